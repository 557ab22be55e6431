"""Chapter 2, stability in Wasserstein distance: the checks of the cells "the ratio stays
bounded as the perturbation shrinks" and "growth with T and R0" over many seeds.

For each seed, the notebook's draws from np.random.default_rng(SEED) in order (the parameters
P, the 40 tokens of the support experiment, the 24 tokens and the direction Z of the stability
experiment, then the matrices and the shape of the growth experiment) and:

- stability: the perturbation sizes eps (scaled to the smallest distance between tokens at
  times 0 and T), the identity-coupling certificate for the two smallest, and the convergence
  of the ratio (relative change below 1% between the two smallest eps), for the six variants;
  also the same convergence check with the fixed sizes 1e-1 ... 1e-4 it replaced;
- growth (with --growth): the variational Jacobian against finite differences (below 1e-5),
  the Gronwall constant above the measured ones at R0 = 0.25, and the W2 ratio of a
  perturbation along the top singular vector within 1e-3 of sigma_max(T), at R0 = 0.25 ... 3;
  prints the largest |ratio / sigma_max - 1|.

Usage: python tests/calibration/ch02_stability.py FIRST LAST [--growth]
"""

import sys

import numpy as np
from transformer_pde import dynamics, stability, transport, variants

N_STAB, T_STAB = 24, 1.5
EPS = np.array([1e-1, 1e-2, 1e-3, 3e-4, 1e-4])
I2 = np.eye(2)


def ratios(P, X0, Z, epsilons, bases):
    positions = (np.arange(N_STAB) + 0.5) / N_STAB
    out, shifts = {}, {}
    for name in variants.VARIANTS:
        field = variants.variant_field(name, P)
        r, s = np.empty((len(epsilons), 2)), np.empty(len(epsilons))
        for k, eps in enumerate(epsilons):
            pert = dynamics.integrate(field, X0 + eps * Z, [0.0, T_STAB], rtol=1e-9,
                                      atol=1e-13)
            s[k] = np.linalg.norm(pert[-1] - bases[name][-1], axis=1).max()
            for j, p in enumerate((1, 2)):
                if name == "causal":
                    w = [transport.conditional_wasserstein(positions, X, positions, Y, p=p,
                                                           bins=4)
                         for X, Y in ((bases[name][-1], pert[-1]), (X0, X0 + eps * Z))]
                else:
                    w = [transport.wasserstein(X, Y, p=p)
                         for X, Y in ((bases[name][-1], pert[-1]), (X0, X0 + eps * Z))]
                r[k, j] = w[0] / w[1]
        out[name], shifts[name] = r, s
    return out, shifts


def stability_seed(rng, P):
    X0 = variants.uniform_ball(rng, N_STAB)
    Z = rng.standard_normal((N_STAB, 2))
    bases = {name: dynamics.integrate(variants.variant_field(name, P), X0, [0.0, T_STAB],
                                      rtol=1e-9, atol=1e-13) for name in variants.VARIANTS}
    spacing = min(stability.smallest_distance(X) for X in [X0] + [b[-1] for b in bases.values()])
    scale = min(1.0, 100 * spacing / np.linalg.norm(Z, axis=1).max())
    r, s = ratios(P, X0, Z, scale * EPS, bases)
    cert = sum(np.any(s[n][-2:] >= spacing / 2) for n in variants.VARIANTS)
    conv = sum(np.any(~np.isfinite(r[n])) or np.any(np.abs(r[n][-1] / r[n][-2] - 1) >= 1e-2)
               for n in variants.VARIANTS)
    if scale < 1:
        r_old, _ = ratios(P, X0, Z, EPS, bases)
    else:
        r_old = r
    old = sum(np.any(np.abs(r_old[n][-1] / r_old[n][-2] - 1) >= 1e-2) for n in variants.VARIANTS)
    return cert, conv, old, scale


