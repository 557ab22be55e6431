"""Chapter 4, appendix: the scripts' scheme, the residual network, Euler and RK4.

Replays the notebook's appendix cells (five draws of the authors' initial data: the scripts'
loop against explicit Euler, the rescaled residual network against Euler on z at four depths,
Euler and RK4 at equal work, the times to come within delta of the limits) with SEED = s for
s = START..START+SEEDS-1, and prints the failures and the range of each measured quantity.
Usage: python tests/calibration/ch04_numerics.py [seeds] [start]
"""

import numpy as np
from _notebook import CH04_IDENTITIES, cell, run, seeds_from_argv, setup

NB = "04_clustering.ipynb"
SEEDS, START = seeds_from_argv()
# the first cell's long x-integration is skipped: only its identity matrices are needed
cells = [CH04_IDENTITIES,
         cell(NB, "rng_num = np.random"),
         cell(NB, "discrete_gap, hull_out = 0.0, 0"), cell(NB, "t_long = np.linspace"),
         cell(NB, "assert scripts_vs_euler"),
         cell(NB, "residual_order = np.log2")]
failures, seen = 0, {"residual order": [], "residual bound": [], "Euler order": [],
                     "RK4 order": [], "reach difference": []}
# per draw (five a run): the fitted orders and the largest passage-time deviation, whose
# rates enter the binomial law of the medians asserted by the notebook
per_draw = {"Euler order": [], "RK4 order": [], "reach deviation": []}
for seed in range(START, START + SEEDS):
    ns = setup(NB, seed)
    if run(cells, ns) is not None:
        failures += 1
        print("fails at seed", seed, flush=True)
    seen["residual order"] += list(ns["residual_order"])
    seen["residual bound"] += list(np.atleast_1d(ns["slack"]))
    seen["Euler order"].append(-ns["orders"]["euler"])
    seen["RK4 order"].append(-ns["orders"]["rk4"])
    seen["reach difference"].append(
        np.max(np.abs(np.diff(ns["t_reach"][:, 1:], axis=1) - np.log(100))))
    for key, m in (("Euler order", "euler"), ("RK4 order", "rk4")):
        per_draw[key] += [-ns["fit_power_law"](ns["work"][3:], e[3:]).exponent
                          for e in ns["errors"][m]]
    per_draw["reach deviation"] += list(np.max(np.abs(
        np.diff(ns["t_reach"][:, 1:], axis=1) - np.log(100)), axis=1))
print(f"{SEEDS} executions: {failures} failures; "
      + "; ".join(f"{k} {min(v):.3f} to {max(v):.3f}" for k, v in seen.items()))
eu, rk, dev = (np.array(per_draw[k]) for k in per_draw)
print(f"{eu.size} draws: Euler order {eu.min():.3f} to {eu.max():.3f} "
      f"({np.sum(eu <= 0.9)} at 0.9 or below, {np.sum(eu >= 1.1)} at 1.1 or above); RK4 order "
      f"{rk.min():.3f} to {rk.max():.3f} ({np.sum(rk <= 3.3)} at 3.3 or below, "
      f"{np.sum(rk >= 4.7)} at 4.7 or above, "
      f"{np.sum(rk < 3.5)} below 3.5); passage deviation up to {dev.max():.3f} "
      f"({np.sum(dev >= 0.25)} at 0.25 or more)")
