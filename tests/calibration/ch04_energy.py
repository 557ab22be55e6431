"""Chapter 4, the energy identity along the runs of the V = I sweep, on many draws.

For each seed, 20 runs of 32 Gaussian tokens in R^3 and 20 of 20 in the plane (A = I, the
sweep's law), integrated until settled as in the notebook; on each run the relative mismatch
of the energy identity d/dt log E = sum_i c_i <A m_i, m_i> (``energy.energy_balance``, Simpson
on pairs of grid steps of 0.1) is measured on the solution, on the frozen tokens z(t) = z(0)
and on z(t) e^{t/4}. Prints the largest mismatch of the solutions against the notebook's
tolerance 1e-2 (the false alarms), and the fraction of wrong trajectories it rejects.
Usage: python tests/calibration/ch04_energy.py [seeds] [start] [--seed-offset=N]
"""

import numpy as np
from _notebook import SEED_OFFSET, seeds_from_argv
from transformer_pde import energy, hardmax

SEEDS, START = seeds_from_argv(count=75, start=5000)
TOL = 1e-2
t_grid = np.linspace(0.0, 12.0, 121)
true_max, frozen, fast = [], [], []
for seed in range(START, START + SEEDS):
    rng = np.random.default_rng(seed + SEED_OFFSET)
    for d, n in ((3, 32), (2, 20)):
        Z0 = rng.normal(size=(20, n, d))
        for run in hardmax.integrate_until_settled(Z0, t_grid, np.eye(d), cap=24.0):
            z, t = run["z"], run["t"]
            m = len(t) if len(t) % 2 else len(t) - 1
            z, t = z[:m], t[:m]
            true_max.append(energy.energy_balance(z, t, np.eye(d)).max())
            frozen.append(energy.energy_balance(np.repeat(z[:1], m, 0), t, np.eye(d)).max())
            fast.append(energy.energy_balance(z * np.exp(t / 4)[:, None, None], t,
                                              np.eye(d)).max())
    if (seed - START + 1) % 5 == 0:
        print(f"{seed - START + 1} seeds, {len(true_max)} runs: largest mismatch "
              f"{max(true_max):.2e}", flush=True)
true_max, frozen, fast = map(np.array, (true_max, frozen, fast))
print(f"{true_max.size} runs: largest mismatch on solutions {true_max.max():.2e}, 99.9% "
      f"quantile {np.quantile(true_max, 0.999):.2e}; failures at {TOL:g}: "
      f"{int(np.sum(true_max > TOL))}")
print(f"rejected at {TOL:g}: frozen tokens {np.mean(frozen > TOL):.3f} of runs, "
      f"z e^(t/4) {np.mean(fast > TOL):.3f} of runs")
