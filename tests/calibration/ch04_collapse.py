"""Chapter 4, V = -I: the collapse cell's assertions on many draws.

Replays the notebook's collapse cells (five draws of 16 and of 2 planar tokens to t = 500)
with SEED = s for s = START..START+SEEDS-1, and prints the failures (more than 2 of the 5
draws missing), the draws that miss, and over all draws the largest deviation of the
measured growth of Sigma^-1 from 2 (band 0.05), of attention from uniform (band 0.05), of
the mean relative to the spread (band 1e-3) and the smallest shrinking factor (at least 2).
Usage: python tests/calibration/ch04_collapse.py [seeds] [start]
"""

import numpy as np
from _notebook import CH04_IDENTITIES, cell, run, seeds_from_argv, setup

NB = "04_clustering.ipynb"
SEEDS, START = seeds_from_argv()
# the first cell's long x-integration is skipped: only its identity matrices are needed
prelude = [CH04_IDENTITIES,
           cell(NB, "t_c = np.concatenate")]
checks = cell(NB, "rate16 = (np.linalg.inv")
failures, draws, missed = 0, 0, 0
worst = {"rate": 0.0, "uniform": 0.0, "mean": 0.0, "log E": 0.0, "shrink": np.inf}
for seed in range(START, START + SEEDS):
    ns = setup(NB, seed)
    assert run(prelude, ns) is None
    if run(checks, ns) is not None:
        failures += 1
        print("fails at seed", seed, flush=True)
    k100, k50, span = ns["k100"], ns["k50"], ns["span"]
    for r16, r2 in zip(ns["collapse"][16], ns["collapse"][2], strict=True):
        draws += 1
        c16, c2, x16 = r16["cov"], r2["cov"], r16["x"]
        rate16 = (np.linalg.inv(c16[-1]) - np.linalg.inv(c16[k100])) / span
        rate2 = (1 / np.trace(c2[-1]) - 1 / np.trace(c2[k100])) / span
        P_end = ns["attention"].softmax_matrix(x16[-1], np.eye(2))
        dev = {"rate": max(np.max(np.abs(rate16 - 2 * np.eye(2))), abs(rate2 - 2)),
               "uniform": np.max(np.abs(P_end * 16 - 1)),
               "mean": np.linalg.norm(r16["mean"][-1]) / np.sqrt(np.trace(c16[-1])),
               "log E": max(r["logE"][-1] - 2 * np.log(len(r["x0"])) for r in (r16, r2))}
        for key, value in dev.items():
            worst[key] = max(worst[key], value)
        shrink = np.abs(x16[k50]).max() / np.abs(x16[-1]).max()
        worst["shrink"] = min(worst["shrink"], shrink)
        missed += (dev["rate"] >= 0.05 or dev["uniform"] >= 0.05 or dev["mean"] >= 1e-3
                   or dev["log E"] >= 1e-2 or shrink <= 2)
print(f"{SEEDS} executions: {failures} failures; {draws} draws, {missed} missing a "
      f"statement; largest |rate - 2| {worst['rate']:.1e} (band 0.05), largest |nP - 1| "
      f"{worst['uniform']:.1e} (band 0.05), largest |mean|/spread {worst['mean']:.1e} "
      f"(band 1e-3), largest log E - log n^2 {worst['log E']:.1e} (band 1e-2), smallest "
      f"shrinking factor {worst['shrink']:.2f} (at least 2)")
