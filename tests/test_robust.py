"""The seed sweep of ``make robust`` (tests/robust.py): seed replacement, scale switches, and
the report of a failing cell, on small notebooks executed for real."""

import json

import pytest
from robust import available_cpus, execute, main, scale_switches, stored_seed, variant


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
    assert not run.ok and run.cell == 2  # code cells numbered from 0, as nbval does
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
    assert "FAIL demo scale BIG" in out and "cell 1: AssertionError" in out
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


def test_a_malformed_notebook_fails_its_own_runs_only(tmp_path, capsys):
    good = tmp_path / "good.ipynb"
    good.write_text(json.dumps(_notebook("SEED = 1\n", "assert SEED > 0")))
    bad = tmp_path / "bad.ipynb"
    bad.write_text(json.dumps(_notebook("SEED = one\n")))
    assert main([str(bad), str(good), "--seeds", "2", "--jobs", "1"]) == 1
    out = capsys.readouterr().out
    assert "FAIL bad" in out and "SEED" in out
    assert "ok   good seed 2" in out
    assert out.splitlines()[-1] == "robust: 1 of 2 runs passed"


def test_the_kernels_get_their_share_of_the_cpus_joblib_included(tmp_path):
    # two runs at a time on one CPU: each kernel sees one thread, and joblib one CPU
    share = ("import os, joblib\nassert os.environ['OMP_NUM_THREADS'] == '1'\n"
             "assert joblib.cpu_count() == 1, joblib.cpu_count()")
    path = tmp_path / "share.ipynb"
    path.write_text(json.dumps(_notebook("SEED = 1\n", share)))
    assert main([str(path), "--seeds", "1 2", "--jobs", str(2 * available_cpus())]) == 0


def test_runs_go_through_a_dask_cluster(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    path = tmp_path / "demo.ipynb"
    path.write_text(json.dumps(_notebook("SEED = 1\n", "assert SEED != 3, SEED")))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        assert main([str(path), "--seeds", "2 3", "--dask", cluster.scheduler_address]) == 1
    out = capsys.readouterr().out
    assert "robust: 2 runs, Dask at a time" in out
    assert "ok   demo seed 2" in out and "FAIL demo seed 3" in out
