"""Chapter 7, indefinite D: mirror ascent from 24 random starts on many draws.

Runs the computation of the notebook's cell (D = diag(1, -2) on 90 points of the circle,
beta = beta*/2 and 2 beta*, 24 Dirichlet starts of 2000 steps each, drawn from
np.random.default_rng([s, 5])) for s = 0..DRAWS-1, and prints the fraction of single starts
that end elsewhere than at the maximum (less than 99% of it, or off its support) and the
number of draws whose best start fails the cell's assertion.
Usage: python tests/calibration/ch07_ascent.py [draws] [start]
(the seeds run from start to start + draws - 1)
"""

import sys

import numpy as np
from joblib import Parallel, delayed
from transformer_pde import sphere

DRAWS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
START = int(sys.argv[2]) if len(sys.argv) > 2 else 0
lam_hi, lam_lo = 1.0, -2.0
D6 = np.diag([lam_hi, lam_lo])
beta_star = sphere.dirac_pair_threshold(lam_hi, lam_lo)
Y6, _ = sphere.sphere_quadrature(90, 2)
theta6 = np.arctan2(Y6[:, 1], Y6[:, 0])
near_e1 = np.abs(theta6) < 0.3
near_m1 = np.abs(np.abs(theta6) - np.pi) < 0.3
near_e2 = np.abs(np.abs(theta6) - np.pi / 2) < 0.3


def passes(b, res):
    best = max(np.exp(b * lam_hi), np.cosh(b * lam_lo)) / (2 * b)
    ratio = res.energy / best
    if not 0.99 < ratio <= 1 + 1e-12:
        return False
    w = res.weights
    if b < beta_star:
        return max(w[near_e1].sum(), w[near_m1].sum()) > 0.9
    up, down = w[near_e2 & (theta6 > 0)].sum(), w[near_e2 & (theta6 < 0)].sum()
    return up + down > 0.9 and abs(up - down) < 0.1


def draw(s):
    rng6 = np.random.default_rng([s, 5])
    out = []
    for b in (0.5 * beta_star, 2.0 * beta_star):
        step = 2 * b / np.exp(b * Y6 @ D6 @ Y6.T).max()
        runs = [
            sphere.energy_mirror_descent(Y6, b, D6, maximise=True, steps=2000,
                                         step_size=step, weights0=rng6.dirichlet(np.ones(90)))
            for _ in range(24)
        ]
        single = [passes(b, r) for r in runs]
        out.append((sum(single), passes(b, max(runs, key=lambda r: r.energy))))
    return out


results = Parallel(n_jobs=-1)(delayed(draw)(s) for s in range(START, START + DRAWS))
for k, name in enumerate(("beta*/2", "2 beta*")):
    ok_single = sum(r[k][0] for r in results)
    fails_best = sum(not r[k][1] for r in results)
    total = 24 * DRAWS
    print(f"{name}: {total - ok_single} of {total} single starts end elsewhere "
          f"(p = {(total - ok_single) / total:.3f}); best of 24 fails on {fails_best} of "
          f"{DRAWS} draws")
