"""Chapter 10, random queries and keys: the tails of the distance check's t statistic.

The notebook's check compares, at each of its seven points, the mean of the per-network
values L H D_L^2 / T^2 over R = 32 networks (128 with PAPER_SCALE) with c_0, within
t SE + 0.01 c_0, t the two-sided 1e-5 quantile of Student's t with R - 1 df. Student's law
assumes normal per-network values; they are skewed to the right, which makes the lower tail
of the t statistic heavier than Student's. This script

1. draws NETS networks at the notebook's cheapest point (T = 0.25, H = 1, L = 16, n = d = 32,
   beta = 1, orthonormal tokens) and prints the relative bias, sd, skewness and excess
   kurtosis of the per-network values;
2. resamples sets of R networks, from these standardised values (bootstrap) and from Pearson
   type III laws (standardised gamma) with the measured skewness and with the measured
   skewness plus two of its standard errors, and with skewness 0.7 and 0.8 (to cover the other
   points of the notebook, item 3), and prints the tails P(t < -q), P(t > q) of the
   t statistic about the true mean and the failure rate of the check as coded (band
   q SE + 0.01 c_0) when the true bias is -0.01 c_0 (the worst case the allowance allows),
   0 and +0.01 c_0;
3. draws NETS / 4 networks at (H, L) = (4, 16) and NETS / 8 at (1, 125) and prints the
   skewness of their per-network values (is it in the range resampled above?).

Usage:
    python tests/calibration/ch10_homogenized_tails.py [seed_offset] [networks] [resamples]
(defaults 0, 4000 networks and 3e6 resampled sets per law and R).
"""

import sys

import numpy as np
from scipy import stats
from transformer_pde import homogenized as hg

OFFSET = int(sys.argv[1]) if len(sys.argv) > 1 else 0
NETS = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
RESAMPLES = int(float(sys.argv[3])) if len(sys.argv) > 3 else 3_000_000
CHUNK = 50_000
n = d = 32
beta, T, H, L = 1.0, 0.25, 1, 16
x0 = np.eye(n)
c0 = hg.squared_distance_rate(beta, n, d)
rng = np.random.default_rng([4343, OFFSET])

vals = []
for start in range(0, NETS, 500):
    x = hg.simulate_random_heads(x0, beta, T / L, H, L, min(500, NETS - start), rng)
    vals.append(np.mean(np.sum((x - x0) ** 2, axis=-1), axis=-1) * L * H / T**2 / c0)
v = np.concatenate(vals)
sd, skew, exkurt = v.std(ddof=1), stats.skew(v), stats.kurtosis(v)
se_skew = np.sqrt(6.0 / v.size)
print(f"{v.size} networks at T = {T}, H = {H}, L = {L}: relative bias "
      f"{v.mean() - 1:+.4f} +- {sd / np.sqrt(v.size):.4f}, sd {sd:.4f}, skewness "
      f"{skew:.3f} (+- {se_skew:.3f}), excess kurtosis {exkurt:.3f}", flush=True)
z = (v - v.mean()) / sd


def pearson3(g):
    k = 4.0 / g**2

    def draw(shape):
        return (rng.gamma(k, 1.0, shape) - k) / np.sqrt(k)
    return draw


laws = {"bootstrap": lambda shape: rng.choice(z, shape),
        f"Pearson III, skewness {skew:.2f}": pearson3(skew),
        f"Pearson III, skewness {skew + 2 * se_skew:.2f}": pearson3(skew + 2 * se_skew),
        "Pearson III, skewness 0.70": pearson3(0.7), "Pearson III, skewness 0.80": pearson3(0.8)}
for R in (32, 128):
    q = stats.t.isf(5e-6, R - 1)
    for name, draw in laws.items():
        lo = hi = 0
        fail = {-0.01: 0, 0.0: 0, 0.01: 0}
        for _ in range(RESAMPLES // CHUNK):
            Z = draw((CHUNK, R))
            m, s = Z.mean(axis=1), Z.std(axis=1, ddof=1) / np.sqrt(R)
            lo += np.count_nonzero(m / s < -q)
            hi += np.count_nonzero(m / s > q)
            for b in fail:   # per-network values 1 + b + sd Z, in units of c_0
                fail[b] += np.count_nonzero(np.abs(b + sd * m) > q * sd * s + 0.01)
        M = (RESAMPLES // CHUNK) * CHUNK
        rates = ", ".join(f"bias {b:+.2f} c_0: {f / M:.2e}" for b, f in fail.items())
        print(f"R = {R}, q = {q:.3f}, {name}: P(t < -q) = {lo / M:.2e}, P(t > q) = "
              f"{hi / M:.2e} (Student: 5.0e-06 each); check fails at {rates} "
              f"({M} sets)", flush=True)

for (H2, L2), N2 in (((4, 16), NETS // 4), ((1, 125), NETS // 8)):
    vals = []
    for start in range(0, N2, 250):
        x = hg.simulate_random_heads(x0, beta, T / L2, H2, L2, min(250, N2 - start), rng)
        vals.append(np.mean(np.sum((x - x0) ** 2, axis=-1), axis=-1) * L2 * H2 / T**2 / c0)
    w = np.concatenate(vals)
    print(f"{w.size} networks at H = {H2}, L = {L2}: relative bias {w.mean() - 1:+.4f} +- "
          f"{w.std(ddof=1) / np.sqrt(w.size):.4f}, skewness {stats.skew(w):.3f} (+- "
          f"{np.sqrt(6.0 / w.size):.3f}), excess kurtosis {stats.kurtosis(w):.3f}",
          flush=True)
