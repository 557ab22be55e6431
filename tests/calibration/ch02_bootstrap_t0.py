"""Chapter 2, "How fast? The interaction strength decides": the tails of the two limit
statistics at t = 0 (rho = 0.25), by a bootstrap-t of the exact design.

The limit check uses T = (mean of the K_T0 = 20 batch values - limit)/(sd/sqrt 20), each batch
value m_b = mean over the sizes of n_k x mean of the batch's squared errors at n_k (draw r of
size n_k in batch r mod 20; fitting.batch_rates). The squared errors are heavy-tailed: a run
that misses its large draws has a low mean and a low sd together, so the left tail of T is
heavier than Student's. This script estimates that tail by resampling.

1. Pool: the notebook's computation (meanfield.meanfield_errors at rho = 0.25,
   n = 100 ... 800 with 1600 ... 200 draws, keys [SEED, 7, k, r]) for the seeds
   FIRST + N <= SEED < LAST + N, the draws of every size pooled over the seeds.
2. Bootstrap: RUNS runs of the exact design, each drawing with replacement 1600, 800, 400,
   200 squared errors from the pools of the four sizes, splitting them into the 20 batches
   and computing T with the pool's own mean of n x MSE as the target (the truth of the
   resampled world).
3. Printed for the covariance and the field: the sd of T, the quantiles 1e-4, 5e-5, 2.5e-5
   of both tails, and the number of runs beyond the thresholds the notebook uses (lower
   Z_LOW = 6.5, upper Z_T0 = Student's 2.5e-5 point, 5.209) and beyond Student's point on the
   left; then the power of the check against a claimed limit 0.7, 0.75, 1.25, 1.3 times the
   linearised one (POWER_RUNS resampled runs, the pool's mean as the truth).

The quantiles are resampling estimates of the tail (the pool stands in for the law of the
draws), not an exact law; at 2.5e-5 with RUNS = 1e6 they rest on about 25 runs.

Usage: python tests/calibration/ch02_bootstrap_t0.py FIRST LAST RUNS [--seed-offset=N]
"""

import sys

import numpy as np
from _notebook import SEED_OFFSET
from scipy import stats
from transformer_pde import meanfield, replicates

ALPHA0 = np.array([0.5, -0.3])
SIGMA0 = np.array([[0.5, 0.2], [0.2, 0.3]])
RATE_SIZES = np.array([100, 200, 400, 800])
RATE_DRAWS = np.array([1600, 800, 400, 200])
K_T0 = 20
Z_T0 = replicates.bonferroni_threshold(4, K_T0 - 1, 2e-4)
Z_LOW = 6.5  # the notebook's lower threshold (Z_LOW_T0), both statistics
POWER_RUNS = 20000
CHUNK = 2000


def pools(first, last):
    lam, U = np.linalg.eigh(SIGMA0)
    S = (U * np.sqrt(lam)) @ U.T
    V = S @ np.array([[0.0, -1.0], [1.0, 0.0]]) @ np.linalg.inv(S)
    A = 0.25 * np.linalg.inv(SIGMA0)
    limits = {"covariance": meanfield.covariance_rate_variance(A, V, ALPHA0, SIGMA0),
              "field": meanfield.field_error_variance(A, V, ALPHA0, SIGMA0)}
    out = {"covariance": [[] for _ in RATE_SIZES], "field": [[] for _ in RATE_SIZES]}
    for seed in range(first, last):
        cov, field = meanfield.meanfield_errors(A, V, ALPHA0, SIGMA0, RATE_SIZES, RATE_DRAWS,
                                                seed=[seed, 7])
        for what, errs in (("covariance", cov), ("field", field)):
            for k, e in enumerate(errs):
                out[what][k].append(RATE_SIZES[k] * np.asarray(e))
        print(f"seed {seed} pooled", flush=True)
    return {w: [np.concatenate(p) for p in v] for w, v in out.items()}, limits


def bootstrap_t(pool, runs, rng):
    """(batch mean, standard error) of `runs` resampled runs of the exact design."""
    means, ses = [], []
    for start in range(0, runs, CHUNK):
        m = min(CHUNK, runs - start)
        vals = np.zeros((m, K_T0))
        for p, draws in zip(pool, RATE_DRAWS, strict=True):
            idx = rng.integers(0, p.size, (m, draws // K_T0, K_T0))
            vals += p[idx].mean(axis=1) / len(pool)
        means.append(vals.mean(axis=1))
        ses.append(vals.std(axis=1, ddof=1) / np.sqrt(K_T0))
    return np.concatenate(means), np.concatenate(ses)


def main():
    first, last = (int(a) + SEED_OFFSET for a in sys.argv[1:3])
    runs = int(float(sys.argv[3]))
    pooled, limits = pools(first, last)
    rng = np.random.default_rng([first, last, runs])
    print(f"{last - first} seeds pooled ({', '.join(str(p.size) for p in pooled['field'])} "
          f"draws at n = {', '.join(str(n) for n in RATE_SIZES)}); {runs} bootstrap runs; "
          f"Student 19 d.f.: sd 1.057, 2.5e-5 point {Z_T0:.3f}")
    for what, pool in pooled.items():
        theta = np.mean([p.mean() for p in pool])
        mean, se = bootstrap_t(pool, runs, rng)
        t = (mean - theta) / se
        q = [1e-4, 5e-5, 2.5e-5]
        lo, hi = np.quantile(t, q), np.quantile(t, [1 - a for a in q])
        print(f"{what}: sd of T {t.std():.3f}, skewness {stats.skew(t):+.2f}; quantiles "
              f"1e-4, 5e-5, 2.5e-5: lower {lo[0]:+.2f} {lo[1]:+.2f} {lo[2]:+.2f}, upper "
              f"{hi[0]:+.2f} {hi[1]:+.2f} {hi[2]:+.2f}")
        print(f"  runs with T <= -{Z_LOW}: {int(np.sum(t <= -Z_LOW))}; "
              f"T <= -{Z_T0:.3f}: {int(np.sum(t <= -Z_T0))}; T >= {Z_T0:.3f}: "
              f"{int(np.sum(t >= Z_T0))} (Student's expectation {runs * 2.5e-5:.0f} each)")
        # power: the check with a claimed limit f x the linearised one, the pool's mean as truth
        mean, se = bootstrap_t(pool, POWER_RUNS, rng)
        tol = 0.05 * limits[what]
        print(f"  pool mean - linearised limit {theta - limits[what]:+.4f}; rejected: " + ", ".join(
            f"limit x{f:g} {np.mean(rejects(mean, se, f * limits[what], f * tol)):.3f}"
            for f in (0.7, 0.75, 1.25, 1.3)))


def rejects(mean, se, claim, tol):
    """The notebook's two-sided limit check: lower threshold Z_LOW, upper Z_T0."""
    return (mean - claim <= -(tol + Z_LOW * se)) | (mean - claim >= tol + Z_T0 * se)


if __name__ == "__main__":
    main()
