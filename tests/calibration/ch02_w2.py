"""Chapter 2, "The mean-field limit": the W2 check over many seeds.

For each seed, the notebook's computation: the parameters P of np.random.default_rng(SEED)
(first draw), scaled by variants.moderate_interaction; the softmax particles of the rate
experiment (n = 25 ... 400, keys [SEED, 21, k, r], RK4 to T = 1); for its 30 first draws at
n = 50, 100, 200, 400, W2 to a fresh sample of mu(T) and W2 between two fresh samples
(variants.sample_distances, keys [SEED, 24, j]); v_r = mean over the four sizes of
log(W2 particles / W2 samples) for draw r, 30 independent batch values given P; the check:
|mean of v| < log 1.5 + Z_W2 standard errors (replicates.batch_t, Student with 29 degrees of
freedom), Z_W2 = the two-sided Student quantile at 1e-4.

Printed per seed: the mean of v, its standard error, t = mean/se and the split-half statistic
(mean of v over draws 0-14 minus over draws 15-29, over the root of the sum of their squared
standard errors), which has mean 0 whatever the parameters and, if the batch values are
Gaussian, nearly Student's law; then over the seeds: failures, the law of the mean log ratio
(mean, sd, largest absolute value) and of the split-half statistic (mean, sd with its 95 %
chi-square interval, extremes), and the pooled skewness and excess kurtosis of the batch values
standardised within each seed.

Usage: python tests/calibration/ch02_w2.py FIRST LAST [--seed-offset=N]
"""

import sys

import numpy as np
from _notebook import SEED_OFFSET
from scipy import stats
from transformer_pde import replicates, variants

ALPHA0 = np.array([0.5, -0.3])
SIGMA0 = np.array([[0.5, 0.2], [0.2, 0.3]])
T_MF, RK4_STEP = 1.0, 0.2
N_VALUES = np.array([25, 50, 100, 200, 400])
W2_DRAWS = 30
Z_W2 = replicates.bonferroni_threshold(1, W2_DRAWS - 1, 1e-4)


def batch_values(seed):
    P = variants.random_parameters(np.random.default_rng(seed))
    P_mf, _, _ = variants.moderate_interaction(P, ALPHA0, SIGMA0, T_MF, rho_max=0.5)
    kept = variants.particle_moment_errors("softmax", P_mf, ALPHA0, SIGMA0, N_VALUES, W2_DRAWS,
                                           T_MF, [seed, 21], max_step=RK4_STEP, keep=True)
    alpha_T, Sigma_T = (m[-1] for m in variants.gaussian_moments("softmax", P_mf, ALPHA0,
                                                                  SIGMA0, [0.0, T_MF]))
    clouds = [X for final in kept.final[1:] for X in final[:W2_DRAWS]]
    w2 = variants.sample_distances(clouds, alpha_T, Sigma_T, [seed, 24]).reshape(
        len(N_VALUES) - 1, W2_DRAWS, 2)
    return np.log(w2[..., 0] / w2[..., 1]).mean(axis=0)


def main():
    first, last = (int(a) + SEED_OFFSET for a in sys.argv[1:3])
    rows, standardised = [], []
    h = W2_DRAWS // 2
    for seed in range(first, last):
        v = batch_values(seed)
        b = replicates.batch_t(v, 0.0)
        b1, b2 = replicates.batch_t(v[:h]), replicates.batch_t(v[h:])
        split = (b1.estimate - b2.estimate) / np.hypot(b1.stderr, b2.stderr)
        fail = abs(b.estimate) >= np.log(1.5) + Z_W2 * b.stderr
        rows.append((b.estimate, b.stderr, b.t, split, fail))
        standardised.append((v - v.mean()) / v.std(ddof=1))
        print(f"seed {seed}: mean {b.estimate:+.4f} se {b.stderr:.4f} t {b.t:+.2f} "
              f"split {split:+.2f}", flush=True)
    r = np.array(rows)
    z = np.concatenate(standardised)
    k = len(r) - 1
    sd = r[:, 3].std(ddof=1)
    lo, hi = (sd * np.sqrt(k / stats.chi2.ppf(q, k)) for q in (0.975, 0.025))
    print(f"Z_W2 = {Z_W2:.3f}; {len(r)} seeds, failures {int(r[:, 4].sum())}")
    print(f"mean log ratio over seeds: mean {r[:, 0].mean():+.4f}, sd {r[:, 0].std(ddof=1):.4f}, "
          f"largest |.| {np.abs(r[:, 0]).max():.4f}; standard error: mean {r[:, 1].mean():.4f}, "
          f"largest {r[:, 1].max():.4f}")
    print(f"split-half statistic: mean {r[:, 3].mean():+.3f}, sd {sd:.3f} (95 % {lo:.3f}-"
          f"{hi:.3f}; Student 28 d.f.: {np.sqrt(28 / 26):.3f}), extremes {r[:, 3].min():+.2f} "
          f"{r[:, 3].max():+.2f}")
    print(f"batch values standardised within each seed ({z.size}): skewness "
          f"{stats.skew(z):+.3f}, excess kurtosis {stats.kurtosis(z):+.3f}")


if __name__ == "__main__":
    main()
