"""Chapter 2, "What is proved: token sample complexity": the uniform-rate checks over many seeds.

For each seed, the notebook's computation at the asserted radius (rho = 1, A = Sigma0^-1,
V = Sigma0^1/2 J Sigma0^-1/2, 127 queries of the disk of radius 0.3, n = 200 ... 3200 with 200
draws each, keys [SEED, 31, 0, k, r]; the limit from 40000 samples of the Gaussian field, key
[SEED, 32, 0]) and the cell's statistics (token_sample.uniform_rate_test): z_rate (exponent)
and z_limit (mean of log(n e_n) against the limit's),
each asserted below Z_TS = 5 in absolute value. Prints the statistics per seed, their mean,
standard deviation and extremes, the failures, and the false-alarm probability of each check
from a normal law with the fitted mean and standard deviation (an extrapolated tail; also with
the standard deviation at its upper 95 % confidence limit).

Usage: python tests/calibration/ch02_uniform_rate.py FIRST LAST [--seed-offset=N]
(seeds FIRST + N <= SEED < LAST + N; seeds above 20240602's neighbourhood are new draws).
"""

import sys

import numpy as np
from _notebook import SEED_OFFSET
from scipy import stats
from transformer_pde import token_sample

ALPHA0 = np.array([0.5, -0.3])
SIGMA0 = np.array([[0.5, 0.2], [0.2, 0.3]])
SIZES = np.array([200, 400, 800, 1600, 3200])
DRAWS, RADIUS, RINGS, SAMPLES = 200, 0.3, 6, 40000


def setting():
    lam, U = np.linalg.eigh(SIGMA0)
    S = (U * np.sqrt(lam)) @ U.T
    J = np.array([[0.0, -1.0], [1.0, 0.0]])
    return np.linalg.inv(SIGMA0), S @ J @ np.linalg.inv(S), token_sample.disk_grid(RADIUS,
                                                                                   RINGS)


def statistics(seed, A, V, Q):
    lim = token_sample.sup_limit(A, V, ALPHA0, SIGMA0, Q, samples=SAMPLES, seed=[seed, 32, 0])
    e = token_sample.uniform_field_errors(A, V, ALPHA0, SIGMA0, Q, SIZES, DRAWS,
                                          [seed, 31, 0])
    return token_sample.uniform_rate_test(SIZES, e, lim)


def main():
    first, last = (int(a) + SEED_OFFSET for a in sys.argv[1:3])
    A, V, Q = setting()
    z_ts = 5.0
    rows = []
    for seed in range(first, last):
        t = statistics(seed, A, V, Q)
        rows.append((t.z_rate, t.z_limit))
        print(f"seed {seed}: z_rate {t.z_rate:+.3f} z_limit {t.z_limit:+.3f}", flush=True)
    z = np.array(rows)
    fails = int(np.sum(np.any(np.abs(z) >= z_ts, axis=1)))
    print(f"threshold {z_ts:g}; {len(z)} seeds, failures {fails}")
    for j, name in enumerate(("z_rate", "z_limit")):
        m, sd = z[:, j].mean(), z[:, j].std(ddof=1)
        sd_hi = sd * np.sqrt((len(z) - 1) / stats.chi2.ppf(0.05, len(z) - 1))
        tails = [stats.norm.sf((z_ts - m) / s) + stats.norm.cdf((-z_ts - m) / s)
                 for s in (sd, sd_hi)]
        print(f"{name}: mean {m:+.3f}, sd {sd:.3f} (upper 95 % {sd_hi:.3f}), min "
              f"{z[:, j].min():+.3f}, max {z[:, j].max():+.3f}; normal tail beyond the band "
              f"{tails[0]:.1e} (with the upper sd {tails[1]:.1e})")


if __name__ == "__main__":
    main()
