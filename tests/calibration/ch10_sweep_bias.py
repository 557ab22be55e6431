"""Chapter 10, particle sweeps: the clustered side's bias against the mean-field branch as a
function of n and h (a measurement, not yet a check of the notebook).

Circle, beta = 5, kappa = 0.94 kappa_1 (inside the hysteresis window), R systems of n
particles started at one point, Euler-Maruyama with step h to T = 10; |Z_n| averaged over
t in [5, 10] per system; prints mean - r (r the stable upper branch of circle_branch at that
kappa) with its standard error across systems. Usage:
    python tests/calibration/ch10_sweep_bias.py [seed_offset] [R]
"""

import sys
import time

import numpy as np
from transformer_pde import noisy_kuramoto as nk
from transformer_pde import sphere_sde as sde

OFFSET = int(sys.argv[1]) if len(sys.argv) > 1 else 0
R = int(sys.argv[2]) if len(sys.argv) > 2 else 16
beta = 5.0
k1 = float(nk.mode_threshold(1, beta, 2))
kappa = 0.94 * k1
r1 = np.linspace(0.3, 0.95, 131)
kap, _ = nk.circle_branch(beta, r1)
upper = np.argmin(kap)            # the fold: the stable branch is r1 beyond it
r = float(np.interp(kappa, kap[upper:], r1[upper:]))
print(f"kappa_1 = {k1:.6f}, kappa = {kappa:.6f}, branch r = {r:.5f}", flush=True)
rng = np.random.default_rng([4242, OFFSET])
for n, h in ((250, 0.002), (500, 0.002), (1000, 0.002), (2000, 0.002), (1000, 0.001)):
    t0 = time.time()
    steps = int(round(10.0 / h))
    every = int(round(0.5 / h))
    order, _ = sde.simulate_circle(np.zeros((R, n)), beta, kappa, h, steps, rng, every)
    late = order[order.shape[0] // 2:].mean(axis=0)
    print(f"n = {n}, h = {h}: mean - r = {late.mean() - r:+.5f} +- "
          f"{late.std(ddof=1) / np.sqrt(R):.5f} (sd x sqrt(n) {late.std(ddof=1) * np.sqrt(n):.3f},"
          f" {time.time() - t0:.0f} s)", flush=True)
