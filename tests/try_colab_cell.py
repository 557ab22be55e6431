"""Run the notebooks' install cell in a fresh virtual environment, on a local copy.

What a reader on Colab meets: a Python where NumPy, SciPy, ... exist but the book's library
does not. This script makes such a Python (a new venv that sees the dependencies of ``.venv``
but not ``transformer_pde``), runs in it the cell that ``book/colab_cell.py`` inserts, with the
install source pointed at a commit of a local clone (``git+file://...``) instead of the public
repository, and then imports the library and runs the first chapter's first computation. It
exits with status 1 if the library was importable before the cell (the check would prove
nothing) or is not importable after it.

Usage: python tests/try_colab_cell.py [COMMIT]   (default: HEAD of this clone; needs git and
pip's access to the package index, for the build backend)
"""

import subprocess
import sys
import sysconfig
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book"))
import colab_cell  # noqa: E402

AFTER = """
import importlib.util, sys
import numpy as np
import transformer_pde
from transformer_pde import attention
X = np.random.default_rng(0).standard_normal((5, 2))
Y = attention.softmax(X, np.eye(2), np.eye(2))
print("imported", transformer_pde.__file__, "; one layer on 5 tokens:", Y.shape)
assert "site-packages" in transformer_pde.__file__
"""


def main():
    commit = sys.argv[1] if len(sys.argv) > 1 else subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True, capture_output=True,
        text=True).stdout.strip()
    cell = colab_cell.cell_source(source=f"git+file://{ROOT}@{commit}")
    with tempfile.TemporaryDirectory() as tmp:
        env_dir = Path(tmp) / "fresh"
        venv.create(env_dir, with_pip=True)
        python = env_dir / "bin" / "python"
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path("
                               "'purelib'))"], check=True, capture_output=True,
                              text=True).stdout.strip()
        # the dependencies only: a plain path line, so the editable install's own .pth in
        # .venv (which makes transformer_pde importable there) is not processed
        Path(site, "book_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
        before = subprocess.run([python, "-c", "import importlib.util as u; "
                                 "print(u.find_spec('transformer_pde') is None)"],
                                check=True, capture_output=True, text=True).stdout.strip()
        if before != "True":
            sys.exit("transformer_pde is importable before the cell: nothing would be shown")
        print(f"fresh venv without transformer_pde; running the install cell for {commit}")
        result = subprocess.run([python, "-c", cell + "\n" + AFTER])
        sys.exit(result.returncode)


if __name__ == "__main__":
    main()
