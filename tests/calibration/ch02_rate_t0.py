"""Chapter 2, "How fast? The interaction strength decides": the checks at rho = 0.25 and rho = 1
over many seeds, and their false-alarm probabilities from the pooled draws.

For each seed, the notebook's computation (meanfield.meanfield_errors at t = 0 with
A = rho Sigma0^-1, V = Sigma0^1/2 J Sigma0^-1/2, n = 100 ... 800 with 1600 ... 200 draws, keys
[SEED, 7, k, r]) and the cell's assertions (meanfield.scaled_error_test):
rho = 0.25, covariance and field: |z_limit| < 5 and |z_rate| < 5; rho = 1: z_rate > 3.
Prints the failures over the seeds, then estimates each check's false-alarm probability per run
by resampling runs of the notebook's size from the pool of all draws of all seeds (the
bootstrap of the test's law: it keeps the skewness and the heavy tails of the squared errors,
up to the largest draw of the pool).

Usage: python tests/calibration/ch02_rate_t0.py FIRST LAST [CACHE_DIR] [RESAMPLES]
(seeds FIRST <= SEED < LAST: a FIRST above the seeds used so far replays the checks on new draws;
it also prints the law of each statistic over the seeds themselves)
(CACHE_DIR holds rho_SEED.npz files with arrays cov_RHO_K and field_RHO_K from the same
computation, to skip recomputing them; RESAMPLES default 100000).
"""

import sys
from pathlib import Path

import numpy as np
from transformer_pde import meanfield

ALPHA0 = np.array([0.5, -0.3])
SIGMA0 = np.array([[0.5, 0.2], [0.2, 0.3]])
RATE_SIZES = np.array([100, 200, 400, 800])
RATE_DRAWS = np.array([1600, 800, 400, 200])
RHOS = (0.25, 1.0)
WHATS = ("cov", "field")


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


def errors(seed, V, cache):
    path = None if cache is None else Path(cache) / f"rho_{seed}.npz"
    if path is not None and path.exists():
        D = np.load(path)
        return {(w, rho): [D[f"{w}_{rho}_{k}"] for k in range(4)] for w in WHATS for rho in RHOS}
    out = {}
    for rho in RHOS:
        cov, field = meanfield.meanfield_errors(rho * np.linalg.inv(SIGMA0), V, ALPHA0, SIGMA0,
                                                RATE_SIZES, RATE_DRAWS, seed=[seed, 7])
        out["cov", rho], out["field", rho] = cov, field
    return out


def statistics(errs, limits):
    """The six statistics the notebook's cell asserts on, for one seed."""
    z = {}
    for w in WHATS:
        t = meanfield.scaled_error_test(RATE_SIZES, errs[w, 0.25], limits[w, 0.25])
        z[w, "limit"], z[w, "rate"] = t.z_limit, t.z_rate
        z[w, "slow"] = meanfield.scaled_error_test(RATE_SIZES, errs[w, 1.0], np.inf).z_rate
    return z


def failures(errs, limits):
    z = statistics(errs, limits)
    return {key: (v <= 3 if key[1] == "slow" else abs(v) >= 5) for key, v in z.items()}


def resampled(pools, limit, resamples, rng, chunk=2000):
    """z_limit and z_rate of runs resampled from the pools (one pool of draws per size)."""
    n = RATE_SIZES.astype(float)
    R_min = RATE_DRAWS.min()
    lx = np.log(n)
    sxx = np.sum((lx - lx.mean()) ** 2)
    zl, zr = [], []
    for start in range(0, resamples, chunk):
        b = min(chunk, resamples - start)
        means, ses, mse_eq, kappa2 = [], [], [], []
        for pool, R in zip(pools, RATE_DRAWS, strict=True):
            e = pool[rng.integers(0, pool.size, size=(b, R))]
            means.append(e.mean(axis=1))
            ses.append(e.std(axis=1, ddof=1) / np.sqrt(R))
            first = e[:, :R_min]
            m = first.mean(axis=1)
            mse_eq.append(m)
            kappa2.append(first.var(axis=1, ddof=1) / m**2)
        means, ses = np.array(means).T * n, np.array(ses).T * n
        scaled, se = means.mean(axis=1), np.sqrt(np.sum(ses**2, axis=1)) / n.size
        if np.isfinite(limit):
            zl.append((scaled - limit) / se)
        ly = 0.5 * np.log(np.array(mse_eq).T)
        slope = ((ly - ly.mean(axis=1, keepdims=True)) @ (lx - lx.mean())) / sxx
        stderr = np.sqrt(np.array(kappa2).T.mean(axis=1)) / (2 * np.sqrt(R_min) * np.sqrt(sxx))
        zr.append((slope + 0.5) / stderr)
    return (np.concatenate(zl) if zl else None), np.concatenate(zr)


