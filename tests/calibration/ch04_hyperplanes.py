"""Chapter 4, hyperplanes and the paranormal V: the assertion cells on many draws.

Replays the notebook's cells for the dominant-eigenvalue V of the authors' scripts (five runs
with A = I and five with A = diag(1, -1/2)) and for V = diag(1, 1, -1/2) with SEED = s for
s = START..START+SEEDS-1, and prints the failures of each assertion cell, the settled runs
of each A that miss the grouping of <phi_1, z_i> at 1e-3, and the latest end of the soft phase.
Usage: python tests/calibration/ch04_hyperplanes.py [seeds] [start]
"""

from _notebook import CH04_IDENTITIES, cell, run, seeds_from_argv, setup

NB = "04_clustering.ipynb"
SEEDS, START = seeds_from_argv()
# the first cell's long x-integration is skipped: only its identity matrices are needed
prelude = [CH04_IDENTITIES,
           cell(NB, "gap_spd = np.max")]
hyper = [cell(NB, "V_h = np.array"), cell(NB, "support functions along phi1 monotone")]
para = [cell(NB, "V_ps = np.diag"), cell(NB, "F-hull non-increasing")]
failures = {"hyperplanes": 0, "paranormal": 0}
t0, settled, grouping = [], [0, 0], [0, 0]
for seed in range(START, START + SEEDS):
    ns = setup(NB, seed)
    assert run(prelude, ns) is None
    for name, code in (("hyperplanes", hyper), ("paranormal", para)):
        if run(code, ns) is not None:
            failures[name] += 1
            print(name, "fails at seed", seed, flush=True)
    for r, h in enumerate(ns["hyper"]):
        settled[r % 2] += h["start"] is not None
    grouping = [g + m for g, m in zip(grouping, ns["grouping_misses"], strict=True)]
    t0 += [r["t"][r["start"]] for r in ns["hyper"] + [ns["run_ps"]] if r["start"] is not None]
print(f"{SEEDS} executions (10 hyperplane runs and 1 paranormal run each): failures "
      f"{failures}; settled runs (A = I, A indefinite) {settled}, of which missing the "
      f"grouping {grouping}; latest end of the soft phase {max(t0):.1f}")
