"""Chapter 1, the dynamics see only the empirical measure: its checks on many draws.

Runs the notebook's own cells for SEED = 0..DRAWS-1 (shifted by the seed offset): the cell
that draws 12 tokens and the five variants' matrices and integrates the original and the
duplicated systems, then its assertion cell (every deviation below 1e-10). Sinkhorn
attention iterates to its tolerance 1e-10 within 10^4 normalisation steps or the library
raises; the script counts the draws that fail either way and prints the largest number of
steps any Sinkhorn evaluation took.
Usage: python tests/calibration/ch01_measure.py [draws] [--seed-offset=N]
"""

import sys

from _notebook import SEED_OFFSET, cell, run, setup
from joblib import Parallel, delayed
from transformer_pde import attention

NOTEBOOK = "01_tokens_as_particles.ipynb"
DRAWS = int(sys.argv[1]) if len(sys.argv) > 1 else 300
_potentials = attention._sinkhorn_potentials


def outcome(seed):
    steps = []

    def counted(*args, **kwargs):
        result = _potentials(*args, **kwargs)
        steps.append(result[3])
        return result

    attention._sinkhorn_potentials = counted
    namespace = setup(NOTEBOOK, seed)
    try:
        error = run([cell(NOTEBOOK, "X_dup = np.repeat"), cell(NOTEBOOK, "worst = max(")],
                    namespace)
    except RuntimeError as err:  # Sinkhorn did not converge within max_steps
        error = err
    finally:
        attention._sinkhorn_potentials = _potentials
    return error is None, max(steps, default=0)


if __name__ == "__main__":
    results = Parallel(n_jobs=-1)(delayed(outcome)(s) for s in range(DRAWS))
    fails = [s + SEED_OFFSET for s, r in enumerate(results) if not r[0]]
    print(f"SEED = {SEED_OFFSET}..{SEED_OFFSET + DRAWS - 1}: {len(fails)} of {DRAWS} draws "
          f"fail {fails}; largest number of Sinkhorn steps {max(r[1] for r in results)}")