def main(first, last, cache=None, resamples=100000):
    V, limits = setting()
    counts, per_seed = {}, {}
    pools = {(w, rho): [[] for _ in RATE_SIZES] for w in WHATS for rho in RHOS}
    for seed in range(first, last):
        errs = errors(seed, V, cache)
        for key, fail in failures(errs, limits).items():
            counts[key] = counts.get(key, 0) + int(fail)
        z = statistics(errs, limits)
        for key, v in z.items():
            per_seed.setdefault(key, []).append(v)
        print(f"seed {seed}: " + ", ".join(f"{w} {kind} {v:+.2f}" for (w, kind), v in z.items()),
              flush=True)
        for key, per_size in errs.items():
            for k, e in enumerate(per_size):
                pools[key][k].append(e)
    print(f"{last - first} seeds; failures: " + ", ".join(
        f"{w} {kind} {c}" for (w, kind), c in sorted(counts.items())))
    # the law of each statistic over the seeds themselves (no resampling): mean, sd with a 95 %
    # interval (chi-square), extremes, and the normal tail beyond the threshold at the upper sd
    from scipy import stats
    for key, v in sorted(per_seed.items()):
        v = np.array(v)
        m, sd, k = v.mean(), v.std(ddof=1), v.size - 1
        sd_hi = sd * np.sqrt(k / stats.chi2.ppf(0.025, k))
        sd_lo = sd * np.sqrt(k / stats.chi2.ppf(0.975, k))
        if key[1] == "slow":
            tail = stats.norm.cdf((3 - m) / sd_hi)
        else:
            tail = stats.norm.sf((5 - m) / sd_hi) + stats.norm.cdf((-5 - m) / sd_hi)
        print(f"per seed {key[0]} {key[1]}: mean {m:+.2f}, sd {sd:.2f} (95 % {sd_lo:.2f}-"
              f"{sd_hi:.2f}), extremes {v.min():+.2f} {v.max():+.2f}; normal tail beyond the "
              f"threshold at the upper sd {tail:.1e}")
    rng = np.random.default_rng(0)
    for (w, rho), per_size in pools.items():
        pool = [np.concatenate(p) for p in per_size]
        zl, zr = resampled(pool, limits[w, rho], resamples, rng)
        if rho == 0.25:
            print(f"rho {rho:g} {w}: {resamples} resampled runs: P(|z_limit| >= 5) = "
                  f"{np.mean(np.abs(zl) >= 5):.1e} (z_limit mean {zl.mean():+.2f}, sd "
                  f"{zl.std():.2f}, smallest {zl.min():+.2f}); P(|z_rate| >= 5) = "
                  f"{np.mean(np.abs(zr) >= 5):.1e} (z_rate mean {zr.mean():+.2f}, sd "
                  f"{zr.std():.2f}, extremes {zr.min():+.2f} {zr.max():+.2f})")
        else:
            print(f"rho {rho:g} {w}: {resamples} resampled runs: P(z_rate <= 3) = "
                  f"{np.mean(zr <= 3):.1e} (z_rate mean {zr.mean():+.2f}, sd {zr.std():.2f}, "
                  f"smallest {zr.min():+.2f})")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None,
         int(sys.argv[4]) if len(sys.argv) > 4 else 100000)
