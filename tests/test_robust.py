"""The seed sweep of ``make robust`` (tests/robust.py): seed replacement, scale switches, and
the report of a failing cell, on small notebooks executed for real."""

import json

import pytest
from robust import execute, main, scale_switches, stored_seed, variant


def _notebook(first, *others):
    cells = [{"cell_type": "code", "metadata": {}, "source": src, "outputs": [],
              "execution_count": None, "id": f"c{i}"} for i, src in enumerate((first, *others))]
    cells.insert(0, {"cell_type": "markdown", "metadata": {}, "source": "# Title", "id": "m"})
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


FIRST = "import numpy as np\nSEED = 5\n# a scale switch\nBIG = False\nsmall = False\n"


def test_variant_replaces_the_seed_and_the_switches_only():
    nb = _notebook(FIRST, "x = SEED")
    assert stored_seed(nb) == 5
    assert scale_switches(nb) == ["BIG"]  # lower-case names are not switches
    seeded = variant(nb, seed=42)
    assert "SEED = 42\n" in seeded["cells"][1]["source"]
    assert "BIG = False" in seeded["cells"][1]["source"]
    scaled = variant(nb, scale=True)
    assert "SEED = 5\n" in scaled["cells"][1]["source"]
    assert "BIG = True" in scaled["cells"][1]["source"]
    assert "small = False" in scaled["cells"][1]["source"]
    assert nb["cells"][1]["source"] == FIRST  # the original is not modified


@pytest.mark.parametrize("first", ["x = 1\n", "SEED = 1\nSEED = 2\n", "SEED = 1.5\n"])
def test_a_notebook_without_one_integer_seed_line_is_refused(first):
    with pytest.raises(ValueError, match="SEED"):
        variant(_notebook(first), seed=3)


def test_a_failing_assertion_reports_its_cell_and_message():
    nb = _notebook("SEED = 1\n", "value = SEED * 2", "assert value < 10, value")
    run = execute(json.dumps(variant(nb, seed=7)), "demo", "seed 7", 60, 1)
    assert not run.ok and run.cell == 3
    assert run.message == "AssertionError: 14"
    assert execute(json.dumps(variant(nb, seed=4)), "demo", "seed 4", 60, 1).ok


def test_main_runs_seeds_and_scale_switches_and_fails_on_any_error(tmp_path, capsys):
    nb = _notebook("SEED = 1\n# scale\nBIG = False\n", "assert not (BIG and SEED == 1)")
    path = tmp_path / "demo.ipynb"
    path.write_text(json.dumps(nb))
    assert main([str(path), "--seeds", "2 3", "--jobs", "2"]) == 0
    report = tmp_path / "report.txt"
    assert main([str(path), "--seeds", "2", "--scale", "--report", str(report)]) == 1
    out = capsys.readouterr().out
    assert "FAIL demo scale BIG" in out and "cell 2: AssertionError" in out
    assert report.read_text().splitlines()[-1] == "robust: 1 of 2 runs passed"


def test_jobs_run_concurrently(tmp_path):
    # A barrier: each run announces itself, then waits for the other. Run one after the
    # other (as parallel_config(prefer="threads") silently does), the first run times out.
    barrier = (f"import pathlib, time\nd = pathlib.Path({str(tmp_path)!r})\n"
               "(d / f'run{SEED}').touch()\n"
               "for _ in range(600):\n"
               "    if len(list(d.glob('run*'))) == 2:\n        break\n"
               "    time.sleep(0.1)\n"
               "assert len(list(d.glob('run*'))) == 2, 'the other run did not start'")
    path = tmp_path / "barrier.ipynb"
    path.write_text(json.dumps(_notebook("SEED = 1\n", barrier)))
    assert main([str(path), "--seeds", "1 2", "--jobs", "2"]) == 0
