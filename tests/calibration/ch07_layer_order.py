"""Chapter 7, the network and its flow: the order-one check of the two layers on many draws.

Runs the computation of the notebook's cell (12 uniform tokens on S^2, the symmetric matrix
drawn first from the same generator, SA at beta = 2 up to T = 3 with L = 30, 60, 120, 240
layers against a tight adaptive solution) for SEED = 0..DRAWS-1, and prints the number of
draws failing |e(h)/e(h/2) - 2| <= 4h, the largest |e(h)/e(h/2) - 2|/h met and its quantiles
(the tail decides the false-alarm probability).
Usage: python tests/calibration/ch07_layer_order.py [draws] [start]
(the seeds run from start to start + draws - 1)
"""

import sys

import numpy as np
from joblib import Parallel, delayed
from transformer_pde import sphere

DRAWS = int(sys.argv[1]) if len(sys.argv) > 1 else 400
START = int(sys.argv[2]) if len(sys.argv) > 2 else 0
depths = np.array([30, 60, 120, 240])
h = 3.0 / depths


def draw(seed):
    rng = np.random.default_rng(seed)
    rng.normal(size=(3, 3))  # the symmetric matrix of the cell comes first
    X0 = sphere.uniform_on_sphere(12, 3, rng)
    flow_T = sphere.integrate_on_sphere(sphere.sa_field(2.0), X0, [0, 3.0])[-1]
    kappas = []
    for f in (sphere.sa_field(2.0, tangent=False), sphere.sa_field(2.0)):
        e = np.array([np.linalg.norm(sphere.normalised_residual_stack(f, X0, 3.0, L)[-1]
                                     - flow_T) for L in depths])
        kappas.append(np.max(np.abs(e[:-1] / e[1:] - 2) / h[:-1]))
    return max(kappas)


kappa = np.array(Parallel(n_jobs=-1)(delayed(draw)(s) for s in range(START, START + DRAWS)))
q = np.quantile(kappa, [0.5, 0.9, 0.99])
print(f"{np.sum(kappa > 4)} of {DRAWS} draws fail (band 4); largest |ratio - 2|/h "
      f"{kappa.max():.2f}; quantiles 50%, 90%, 99%: {q[0]:.2f}, {q[1]:.2f}, {q[2]:.2f}")
