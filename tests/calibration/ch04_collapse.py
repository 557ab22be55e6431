"""Chapter 4, V = -I: the collapse cell's assertions on many draws.

Replays the notebook's collapse cells (16 and 2 planar tokens to t = 500) with SEED = s for
s = START..START+SEEDS-1, and prints the failures and the largest deviation of the measured
growth of Sigma^-1 from 2 (the band is 0.05).
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
failures, worst, worst_uniform, worst_mean = 0, 0.0, 0.0, 0.0
for seed in range(START, START + SEEDS):
    ns = setup(NB, seed)
    assert run(prelude, ns) is None
    if run(checks, ns) is not None:
        failures += 1
        print("fails at seed", seed, flush=True)
    worst = max(worst, np.max(np.abs(ns["rate16"] - 2 * np.eye(2))), abs(ns["rate2"] - 2))
    worst_uniform = max(worst_uniform, np.max(np.abs(ns["P_end"] * 16 - 1)))
    worst_mean = max(worst_mean, np.linalg.norm(ns["mean_c"][-1]) / ns["rms"][-1])
print(f"{SEEDS} executions: {failures} failures; largest |rate - 2| {worst:.1e} (band 0.05), "
      f"largest |nP - 1| {worst_uniform:.1e} (band 0.05), largest |mean|/spread "
      f"{worst_mean:.1e} (band 1e-3)")
