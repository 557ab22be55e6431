"""Chapter 6, the Monte Carlo constant of the masked field: failures over many seeds.

Replays the cells of ``06_masked_attention.ipynb`` that sample 80 sequences of each length
(from the stream ``[SEED, 3]``) and assert that the mean of n x MSE over the 240 sequences
with n >= 400 lies in the band of the limit law (false alarm at most 1e-4 by the lemma of
Laurent and Massart), for SEED = 0, 1, ..., and counts the failures. The limit law is
computed once (it does not depend on the seed).

It then pools every sequence of every run and estimates, by resampling 10^6 pooled means
from these sequences, (a) the false-alarm probability of the check at the sizes used, where
the law is not yet the limit law (bias and tails of order 1/n), and (b) its power against
the constant of independent positions: the probability that the pooled mean falls below the
lower end of the band built for that constant (the limit law's weights scaled to its mean).
It prints the skewness of one sequence's n x MSE at each n and the relative bias.

Usage::

    python tests/calibration/ch06_field_constant.py --seeds 200   # about 20 minutes
"""

import argparse

import numpy as np
from _notebook import cell, run, setup
from scipy import stats

NOTEBOOK = "06_masked_attention.ipynb"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=200, help="number of seeds")
    parser.add_argument("--offset", type=int, default=0,
                        help="first seed (SEED = offset .. offset + seeds - 1): a new offset "
                             "replays the checks on draws not used before")
    parser.add_argument("--resamples", type=int, default=10**6)
    args = parser.parse_args()
    law = cell(NOTEBOOK, "gaussian_sequence_field_covariance(")
    sample = cell(NOTEBOOK, "gen3 = np.random.default_rng([SEED, 3])")
    check = cell(NOTEBOOK, "quadratic_form_mean_band(")
    ns = setup(NOTEBOOK, 0)
    run(law, ns)
    failures, samples = [], []
    for seed in range(args.offset, args.offset + args.seeds):
        ns["SEED"] = seed
        err = run([sample, check], ns)
        samples.append(ns["n_mse"].copy())
        if err is not None:
            failures.append(seed)
            print(f"SEED = {seed}: {err}", flush=True)
    print(f"{len(failures)} failures in {args.seeds} seeds: {failures}")

    lam, limit, limit_iid = ns["lam"], ns["limit"], ns["limit_iid"]
    sizes = ns["ns_field"]
    pooled = np.concatenate(samples, axis=1)  # (n, all sequences)
    for n, values in zip(sizes, pooled, strict=True):
        se = values.std(ddof=1) / np.sqrt(values.size)
        print(f"n = {n:4d}: {values.size} sequences, mean / c-bar - 1 = "
              f"{values.mean() / limit - 1:+.4f} (se {se / limit:.4f}), skewness "
              f"{stats.skew(values):.2f}, relative sd {values.std() / values.mean():.3f}")
    draws, count = ns["draws"], ns["n_mse"][1:].size
    low, high = ns["low"], ns["high"]
    rng = np.random.default_rng(0)
    means = np.zeros(args.resamples)
    for values in pooled[1:]:
        for start in range(0, args.resamples, 10**5):
            stop = min(start + 10**5, args.resamples)
            idx = rng.integers(0, values.size, (stop - start, draws))
            means[start:stop] += values[idx].mean(axis=1) / (len(sizes) - 1)
    scale = limit_iid / limit
    low_iid, _ = ns["masked"].quadratic_form_mean_band(lam * scale, count, 1e-4)
    print(f"band [{low / limit:.3f}, {high / limit:.3f}] x c-bar; resampled pooled means "
          f"({args.resamples}): below {np.mean(means < low):.1e}, above "
          f"{np.mean(means > high):.1e}")
    print(f"independent positions (c = {scale:.3f} c-bar): band from "
          f"{low_iid / limit:.3f} c-bar; the pooled mean reaches it with probability "
          f"{np.mean(means >= low_iid):.1e}")


if __name__ == "__main__":
    main()
