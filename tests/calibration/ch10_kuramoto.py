"""Chapter 10, noisy Kuramoto particles: the bias of the step and of finite n, and the two
statistical checks of the notebook replayed on new draws.

Part 1 (bias): BATCHES systems of n = 250 and n = 1000 oscillators at kappa = 3, each from
n draws of the limit's stationary law, run to t1 = 1.5 and on to T = 6 with h = 0.01 exactly
as the notebook does; prints the mean of |Z_n| - r with its standard error and sd x sqrt(n),
and the mean of n dphi^2 / (length D) over [0, t1], [t1, T] and [0, T] (dphi the turn of the
phase of Z_n, D = noisy_kuramoto.phase_diffusion(3)) with its standard error.
Part 2 (replay): the notebook's particle cell and its assertion cell under SEED = START ..
START + SEEDS - 1 (through tests/calibration/_notebook.py); prints the failures of each
check. Usage:
    python tests/calibration/ch10_kuramoto.py [seeds] [start] [batches]
(defaults 0 replays from 1000, 32 batches of 64 systems at n = 250 and half as many at 1000);
TP_SEED_OFFSET shifts every seed (see _notebook.py).
"""

import sys

import numpy as np
from _notebook import SEED_OFFSET, cell, run, seeds_from_argv, setup
from transformer_pde import noisy_kuramoto as nk
from transformer_pde import sphere_sde as sde

NB = "10_noisy_transformers.ipynb"
SEEDS, START = seeds_from_argv(0, 1000)
BATCHES = int(sys.argv[3]) if len(sys.argv) > 3 else 32
kappa, R, h, T, t1 = 3.0, 64, 0.01, 6.0, 1.5
r = nk.kuramoto_order(kappa)
D = nk.phase_diffusion(kappa)
rng = np.random.default_rng([12345, SEED_OFFSET])
for n, batches in ((250, BATCHES), (1000, BATCHES // 2)):
    if batches < 1:
        continue
    snaps, turns = [], []
    for _ in range(batches):
        theta0 = rng.vonmises(0.0, kappa * r, (R, n))
        steps1 = int(round(t1 / h))
        _, theta1 = sde.simulate_circle(theta0, 0.0, kappa, h, steps1, rng, steps1)
        steps2 = int(round((T - t1) / h))
        order, thetaT = sde.simulate_circle(theta1, 0.0, kappa, h, steps2, rng, steps2)
        snaps.append(order[-1])
        Z = [np.exp(1j * t).mean(axis=1) for t in (theta0, theta1, thetaT)]
        turns.append(np.stack([np.angle(Z[1] / Z[0]), np.angle(Z[2] / Z[1])], axis=1))
    x = np.concatenate(snaps)
    print(f"n = {n}, {x.size} systems: bias {x.mean() - r:+.5f} +- "
          f"{x.std(ddof=1) / np.sqrt(x.size):.5f}, sd x sqrt(n) "
          f"{x.std(ddof=1) * np.sqrt(n):.4f}", flush=True)
    # the turning rate: n dphi^2 / (length D) over [0, t1], [t1, T] and [0, T]
    tu = np.concatenate(turns)
    pieces = {"[0, t1]": (tu[:, 0], t1), "[t1, T]": (tu[:, 1], T - t1),
              "[0, T]": (tu.sum(axis=1), T)}
    for name, (y, length) in pieces.items():
        z = n * y**2 / (length * D)
        print(f"  n dphi^2 / (length D) over {name}: {z.mean():.4f} +- "
              f"{z.std(ddof=1) / np.sqrt(z.size):.4f}; kurtosis of dphi "
              f"{np.mean(y**4) / np.mean(y**2) ** 2:.3f}", flush=True)
    print(f"  corr of the two increments {np.corrcoef(tu[:, 0], tu[:, 1])[0, 1]:+.4f}; "
          f"max |dphi| {np.abs(tu).max():.3f}", flush=True)

if SEEDS:
    simulate = cell(NB, "theta0 = rng.vonmises")
    check = cell(NB, "lo, hi = f_dist.ppf")
    turning = cell(NB, "phase_diffusion")
    failures = 0
    for seed in range(START, START + SEEDS):
        ns = setup(NB, seed)
        err = run([simulate, check, turning], ns)
        if err is not None:
            failures += 1
            print(f"seed {seed + SEED_OFFSET}: {err!r}", flush=True)
    print(f"{failures} failures in {SEEDS} replays (seeds from {START + SEED_OFFSET})")
