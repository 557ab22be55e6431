"""Chapter 4, the energy identity along the runs of the V = I sweep, on many draws.

For each seed, 20 runs of 32 Gaussian tokens in R^3 and 20 of 20 in the plane (A = I, the
sweep's law). On each run the notebook's check is replayed: the identity
log E(t_k+1) - log E(t_k) = int sum_i c_i <A m_i, m_i> dt on every step of 0.1 to t = 12,
the integral carried by the solver with the tokens (``energy.energy_identity_gap``), relative
gap at most 1e-6 plus the allowance a_k for the solver's errors (proven, see the docstring).
Prints the largest ratio gap / allowance on solutions (a false alarm needs gap > 1e-6 + a_k),
the largest difference between these tokens and those of ``clusters.integrate_draws`` (the
notebook asserts below 1e-8 of the scale), and the fraction of wrong motions rejected: frozen
tokens, and self-attention plus or minus z/4 (tokens moving like z e^{+-t/4}).
Usage: python tests/calibration/ch04_energy.py [seeds] [start] [--seed-offset=N]
"""

import numpy as np
from _notebook import SEED_OFFSET, seeds_from_argv
from transformer_pde import clusters, energy

SEEDS, START = seeds_from_argv(count=10, start=5000)
TOL = 1e-6
t_grid = np.linspace(0.0, 12.0, 121)
ratio, zgap, gaps_max, allow_max = [], [], [], []
rejected = {"frozen": [], "z e^(t/4)": [], "z e^(-t/4)": []}
for seed in range(START, START + SEEDS):
    rng = np.random.default_rng(seed + SEED_OFFSET)
    for d, n in ((3, 32), (2, 20)):
        A = np.eye(d)
        Z0 = rng.normal(size=(20, n, d))
        z, g, a = energy.energy_identity_gap(Z0, t_grid, A)
        ref = clusters.integrate_draws(Z0, t_grid, A, A, rtol=1e-12, atol=1e-14)
        scale = np.abs(Z0).max(axis=(1, 2))
        zgap.extend(np.abs(z - ref).max(axis=(0, 2, 3)) / scale)
        ratio.extend((g / a).max(axis=0))
        gaps_max.extend(g.max(axis=0))
        allow_max.extend(a.max(axis=0))

        def attention_velocity(s, Z, A=A):
            return energy._rescaled_attention_velocity(s, Z, A)
        wrong = {"frozen": lambda s, Z: np.zeros_like(Z),
                 "z e^(t/4)": lambda s, Z: attention_velocity(s, Z) + Z / 4,
                 "z e^(-t/4)": lambda s, Z: attention_velocity(s, Z) - Z / 4}
        for name, velocity in wrong.items():
            _, gw, aw = energy.energy_identity_gap(Z0, t_grid, A, velocity=velocity)
            rejected[name].extend(np.any(gw > TOL + aw, axis=0))
    print(f"{seed - START + 1} seeds, {len(ratio)} runs: largest gap / allowance "
          f"{max(ratio):.2e}, largest token difference {max(zgap):.2e} of the scale",
          flush=True)
print(f"{len(ratio)} runs: largest gap {max(gaps_max):.2e}, largest allowance "
      f"{max(allow_max):.2e}, largest gap / allowance {max(ratio):.2e}; failures "
      f"(gap > {TOL:g} + allowance): 0 by the allowance's proof, measured "
      f"{int(np.sum(np.array(gaps_max) > TOL))}")
print(f"tokens against clusters.integrate_draws: at most {max(zgap):.2e} of the scale")
print("rejected: " + ", ".join(f"{k} {np.mean(v):.3f} of runs ({len(v) - sum(v)} accepted)"
                               for k, v in rejected.items()))
