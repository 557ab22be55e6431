"""Chapter 7, phase diagram: the half-clustering time in d = 1024 against the equiangular t*.

Runs the computation of the notebook's cell (32 tokens uniform on S^1023, SA layers of step
0.1, one start per beta = 0..9 up to t = 30, drawn with seed [s, 4, 1024]) for
s = START..START+DRAWS-1, and prints, for each beta the cell checks (beta <= 5), the number
of draws outside the band, the mean and standard deviation of (half-clustering time - t*),
the largest deviations in layers, and the margin to the nearer edge of the band in layers.
Only the checked values of beta are run (each is an independent run of its own). With
--full it runs the scale switch's configuration (41 values of beta, t <= 60, 8 starts).
Usage: python tests/calibration/ch07_phase.py [draws] [start] [--full]
"""

import sys

import numpy as np
from transformer_pde import sphere, sphere_phase

args = [a for a in sys.argv[1:] if not a.startswith("--")]
DRAWS = int(args[0]) if args else 200
START = int(args[1]) if len(args) > 1 else 0
FULL = "--full" in sys.argv
if FULL:
    betas, T, starts = np.linspace(0.0, 10.0, 41), 60.0, 8
else:
    betas, T, starts = np.arange(0.0, 9.5, 1.0), 30.0, 1
h, n, d = 0.1, 32, 1024
L = int(round(T / h))
t = h * np.arange(L + 1)
level = 1 - 1e-3
c_med = 5 * 1.2533 / np.sqrt(n * (n - 1) / 2 * d)


def crossing(rho0):
    return np.array([
        sphere_phase.first_crossing(sphere.equiangular_layers(rho0, n, b, h, L, "sa"), t, level)
        for b in betas
    ])


t_star, early, late = crossing(0.0), crossing(c_med), crossing(-c_med)
checked = np.isfinite(late) & (late + h <= T) & (betas <= 5.0)
betas, t_star, early, late = (a[checked] for a in (betas, t_star, early, late))
checked = checked[checked]
dev, fails = [], 0
for s in range(START, START + DRAWS):
    frac = sphere_phase.phase_diagram(betas, n, d, T, h, starts=starts, seed=[s, 4, d])
    half = sphere_phase.first_crossing(frac, t, 0.5)
    inside = (half >= early - h) & (half <= late + h)
    fails += not np.all(inside[checked])
    dev.append(half - t_star)
dev = np.array(dev)
print(f"{'full' if FULL else 'default'} configuration: {fails} of {DRAWS} draws fail")
for k in np.flatnonzero(checked):
    m, sd = np.nanmean(dev[:, k]), np.nanstd(dev[:, k])
    lo, hi = early[k] - h - t_star[k], late[k] + h - t_star[k]
    z = min(m - lo, hi - m) / sd if sd > 0 else np.inf
    steps = np.rint(dev[:, k] / h).astype(int)
    margin = min(np.rint(-lo / h) - (-steps.min()), np.rint(hi / h) - steps.max())
    print(f"beta = {betas[k]:.2f}: deviation mean {m:+.3f}, sd {sd:.3f}, band [{lo:.2f}, "
          f"{hi:.2f}], nearer edge {z:.1f} sd away; deviations from {steps.min()} to "
          f"{steps.max()} layers, at least {margin:.0f} layers inside the band")
