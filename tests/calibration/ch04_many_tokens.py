"""Chapter 4, many tokens: the number of leaders at t = 6 for sizes beyond the notebook's.

Replays the law of the notebook's many-tokens cell (A = V = I_2, standard Gaussian tokens and
tokens uniform on the unit disc, integrated to t = 6 at tolerance 1e-6, a token counting as a
leader when its self-attention exceeds 1/2) for n = 16, ..., 1024 and DRAWS draws per size
and law, and prints the range of the counts of leaders and of the initial hull's vertices.
Usage: python tests/calibration/ch04_many_tokens.py [draws] [start] [--seed-offset=N]
"""

import numpy as np
from _notebook import SEED_OFFSET, seeds_from_argv
from transformer_pde import clusters

DRAWS, START = seeds_from_argv(count=3, start=7000)
I2 = np.eye(2)
t = np.linspace(0.0, 6.0, 7)
for n in (16, 32, 64, 128, 256, 512, 1024):
    counts = {"Gaussian": [], "uniform on a disc": []}
    for seed in range(START, START + DRAWS):
        rng = np.random.default_rng(seed + SEED_OFFSET)
        radius, angle = np.sqrt(rng.uniform(size=n)), rng.uniform(0, 2 * np.pi, n)
        starts = {"Gaussian": rng.normal(size=(n, 2)),
                  "uniform on a disc": np.c_[radius * np.cos(angle), radius * np.sin(angle)]}
        for kind, Z0 in starts.items():
            end = clusters.integrate_draws(Z0, t, I2, I2, rtol=1e-6, atol=1e-9)[-1]
            P = clusters.rescaled_attention_matrix(end, t[-1], I2, I2)
            counts[kind].append((int(np.sum(np.diag(P) > 0.5)),
                                 len(clusters.polytope_vertices(Z0))))
    print(f"n = {n:5d}: " + "; ".join(
        f"{kind}: leaders {min(c[0] for c in v)}-{max(c[0] for c in v)}, initial vertices "
        f"{min(c[1] for c in v)}-{max(c[1] for c in v)}" for kind, v in counts.items()),
        flush=True)
