"""Chapter 4, V = I: the tail of the end t0 of the soft phase over many runs.

Integrates runs of the sweep's two settings (32 Gaussian tokens in R^3, 20 in the plane,
A = I) exactly as the notebook's sweep cell does (hardmax.integrate_until_settled on the grid
[0, 12] with step 0.1, cap 24), in batches of 20 drawn from np.random.default_rng([s, k]),
and prints, per setting, the quantiles of t0, the fraction of runs with t0 above a grid of
levels, and the number of runs that did not settle by the cap (the assertion of the sweep).
Usage: python tests/calibration/ch04_soft_phase.py [runs per setting] [start] [--seed-offset=N]
"""

import sys

import numpy as np
from _notebook import SEED_OFFSET
from transformer_pde import hardmax

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
START = int(sys.argv[2]) if len(sys.argv) > 2 else 0
t_grid = np.linspace(0.0, 12.0, 121)
for name, (n_tok, d) in {"3-D, A = I": (32, 3), "2-D, A = I": (20, 2)}.items():
    t0, unsettled = [], 0
    for batch in range(START, START + RUNS // 20):
        Z0 = np.random.default_rng([batch + SEED_OFFSET, d]).normal(size=(20, n_tok, d))
        for run in hardmax.integrate_until_settled(Z0, t_grid, np.eye(d), cap=24.0):
            if run["start"] is None:
                unsettled += 1
            else:
                t0.append(run["t"][run["start"]])
    v = np.sort(t0)
    print(f"{name}: {RUNS} runs, {unsettled} not in their hardmax phase by the cap; t0 median "
          f"{np.median(v):.1f}, 99% {np.quantile(v, 0.99):.1f}, largest {v[-3:]}", flush=True)
    print("  " + ", ".join(f"P(t0 > {s:g}) = {np.mean(v > s):.1e}"
                           for s in (3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)), flush=True)
