"""Chapter 4, the rescaling and the three reductions: their assertion cells on many draws.

Replays the notebook's first cells (x against z for random A, V and for A = V = I to t = 20;
A positive definite against A = I; logits times 10 against a later start; d = 1,
(V, QK) = (1/2, 2) against (1, 1)) with SEED = s for s = START..START+SEEDS-1, and prints
the failures and the largest gaps (bands 1e-9 of the scale, 1e-8 and 1e-8).
Usage: python tests/calibration/ch04_reductions.py [seeds] [start]
"""

from _notebook import cell, run, seeds_from_argv, setup

NB = "04_clustering.ipynb"
SEEDS, START = seeds_from_argv()
cells = [cell(NB, "gap_hardmax = np.max"), cell(NB, "assert gap_random <"),
         cell(NB, "gap_spd = np.max"), cell(NB, "assert max(gap_spd")]
failures, ratio = 0, 0.0
worst = dict.fromkeys(["gap_random", "gap_hardmax", "P_gap", "gap_spd", "gap_beta", "gap_1d"], 0.0)
for seed in range(START, START + SEEDS):
    ns = setup(NB, seed)
    if run(cells, ns) is not None:
        failures += 1
        print("fails at seed", seed, flush=True)
    for key in worst:
        worst[key] = max(worst[key], float(ns.get(key, 0.0)))
    ratio = max(ratio, ns["gap_random"] / ns["scale_random"])
print(f"{SEEDS} executions: {failures} failures; largest gaps "
      + ", ".join(f"{k} {v:.1e}" for k, v in worst.items())
      + f"; largest gap_random / scale_random {ratio:.1e} (band 1e-9)")
