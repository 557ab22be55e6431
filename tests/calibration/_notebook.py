"""Replay cells of a chapter notebook under other seeds, for the calibration scripts.

A calibration script measures how often an assertion of a chapter fails when its cell runs
with other seeds. It runs the notebook's own code: the first code cell with ``SEED``
replaced (as ``make robust`` does), then the cells that compute and assert, found by a
string that occurs in exactly one cell. Figures are drawn off screen and closed.

Every script replays on new draws with a seed offset: ``--seed-offset=N`` on its command line
(removed from ``sys.argv`` before the script reads its own arguments) or the environment
variable ``CALIBRATION_SEED_OFFSET=N``. :func:`setup` adds the offset to the notebook's
``SEED``; scripts that seed their own generators add :data:`SEED_OFFSET`.
"""

import contextlib
import io
import json
import os
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
plt.show = lambda *args, **kwargs: plt.close("all")


def _seed_offset():
    offset = int(os.environ.get("CALIBRATION_SEED_OFFSET", "0"))
    for arg in [a for a in sys.argv[1:] if a.startswith("--seed-offset=")]:
        offset = int(arg.split("=", 1)[1])
        sys.argv.remove(arg)
    return offset


#: added to every seed the scripts replay (0 by default: the published calibration)
SEED_OFFSET = _seed_offset()


def _code_cells(notebook):
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    # the cell that installs the library where it is missing (book/colab_cell.py, tagged
    # install-library) is not replayed: the first code cell is the one with SEED
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"
            and "install-library" not in c.get("metadata", {}).get("tags", [])]


def cell(notebook, needle):
    """The source of the one code cell of ``notebook`` that contains ``needle``."""
    hits = [src for src in _code_cells(notebook) if needle in src]
    if len(hits) != 1:
        raise LookupError(f"{len(hits)} code cells of {notebook} contain {needle!r}")
    return compile(hits[0], f"{notebook}: {needle}", "exec")


def setup(notebook, seed, **switches):
    """The namespace after the first code cell, with ``SEED = seed + SEED_OFFSET`` and
    switches set."""
    first = _code_cells(notebook)[0]
    seed = int(seed) + SEED_OFFSET
    first, count = re.subn(r"^SEED = \d+$", f"SEED = {seed}", first, flags=re.M)
    if count != 1:
        raise LookupError(f"no line 'SEED = <int>' in the first code cell of {notebook}")
    for name, value in switches.items():
        first, count = re.subn(rf"^{name} = \w+", f"{name} = {value!r}", first, flags=re.M)
        if count != 1:
            raise LookupError(f"no switch {name} in the first code cell of {notebook}")
    namespace = {}
    exec(compile(first, f"{notebook}: first cell", "exec"), namespace)
    return namespace


def run(code, namespace):
    """Run compiled cells in ``namespace`` (printing nothing); return the AssertionError
    raised, or None."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for c in code if isinstance(code, (list, tuple)) else [code]:
                exec(c, namespace)
    except AssertionError as err:
        return err
    return None


def seeds_from_argv(count=200, start=1000):
    """``(SEEDS, START)`` from the command line ``[seeds] [start]``: SEED runs over
    ``range(START, START + SEEDS)``."""
    count = int(sys.argv[1]) if len(sys.argv) > 1 else count
    start = int(sys.argv[2]) if len(sys.argv) > 2 else start
    return count, start


#: chapter 4's first cell without its long integration: the identity matrices the cells use
CH04_IDENTITIES = compile("I2, I3 = np.eye(2), np.eye(3)", "identities", "exec")
