"""Chapter 10, random queries and keys: the bias of the distance check.

The notebook checks that L H D_L^2 / T^2 (D_L^2 the mean squared distance of the 32 tokens
from where they started, after L layers of step T / L with H heads whose Q, K, V are redrawn
at every layer and head) has mean c_0 = homogenized.squared_distance_rate(1, 32, 32), up to a
relative correction O(T^2 / (L H)). This script measures that correction at the notebook's
cheapest point (H = 1, L = 16, T = 0.25: T^2 / (L H) = 1/256, the largest of the notebook)
and at T = 1 (16 times larger), with many networks, and prints mean / c_0 - 1 with its
standard error. Usage:
    python tests/calibration/ch10_homogenized.py [seed_offset] [batches]
(defaults 0 and 8 batches of 500 networks per case).
"""

import sys

import numpy as np
from transformer_pde import homogenized as hg

OFFSET = int(sys.argv[1]) if len(sys.argv) > 1 else 0
BATCHES = int(sys.argv[2]) if len(sys.argv) > 2 else 8
n = d = 32
beta, N = 1.0, 500
x0 = np.eye(n)
c0 = hg.squared_distance_rate(beta, n, d)
rng = np.random.default_rng([4242, OFFSET])
for T, H, L in ((0.25, 1, 16), (1.0, 1, 16), (1.0, 4, 16)):
    vals = []
    for _ in range(BATCHES):
        x = hg.simulate_random_heads(x0, beta, T / L, H, L, N, rng)
        vals.append(np.mean(np.sum((x - x0) ** 2, axis=-1), axis=-1) * L * H / T**2 / c0)
    v = np.concatenate(vals) - 1.0
    print(f"T = {T}, H = {H}, L = {L} (T^2/(LH) = {T * T / (L * H):.5f}): relative bias "
          f"{v.mean():+.5f} +- {v.std(ddof=1) / np.sqrt(v.size):.5f} (sd {v.std(ddof=1):.4f},"
          f" {v.size} networks)", flush=True)
