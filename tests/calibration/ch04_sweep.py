"""Chapter 4, V = I: the sweep's assertions (and the consensus cell) on many draws.

Replays the notebook's cells with SEED = s for s = START..START+SEEDS-1: the reduction cell
(which sets the grid; the first cell is skipped, so the draws differ from the notebook's for
the same SEED but have the same law), the sweep (20 runs of 32 tokens in R^3 and 20 of 20 in
the plane, each integrated until it has spent four time units in its hardmax phase), its
assertion cell (hardmax phase before the cap, nested hulls, the deviation bound of
lem-ch4-deviation, the energy), and the consensus cells. Prints the failures of each cell and
the distribution of the end t0 of the soft phase over all runs, with its tail.
Usage: python tests/calibration/ch04_sweep.py [seeds] [start]
"""

import numpy as np
from _notebook import CH04_IDENTITIES, cell, run, seeds_from_argv, setup

NB = "04_clustering.ipynb"
SEEDS, START = seeds_from_argv()
# the first cell's long x-integration is skipped: only its identity matrices are needed
prelude = [CH04_IDENTITIES,
           cell(NB, "gap_spd = np.max"), cell(NB, "integrate_until_settled(Z0, t_grid")]
# the settled-count cell: it counts the unsettled runs and asserts at most 2 of the 40
checks = cell(NB, "assert unsettled <= 2")
consensus = [cell(NB, "consensus.transition_matrix"), cell(NB, "delta_frozen =")]

failures = {"sweep": 0, "consensus": 0}
unsettled_runs = 0
t0 = {"3-D, A = I": [], "2-D, A = I": []}
for seed in range(START, START + SEEDS):
    ns = setup(NB, seed)
    err = run(prelude, ns)
    assert err is None, (seed, err)
    if run(checks, ns) is not None:
        failures["sweep"] += 1
        print("sweep fails at seed", seed, flush=True)
    missed = sum(r["start"] is None for runs in ns["sweep"].values() for r in runs)
    unsettled_runs += missed
    if missed:
        print(f"seed {seed}: {missed} run(s) without a hardmax phase by the cap", flush=True)
    for name, runs in ns["sweep"].items():
        t0[name] += [r["t"][r["start"]] if r["start"] is not None else np.inf for r in runs]
    if run(consensus, ns) is not None:
        failures["consensus"] += 1
        print("consensus fails at seed", seed, flush=True)
    if (seed - START + 1) % 20 == 0:
        print(f"{seed - START + 1} executions done: failures {failures}, unsettled runs "
              f"{unsettled_runs}", flush=True)
print(f"{SEEDS} executions ({40 * SEEDS} runs, {SEEDS} consensus computations): failures "
      f"{failures}; runs without a hardmax phase by the cap: {unsettled_runs}")
for name, values in t0.items():
    v = np.sort(values)
    print(f"{name}: {v.size} runs, t0 median {np.median(v):.1f}, 99% {np.quantile(v, 0.99):.1f},"
          f" largest {v[-5:]}")
    # tail: the fraction of runs with t0 > s, for s on a grid
    for s in (4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0):
        print(f"  P(t0 > {s:g}) = {np.mean(v > s):.2e}")
