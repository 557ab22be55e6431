"""Chapter 6, the mean-field limit of the masked Transformer PDE: failures over many seeds.

Replays the cells of ``06_masked_attention.ipynb`` that evolve 6 sequences of each length
n = 20, ..., 320 and a 3000-token reference (streams ``[SEED, 4]`` and ``[SEED, 6]``) and
assert the support bound and that each of the 6 conditional distances at time T for n = 20
exceeds each of the 6 for n = 320, then the cells of the stability experiment (the same
stream: the swapped pair in plain W2, and the linearisation of the flow of 40 tokens along
its top singular direction and 4 random ones), for SEED = 0, 1, ..., and counts the failures
of each.

It also prints the smallest margin log(min over n = 20 / max over n = 320) over the seeds,
and estimates the failure probability by resampling: 10^6 draws of 6 distances at n = 20
and 6 at n = 320 from the distances of all runs (this ignores that the runs of one seed
share their reference, which moves both sizes the same way).

Usage::

    python tests/calibration/ch06_mean_field_limit.py --seeds 200   # about an hour
"""

import argparse

import numpy as np
from _notebook import cell, run, setup

NOTEBOOK = "06_masked_attention.ipynb"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=200, help="number of seeds")
    parser.add_argument("--offset", type=int, default=0,
                        help="first seed (SEED = offset .. offset + seeds - 1): a new offset "
                             "replays the checks on draws not used before")
    parser.add_argument("--no-stability", action="store_true",
                        help="skip the stability cells (only the order check and its margin)")
    args = parser.parse_args()
    base = setup(NOTEBOOK, 0)  # the law, curve and matrices of the previous section
    run(cell(NOTEBOOK, "gaussian_sequence_field_covariance("), base)
    code = [cell(NOTEBOOK, "gen4 = np.random.default_rng([SEED, 4])"),
            cell(NOTEBOOK, "assert DTs[0].min() > DTs[-1].max()")]
    stability = [cell(NOTEBOOK, "swap_amp = []"), cell(NOTEBOOK, "lin_err = np.abs(")]
    failures, first, last, margins, stable_failures = [], [], [], [], []
    for seed in range(args.offset, args.offset + args.seeds):
        ns = dict(base, SEED=seed)
        err = run(code, ns)
        DTs = ns["DTs"]
        first.append(DTs[0])
        last.append(DTs[-1])
        margins.append(np.log(DTs[0].min() / DTs[-1].max()))
        print(f"SEED = {seed}: margin {margins[-1]:.4f}", flush=True)
        if err is not None:
            failures.append(seed)
            print(f"SEED = {seed}: {err}", flush=True)
            continue
        if args.no_stability:
            continue
        err = run(stability, ns)
        if err is not None:
            stable_failures.append(seed)
            print(f"SEED = {seed}, stability: {err}", flush=True)
    print(f"{len(failures)} failures in {args.seeds} seeds: {failures}")
    print(f"stability cells: {len(stable_failures)} failures in {args.seeds - len(failures)} "
          f"seeds: {stable_failures}")
    margins = np.array(margins)
    print(f"margin log(min D_T(20) / max D_T(320)): smallest {margins.min():.3f}, mean "
          f"{margins.mean():.3f}, sd {margins.std(ddof=1):.3f}")
    first, last = np.concatenate(first), np.concatenate(last)
    rng = np.random.default_rng(0)
    lows = first[rng.integers(0, first.size, (10**6, 6))].min(axis=1)
    highs = last[rng.integers(0, last.size, (10**6, 6))].max(axis=1)
    print(f"resampled (10^6): min of 6 at n = 20 below max of 6 at n = 320 with probability "
          f"{np.mean(lows <= highs):.1e}")


if __name__ == "__main__":
    main()
