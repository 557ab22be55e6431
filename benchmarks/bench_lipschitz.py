r"""Benchmark: local Lipschitz constant of self-attention, Lanczos vs power iteration vs dense SVD.

``transformer_pde.lipschitz.local_lipschitz`` (ARPACK Lanczos on the normal operator built
from the analytic JVP/VJP) is timed against

(a) a plain power iteration on the same normal operator with ARPACK's stopping test, the
    residual :math:`\|N v - \lambda v\| \le \mathrm{tol}\,|\lambda|` (or ``--max-power`` steps);
(b) the dense Jacobian (built from the same JVPs) and its full SVD, where it fits in memory.

Inputs: ``n`` random tokens in dimension ``d = 384`` (rows of norm about 1), random ``A`` and
``V`` (entries N(0, 1/d), ``A`` scaled by 2). Prints time ratios, iteration counts and the
relative agreement of the constants. ``--quick`` runs small sizes only.
"""

import argparse
import time

import numpy as np
from transformer_pde import lipschitz

DENSE_LIMIT_BYTES = 2**30  # dense Jacobian (n d)^2 float64 must fit in 1 GiB


def problem(n, d, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    A = 2 * rng.normal(size=(d, d)) / np.sqrt(d)
    V = rng.normal(size=(d, d)) / np.sqrt(d)
    return X, A, V


def power_iteration(X, A, V, tol, max_steps, seed):
    """Power iteration on (D f)^T D f with the library's linearisation; returns (sigma, steps)."""
    X, lin = lipschitz._prepare(X, A, V, False, None, multi=False)
    v = np.random.default_rng(seed).normal(size=X.shape)
    v /= np.linalg.norm(v)
    for step in range(1, max_steps + 1):
        w = lipschitz._apply_vjp(lin, lipschitz._apply_jvp(lin, v))
        lam = float(np.sum(v * w))
        if np.linalg.norm(w - lam * v) <= tol * abs(lam):
            return np.sqrt(lam), step, True
        v = w / np.linalg.norm(w)
    return np.sqrt(lam), max_steps, False


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--max-power", type=int, default=300)
    args = parser.parse_args()
    d = 384
    sizes = [32, 128] if args.quick else [128, 512, 2048]
    dense_sizes = [4] if args.quick else [4, 8]
    print(f"local Lipschitz constant of softmax self-attention, d = {d}, tol = {args.tol:g}")
    print(f"{'n':>5} | {'Lanczos s':>9} {'matvecs':>7} | {'power s':>8} {'steps':>6} "
          f"{'time ratio':>10} {'rel. diff':>9} | {'dense SVD s':>11} {'time ratio':>10} "
          f"{'rel. diff':>9}")
    for n in sorted(set(sizes + dense_sizes)):
        X, A, V = problem(n, d, seed=n)
        res, t_lan = timed(lambda X=X, A=A, V=V: lipschitz.local_lipschitz(
            X, A, V, tol=args.tol, return_vectors=True))
        (sig_pow, steps, ok), t_pow = timed(lambda X=X, A=A, V=V: power_iteration(
            X, A, V, args.tol, args.max_power, seed=0))
        row = (f"{n:>5} | {t_lan:>9.3f} {res.matvecs:>7d} | {t_pow:>8.3f} "
               f"{steps:>5d}{'' if ok else '*'} {t_pow / t_lan:>10.1f} "
               f"{abs(sig_pow - res.value) / res.value:>9.1e} |")
        if n in dense_sizes and (n * d) ** 2 * 8 <= DENSE_LIMIT_BYTES:
            def dense(X=X, A=A, V=V):
                return np.linalg.norm(lipschitz.jacobian_matrix(X, A, V), 2)
            sig_dense, t_dense = timed(dense)
            row += (f" {t_dense:>11.3f} {t_dense / t_lan:>10.1f} "
                    f"{abs(sig_dense - res.value) / res.value:>9.1e}")
        elif (n * d) ** 2 * 8 > DENSE_LIMIT_BYTES:
            need = (n * d) ** 2 * 8 / 2**30
            row += f" {'does not fit: ' + format(need, '.0f') + ' GiB':>32}"
        else:
            row += f" {'-':>11}"
        print(row)
    print("time ratio = other method's time / Lanczos time (> 1: Lanczos is faster); "
          "* = power iteration stopped at --max-power without reaching tol; "
          "rel. diff = |other - Lanczos| / Lanczos.")


if __name__ == "__main__":
    main()
