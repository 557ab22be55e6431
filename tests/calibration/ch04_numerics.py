"""Chapter 4, appendix: the scripts' scheme, the residual network, Euler and RK4.

Replays the notebook's appendix cells (five draws of the authors' initial data: the scripts'
loop against explicit Euler, the rescaled residual network against Euler on z at four depths,
Euler and RK4 at equal work, the times to come within delta of the limits) with SEED = s for
s = START..START+SEEDS-1, and prints the failures and the range of each measured quantity.
Usage: python tests/calibration/ch04_numerics.py [seeds] [start]
"""

import sys

import numpy as np
from _notebook import cell, run, setup

NB = "04_clustering.ipynb"
SEEDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
START = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
# the first cell's long x-integration is skipped: only its identity matrices are needed
cells = [compile("I2, I3 = np.eye(2), np.eye(3)", "identities", "exec"),
         cell(NB, "rng_num = np.random"),
         cell(NB, "t_long = np.linspace"), cell(NB, "residual_order = np.log2")]
failures, seen = 0, {"residual order": [], "Euler order": [], "RK4 order": [],
                     "reach difference": []}
for seed in range(START, START + SEEDS):
    ns = setup(NB, seed)
    if run(cells, ns) is not None:
        failures += 1
        print("fails at seed", seed, flush=True)
    seen["residual order"] += list(ns["residual_order"])
    seen["Euler order"].append(-ns["orders"]["euler"])
    seen["RK4 order"].append(-ns["orders"]["rk4"])
    seen["reach difference"].append(
        np.max(np.abs(np.diff(ns["t_reach"][:, 1:], axis=1) - np.log(100))))
print(f"{SEEDS} executions: {failures} failures; "
      + "; ".join(f"{k} {min(v):.3f} to {max(v):.3f}" for k, v in seen.items()))
