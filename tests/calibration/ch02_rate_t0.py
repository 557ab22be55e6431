"""Chapter 2, "How fast? The interaction strength decides": the six checks at t = 0 over many
seeds, and the law of their statistics.

For each seed, the notebook's computation (meanfield.meanfield_errors at t = 0 with
A = rho Sigma0^-1, V = Sigma0^1/2 J Sigma0^-1/2, n = 100 ... 800 with 1600 ... 200 draws, keys
[SEED, 7, k, r]) and the cell's checks, on K_T0 = 20 independent batches (draw r in batch
r mod 20; fitting.batch_rates, replicates.batch_t, Student with 19 degrees of freedom):

- rho = 0.25, covariance and field: the mean over the sizes of n x MSE within
  TOL_LIMIT x limit + Z_T0 standard errors above and Z_LOW_T0 = 6.5 below (a bootstrap-t
  threshold, ch02_bootstrap_t0.py) of the linearised limit, and the exponent of the
  typical error (log_error_rate per batch) within TOL_RATE + Z_T0 standard errors of -1/2;
- rho = 1: the exponent above -1/2 by more than 3 standard errors.

Printed per seed: the estimates and standard errors; then over the seeds: failures; for each
statistic the bias (mean over seeds of estimate - target, with a 95 % interval), which the
tolerance must cover; the law of the centred statistic (estimate - its mean over seeds) / se,
which is Student's with 19 degrees of freedom if the batch values are Gaussian (sd 1.057):
mean, sd with its 95 % chi-square interval, skewness, extremes and the count beyond 4; at
rho = 1 the law of t = (exponent + 1/2)/se (mean, sd, smallest), the noncentrality at the
lower 95 % limit of its mean, and the noncentral Student probability of t <= 3 there.

Usage: python tests/calibration/ch02_rate_t0.py FIRST LAST [--seed-offset=N]
(seeds FIRST + N <= SEED < LAST + N: a FIRST above the seeds used so far replays the checks on
new draws).
"""

import math
import sys

import numpy as np
from _notebook import SEED_OFFSET
from scipy import stats
from transformer_pde import meanfield, replicates
from transformer_pde.fitting import batch_rates

ALPHA0 = np.array([0.5, -0.3])
SIGMA0 = np.array([[0.5, 0.2], [0.2, 0.3]])
RATE_SIZES = np.array([100, 200, 400, 800])
RATE_DRAWS = np.array([1600, 800, 400, 200])
RHOS = (0.25, 1.0)
WHATS = ("cov", "field")
K_T0, TOL_LIMIT, TOL_RATE, Z_LOW_T0 = 20, 0.05, 0.05, 6.5  # lower side of the limit checks
Z_T0 = replicates.bonferroni_threshold(4, K_T0 - 1, 2e-4)


def setting():
    lam, U = np.linalg.eigh(SIGMA0)
    S = (U * np.sqrt(lam)) @ U.T
    J = np.array([[0.0, -1.0], [1.0, 0.0]])
    V = S @ J @ np.linalg.inv(S)
    limits = {}
    for rho in RHOS:
        A = rho * np.linalg.inv(SIGMA0)
        limits["cov", rho] = meanfield.covariance_rate_variance(A, V, ALPHA0, SIGMA0)
        limits["field", rho] = meanfield.field_error_variance(A, V, ALPHA0, SIGMA0)
    return V, limits


def statistics(seed, V, limits):
    """(estimate, standard error, target) of the six checked statistics, for one seed."""
    out = {}
    for rho in RHOS:
        cov, field = meanfield.meanfield_errors(rho * np.linalg.inv(SIGMA0), V, ALPHA0, SIGMA0,
                                                RATE_SIZES, RATE_DRAWS, seed=[seed, 7])
        for w, errs in zip(WHATS, (cov, field), strict=True):
            b = batch_rates(RATE_SIZES, errs, K_T0)
            r = replicates.batch_t(b.exponent, -0.5)
            if rho == 0.25:
                m = replicates.batch_t(b.scaled_mean, limits[w, rho])
                out[w, "limit"] = (m.estimate, m.stderr, limits[w, rho])
                out[w, "rate"] = (r.estimate, r.stderr, -0.5)
            else:
                out[w, "slow"] = (r.estimate, r.stderr, -0.5)
    return out


def failed(key, est, se, target):
    if key[1] == "slow":
        return (est - target) / se <= 3
    if key[1] == "limit":  # Z_T0 above, Z_LOW_T0 (bootstrap-t, ch02_bootstrap_t0.py) below
        tol = TOL_LIMIT * target
        return est - target >= tol + Z_T0 * se or target - est >= tol + Z_LOW_T0 * se
    return abs(est - target) >= TOL_RATE + Z_T0 * se


def main():
    first, last = (int(a) + SEED_OFFSET for a in sys.argv[1:3])
    V, limits = setting()
    rows = {}
    for seed in range(first, last):
        s = statistics(seed, V, limits)
        for key, v in s.items():
            rows.setdefault(key, []).append(v)
        print(f"seed {seed}: " + ", ".join(f"{w} {kind} {e:+.4f} ({se:.4f})"
                                           for (w, kind), (e, se, _) in s.items()), flush=True)
    n = last - first
    print(f"{n} seeds; K_T0 = {K_T0}, Z_T0 = {Z_T0:.3f}, TOL_LIMIT = {TOL_LIMIT}, "
          f"TOL_RATE = {TOL_RATE}")
    for key, v in rows.items():
        v = np.array(v)
        est, se, target = v[:, 0], v[:, 1], v[0, 2]
        fails = sum(failed(key, *row) for row in v)
        bias = est - target
        half = stats.t.isf(0.025, n - 1) * bias.std(ddof=1) / np.sqrt(n)
        print(f"{key[0]} {key[1]}: failures {fails}; estimate - target over seeds: mean "
              f"{bias.mean():+.4f} (95 % {bias.mean() - half:+.4f} to {bias.mean() + half:+.4f}),"
              f" largest |.| {np.abs(bias).max():.4f}; standard error: mean {se.mean():.4f}")
        if key[1] == "slow":
            t = bias / se
            lam = (t.mean() - stats.t.isf(0.025, n - 1) * t.std(ddof=1) / np.sqrt(n))
            # E T = lam sqrt(nu/2) Gamma((nu-1)/2)/Gamma(nu/2) for noncentral t with nu d.f.
            nu = K_T0 - 1
            c = np.sqrt(nu / 2) * np.exp(math.lgamma((nu - 1) / 2) - math.lgamma(nu / 2))
            print(f"  t: mean {t.mean():+.2f}, sd {t.std(ddof=1):.2f}, smallest {t.min():+.2f}; "
                  f"noncentrality at the lower 95 % limit of the mean {lam / c:.2f}; "
                  f"P(noncentral t <= 3) there {stats.nct.cdf(3, nu, lam / c):.1e}")
            continue
        tc = (est - est.mean()) / se
        sd = tc.std(ddof=1)
        lo, hi = (sd * np.sqrt((n - 1) / stats.chi2.ppf(q, n - 1)) for q in (0.975, 0.025))
        print(f"  centred t: mean {tc.mean():+.3f}, sd {sd:.3f} (95 % {lo:.3f}-{hi:.3f}; "
              f"Student 19 d.f.: 1.057), skewness {stats.skew(tc):+.2f}, extremes "
              f"{tc.min():+.2f} {tc.max():+.2f}, beyond 4: {int(np.sum(np.abs(tc) > 4))}")


if __name__ == "__main__":
    main()
