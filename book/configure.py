"""Write the book's build configuration: ``_config.yml`` plus the repository, if one is set.

The repository button, the issues button and the Binder and Colab launch buttons only work for
a public repository, so they appear only when the book is built with one::

    make book REPOSITORY=https://github.com/OWNER/NAME      # optionally BRANCH=main

Without ``REPOSITORY`` (the default) the book has none of these buttons rather than buttons
pointing at a placeholder. Usage: ``python book/configure.py OUT.yml [URL [BRANCH]]``.
"""

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def configure(url=None, branch="main"):
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
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
    return config


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
