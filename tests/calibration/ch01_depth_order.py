"""Chapter 1, depth convergence: the local-order and limit checks on many draws.

Runs the notebook's own cells (the draw and computation cell, then the assertion cell) for
SEED = 0..DRAWS-1 and prints the number of failing draws, the depths at which the local
orders settled, and the largest ratio of the error to the ODE solution to its bound.

It also runs them on the draw of an earlier, unbounded law that defeated a fixed-depth check:
the tokens and matrices of SEED = 3155 drawn as X0 ~ N(0, I), A0, A1, V0, V1 with N(0, 1/4)
entries, and V0, V1 multiplied by 0.995, 1, 1.01, ..., 1.04 (the RK4 local orders of these
draws overshoot 5 near depth 128, where the tokens have grown to |x| = 20).
With a second argument ``gaussian`` it runs the draws of that unbounded law (factor 1) for
SEED = 0..DRAWS-1 instead of the notebook's law.
Usage: python tests/calibration/ch01_depth_order.py [draws] [gaussian]
"""

import sys
from collections import Counter

import numpy as np
from _notebook import _code_cells, cell, run, setup
from joblib import Parallel, delayed

NOTEBOOK = "01_tokens_as_particles.ipynb"
DRAWS = int(sys.argv[1]) if len(sys.argv) > 1 else 300
GAUSSIAN = len(sys.argv) > 2 and sys.argv[2] == "gaussian"
COMPUTE = "def residual_transformer"
ASSERT = "the limit is X(T)"
BOUNDED = ("X0 = rng.uniform(-2.0, 2.0, size=(n, d))\n",
           "A0, A1, V0, V1 = (0.5 * g / np.linalg.norm(g, 2) for g in G)\n")


def gaussian_law(factor):
    """The computation cell with the unbounded law, V0 and V1 multiplied by ``factor``."""
    source = next(src for src in _code_cells(NOTEBOOK) if COMPUTE in src)
    for line in BOUNDED:
        if line not in source:
            raise LookupError(f"the draw line {line!r} is not in the computation cell")
    source = source.replace(BOUNDED[0], "X0 = rng.normal(size=(n, d))\n").replace(
        BOUNDED[1], "A0, A1, V0, V1 = 0.5 * G  # N(0, 1/4) entries\n"
                    f"V0, V1 = {factor!r} * V0, {factor!r} * V1\n")
    return compile(source, f"{NOTEBOOK}: Gaussian law x {factor}", "exec")


def outcome(seed, compute):
    namespace = setup(NOTEBOOK, seed)
    error = run([compute, cell(NOTEBOOK, ASSERT)], namespace)
    settled = namespace["settled"]
    ratios = []
    for method, result in settled.items():
        if result.settled:
            L, q = result.depth, result.order
            to_ode = np.linalg.norm(namespace["output"](method, 2 * L) - namespace["reference"][-1])
            ratios.append(to_ode / (2 * result.errors[-2] / (2**q - 1)
                                    + 1e-11 * namespace["scale"]))
    depths = {m: (r.depth if r.settled else None) for m, r in settled.items()}
    orders = {m: np.round(r.orders, 3).tolist() for m, r in settled.items()}
    return error is None, depths, max(ratios, default=np.nan), orders


if __name__ == "__main__" and GAUSSIAN:
    compute = gaussian_law(1.0)
    results = Parallel(n_jobs=-1)(delayed(outcome)(s, compute) for s in range(DRAWS))
    fails = [s for s, r in enumerate(results) if not r[0]]
    print(f"unbounded Gaussian law, SEED = 0..{DRAWS - 1}: {len(fails)} of {DRAWS} draws fail "
          f"{fails}")
    for method in ("Euler", "RK4"):
        count = Counter(r[1][method] for r in results)
        print(f"  {method}: settled at depth {dict(sorted(count.items(), key=str))}")
    print(f"  largest error to the ODE solution / its bound: {max(r[2] for r in results):.3f}")
elif __name__ == "__main__":
    print("SEED = 3155, unbounded Gaussian law, V0 and V1 multiplied by a factor:")
    for factor in (0.995, 1.0, 1.01, 1.02, 1.03, 1.04):
        ok, depths, ratio, orders = outcome(3155, gaussian_law(factor))
        print(f"  x {factor}: {'passes' if ok else 'FAILS'}; settled at {depths}; "
              f"limit ratio {ratio:.2f}; RK4 local orders {orders['RK4']}")

    compute = cell(NOTEBOOK, COMPUTE)
    results = Parallel(n_jobs=-1)(delayed(outcome)(s, compute) for s in range(DRAWS))
    fails = [s for s, r in enumerate(results) if not r[0]]
    print(f"notebook law, SEED = 0..{DRAWS - 1}: {len(fails)} of {DRAWS} draws fail {fails}")
    for method in ("Euler", "RK4"):
        count = Counter(r[1][method] for r in results)
        print(f"  {method}: settled at depth {dict(sorted(count.items(), key=str))}")
    print(f"  largest error to the ODE solution / its bound: {max(r[2] for r in results):.3f}")
