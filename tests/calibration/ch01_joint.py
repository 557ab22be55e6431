"""Chapter 1: every draw-dependent check of the chapter, jointly, on the same draws.

Replays, for each seed, every code cell of ``01_tokens_as_particles.ipynb`` in order except
the cells that only draw figures (code cells tagged hide-input without an assertion), so
that the notebook's single generator ``rng`` advances exactly as in an execution with that
``SEED``: the depth-order check and the limit (section "Residual attention is the Euler
scheme"), the Sinkhorn iterations along the trajectories (the measure section, where the
library raises if 10^4 steps do not reach the tolerance), the masking changes, the gallery
inequalities, and the Sinkhorn contraction check. A seed passes when the whole replay runs
without an AssertionError or a RuntimeError, so N failure-free seeds bound the rate of the
chapter's checks together (not of each separately) by about 3 / N at 95 % confidence.

Runs in one process; prints one line per seed (pass or the failing check, the depths at
which the local orders settled, the smallest masking change, the number of linear-regime
Sinkhorn steps and the largest contraction ratio minus lambda_2^2), then the totals.

Usage::

    python tests/calibration/ch01_joint.py [draws] [first] [--seed-offset=N]

SEED runs over ``first + N .. first + N + draws - 1`` (default first 0, N 0).
"""

import json
import sys
import time

import numpy as np
from _notebook import ROOT, SEED_OFFSET, setup

NOTEBOOK = "01_tokens_as_particles.ipynb"


def replay_cells():
    """The notebook's code cells after the first, without the figure-only ones, compiled."""
    cells = json.loads((ROOT / "notebooks" / NOTEBOOK).read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"
            and "install-library" not in c.get("metadata", {}).get("tags", [])][1:]
    kept = []
    for k, c in enumerate(code):
        src = "".join(c["source"])
        figure_only = ("hide-input" in c.get("metadata", {}).get("tags", [])
                       and "assert" not in src)
        if not figure_only:
            kept.append((src.splitlines()[0], compile(src, f"{NOTEBOOK}: cell {k + 1}", "exec")))
    return kept


def code_digest():
    """SHA-256 of the notebook's code cells: printed at the start and at the end of a replay,
    so that a count can be tied to one version of the notebook (the first cell is re-read for
    every seed)."""
    import hashlib

    cells = json.loads((ROOT / "notebooks" / NOTEBOOK).read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def outcome(seed, cells):
    import contextlib
    import io

    ns = setup(NOTEBOOK, seed)
    error = None
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for head, code in cells:
                try:
                    exec(code, ns)
                except (AssertionError, RuntimeError) as err:
                    error = f"{head!r}: {type(err).__name__} {str(err)[:120]}"
                    raise
    except (AssertionError, RuntimeError):
        pass
    stats = {}
    if "settled" in ns:
        stats["depths"] = {m: (r.depth if r.settled else None) for m, r in ns["settled"].items()}
    if "changes" in ns:
        stats["change"] = float(min(ns["changes"].min(), ns["dup_first_change"].min()))
    if "linear" in ns and "ratios" in ns and np.ndim(ns["ratios"]):
        lin = ns["linear"]
        stats["linear"] = int(lin.sum())
        stats["contraction"] = float(np.max(ns["ratios"][lin] - ns["lam2"] ** 2)) \
            if lin.any() else float("nan")
    return error, stats


def main():
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    first = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    digest = code_digest()
    print(f"notebook code {digest}", flush=True)
    cells = replay_cells()
    failures, changes, linear, contraction = [], [], [], []
    start = time.time()
    for seed in range(first, first + draws):
        error, stats = outcome(seed, cells)
        if error is not None:
            failures.append(seed + SEED_OFFSET)
        changes.append(stats.get("change", np.nan))
        linear.append(stats.get("linear", -1))
        contraction.append(stats.get("contraction", np.nan))
        print(f"SEED = {seed + SEED_OFFSET}: {'passes' if error is None else 'FAILS ' + error}; "
              f"settled {stats.get('depths')}; smallest masking change "
              f"{stats.get('change', np.nan):.2e}; linear steps {stats.get('linear')}; "
              f"contraction - lambda_2^2 {stats.get('contraction', np.nan):+.2e}", flush=True)
    print(f"SEED = {first + SEED_OFFSET}..{first + SEED_OFFSET + draws - 1}: {len(failures)} "
          f"failing draws {failures}; smallest masking change {np.nanmin(changes):.2e}; "
          f"fewest linear steps {min(linear)}; largest contraction - lambda_2^2 "
          f"{np.nanmax(contraction):+.2e}; {(time.time() - start) / draws:.2f} s per draw")
    end = code_digest()
    print(f"notebook code {end}" + ("" if end == digest else
                                    " CHANGED during the replay: the count is not of one version"))


if __name__ == "__main__":
    main()
