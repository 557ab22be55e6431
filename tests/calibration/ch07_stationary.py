"""Chapter 7, stationary points: the checks that depend on the random symmetric D.

Runs the computation of the notebook's cells (a random trace-free symmetric D in d = 3, Diracs
and pairs at its eigenvectors, the balanced pair on an isotropic direction, the velocities of
a pair off the eigenvectors against the closed form of the proof, vectors and signs
included, the rigid rotation of the isotropic pair, the uniform measure) for
SEED = 0..DRAWS-1, and prints the number of draws failing each check.
Usage: python tests/calibration/ch07_stationary.py [draws] [start]
(the seeds run from start to start + draws - 1)
"""

import sys

import numpy as np
from transformer_pde import sphere, sphere_stability

DRAWS = int(sys.argv[1]) if len(sys.argv) > 1 else 400
START = int(sys.argv[2]) if len(sys.argv) > 2 else 0
beta3 = 1.5
Yq, wq = sphere.sphere_quadrature(24, 3)
fails = dict(eig=0, closed_form=0, isotropic=0, rotation=0, uniform=0)
for seed in range(START, START + DRAWS):
    rng = np.random.default_rng(seed)
    M = rng.normal(size=(3, 3))
    D = (M + M.T) / 2 - np.trace(M) / 3 * np.eye(3)
    lam, U = np.linalg.eigh(D)
    tol = 1e-13 * max(1.0, np.exp(beta3 * np.abs(lam).max()) * np.abs(lam).max())
    worst = max(np.abs(sphere.usa(np.array([v, -v]), beta3, D, weights=[p, 1 - p])).max()
                for v in U.T for p in (1.0, 0.7, 0.5))
    fails["eig"] += not worst < tol
    a = np.sqrt(lam[-1] / (lam[-1] - lam[0]))
    v_iso = a * U[:, 0] + np.sqrt(1 - a**2) * U[:, -1]
    fails["isotropic"] += not np.abs(
        sphere.usa(np.array([v_iso, -v_iso]), beta3, D, weights=[0.5, 0.5])).max() < tol
    u = sphere.normalise((U[:, 0] + 0.5 * U[:, 1])[None])[0]
    lg = u @ D @ u
    PDu = D @ u - lg * u
    gap = 0.0
    for p in (1.0, 0.7, 0.5):
        v_mu = sphere.usa(np.array([u, -u]), beta3, D, weights=[p, 1 - p])
        pred = np.array([(p * np.exp(beta3 * lg) - (1 - p) * np.exp(-beta3 * lg)) * PDu,
                         (p * np.exp(-beta3 * lg) - (1 - p) * np.exp(beta3 * lg)) * PDu])
        gap = max(gap, np.abs(v_mu - pred).max())
    fails["closed_form"] += not gap < 10 * tol
    H = sphere_stability.energy_hessian(np.array([v_iso, -v_iso]), beta3, D, [0.5, 0.5])
    B = sphere_stability.tangent_basis(np.array([v_iso, -v_iso]))
    rot = np.concatenate([B[0].T @ (D @ v_iso), B[1].T @ (-D @ v_iso)])
    curv = rot @ H @ rot / (rot @ rot)
    fails["rotation"] += not (np.isclose(curv, beta3 * np.sum((D @ v_iso) ** 2), rtol=1e-10)
                              and curv > 0)
    spread = np.ptp(np.linalg.eigvalsh(D @ D))
    speed = np.abs(sphere.usa(Yq, beta3, D, weights=wq)).max()
    fails["uniform"] += spread > 1e-3 and not speed > 1e-9
print(f"{DRAWS} draws; failures per check: {fails}")
