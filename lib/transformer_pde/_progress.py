"""Progress bars for the long sweeps of the library, shown only to a reader who is watching.

A sweep (many independent runs through :class:`joblib.Parallel`) can take minutes when a
chapter's scale switch is on. :func:`run` executes its calls (:func:`map_blocks`: one task
per block of keys); given a bar from :func:`bar`, which draws one with :mod:`tqdm` when the
output is *interactive*, it advances the bar as results arrive. Otherwise it writes
nothing at all (neither stdout nor stderr), so that the stored outputs of a notebook executed
by nbval, ``jupyter nbconvert --execute`` or ``tests/robust.py`` never contain a bar.

Interactive means (:func:`interactive`):

- in a Jupyter kernel: the kernel was started by a Jupyter server for a notebook session
  (JupyterLab, Notebook: the server sets ``JPY_SESSION_NAME`` in the kernel's environment).
  Kernels started by nbclient (nbval, nbconvert, ``tests/robust.py``) have no such variable;
- elsewhere: ``sys.stdout`` is a terminal (``isatty()``); under pytest, in a pipe or a file,
  it is not.

A sweep's ``progress`` argument overrides the rule: ``True`` always draws the bar, ``False``
never, ``None`` (default) follows :func:`interactive`. The results are the same in all cases
(the bar only watches them arrive, in order).
"""

import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from joblib import Parallel, delayed

from . import _checks


def _in_kernel() -> bool:
    """Whether this process is an IPython kernel (the shell of ipykernel is running)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and hasattr(shell, "kernel")


def interactive() -> bool:
    """Whether a reader is watching the output: a Jupyter kernel of a notebook session of a
    Jupyter server, or a terminal on ``sys.stdout``."""
    if _in_kernel():
        return bool(os.environ.get("JPY_SESSION_NAME"))
    try:
        return bool(sys.stdout.isatty())
    except (AttributeError, ValueError):  # no stdout, or a closed one
        return False


def wanted(progress: bool | None) -> bool:
    """``progress`` checked (``True``, ``False`` or ``None`` for :func:`interactive`)."""
    if progress is None:
        return interactive()
    return _checks.flag(progress, "progress")


def _text_or_notebook_bar(total: int, desc: str):
    """A notebook bar in a kernel with ipywidgets, else a text bar on stderr (which Jupyter
    redraws in place)."""
    if _in_kernel() and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm as notebook_tqdm

        return notebook_tqdm(total=total, desc=desc)
    from tqdm.std import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr)


@contextmanager
def bar(total: int, progress: bool | None = None, desc: str = "") -> Iterator[Any]:
    """A progress bar of ``total`` steps when :func:`wanted` says so, else a silent one
    (``None`` for :func:`run`); closed on exit."""
    if not wanted(progress):
        yield None
        return
    shown = _text_or_notebook_bar(total, desc)
    try:
        yield shown
    finally:
        shown.close()


def run(calls: Iterable[Any], *, n_jobs: int | None = None, bar: Any = None,
        steps: Sequence[int] | None = None) -> list:
    """``joblib.Parallel(n_jobs=n_jobs)(calls)``; with a ``bar`` (from :func:`bar`), the
    results are collected as they arrive (in the order of ``calls``) and result ``i``
    advances it by ``steps[i]`` (default 1)."""
    if bar is None:
        return Parallel(n_jobs=n_jobs)(calls)
    out = []
    for i, result in enumerate(Parallel(n_jobs=n_jobs, return_as="generator")(calls)):
        out.append(result)
        bar.update(1 if steps is None else steps[i])
    return out


def _run_block(task, keys, args, kwargs):
    return [task(key, *args, **kwargs) for key in keys]


def map_blocks(task: Callable[..., Any], keys: Sequence[Any], args: tuple, kwargs: dict, *,
               block: int = 1, n_jobs: int | None = None, bar: Any = None) -> list:
    """``[task(key, *args, **kwargs) for key in keys]`` through :func:`run`, ``block``
    consecutive keys per joblib task; the bar advances by one per key."""
    keys = list(keys)
    blocks = [keys[i:i + block] for i in range(0, len(keys), block)]
    if not blocks:
        return []
    parts = run((delayed(_run_block)(task, b, args, kwargs) for b in blocks), n_jobs=n_jobs,
                bar=bar, steps=[len(b) for b in blocks])
    return [result for part in parts for result in part]
