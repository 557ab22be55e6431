"""Chapter 9: the three statistical checks replayed on other seeds.

Replays the notebook's own cells with SEED = START, ..., START + SEEDS - 1 (plus the seed
offset, see _notebook.py) and prints, for each check, the number of seeds that fail it and the
mean and standard deviation of its statistic:

- circle runs: the growth exponent p of the mean group count between beta = 25 and 100
  (asserted in (1/4, 3/4));
- KDE modes on the line: the largest / smallest ratio of the mean count to
  sqrt(beta log beta) on n^0.70..n^0.93 (10^3..10^4 at the default n; asserted < 1.5)
  and the fitted exponent there
  (asserted in (0.45, 0.70));
- KDE modes on the circle: the z-scores of the mean counts against the Rice limit (asserted
  |z| < 7).

Usage: python tests/calibration/ch09_checks.py [seeds] [start] [--only=circle|line|rice]
       [--seed-offset=N]
(default 20 seeds from 1000; one seed takes about the notebook's time, two minutes).
"""

import sys

import numpy as np
from _notebook import cell, run, seeds_from_argv, setup

NB = "09_metastability_mean_shift.ipynb"
only = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")]
sys.argv = [a for a in sys.argv if not a.startswith("--only=")]
SEEDS, START = seeds_from_argv(20, 1000)
parts = {
    "circle": ([cell(NB, "betas_l = np.array"), cell(NB, "n_circle = "),
                cell(NB, "p_hat = ")], "p_hat"),
    "line": ([cell(NB, "n_kde = "), cell(NB, "ratio[up].max() / ratio[up].min()")], "slope"),
    "rice": ([cell(NB, "n_ang = ")], "z"),
}
for name, (code, stat) in parts.items():
    if only and name not in only:
        continue
    fails, values, ratios = 0, [], []
    for seed in range(START, START + SEEDS):
        ns = setup(NB, seed)
        err = run(code, ns)
        fails += err is not None
        values.append(np.atleast_1d(ns.get(stat, np.nan)))
        if name == "line" and "ratio" in ns:
            r = ns["ratio"][ns["up"]]
            ratios.append(r.max() / r.min())
    v = np.array(values, dtype=float)
    print(f"{name}: {fails} of {SEEDS} seeds fail; {stat}: mean {np.nanmean(v, axis=0)}, "
          f"sd {np.nanstd(v, axis=0, ddof=1)}")
    if ratios:
        print(f"  max/min ratio: mean {np.mean(ratios):.3f}, largest {np.max(ratios):.3f}")
