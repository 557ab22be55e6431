"""Chapter 2, "What is proved: token sample complexity": the uniform-rate checks over many seeds.

For each seed, the notebook's computation at the asserted radius (rho = 1, A = Sigma0^-1,
V = Sigma0^1/2 J Sigma0^-1/2, 127 queries of the disk of radius 0.3, n = 200 ... 3200 with 200
draws each, keys [SEED, 31, 0, k, r]; 40000 samples of max |G|^2 for the Gaussian field of the
limit, key [SEED, 32, 0]) and the cell's checks on K_TS = 20 independent batches (draw r and
limit sample j in batch r mod 20, j mod 20; fitting.batch_rates, replicates.batch_t, Student
with 19 degrees of freedom): the exponent of the typical sup error within TOL_TS_RATE + Z_TS
standard errors of -1/2, and the mean of log(n e_n) minus the batch's mean of log max |G|^2
within TOL_TS_LOG + Z_TS standard errors of 0, Z_TS the Student threshold of two tests at total
1e-4.

Printed per seed: the two estimates and their standard errors; then over the seeds: failures,
the bias of each estimate (mean over seeds, 95 % interval), which the tolerance must cover, and
the law of the centred statistic (estimate - its mean over seeds) / se, Student's with 19
degrees of freedom if the batch values are Gaussian (sd 1.057): mean, sd with its 95 %
chi-square interval, skewness, extremes, count beyond 4.

Usage: python tests/calibration/ch02_uniform_rate.py FIRST LAST [--seed-offset=N]
(seeds FIRST + N <= SEED < LAST + N; seeds above 20240602's neighbourhood are new draws).
"""

import sys

import numpy as np
from _notebook import SEED_OFFSET
from scipy import stats
from transformer_pde import replicates, token_sample
from transformer_pde.fitting import batch_rates

ALPHA0 = np.array([0.5, -0.3])
SIGMA0 = np.array([[0.5, 0.2], [0.2, 0.3]])
SIZES = np.array([200, 400, 800, 1600, 3200])
DRAWS, RADIUS, RINGS, SAMPLES = 200, 0.3, 6, 40000
K_TS, TOL_TS_RATE, TOL_TS_LOG = 20, 0.02, 0.05
Z_TS = replicates.bonferroni_threshold(2, K_TS - 1, 1e-4)


def setting():
    lam, U = np.linalg.eigh(SIGMA0)
    S = (U * np.sqrt(lam)) @ U.T
    J = np.array([[0.0, -1.0], [1.0, 0.0]])
    return np.linalg.inv(SIGMA0), S @ J @ np.linalg.inv(S), token_sample.disk_grid(RADIUS,
                                                                                   RINGS)


def statistics(seed, A, V, Q):
    g = token_sample.sup_limit_samples(A, V, ALPHA0, SIGMA0, Q, samples=SAMPLES,
                                       seed=[seed, 32, 0])
    e = token_sample.uniform_field_errors(A, V, ALPHA0, SIGMA0, Q, SIZES, DRAWS,
                                          [seed, 31, 0])
    b = batch_rates(SIZES, e, K_TS)
    lim = np.array([np.log(g[k::K_TS]).mean() for k in range(K_TS)])
    return replicates.batch_t(b.exponent, -0.5), replicates.batch_t(b.log_mean - lim, 0.0)


def main():
    first, last = (int(a) + SEED_OFFSET for a in sys.argv[1:3])
    A, V, Q = setting()
    rows = []
    for seed in range(first, last):
        r, m = statistics(seed, A, V, Q)
        rows.append((r.estimate + 0.5, r.stderr, m.estimate, m.stderr))
        print(f"seed {seed}: exponent + 1/2 {r.estimate + 0.5:+.4f} ({r.stderr:.4f}), log-mean "
              f"gap {m.estimate:+.4f} ({m.stderr:.4f})", flush=True)
    v = np.array(rows)
    n = len(v)
    fails = int(np.sum((np.abs(v[:, 0]) >= TOL_TS_RATE + Z_TS * v[:, 1])
                       | (np.abs(v[:, 2]) >= TOL_TS_LOG + Z_TS * v[:, 3])))
    print(f"K_TS = {K_TS}, Z_TS = {Z_TS:.3f}, tolerances {TOL_TS_RATE} (exponent), "
          f"{TOL_TS_LOG} (log mean); {n} seeds, failures {fails}")
    for j, name in ((0, "exponent + 1/2"), (2, "log-mean gap")):
        est, se = v[:, j], v[:, j + 1]
        half = stats.t.isf(0.025, n - 1) * est.std(ddof=1) / np.sqrt(n)
        tc = (est - est.mean()) / se
        sd = tc.std(ddof=1)
        lo, hi = (sd * np.sqrt((n - 1) / stats.chi2.ppf(q, n - 1)) for q in (0.975, 0.025))
        print(f"{name}: bias {est.mean():+.4f} (95 % {est.mean() - half:+.4f} to "
              f"{est.mean() + half:+.4f}), largest |.| {np.abs(est).max():.4f}, standard error "
              f"mean {se.mean():.4f}; centred t: mean {tc.mean():+.3f}, sd {sd:.3f} (95 % "
              f"{lo:.3f}-{hi:.3f}; Student 19 d.f.: 1.057), skewness {stats.skew(tc):+.2f}, "
              f"extremes {tc.min():+.2f} {tc.max():+.2f}, beyond 4: {int(np.sum(np.abs(tc) > 4))}")


if __name__ == "__main__":
    main()
