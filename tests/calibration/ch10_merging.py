"""Chapter 10, noise against metastability: the bias of the merging check.

Runs the notebook's two-group systems (beta = 6, kappa = 1, m = 8 + 8, Delta_0 = 2.8,
h = 1e-3, a = 0.3) up to t* = 4 and compares the fraction merged with the prediction
1 - merge_survival(t*) of prop-ch10-merge (with the Gaussian spread correction).

Usage: python tests/calibration/ch10_merging.py SYSTEMS [SEED_OFFSET]
"""

import math
import sys

import numpy as np
from transformer_pde import cluster_merging as cm

systems = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
offset = int(sys.argv[2]) if len(sys.argv) > 2 else 0
beta, kappa, m, h, d0, a, t_star = 6.0, 1.0, 8, 1e-3, 2.8, 0.3, 4.0
lam = 0.5 * math.exp(beta)
v = 2 * (1 - 1 / m) / (kappa * lam)
p0 = 1 - cm.merge_survival([t_star], d0, beta, kappa, m, m, 2 * m, a, v)[0]
rng = np.random.default_rng([10_041, offset])
_, _, _, tau = cm.simulate_two_groups(d0, m, m, beta, kappa, h, int(round(t_star / h)),
                                      systems, rng)
p = float(np.mean(tau <= t_star + 1e-9))
se = math.sqrt(p * (1 - p) / systems)
print(f"systems {systems}, offset {offset}: merged by t* {p:.4f} +- {se:.4f}, "
      f"predicted {p0:.4f}, bias {p - p0:+.4f}")
