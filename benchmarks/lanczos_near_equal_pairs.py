r"""How often ``local_lipschitz`` misses ``tol`` on tokens in tight clusters (not a timing).

The stopping rule of :func:`transformer_pde.lipschitz.local_lipschitz` is a Kato-Temple
bound whose spectral gap is estimated by the second Ritz value. When the two largest
singular values of the Jacobian are nearly equal, the Krylov space can still hold a mixture
of their singular vectors when the rule is met, and the value is then low by up to their
distance (the limitation stated in the docstring). Tokens in tight clusters produce such
pairs. This script draws random clustered configurations, small enough for a dense SVD of
the Jacobian, and counts the calls whose relative error exceeds ``tol``.

Each draw: ``n`` in {64, 128, 160, 256}, ``d`` in {2, 3, 4}, ``m`` clusters (1 to n/16) of
tokens on a sphere of radius 0.5 to 6, spread at most 2 % of the radius, ``A`` a scaled
Gaussian matrix plus a multiple of the identity (from -2 to 2), ``V`` Gaussian. A draw is kept
when every token lies within 2 % of the largest token norm of one of at most
``min(32, n/16)`` centres (farthest-point clustering) and the tokens do not coincide
exactly (those go through the exact merged operator). 200 draws per seed; each kept draw is
solved at ``tol`` in {1e-4, 1e-6, 1e-10}.

Usage::

    python benchmarks/lanczos_near_equal_pairs.py --seeds 0 1 2 3 4 5 6 7   # about 8 minutes
"""

import argparse

import numpy as np
from transformer_pde import lipschitz

TOLS = (1e-4, 1e-6, 1e-10)


def tight_clusters(X, radius=0.02):
    """Are all tokens within radius * max |x_i| of at most min(32, n/16) farthest-point
    centres?"""
    n = X.shape[0]
    sq = np.einsum("ij,ij->i", X, X)
    radius2 = radius**2 * sq.max()
    dist2 = np.full(n, np.inf)
    centre = 0
    for _ in range(min(32, n // 16)):
        dist2 = np.minimum(dist2, sq - 2 * X @ X[centre] + sq[centre])
        centre = int(np.argmax(dist2))
        if dist2[centre] <= radius2:
            return True
    return False


def draws(seed, count=200):
    rng = np.random.default_rng(seed)
    for trial in range(count):
        n = int(rng.choice([64, 128, 160, 256]))
        d = int(rng.choice([2, 3, 4]))
        m = int(rng.integers(1, max(2, n // 16) + 1))
        radius = rng.uniform(0.5, 6)
        C = rng.standard_normal((m, d))
        C *= radius / np.linalg.norm(C, axis=1, keepdims=True)
        spread = rng.uniform(0, 0.02) * radius / np.sqrt(d)
        X = C[rng.integers(0, m, n)] + spread * rng.standard_normal((n, d))
        A = (rng.standard_normal((d, d)) * rng.uniform(0.2, 3) / np.sqrt(d)
             + rng.uniform(-2, 2) * np.eye(d))
        V = rng.standard_normal((d, d))
        unique = np.unique(X, axis=0).shape[0]
        if tight_clusters(X) and unique > n // 2:
            yield trial, X, A, V


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    args = parser.parse_args()
    kept = calls = 0
    misses = []
    for seed in args.seeds:
        for trial, X, A, V in draws(seed):
            kept += 1
            s = np.linalg.svd(lipschitz.jacobian_matrix(X, A, V), compute_uv=False)
            gap = (s[0] - s[1]) / s[0]
            for tol in TOLS:
                calls += 1
                err = (s[0] - lipschitz.local_lipschitz(X, A, V, tol=tol)) / s[0]
                if err > tol:
                    misses.append((seed, trial, X.shape, tol, err, gap))
                    print(f"seed {seed} draw {trial:3d} (n, d) = {X.shape}: tol {tol:.0e}, "
                          f"error {err:.2e} ({err / tol:.0f} tol), top two singular values "
                          f"{gap:.2e} apart (relative)", flush=True)
    print(f"{kept} configurations, {calls} calls, {len(misses)} above tol", end="")
    if misses:
        print(f"; largest error {max(m[4] / m[3] for m in misses):.0f} tol; largest distance "
              f"of the top two singular values among them {max(m[5] for m in misses):.2e}")
    else:
        print()


if __name__ == "__main__":
    main()
