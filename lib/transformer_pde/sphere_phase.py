r"""Phase diagrams of clustering on the sphere: many independent runs through joblib.

A phase diagram in the manner of Geshkovski, Letrouit, Polyanskiy and Rigollet (2025) records,
for each inverse temperature :math:`\beta` and each layer, the fraction of pairs of tokens
with :math:`\langle x_i, x_j\rangle \ge` ``threshold`` (their :math:`1 - 10^{-3}`), for
``n`` tokens drawn uniformly on :math:`\mathbb S^{d-1}` and sent through the Transformer with
layer normalisation (:func:`transformer_pde.sphere.normalised_residual_stack`, the layer
:math:`x \mapsto (x + h\Gamma(x))/|x + h\Gamma(x)|` of their code, :math:`Q = K = V = I`).

Each run is an independent task of :class:`joblib.Parallel`. The library fixes neither the
number of jobs nor the backend: they come from :func:`joblib.parallel_config` (one job by
default), so a reader can run the sweep on several cores or on a Dask cluster
(``parallel_config(backend="dask")``). Each task draws its tokens from its own generator
``np.random.default_rng([*seed, k, s])`` (``k`` the index of :math:`\beta`, ``s`` that of the
start), so the result does not depend on the backend or on the number of jobs.

With :math:`Q = K = V = I` every layer output is a combination of the tokens, so the tokens
stay in the span of the initial ones, and the dynamics commutes with rotations: when
:math:`d > n` a run is computed in coordinates of that :math:`n`-dimensional span (exactly the
same Gram matrices, at a cost independent of :math:`d`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from joblib import delayed
from numpy.typing import ArrayLike, NDArray

from . import _checks, _progress, _sphere
from .sphere import (
    clustered_pair_fraction,
    equiangular_layers,
    normalised_residual_stack,
    sa_field,
    uniform_on_sphere,
    usa_field,
)

__all__ = ["clustering_run", "phase_diagram", "first_crossing", "median_pair_band"]


def _seed_entropy(seed):
    arr = np.atleast_1d(np.asarray(seed))
    if arr.ndim != 1 or arr.size < 1 or not np.issubdtype(arr.dtype, np.integer) \
            or np.any(arr < 0):
        raise ValueError(f"seed must be a non-negative integer or a sequence of them, "
                         f"got {seed!r}")
    return [int(s) for s in arr]


def clustering_run(beta: float, n: int, d: int, T: float, h: float, rng: np.random.Generator, *,
                   model: str = "sa", threshold: float = 1 - 1e-3) -> NDArray[np.float64]:
    r"""Fraction of clustered pairs after each layer, for one uniform random start.

    ``n`` tokens uniform on :math:`\mathbb S^{d-1}` (from the generator ``rng``) go through
    ``L = round(T / h)`` layers :math:`x \mapsto (x + h\Gamma(x))/|\cdot|`, :math:`\Gamma` the
    SA (softmax) or USA attention output with :math:`Q = K = V = I` and inverse temperature
    ``beta``. Returns the fraction of pairs :math:`i < j` with :math:`\langle x_i,
    x_j\rangle \ge` ``threshold`` at layers ``0..L`` (shape ``(L + 1,)``); the quantity of the
    phase diagrams of Geshkovski et al. (2025).

    Parameters
    ----------
    beta : float
        Inverse temperature, non-negative.
    n : int
        Number of tokens.
    d : int
        Dimension of the ambient space.
    T : float
        Final time, positive.
    h : float
        Step, positive.
    rng : numpy.random.Generator
        Source of the start.
    model : {"sa", "usa"}
        Attention model.
    threshold : float
        Inner product at which a pair counts as clustered.

    Returns
    -------
    array (L + 1,)

    Raises
    ------
    ValueError
        If ``model`` is unknown, ``beta`` is negative or not finite, or ``T``, ``h`` is not
        positive.

    Examples
    --------
    Four tokens on the circle at :math:`\beta = 1` are one cluster by :math:`T = 30`:

    >>> import numpy as np
    >>> frac = clustering_run(1.0, 4, 2, 30.0, 0.5, np.random.default_rng(0))
    >>> print(len(frac), frac[0], frac[-1])
    61 0.0 1.0

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    model = _sphere.model(model)
    beta = _sphere.beta(beta, allow_zero=True)
    T = _checks.positive_float(T, "T")
    h = _checks.positive_float(h, "h")
    threshold = _checks.finite_float(threshold, "threshold")
    L = max(1, int(round(T / h)))
    X0 = uniform_on_sphere(n, d, rng)
    if d > n:  # coordinates in the span of the initial tokens: same Gram matrices
        _, R = np.linalg.qr(X0.T)
        X0 = R.T / np.linalg.norm(R.T, axis=1, keepdims=True)
    field = sa_field(beta, tangent=False) if model == "sa" else usa_field(beta, tangent=False)
    stack = normalised_residual_stack(field, X0, L * h, L)
    return np.asarray(clustered_pair_fraction(stack, threshold))  # (L + 1,) for a stack


