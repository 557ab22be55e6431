"""The progress bar of long sweeps (transformer_pde._progress): silent unless a reader watches."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest
from transformer_pde import _progress, draws


def _square(key, offset):
    return key[-1] ** 2 + offset


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_not_interactive_under_pytest_a_pipe_or_a_kernel_without_a_session(monkeypatch):
    assert not _progress.interactive()  # pytest captures stdout: no terminal
    monkeypatch.setattr(sys, "stdout", _Terminal())
    assert _progress.interactive()
    # a Jupyter kernel: only a notebook session of a Jupyter server counts, whatever stdout
    monkeypatch.setattr(_progress, "_in_kernel", lambda: True)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert not _progress.interactive()
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/reader/02_well_posedness.ipynb")
    assert _progress.interactive()


def test_silent_when_not_interactive(capfd):
    keys = [[5, r] for r in range(7)]
    out = draws.map_keys(_square, keys, 1, block=2)
    assert out == [r * r + 1 for r in range(7)]
    captured = capfd.readouterr()  # the file descriptors: nothing reaches stdout or stderr
    assert captured.out == "" and captured.err == ""


def test_silent_in_a_process_whose_output_is_a_pipe():
    # as under nbconvert, nbval or tests/robust.py: the library writes nothing at all
    code = ("from transformer_pde import draws; "
            "r = draws.map_keys(lambda k: k[-1], [[0, i] for i in range(5)]); "
            "assert r == list(range(5))")
    env = {k: v for k, v in os.environ.items() if k != "JPY_SESSION_NAME"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, check=True)
    assert done.stdout == "" and done.stderr == ""


def test_a_requested_bar_counts_the_keys_and_leaves_the_results_unchanged(capfd):
    keys = [[5, r] for r in range(7)]
    quiet = draws.map_keys(_square, keys, 1, block=3, progress=False)
    shown = draws.map_keys(_square, keys, 1, block=3, progress=True)
    assert shown == quiet
    err = capfd.readouterr().err
    assert "7/7" in err  # one step per key, whatever the blocks
    with pytest.raises(ValueError, match="progress"):
        draws.map_keys(_square, keys, 1, progress="auto")


def test_run_advances_the_bar_by_the_given_steps():
    from joblib import delayed

    class Counter:
        total = 0

        def update(self, n=1):
            self.total += n

    bar = Counter()
    out = _progress.run((delayed(np.square)(k) for k in range(4)), bar=bar, steps=[1, 2, 3, 4])
    assert out == [0, 1, 4, 9] and bar.total == 10


def test_the_sweeps_take_progress_and_give_the_same_results(capfd):
    from transformer_pde import gaussian, meanfield

    I2 = np.eye(2)
    args = (0.5 * I2, I2, np.zeros(2), I2, [8, 16], 3, [1, 2])
    quiet = meanfield.meanfield_errors(*args, progress=False)
    shown = meanfield.meanfield_errors(*args, progress=True)
    for q, s in zip(quiet, shown, strict=True):  # covariance errors, field errors
        for a, b in zip(q, s, strict=True):
            np.testing.assert_array_equal(a, b)
    assert "6/6" in capfd.readouterr().err  # one bar over every size's draws
    times = np.array([0.0, 1.0, 10.0])
    runs = gaussian.clustering_rank_draws(2, 2, np.random.default_rng(0), times=times,
                                          progress=True)
    assert len(runs) == 2 and "2/2" in capfd.readouterr().err
