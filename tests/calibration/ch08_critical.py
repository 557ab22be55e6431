"""Chapter 8, critical scaling: the kernel against the exact formula on many draws.

Runs the notebook's sweep (probe configurations with 16 random bulk coordinates, rho = 1/2,
33 values of gamma in [0, 4], n = 10^2 .. 10^5) with seeds [s, 3, n] for s = 0..DRAWS-1 and
prints the number of draws whose largest deviation reaches the tolerance 1e-9, and the
largest deviation. Usage: python tests/calibration/ch08_critical.py [draws]
"""

import sys

import numpy as np
from transformer_pde import draws, long_context

DRAWS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
ns = 10 ** np.arange(2, 6)
gammas = np.linspace(0.0, 4.0, 33)
worst = []
for s in range(DRAWS):
    sweep = draws.map_keys(long_context.probe_sweep_task, [[s, 3, int(n)] for n in ns],
                           0.5, 16, gammas, n_jobs=-1)
    worst.append(max(np.max(np.abs(m - e)) for m, e in sweep))
worst = np.array(worst)
print(f"kernel against (ch8-finite): {np.sum(~(worst < 1e-9))} of {DRAWS} draws fail; largest "
      f"deviation {worst.max():.2e} (tolerance 1e-9)")