def phase_diagram(betas: ArrayLike, n: int, d: int, T: float, h: float, *, starts: int = 1,
                  seed: int | Sequence[int] = 0, model: str = "sa", threshold: float = 1 - 1e-3,
                  n_jobs: int | None = None, progress: bool | None = None) -> NDArray[np.float64]:
    r"""Mean fraction of clustered pairs over :math:`(\beta, \text{layer})`, through joblib.

    Runs :func:`clustering_run` for every ``beta`` in ``betas`` and ``starts`` random starts,
    as independent tasks of ``joblib.Parallel()`` (jobs and backend from
    :func:`joblib.parallel_config`); task ``(k, s)`` uses
    ``np.random.default_rng([*seed, k, s])``. Returns an array of shape
    ``(len(betas), L + 1)``, the average over the starts, identical whatever the backend
    and the number of jobs. ``n_jobs``, when given, is passed to :class:`joblib.Parallel`.
    ``progress``: a progress bar over the runs, shown by default (``None``) only when the
    output is interactive (a terminal, a notebook open in Jupyter; never under nbval or
    ``nbconvert --execute``); ``True`` always, ``False`` never.

    Parameters
    ----------
    betas : array (B,)
        Inverse temperatures, finite and non-negative.
    n : int
        Number of tokens.
    d : int
        Dimension.
    T : float
        Final time.
    h : float
        Step.
    starts : int
        Random starts per ``beta``.
    seed : int or sequence of int
        Key of the starts.
    model : {"sa", "usa"}
        Attention model.
    threshold : float
        Inner product at which a pair counts as clustered.
    n_jobs : int, optional
        Passed to :class:`joblib.Parallel`.
    progress : bool, optional
        Progress bar (see above).

    Returns
    -------
    array (B, L + 1)

    Raises
    ------
    ValueError
        If ``betas`` is not a non-empty 1-D array of finite non-negative values, ``starts``,
        ``n`` or ``d`` is not a positive integer, ``seed`` is not a non-negative integer or a
        sequence of them, ``model`` is unknown or ``n_jobs`` is 0.

    Examples
    --------
    >>> D = phase_diagram([0.0, 1.0], 4, 2, 30.0, 0.5, starts=2)
    >>> print(D.shape, D[:, 0].tolist(), D[:, -1].tolist())
    (2, 61) [0.0, 0.0] [1.0, 1.0]

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    b = _checks.real_array(betas, "betas")
    if b.ndim != 1 or b.size < 1 or not np.all(np.isfinite(b)) or np.any(b < 0):
        raise ValueError("betas must be a non-empty 1-D array of finite values >= 0")
    starts = _checks.positive_int(starts, "starts")
    entropy = _seed_entropy(seed)
    _sphere.model(model)
    n = _checks.positive_int(n, "n")
    d = _checks.positive_int(d, "d")
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer))
                               or n_jobs == 0):
        raise ValueError(f"n_jobs must be None or a non-zero int (joblib's convention), "
                         f"got {n_jobs!r}")
    tasks = [(k, s) for k in range(b.size) for s in range(starts)]
    calls = (delayed(clustering_run)(b[k], n, d, T, h, np.random.default_rng([*entropy, k, s]),
                                     model=model, threshold=threshold) for k, s in tasks)
    with _progress.bar(len(tasks), progress, "phase_diagram") as shown:
        runs = _progress.run(calls, n_jobs=n_jobs, bar=shown)
    out = np.zeros((b.size, runs[0].size))
    for (k, _), frac in zip(tasks, runs, strict=True):
        out[k] += frac
    return out / starts


def first_crossing(values: ArrayLike, times: ArrayLike,
                   level: float) -> float | NDArray[np.float64]:
    r"""First time at which ``values`` reach ``level`` (``nan`` if never).

    ``values`` has shape ``(..., k)`` over the ``k`` entries of ``times``; returns an array of
    shape ``(...)``: :math:`\min\{t_j : v_j \ge \text{level}\}`.

    Parameters
    ----------
    values : array (..., k)
        Values over ``times``.
    times : array (k,)
        Times.
    level : float
        Level to reach.

    Returns
    -------
    float or array

    Raises
    ------
    ValueError
        If the last axis of ``values`` does not have the length of ``times``.

    Examples
    --------
    >>> print(first_crossing([0.1, 0.5, 0.9], [0.0, 1.0, 2.0], 0.5))
    1.0
    >>> print(first_crossing([[0.1, 0.5, 0.9], [0.0, 0.0, 0.0]], [0.0, 1.0, 2.0], 0.5).tolist())
    [1.0, nan]

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    v = _checks.real_array(values, "values")
    t = _checks.real_array(times, "times")
    level = _checks.finite_float(level, "level")
    if t.ndim != 1 or v.ndim < 1 or v.shape[-1] != t.size:
        raise ValueError(f"values must end with an axis of length len(times) = {t.size}, got "
                         f"shape {v.shape}")
    hit = v >= level
    out = np.where(hit.any(axis=-1), t[np.argmax(hit, axis=-1)], np.nan)
    return out if out.ndim else float(out)


