"""Chapter 8, critical scaling: the kernel against the exact formula on many draws.

Runs the notebook's sweep (probe configurations with 16 random bulk coordinates, rho = 1/2,
33 values of gamma in [0, 4] without the residual and 9 with it, c = 1, n = 10^2 .. 10^5)
with seeds [s, 3, n] for s = START .. START + DRAWS - 1 and prints the number of draws whose
largest deviation reaches the tolerance 1e-9, and the largest deviation.
Usage: python tests/calibration/ch08_critical.py [draws] [start]   (default 200 from 0)
"""

import sys

import numpy as np
from transformer_pde import draws, long_context

DRAWS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
START = int(sys.argv[2]) if len(sys.argv) > 2 else 0
ns = 10 ** np.arange(2, 6)
gammas = np.linspace(0.0, 4.0, 33)
worst = []
for s in range(START, START + DRAWS):
    keys = [[s, 3, int(n)] for n in ns]
    sweep = draws.map_keys(long_context.probe_sweep_task, keys, 0.5, 16, gammas, n_jobs=-1)
    sweep += draws.map_keys(long_context.probe_sweep_task, keys, 0.5, 16, gammas[::4],
                            residual=1.0, n_jobs=-1)
    worst.append(max(np.max(np.abs(m - e)) for m, e in sweep))
worst = np.array(worst)
print(f"kernel against (ch8-finite): {np.sum(~(worst < 1e-9))} of {DRAWS} draws fail; largest "
      f"deviation {worst.max():.2e} (tolerance 1e-9; seeds from {START})")
