"""Chapter 2, the mean-field rate with time-dependent parameters: the checks of the cell
"mean-field errors decay like n^-1/2" over many seeds.

For each seed, the notebook's computation: the parameters P of np.random.default_rng(SEED)
(first draw), scaled by variants.moderate_interaction; 60 draws of n = 25 ... 400 particles per
variant (softmax, L2, multi-head) moved by RK4 to T = 1; then

- the rate test: |z| < Z_RATE for the exponent of the typical error (fitting.log_error_rate of
  the geometric mean of the squared errors of mean and covariance), Z_RATE the Student
  threshold of 3 tests at total 1e-4; printed: failures, the mean and standard deviation of z
  over seeds and variants (the test's law), the largest |z|, and the mean power against
  n^-0.3 and n^-0.7 (normal approximation with the seed's standard error);
- the RK4 check, time-stepping error below 1% of the smallest RMS error (failures);
(the W2 check of the same section: tests/calibration/ch02_w2.py).

Usage: python tests/calibration/ch02_meanfield_rate.py FIRST LAST [CACHE_DIR]
(seeds FIRST <= SEED < LAST; CACHE_DIR holds mf_SEED.npz files with arrays <variant>_mean and
<variant>_cov of squared errors, at least 60 draws a size, from the same computation, to skip
recomputing them).
"""

import sys
from pathlib import Path

import numpy as np
from scipy import stats
from transformer_pde import dynamics, replicates, variants
from transformer_pde.fitting import log_error_rate

ALPHA0 = np.array([0.5, -0.3])
SIGMA0 = np.array([[0.5, 0.2], [0.2, 0.3]])
T_MF, RK4_STEP = 1.0, 0.2
N_VALUES = np.array([25, 50, 100, 200, 400])
MF_DRAWS = 60
NAMES = ("softmax", "l2", "multihead")
Z_RATE = replicates.bonferroni_threshold(3, len(N_VALUES) * MF_DRAWS - 2, 1e-4)


def errors(seed, P_mf, cache):
    path = None if cache is None else Path(cache) / f"mf_{seed}.npz"
    if path is not None and path.exists():
        D = np.load(path)
        return {n: (D[n + "_mean"][:, :MF_DRAWS], D[n + "_cov"][:, :MF_DRAWS]) for n in NAMES}
    out = {}
    for name in NAMES:
        e = variants.particle_moment_errors(name, P_mf, ALPHA0, SIGMA0, N_VALUES, MF_DRAWS,
                                            T_MF, [seed, 21], max_step=RK4_STEP)
        out[name] = (e.mean, e.covariance)
    return out


def one_seed(seed, cache):
    P = variants.random_parameters(np.random.default_rng(seed))
    P_mf, _, _ = variants.moderate_interaction(P, ALPHA0, SIGMA0, T_MF, rho_max=0.5)
    errs = errors(seed, P_mf, cache)
    fits = [log_error_rate(N_VALUES, np.sqrt(errs[n][0] * errs[n][1])) for n in NAMES]
    z = np.array([f.z(-0.5) for f in fits])
    se = np.array([f.stderr for f in fits])
    rms = np.sqrt(np.stack([errs["softmax"][0], errs["softmax"][1]]).mean(axis=2))
    X0 = (ALPHA0 + np.random.default_rng([seed, 23]).standard_normal((200, 2))
          @ np.linalg.cholesky(SIGMA0).T)
    field = variants.variant_field("softmax", P_mf)
    rk4_gap = np.abs(dynamics.integrate(field, X0, [0, T_MF], method="rk4",
                                        max_step=RK4_STEP)[-1]
                     - dynamics.integrate(field, X0, [0, T_MF], rtol=1e-11,
                                          atol=1e-13)[-1]).max()
    return z, se, rk4_gap / (1e-2 * rms.min())


def main(first, last, cache=None):
    zs, ses, rk4 = [], [], []
    for seed in range(first, last):
        z, se, r = one_seed(seed, cache)
        zs.append(z)
        ses.append(se)
        rk4.append(r)
        print(seed, " ".join(f"{x:+.2f}" for x in z), f"rk4 {r:.3f}",
              flush=True)
    zs, ses, rk4 = np.array(zs), np.array(ses), np.array(rk4)
    n = last - first
    power = {p: np.mean(stats.norm.cdf(np.abs(p + 0.5) / ses - Z_RATE)) for p in (-0.3, -0.7)}
    print(f"{n} seeds, Z_RATE = {Z_RATE:.3f}")
    print(f"rate test: {np.sum(np.any(np.abs(zs) >= Z_RATE, axis=1))} failing seeds; z over "
          f"seeds and variants: mean {zs.mean():+.3f}, sd {zs.std(ddof=1):.3f}, largest |z| "
          f"{np.abs(zs).max():.2f}; mean power against n^-0.3 {power[-0.3]:.3f}, against "
          f"n^-0.7 {power[-0.7]:.3f}")
    print(f"RK4 check: {np.sum(rk4 >= 1)} failures; largest error / allowance {rk4.max():.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
