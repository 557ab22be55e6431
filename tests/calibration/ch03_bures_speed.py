"""Chapter 3, the Bures-Wasserstein speed: the two-sided check 0 <= delta(h) <= 5 h^2 over many
draws of the chapter's parameters.

delta(h) = (length - chord) / length along the softmax solution of the particle experiment at
t = 0.5 (bures.chord_and_length). The parameters are drawn as the notebook draws them from
np.random.default_rng(SEED): the d = 3 Sinkhorn check first, then alpha, Sigma, Q, K, V of the
particle experiment (rho = 0.3). Prints the failure count of each side of the check and the
largest delta(h) / h^2, the constant the bound 5 must exceed.

Usage: python tests/calibration/ch03_bures_speed.py [number of seeds, default 1000] [first seed,
default 0]   (a first seed other than 0 replays the check on draws not used before)
"""

import sys

import numpy as np
from transformer_pde import bures, gaussian, meanfield

K_BW, H_BW = 5.0, (4e-3, 2e-3, 1e-3)


def parameters(seed):
    rng = np.random.default_rng(seed)
    rng.normal(size=(3, 3))                       # the d = 3 Sinkhorn check draws first
    rng.normal(size=(3, 3)), rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    alpha = np.array([0.3, -0.2])
    L = 0.4 * rng.normal(size=(2, 2))
    Sigma = L @ L.T + 0.3 * np.eye(2)
    Q, K = rng.normal(size=(2, 2)), rng.normal(size=(2, 2))
    c = np.sqrt(0.3 / meanfield.interaction_strength(K.T @ Q, Sigma))
    Q, K = c * Q, c * K
    V = rng.normal(size=(2, 2))
    return alpha, Sigma, K.T @ Q, V


def main(n_seeds, first=0):
    low = high = not_finished = 0
    worst = 0.0
    ratios = []
    for seed in range(first, first + n_seeds):
        alpha, Sigma, A, V = parameters(seed)
        run = gaussian.integrate_moments(gaussian.softmax_rhs, alpha, Sigma, [0.0, 0.5],
                                         args=(A, V))
        # as the notebook: a solution that blows up before t = 0.5 is checked at t = 0
        if run.status == "finished":
            a_t, S_t = run.alpha[-1], run.Sigma[-1]
        else:
            not_finished += 1
            a_t, S_t = alpha, Sigma
        for h in H_BW:
            c = bures.chord_and_length(gaussian.softmax_rhs, a_t, S_t, h, args=(A, V))
            low += c.defect < -c.rounding
            high += c.defect > K_BW * h**2 + c.rounding
            worst = max(worst, c.defect / h**2)
            ratios.append(c.defect / h**2)
    print(f"{n_seeds} seeds: {not_finished} solutions not reaching t = 0.5 (checked at t = 0); "
          "failures: "
          f"W2 > length {low}, delta > {K_BW:g} h^2 {high}; largest delta / h^2 {worst:.3g}")
    q = np.quantile(ratios, [0.5, 0.9, 0.99, 0.999])
    print("delta / h^2 quantiles 50%, 90%, 99%, 99.9%: " + ", ".join(f"{v:.3g}" for v in q))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000,
         int(sys.argv[2]) if len(sys.argv) > 2 else 0)
