"""Write the book's build configuration: ``_config.yml`` plus the repository, if one is set.

The repository button, the issues button and the Binder and Colab launch buttons only work for
a public repository, so they appear only when the book is built with one::

    make book REPOSITORY=https://github.com/OWNER/NAME      # optionally BRANCH=main

Without ``REPOSITORY`` (the default) the book has none of these buttons rather than buttons
pointing at a placeholder, and the pages that mention them say so: the MyST substitution
``{{ launch_sentence }}`` (used by the introduction and the Reproducing page) is empty without
a repository and names the launch buttons with one; ``{{ launch_status }}`` says which. Usage:
``python book/configure.py OUT.yml [URL [BRANCH]]``.
"""

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


#: the text that the pages show, through ``{{ launch_sentence }}``, when the book has buttons
LAUNCH_SENTENCE = (", or on Binder or Colab with the launch button (the rocket icon at the top "
                   "of each chapter), where the notebook's first cell installs the library")
#: ``{{ launch_status }}`` on the Reproducing page: whether this build has the buttons
LAUNCH_STATUS = {False: "This copy of the book was built without it and has no launch buttons.",
                 True: "This copy of the book was built with it."}


def configure(url=None, branch="main"):
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    substitutions = config.setdefault("parse", {}).setdefault("myst_substitutions", {})
    substitutions["launch_sentence"] = LAUNCH_SENTENCE if url else ""
    substitutions["launch_status"] = LAUNCH_STATUS[bool(url)]
    # Jupyter Book reads local extension folders relative to the configuration file
    local = config.get("sphinx", {}).get("local_extensions", {})
    for name, folder in local.items():
        local[name] = str(ROOT / folder)
    if url:
        url = url.rstrip("/")
        if not url.startswith("https://github.com/") or url.count("/") != 4:
            sys.exit(f"REPOSITORY must be https://github.com/OWNER/NAME, got {url!r}")
        config["repository"] = {"url": url, "branch": branch}
        config["launch_buttons"] = {
            "notebook_interface": "jupyterlab",
            "binderhub_url": "https://mybinder.org",
            "colab_url": "https://colab.research.google.com",
        }
        config.setdefault("html", {}).update(
            {"use_repository_button": True, "use_issues_button": True})
        warn_install_cells(url, branch)
    return config


def warn_install_cells(url, branch):
    """Warn about the chapters whose install cell does not install from ``url`` at ``branch``.

    Colab opens the notebook from the repository; its first code cell must install the
    library from there (book/colab_cell.py writes it). The build goes on (a preview of the
    buttons is useful), but the warning names the command that fixes the notebooks.
    """
    sys.path.insert(0, str(ROOT / "book"))
    import colab_cell

    stale = [path.name for path in sorted((ROOT / "notebooks").glob("*.ipynb"))
             if colab_cell.update(path, url, branch, check=True)]
    if stale:
        ref = f" --ref {branch}" if branch != "main" else ""
        print(f"configure: the Colab buttons of {len(stale)} notebook(s) open a notebook "
              f"without the cell that installs the library from {url} ({', '.join(stale)}); "
              f"run python book/colab_cell.py --repository {url}{ref} notebooks/*.ipynb "
              "and commit the notebooks", file=sys.stderr)


def main(argv):
    if not 1 <= len(argv) <= 3:
        sys.exit(__doc__)
    out = Path(argv[0])
    url = argv[1] if len(argv) > 1 and argv[1] else None
    branch = argv[2] if len(argv) > 2 and argv[2] else "main"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(configure(url, branch), sort_keys=False))


if __name__ == "__main__":
    main(sys.argv[1:])
