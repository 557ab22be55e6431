"""Chapter 7, cone collapse and Wendel's formula on many draws.

Runs the computations of the notebook's cell (32 uniform tokens in d = 32, SA and USA at
beta = 1 up to t = 40, alpha(t) from an integration with relative tolerance 1e-12 checked
against the error estimated by one 100 times looser; the fitting window of the diameter and
its slope) with tokens from np.random.default_rng([seed, 8]), and the Wendel counts on the
circle (20000 draws for each n = 3..8, from np.random.default_rng([seed, 6])), for
seeds 0..DRAWS-1; prints the number of draws failing each check and the largest slope error.
Usage: python tests/calibration/ch07_cone.py [draws] [start]
(the seeds run from start to start + draws - 1)
"""

import sys

import numpy as np
from joblib import Parallel, delayed
from scipy.stats import binom
from transformer_pde import sphere

DRAWS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
START = int(sys.argv[2]) if len(sys.argv) > 2 else 0
n9, d9, beta9 = 32, 32, 1.0
t9 = np.linspace(0.0, 40.0, 161)


def draw(seed):
    X9 = sphere.uniform_on_sphere(n9, d9, np.random.default_rng([seed, 8]))
    w9 = X9.T @ np.linalg.solve(X9 @ X9.T, np.ones(n9))
    w9 /= np.linalg.norm(w9)
    alpha_ok, window_ok, slope_err = True, True, 0.0
    for field, rate in ((sphere.sa_field(beta9), 1.0), (sphere.usa_field(beta9), np.exp(beta9))):
        traj = sphere.integrate_on_sphere(field, X9, t9, rtol=1e-10, atol=1e-13)
        tight = sphere.integrate_on_sphere(field, X9, t9, rtol=1e-12, atol=1e-15)
        err = np.abs(traj - tight).max(axis=(1, 2))
        alpha = (tight @ w9).min(axis=1)
        alpha_ok &= bool(np.all(np.diff(alpha) > -(err[:-1] + err[1:]) - 1e-14))
        diam = np.array([np.linalg.norm(X[:, None] - X[None], axis=-1).max() for X in traj])
        window = (diam < 1e-4) & (t9 < t9[np.argmax(diam < 1e-9)])
        window_ok &= bool(window.sum() >= 5)
        if window.sum() >= 2:
            slope = np.polyfit(t9[window], np.log(diam[window]), 1)[0]
            slope_err = max(slope_err, abs(-slope / rate - 1))
    rng_w = np.random.default_rng([seed, 6])
    wendel_ok = True
    for n in range(3, 9):
        ang = np.sort(rng_w.uniform(0.0, 2 * np.pi, size=(20000, n)), axis=1)
        gaps = np.diff(ang, axis=1, append=ang[:, :1] + 2 * np.pi)
        hits = np.sum(gaps.max(axis=1) > np.pi)
        p = n * 2.0 ** (1 - n)
        wendel_ok &= bool(binom.ppf(5e-7, 20000, p) <= hits <= binom.isf(5e-7, 20000, p))
    return alpha_ok, window_ok, slope_err, wendel_ok


res = Parallel(n_jobs=-1)(delayed(draw)(s) for s in range(START, START + DRAWS))
slope = np.array([r[2] for r in res])
print(f"{DRAWS} draws: alpha fails on {sum(not r[0] for r in res)}, the window on "
      f"{sum(not r[1] for r in res)}, the slope (1e-3) on {np.sum(slope >= 1e-3)} (largest "
      f"relative error {slope.max():.1e}); Wendel fails on {sum(not r[3] for r in res)}")