def growth_seed(rng):
    A0, A1 = rng.standard_normal((2, 2, 2)) / np.sqrt(2)
    V0, V1 = 0.3 * rng.standard_normal((2, 2, 2)) / np.sqrt(2)
    PG = {"A": lambda t: A0 + np.sin(2 * t) * A1, "V": lambda t: 0.5 * I2 + V0 + np.cos(t) * V1}
    times = np.linspace(0.0, 1.5, 16)
    shape = variants.uniform_ball(rng, 10)
    shape /= np.linalg.norm(shape, axis=1).max()
    field = variants.variant_field("softmax", PG)
    a_t = np.array([np.linalg.norm(PG["A"](t), 2) for t in times])
    v_t = np.array([np.linalg.norm(PG["V"](t), 2) for t in times])
    worst_top, gron_fail, top_fail = 0.0, 0, 0
    for R0 in (0.25, 0.5, 1.0, 2.0, 3.0):
        X0g = R0 * shape
        traj, jac = stability.flow_jacobian(PG["A"], PG["V"], X0g, times)
        if R0 == 0.25:
            measured = np.log([[stability.l1_l2_norm(J, 10) for J in jac],
                               np.linalg.norm(jac, 2, axis=(1, 2))])
            radius = stability.support_radius(traj)
            for j, p in enumerate((1, 2)):
                rate = stability.gronwall_rate(a_t, v_t, radius, p)
                post = np.concatenate([[0.0], np.cumsum((rate[1:] + rate[:-1]) / 2
                                                        * np.diff(times))])
                gron_fail += np.any(measured[j] > post + 1e-9)
        sigma = np.linalg.norm(jac[-1], 2)
        spacing = min(stability.smallest_distance(Y) for Y in (X0g, traj[-1]))
        top = np.linalg.svd(jac[-1])[2][0].reshape(10, 2)
        dX = 1e-4 * spacing * top / (np.abs(top).max() * sigma)
        pert = dynamics.integrate(field, X0g + dX, times, rtol=1e-11, atol=1e-14)
        ratio = (transport.wasserstein(traj[-1], pert[-1])
                 / transport.wasserstein(X0g, X0g + dX))
        worst_top = max(worst_top, abs(ratio / sigma - 1))
        top_fail += abs(ratio / sigma - 1) >= 1e-3
    vt = np.linalg.svd(jac[-1])[2][0]
    ends = [dynamics.integrate(field, X0g + sgn * 1e-5 * vt.reshape(10, 2), times, rtol=1e-12,
                               atol=1e-14)[-1] for sgn in (1, -1)]
    fd = ((ends[0] - ends[1]) / 2e-5).ravel()
    fd_fail = np.linalg.norm(fd - jac[-1] @ vt) / np.linalg.norm(fd) >= 1e-5
    return fd_fail, gron_fail, top_fail, worst_top


def main(first, last, growth):
    totals = np.zeros(3, dtype=int)
    g_totals, worst = np.zeros(3, dtype=int), 0.0
    scaled = 0
    for seed in range(first, last):
        rng = np.random.default_rng(seed)
        P = variants.random_parameters(rng)
        variants.uniform_ball(rng, 40)                 # the support experiment's tokens
        cert, conv, old, scale = stability_seed(rng, P)
        totals += (cert, conv, old)
        scaled += scale < 1
        line = f"{seed} stability cert {cert} conv {conv} old {old} scale {scale:.2g}"
        if growth:
            fd, gron, top, w = growth_seed(rng)
            g_totals += (fd, gron, top)
            worst = max(worst, w)
            line += f" growth fd {int(fd)} gronwall {gron} top {top} ({w:.1e})"
        print(line, flush=True)
    print(f"{last - first} seeds ({scaled} with eps scaled down): identity-coupling certificate "
          f"failures {totals[0]}, convergence failures {totals[1]}; the fixed eps it replaced: "
          f"{totals[2]} failures")
    if growth:
        print(f"growth: finite-difference failures {g_totals[0]}, Gronwall failures "
              f"{g_totals[1]}, top-direction failures {g_totals[2]}; largest "
              f"|ratio / sigma_max - 1| {worst:.2e}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), "--growth" in sys.argv[3:])
