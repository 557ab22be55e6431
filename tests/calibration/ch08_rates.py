"""Chapter 8, random tokens: the rate checks of the six schemes on many draws.

Runs the computation of the notebook's cell (16 random tokens of S^31, 600 layers of step
0.1, beta = 1, Mix-LN switching at 5) with seeds [s, 2, k] for s = 0..DRAWS/8 - 1 and
k = 0..7, and prints, for each check, the number of draws that fail it and the largest
deviation met beside its tolerance. Usage: python tests/calibration/ch08_rates.py [draws]
"""

import sys

import numpy as np
from transformer_pde import draws, fitting, normalisation, rates

DRAWS = int(sys.argv[1]) if len(sys.argv) > 1 else 400
n, d, beta, h, T, tau = 16, 32, 1.0, 0.1, 60.0, 5.0
L = int(round(T / h))
t = h * np.arange(L + 1)
late = t >= T / 2
keys = [[s, 2, k] for s in range(DRAWS // 8) for k in range(8)]
predicted = {"post": 2 * np.log1p(h) / h, "ngpt": -2 * np.log1p(-h) / h}
tolerances = {"post": 1e-4, "ngpt": 1e-4, "pre": (0.02, 0.01), "peri": (0.02, 0.01),
              "mix": (0.02, 0.01), "sqrt": (0.05, 0.1)}
for scheme in normalisation.SCHEMES:
    runs = draws.map_keys(normalisation.random_run, keys, scheme, n, d, beta, T, L,
                          switch=tau, block=8, n_jobs=-1)
    if scheme in predicted:
        dev = np.array([abs(rates.decay_rate(t, r.gap, high=1e-6, low=1e-12)
                            - predicted[scheme]) for r in runs])
        tol = tolerances[scheme]
        print(f"{scheme}: rate, {np.sum(~(dev < tol))} of {len(runs)} fail; largest "
              f"deviation {dev.max():.2e} (tolerance {tol:g})")
        continue
    clock = np.sqrt(1 + t[late]) if scheme == "sqrt" else t[late]
    slope = 2.0 if scheme == "sqrt" else 1.0
    dp = np.array([abs(fitting.fit_power_law(r.radius[late], r.gap[late]).exponent + 2.0)
                   for r in runs])
    dr = np.array([abs(np.polyfit(clock, r.radius[late], 1)[0] - slope) for r in runs])
    tp, tr = tolerances[scheme]
    print(f"{scheme}: exponent against the norm, {np.sum(~(dp < tp))} of {len(runs)} fail, "
          f"largest deviation {dp.max():.2e} (tolerance {tp:g}); growth of the norm, "
          f"{np.sum(~(dr < tr))} fail, largest {dr.max():.2e} (tolerance {tr:g})")
