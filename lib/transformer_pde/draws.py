r"""Independent random draws and bootstrap replicates, run through :class:`joblib.Parallel`.

A Monte Carlo experiment repeats one task on independent draws: :math:`R` samples of
:math:`n` particles for each of several :math:`n`, or :math:`B` bootstrap replicates of a
statistic (Efron and Tibshirani, 1993). Here every task draws its randomness from its own
key, ``numpy.random.default_rng(key)`` with ``key = [*seed, k, r]`` (NumPy's
``SeedSequence`` makes the streams of different keys independent), so that the results do
not depend on how many jobs run, on the backend, or on the order in which tasks finish.

The functions fix neither ``n_jobs`` nor the backend: :class:`joblib.Parallel` takes them
from the caller's :func:`joblib.parallel_config` (one job, in the calling process, when
nothing is set). A reader chooses, for instance::

    joblib.parallel_config(n_jobs=len(os.sched_getaffinity(0)))   # every CPU available
    with joblib.parallel_config(backend="dask"):                   # a Dask cluster
        ...
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from joblib import Parallel, delayed
from numpy.typing import ArrayLike, NDArray

from . import _checks, _progress

__all__ = ["map_keys", "bootstrap"]


def map_keys(task: Callable[..., Any], keys: Sequence[Any], *args: Any, block: int = 1,
             n_jobs: int | None = None, progress: bool | None = None, **kwargs: Any) -> list[Any]:
    r"""``[task(key, *args, **kwargs) for key in keys]``, through :class:`joblib.Parallel`.

    Consecutive keys are grouped ``block`` at a time into one joblib task (short tasks cost
    less together). The result is the same list whatever ``n_jobs``, ``block`` and the
    backend, provided ``task`` draws its randomness from its key only.

    Parameters
    ----------
    task : callable
        ``task(key, *args, **kwargs)``; picklable (a function of a module, or a lambda for
        the default loky backend) when run in other processes.
    keys : sequence
        One seed key per call (a non-negative int or a 1-D sequence of them), e.g.
        ``[[seed, k, r] for r in range(R)]``.
    block : int
        Keys per joblib task.
    n_jobs : int or None
        Passed to :class:`joblib.Parallel`; ``None`` (default) takes it from
        :func:`joblib.parallel_config`.
    progress : bool or None
        A progress bar over the keys: ``None`` (default) shows it only when the output is
        interactive (a terminal, or a notebook open in Jupyter; never under nbval,
        ``nbconvert --execute`` or pytest), ``True`` always, ``False`` never.

    Returns
    -------
    list
        The results, in the order of ``keys``.

    Raises
    ------
    ValueError
        If ``block`` is not a positive integer.

    Examples
    --------
    >>> map_keys(pow, [1, 2, 3], 2, n_jobs=1)  # [pow(key, 2) for key in keys]
    [1, 4, 9]
    """
    if isinstance(keys, (str, bytes)) or not hasattr(keys, "__iter__"):
        raise ValueError(f"keys must be a sequence of seed keys, got {keys!r}")
    keys = list(keys)
    for key in keys:
        _checks.seed_key(key, "keys")  # each a non-negative int or a 1-D sequence of them
    if not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive int, got {block!r}")
    with _progress.bar(len(keys), progress, getattr(task, "__name__", "")) as shown:
        return _progress.map_blocks(task, keys, args, kwargs, block=block, n_jobs=n_jobs,
                                    bar=shown)


def _replicates(statistic, samples, seed, replicates):
    out = []
    for b in replicates:
        gen = np.random.default_rng([*seed, b])
        out.append(statistic([s[gen.integers(0, s.shape[0], s.shape[0])] for s in samples]))
    return out


def bootstrap(statistic: Callable[..., Any], samples: Sequence[ArrayLike], n_boot: int,
              seed: int | Sequence[int], *, n_jobs: int | None = None) -> NDArray[np.float64]:
    r"""Bootstrap replicates :math:`T(S_1^{*b}, \dots, S_K^{*b})`, :math:`b = 0, \dots, B-1`.

    Each sample :math:`S_k` (an array whose first axis holds independent draws) is
    resampled with replacement, independently of the others, by the generator
    ``numpy.random.default_rng([*seed, b])`` of replicate :math:`b` (Efron and Tibshirani,
    1993, ch. 6); ``statistic`` receives the list of resampled arrays. The standard
    deviation of the replicates estimates the standard error of
    :math:`T(S_1, \dots, S_K)`. Replicates run through :class:`joblib.Parallel`, in blocks,
    with ``n_jobs`` from :func:`joblib.parallel_config` unless given.

    Parameters
    ----------
    statistic : callable
        ``statistic(list_of_arrays)``, returning a number or an array.
    samples : sequence of arrays
        The samples, real and finite, each with at least one draw along its first axis.
    n_boot : int
        Number of replicates :math:`B`.
    seed : int or sequence of int
        Seed of the replicates (non-negative).
    n_jobs : int or None
        Passed to :class:`joblib.Parallel`.

    Returns
    -------
    array (n_boot, ...)
        The replicates, in the order of ``b``.

    Raises
    ------
    ValueError
        If ``n_boot`` is not a positive integer, ``samples`` is empty or holds an array
        without draws, or ``seed`` is malformed.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(10.0)
    >>> reps = bootstrap(lambda s: s[0].mean(), [x], 200, 0, n_jobs=1)
    >>> reps.shape, bool(np.all((reps >= 0.0) & (reps <= 9.0)))
    ((200,), True)
    >>> bool(np.array_equal(reps, bootstrap(lambda s: s[0].mean(), [x], 200, 0, n_jobs=1)))
    True
    """
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int, got {n_boot!r}")
    if isinstance(samples, (str, bytes)) or not hasattr(samples, "__iter__"):
        raise ValueError(f"samples must be a sequence of arrays, got {samples!r}")
    arrays = [_checks.real_array(s, "samples") for s in samples]
    if any(not np.all(np.isfinite(s)) for s in arrays):
        raise ValueError("samples contains non-finite values (NaN or inf)")
    if not arrays or any(s.ndim < 1 or s.shape[0] < 1 for s in arrays):
        raise ValueError("samples must be a non-empty sequence of arrays with >= 1 draw each")
    seed = _checks.seed_key(seed)
    per_block = max(1, math.ceil(n_boot / 8))
    blocks = [range(i, min(i + per_block, n_boot)) for i in range(0, n_boot, per_block)]
    parts = Parallel(n_jobs=n_jobs)(delayed(_replicates)(statistic, arrays, seed, b)
                                    for b in blocks)
    return np.array([r for part in parts for r in part])
