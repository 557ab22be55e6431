"""Chapter 4, consensus: the transition matrix Phi and the frozen-weights bound on many draws.

Replays the notebook's consensus cells (Phi(t) with z(t) = Phi(t) z(0) for 20 Gaussian
planar tokens, A = V = I, up to t = 12; exp(T(P(0) - I)) against the ergodicity bound; pure
attention layers) with SEED = s for s = START..START+SEEDS-1, on a fresh Gaussian start in
place of the sweep's first planar run, and prints the failures of the assertion cell.
Usage: python tests/calibration/ch04_consensus.py [seeds] [start]
"""

import numpy as np
from _notebook import CH04_IDENTITIES, SEED_OFFSET, cell, run, seeds_from_argv, setup

NB = "04_clustering.ipynb"
SEEDS, START = seeds_from_argv()
# the first cell's long x-integration is skipped: only its identity matrices are needed
prelude = [CH04_IDENTITIES,
           cell(NB, "gap_spd = np.max")]
cells = [cell(NB, "consensus.transition_matrix"), cell(NB, "delta_frozen =")]
failures, worst_rows = 0, 0.0
for seed in range(START, START + SEEDS):
    ns = setup(NB, seed)
    assert run(prelude, ns) is None
    start = np.random.default_rng([seed + SEED_OFFSET, 11]).normal(size=(1, 20, 2))
    ns["sweep"] = {"2-D, A = I": [{"z": start, "leaders": [], "target": np.arange(20)}]}
    if run(cells, ns) is not None:
        failures += 1
        print("fails at seed", seed, flush=True)
    worst_rows = max(worst_rows, np.max(np.abs(ns["Phi"].sum(axis=2) - 1)))
print(f"{SEEDS} executions: {failures} failures; largest |row sum - 1| of Phi {worst_rows:.1e}")
