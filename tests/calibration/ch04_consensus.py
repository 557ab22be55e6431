"""Chapter 4, consensus: the transition matrix Phi and the frozen-weights bound on many draws.

Replays the notebook's consensus cells (Phi(t) with z(t) = Phi(t) z(0) for 20 Gaussian
planar tokens, A = V = I, up to t = 12; exp(T(P(0) - I)) against the ergodicity bound; pure
attention layers) with SEED = s for s = START..START+SEEDS-1, on a fresh Gaussian start in
place of the sweep's first planar run, and prints the failures of the assertion cell.
Usage: python tests/calibration/ch04_consensus.py [seeds] [start]
"""

import sys

import numpy as np
from _notebook import cell, run, setup

NB = "04_clustering.ipynb"
SEEDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
START = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
# the first cell's long x-integration is skipped: only its identity matrices are needed
prelude = [compile("I2, I3 = np.eye(2), np.eye(3)", "identities", "exec"),
           cell(NB, "gap_spd = np.max")]
cells = [cell(NB, "consensus.transition_matrix"), cell(NB, "delta_frozen =")]
failures, worst_rows = 0, 0.0
for seed in range(START, START + SEEDS):
    ns = setup(NB, seed)
    assert run(prelude, ns) is None
    start = np.random.default_rng([seed, 11]).normal(size=(1, 20, 2))
    ns["sweep"] = {"2-D, A = I": [{"z": start, "leaders": [], "target": np.arange(20)}]}
    if run(cells, ns) is not None:
        failures += 1
        print("fails at seed", seed, flush=True)
    worst_rows = max(worst_rows, np.max(np.abs(ns["Phi"].sum(axis=2) - 1)))
print(f"{SEEDS} executions: {failures} failures; largest |row sum - 1| of Phi {worst_rows:.1e}")
