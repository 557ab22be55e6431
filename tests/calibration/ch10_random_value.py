"""Chapter 10, random value matrices: the step bias of the two statistical checks.

Runs the notebook's two checks with many more networks, at the notebook's h = 0.01 and at
h = 0.005, and prints the mean of each statistic minus its limit value with its standard
error: (i) the martingale E S(rho_T) - S(rho_0) at beta = 2, d = 6, rho_0 = 0, T = 5;
(ii) the mean of log(gap_T / gap_0) / T minus lambda_{-1} at beta = 0.5 and 2, d = 6,
gap_0 = 1e-6, T = 2. Usage:
    python tests/calibration/ch10_random_value.py [seed_offset] [batches]
(defaults 0 and 8 batches of 4000 networks per case).
"""

import sys

import numpy as np
from transformer_pde import random_value as rv

OFFSET = int(sys.argv[1]) if len(sys.argv) > 1 else 0
BATCHES = int(sys.argv[2]) if len(sys.argv) > 2 else 8
d, N = 6, 4000
rng = np.random.default_rng([777, OFFSET])
for h in (0.01, 0.005):
    vals = []
    for _ in range(BATCHES):
        rho, _ = rv.simulate_two_tokens(0.0, 2.0, d, h, int(round(5.0 / h)), N, rng)
        vals.append(rv.antipodal_probability(rho, 2.0, d))
    x = np.concatenate(vals) - rv.antipodal_probability(0.0, 2.0, d)
    print(f"h = {h}: martingale bias {x.mean():+.5f} +- {x.std(ddof=1) / np.sqrt(x.size):.5f}"
          f" (sd {x.std(ddof=1):.4f}, {x.size} networks)", flush=True)
    for beta in (0.5, 2.0):
        lam = rv.boundary_exponents(beta, d)[1]
        vals = []
        for _ in range(BATCHES):
            _, gap = rv.simulate_two_tokens(-1.0 + 1e-6, beta, d, h, int(round(2.0 / h)), N,
                                            rng)
            vals.append(np.log(gap / 1e-6) / 2.0)
        x = np.concatenate(vals) - lam
        print(f"h = {h}, beta = {beta}: exponent bias {x.mean():+.5f} +- "
              f"{x.std(ddof=1) / np.sqrt(x.size):.5f} (sd {x.std(ddof=1):.4f})", flush=True)
