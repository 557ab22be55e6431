"""Chapter 4, dimension one: P(t) in the set P (all rows but one basis vectors) by t = 24.

Replays the notebook's d = 1 cells (five sequences of 16 tokens and five shifted to be
positive, integrated to t = 12 and further while more than one row is not within 1e-6 of
e_min or e_max) with SEED = s for s = START..START+SEEDS-1, and prints the failures of the
assertion cell (3 of the 5 of a kind missing), the sequences of each kind that miss, and how
many sequences needed more than t = 12.
Usage: python tests/calibration/ch04_one_d.py [seeds] [start]
"""

from _notebook import cell, run, seeds_from_argv, setup

NB = "04_clustering.ipynb"
SEEDS, START = seeds_from_argv()
compute, checks = cell(NB, "one_d = []"), cell(NB, "d = 1: P(t) in the set P")
failures, extended, worst, sequences = 0, 0, 0, 0
missed = {"both signs": 0, "one sign": 0}
for seed in range(START, START + SEEDS):
    ns = setup(NB, seed)
    assert run(compute, ns) is None
    if run(checks, ns) is not None:
        failures += 1
        print("fails at seed", seed, flush=True)
    for key, positive in (("both signs", False), ("one sign", True)):
        missed[key] += ns["misses"][positive]
    sequences += len(ns["one_d"])
    ends = [r["t"][-1] for r in ns["one_d"]]
    extended += sum(e > 12 for e in ends)
    worst = max(worst, max(ends))
print(f"{SEEDS} executions ({sequences} sequences): {failures} failures; sequences missing "
      f"{missed}; {extended} sequences integrated past t = 12, the latest to t = {worst:g}")