def median_pair_band(betas: ArrayLike, n: int, d: int, T: float, h: float, *, sigmas: float = 5.0,
                     model: str = "sa", threshold: float = 1 - 1e-3
                     ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Band for the half-clustering time of ``n`` uniform tokens in high dimension ``d``.

    The first layer at which half of the pairs have :math:`\langle x_i, x_j\rangle \ge`
    ``threshold`` is the clustering time of the median pair, which to first order is the
    equiangular time (:func:`transformer_pde.sphere.equiangular_layers`) from the median of
    the :math:`N = n(n-1)/2` initial inner products. Those have standard deviation
    :math:`d^{-1/2}`, and their median a standard error of about
    :math:`1.2533\,(Nd)^{-1/2}` (:math:`\sqrt{\pi/2}` times that of a mean). With
    :math:`c =` ``sigmas`` times that standard error, returns ``(early, late)``: the
    equiangular times from :math:`\rho_0 = c` minus one layer and from :math:`\rho_0 = -c`
    plus one layer, for each ``beta`` (``nan`` where the level is not reached by time ``T``).
    The first-order argument neglects the spread of the initial inner products, whose effect
    grows with :math:`\beta` (chapter 7 restricts the check to :math:`\beta \le 5` at
    :math:`n = 32`, :math:`d = 1024`). Derived in chapter 7.

    Parameters
    ----------
    betas : array (B,)
        Inverse temperatures, finite and non-negative.
    n : int
        Number of tokens, at least 2.
    d : int
        Dimension.
    T : float
        Final time, positive.
    h : float
        Step, positive.
    sigmas : float
        Width of the band in standard errors.
    model : {"sa", "usa"}
        Attention model.
    threshold : float
        Inner product at which a pair counts as clustered.

    Returns
    -------
    early, late : arrays (B,)

    Raises
    ------
    ValueError
        If ``betas`` is not valid, ``n < 2``, a size or step is not positive, ``model`` is
        unknown, or the band is wider than the inner products (``d`` too small).

    Examples
    --------
    >>> early, late = median_pair_band([1.0, 2.0], 32, 1024, 30.0, 0.1)
    >>> print(early.shape, bool(np.all(early < late)))
    (2,) True

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    b = _checks.real_array(betas, "betas")
    if b.ndim != 1 or b.size < 1 or not np.all(np.isfinite(b)) or np.any(b < 0):
        raise ValueError("betas must be a non-empty 1-D array of finite values >= 0")
    threshold = _checks.finite_float(threshold, "threshold")
    n = _checks.positive_int(n, "n")
    d = _checks.positive_int(d, "d")
    if n < 2:
        raise ValueError(f"n must be at least 2, got {n}")
    T = _checks.positive_float(T, "T")
    h = _checks.positive_float(h, "h")
    sigmas = _checks.positive_float(sigmas, "sigmas")
    _sphere.model(model)
    L = max(1, int(round(T / h)))
    times = h * np.arange(L + 1)
    c = sigmas * 1.2533 / np.sqrt(n * (n - 1) / 2 * d)
    if c >= 1.0:
        raise ValueError(f"the band {c:.3g} is wider than the inner products: raise d")

    def crossing(rho0):
        return np.array([first_crossing(equiangular_layers(rho0, n, beta, h, L, model),
                                        times, threshold) for beta in b])

    return crossing(c) - h, crossing(-c) + h
