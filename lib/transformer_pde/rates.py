r"""Rates read off experiments: fitted exponents with replicate errors, exponential decay rates.

Three small estimators used by the chapters that check a rate rather than a value:

- :func:`jackknife_exponent`: the exponent :math:`p` of :math:`y(n) \approx C n^{p}` fitted to
  the mean of independent replicates, with its delete-one jackknife standard error over the
  replicates (Efron and Stein, 1981), the honest error bar of a slope estimated from a few
  random samples per :math:`n`;
- :func:`decay_rate`: the rate :math:`r` of :math:`\delta(t) \approx c\, e^{-r t}`, fitted on the
  window where :math:`\delta` goes from ``high`` down to ``low`` (above integration noise);
- :func:`first_time_below`: the first sampled time at which a quantity is below a threshold.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from . import _checks
from .fitting import fit_power_law

__all__ = ["JackknifeFit", "jackknife_exponent", "decay_rate", "first_time_below"]


class JackknifeFit(NamedTuple):
    """Fitted exponent and its delete-one jackknife standard error."""

    exponent: float
    stderr: float


def _times_values(times, values, name):
    t = _checks.real_array(times, "times")
    v = _checks.real_array(values, name)
    if t.ndim != 1 or v.shape != t.shape:
        raise ValueError(f"times and {name} must be 1-D arrays of the same length, got shapes "
                         f"{t.shape} and {v.shape}")
    if not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0):
        raise ValueError("times must be finite and strictly increasing")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return t, v


def jackknife_exponent(x: ArrayLike, replicates: ArrayLike, *,
                       transform: Callable[..., Any] | None = None) -> JackknifeFit:
    r"""Exponent of :math:`y \approx C x^p`, :math:`y` the replicate mean, with jackknife error.

    With :math:`m` independent replicates :math:`y_{k,1}, \dots, y_{k,m}` at each abscissa
    :math:`x_k`, the estimate is the least-squares slope :math:`\hat p` of
    :math:`\log g(\bar y_k)` against :math:`\log x_k`, :math:`\bar y_k = \frac1m \sum_j y_{k,j}`,
    and its delete-one jackknife standard error (Efron and Stein, 1981) is

    .. math::

        \widehat{\mathrm{se}} = \Big(\frac{m-1}{m}\sum_{j=1}^m
            \big(\hat p_{(j)} - \bar p\big)^2\Big)^{1/2},

    :math:`\hat p_{(j)}` the slope computed without replicate :math:`j` and :math:`\bar p` their
    mean. ``transform`` is :math:`g` (identity by default); use ``np.sqrt`` when the replicates
    are squared errors, so that the fitted quantity is a root-mean-square error.

    Parameters
    ----------
    x : array (K,)
        Positive abscissae, at least two distinct.
    replicates : array (K, m)
        Positive replicate values, ``m >= 2`` independent replicates per abscissa.
    transform : callable, optional
        Applied to the replicate means before the fit.

    Returns
    -------
    JackknifeFit
        ``(exponent, stderr)``.

    Raises
    ------
    ValueError
        If ``replicates`` is not a finite ``(len(x), m)`` array with ``m >= 2``, or the values
        are not positive.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([1.0, 2.0, 4.0])
    >>> fit = jackknife_exponent(x, np.stack([1 / x, 1 / x], axis=1))
    >>> print(f"{fit.exponent:.6f}", bool(fit.stderr < 1e-12))
    -1.000000 True
    """
    x = _checks.real_array(x, "x")
    Y = _checks.matrix(replicates, "replicates")
    if x.ndim != 1 or Y.ndim != 2 or Y.shape[0] != x.size:
        raise ValueError(f"replicates must have shape (len(x), m), got {Y.shape} for "
                         f"len(x) = {x.size}")
    m = Y.shape[1]
    if m < 2:
        raise ValueError(f"replicates needs at least 2 replicates per abscissa, got {m}")
    g = (lambda a: a) if transform is None else transform
    full = fit_power_law(x, g(Y.mean(axis=1))).exponent
    loo = np.array([fit_power_law(x, g(np.delete(Y, j, axis=1).mean(axis=1))).exponent
                    for j in range(m)])
    return JackknifeFit(float(full), float(np.sqrt((m - 1) / m * np.sum((loo - loo.mean()) ** 2))))


def decay_rate(times: ArrayLike, distances: ArrayLike, *, high: float = 1e-4,
               low: float = 1e-8) -> float:
    r"""Rate :math:`r` of an exponential decay :math:`\delta(t) \approx c\,e^{-rt}`.

    Least-squares slope of :math:`-\log\delta(t)` against :math:`t` over the samples from the
    first time :math:`\delta < \text{high}` up to (excluded) the first time
    :math:`\delta < \text{low}`; ``low`` keeps out the samples where integration errors
    dominate. Returns ``nan`` when fewer than two samples fall in the window (the decay was not
    observed).

    Parameters
    ----------
    times : array (m,)
        Finite, strictly increasing times.
    distances : array (m,)
        Finite samples of :math:`\delta(t)`.
    high, low : float
        The window :math:`\text{low} \le \delta < \text{high}`, ``0 < low < high``.

    Returns
    -------
    float
        The rate :math:`r`, or ``nan`` when fewer than two samples fall in the window.

    Raises
    ------
    ValueError
        If the arrays are not finite 1-D arrays of the same length with increasing times, or
        ``low``, ``high`` are not positive with ``low < high``.

    Examples
    --------
    >>> import numpy as np
    >>> t = np.linspace(0.0, 10.0, 11)
    >>> print(f"{decay_rate(t, np.exp(-2.0 * t)):.6f}")
    2.000000
    """
    t, v = _times_values(times, distances, "distances")
    high, low = _checks.positive_float(high, "high"), _checks.positive_float(low, "low")
    if not (0 < low < high):
        raise ValueError(f"need 0 < low < high, got low = {low}, high = {high}")
    start = np.flatnonzero(v < high)
    if start.size == 0:
        return float("nan")
    stop = np.flatnonzero(v < low)
    window = slice(start[0], stop[0] if stop.size else t.size)
    tw, vw = t[window], v[window]
    if tw.size < 2 or np.any(vw <= 0):
        return float("nan")
    return float(-np.polyfit(tw, np.log(vw), 1)[0])


def first_time_below(times: ArrayLike, values: ArrayLike, threshold: float) -> float:
    """First sampled time with ``values < threshold`` (``inf`` if never).

    Parameters
    ----------
    times : array (m,)
        Finite, strictly increasing times.
    values : array (m,)
        Finite samples.
    threshold : float
        Finite threshold.

    Returns
    -------
    float
        The first ``times[k]`` with ``values[k] < threshold``, ``inf`` if there is none.

    Raises
    ------
    ValueError
        If the arrays are not valid or ``threshold`` is not finite.

    Examples
    --------
    >>> first_time_below([0.0, 1.0, 2.0], [1.0, 0.5, 0.1], 0.3)
    2.0
    """
    t, v = _times_values(times, values, "values")
    threshold = _checks.finite_float(threshold, "threshold")
    below = np.flatnonzero(v < threshold)
    return float(t[below[0]]) if below.size else float("inf")
