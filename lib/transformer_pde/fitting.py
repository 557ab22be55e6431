r"""Power-law fits on log-log data: :math:`y \approx C x^{p}`.

Used by every chapter that checks a rate (the :math:`1/L` of the Euler scheme, the
:math:`n^{-1/2}` of Monte Carlo, the :math:`\sqrt n` growth of Lipschitz constants), and, with
replicated measurements (several sequences per length), the jackknife error of the exponent
over the replicates. :func:`log_error_rate` fits the exponent of the typical size of random
errors from every draw at once, with a standard error whose law is nearly Student's even when
the errors themselves are heavy-tailed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from . import _checks

__all__ = ["PowerLawFit", "fit_power_law", "JackknifeExponent", "jackknife_exponent",
           "JackknifeDifference", "jackknife_difference", "LogErrorRate", "log_error_rate",
           "BatchRates", "batch_rates"]


class PowerLawFit(NamedTuple):
    """Least-squares fit of :math:`\\log y = p \\log x + \\log C`."""

    exponent: float
    prefactor: float
    stderr: float  # standard error of the exponent (0 with two points)

    def __call__(self, x):
        return self.prefactor * np.asarray(x, dtype=np.float64) ** self.exponent


def fit_power_law(x: ArrayLike, y: ArrayLike) -> PowerLawFit:
    r"""Fit :math:`y = C x^p` by least squares on :math:`(\log x, \log y)`.

    Returns a :class:`PowerLawFit` ``(exponent, prefactor, stderr)``; ``x`` and ``y`` must be
    positive, finite, of the same length (at least 2) with at least two distinct ``x``.

    Parameters
    ----------
    x, y : arrays
        Positive, finite, of the same size (at least 2), flattened; ``x`` takes at least two
        distinct values.

    Returns
    -------
    PowerLawFit
        ``(exponent, prefactor, stderr)``; ``stderr`` is 0 with two points.

    Raises
    ------
    ValueError
        If ``x`` or ``y`` is not real, positive and finite, or the sizes differ.

    Examples
    --------
    >>> fit = fit_power_law([1.0, 2.0, 4.0], [3.0, 0.75, 0.1875])
    >>> print(f"{fit.exponent:.6f} {fit.prefactor:.6f}", bool(fit.stderr < 1e-12))
    -2.000000 3.000000 True

    References
    ----------
    :cite:`virtanen2020scipy`
    """
    x = _checks.real_array(x, "x").ravel()
    y = _checks.real_array(y, "y").ravel()
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"x and y must have the same length >= 2, got {x.size} and {y.size}")
    for name, arr in (("x", x), ("y", y)):
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError(f"{name} must be positive and finite for a log-log fit")
    lx, ly = np.log(x), np.log(y)
    if np.ptp(lx) == 0:
        raise ValueError("x must take at least two distinct values")
    slope, intercept = np.polyfit(lx, ly, 1)
    if x.size > 2:
        resid = ly - (slope * lx + intercept)
        stderr = float(np.sqrt(resid @ resid / (x.size - 2) / np.sum((lx - lx.mean()) ** 2)))
    else:
        stderr = 0.0
    return PowerLawFit(float(slope), float(np.exp(intercept)), stderr)


class JackknifeExponent(NamedTuple):
    """Pooled power-law exponent of replicated data and its jackknife standard error.

    ``leave_one_out[s]`` is the exponent fitted without replicate ``s``.
    """

    exponent: float
    stderr: float
    leave_one_out: np.ndarray


def jackknife_exponent(x: ArrayLike, Y: ArrayLike) -> JackknifeExponent:
    r"""Exponent of :math:`y \approx C x^p` fitted to replicates, with its jackknife error.

    ``Y`` has shape ``(S, m)``: row ``s`` holds replicate ``s`` (e.g. the ``s``-th text
    sequence of each length) measured at the ``m`` abscissae ``x``. The exponent
    :math:`\hat p` is the least-squares slope through all :math:`S m` points
    :math:`(\log x_a, \log Y_{sa})`; :math:`\hat p_{(s)}` is the same fit without row ``s``,
    and the jackknife standard error (Efron and Stein, 1981; Efron and Tibshirani, 1993,
    ch. 11) is

    .. math::

        \widehat{\mathrm{se}} = \Big(\frac{S-1}{S}\sum_{s=1}^S
            \big(\hat p_{(s)} - \bar p_{(\cdot)}\big)^2\Big)^{1/2},
        \qquad \bar p_{(\cdot)} = \frac1S \sum_s \hat p_{(s)} .

    It measures the spread due to the choice of replicates, treating rows as independent
    draws (as in the sampling protocol of Castin, Ablin and Peyré, 2024: different,
    non-overlapping sequences for every length); it does not see a bias of the power-law
    model itself (compare the exponents of different fit windows for that). Because the
    pooled slope is the mean of the per-row slopes, :math:`\widehat{\mathrm{se}}` equals
    their sample standard deviation divided by :math:`\sqrt S`.

    Parameters
    ----------
    x : array (m,)
        Positive abscissae, at least two distinct values.
    Y : array (S, m)
        Positive measurements, ``S >= 2`` replicates.

    Returns
    -------
    JackknifeExponent
        ``(exponent, stderr, leave_one_out)``.

    Raises
    ------
    ValueError
        If the shapes do not agree, ``S < 2``, or the data are not positive and finite.

    Examples
    --------
    Replicates on exact power laws :math:`x^{-1}` and :math:`x^{-2}`: pooled slope
    :math:`-1.5`, jackknife error :math:`0.5` (the per-row slopes' deviation over :math:`\sqrt S`):

    >>> import numpy as np
    >>> x = np.array([1.0, 2.0, 4.0])
    >>> r = jackknife_exponent(x, np.vstack([1 / x, 1 / x**2]))
    >>> print(f"{r.exponent:.6f} {r.stderr:.6f}", [f"{p:.6f}" for p in r.leave_one_out])
    -1.500000 0.500000 ['-2.000000', '-1.000000']
    """
    x = _checks.real_array(x, "x")
    Y = _checks.matrix(Y, "Y")
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"x must be a 1-D array of length >= 2, got shape {x.shape}")
    if Y.ndim != 2 or Y.shape[1] != x.size or Y.shape[0] < 2:
        raise ValueError(f"Y must have shape (S >= 2, {x.size}), got {Y.shape}")
    S = Y.shape[0]
    X = np.broadcast_to(x, Y.shape)
    full = fit_power_law(X, Y).exponent
    keep = ~np.eye(S, dtype=bool)
    loo = np.array([fit_power_law(X[keep[s]], Y[keep[s]]).exponent for s in range(S)])
    stderr = float(np.sqrt((S - 1) / S * np.sum((loo - loo.mean()) ** 2)))
    return JackknifeExponent(full, stderr, loo)


class JackknifeDifference(NamedTuple):
    """Difference of two exponents fitted to the same replicates, with its jackknife error."""

    difference: float
    stderr: float


def jackknife_difference(first: JackknifeExponent,
                         second: JackknifeExponent) -> JackknifeDifference:
    r"""Difference :math:`\hat p_2 - \hat p_1` of two jackknifed exponents, with its error.

    ``first`` and ``second`` are :class:`JackknifeExponent` results of
    :func:`jackknife_exponent` on the same ``S`` replicates (for example two fit windows, or
    two quantities measured on the same sequences). The exponents are correlated through the
    replicates, so the error of the difference is not the root sum of squares of the two
    errors; it is the jackknife error of the difference itself (Efron and Tibshirani, 1993,
    ch. 11),

    .. math::

        \widehat{\mathrm{se}} = \Big(\frac{S-1}{S}\sum_{s=1}^S
            \big(\delta_{(s)} - \bar\delta_{(\cdot)}\big)^2\Big)^{1/2},
        \qquad \delta_{(s)} = \hat p_{2,(s)} - \hat p_{1,(s)} .

    Parameters
    ----------
    first, second : JackknifeExponent
        Fits with leave-one-out exponents over the same replicates, in the same order.

    Returns
    -------
    JackknifeDifference
        ``(difference, stderr)``, the difference being ``second - first``.

    Raises
    ------
    ValueError
        If the fits do not hold leave-one-out exponents over the same number of replicates.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([1.0, 2.0, 4.0])
    >>> first = jackknife_exponent(x, np.vstack([1 / x, 1 / x**2]))
    >>> second = jackknife_exponent(x, np.vstack([1 / x**2, 1 / x**3]))
    >>> d = jackknife_difference(first, second)
    >>> print(f"{d.difference:.6f}", bool(d.stderr < 1e-12))  # the same spread: no error
    -1.000000 True
    """
    for name, fit in (("first", first), ("second", second)):
        loo = getattr(fit, "leave_one_out", None)
        if loo is None or np.ndim(loo) != 1 or np.size(loo) < 2:
            raise ValueError(f"{name} must be a JackknifeExponent with at least 2 replicates")
    loo1 = np.asarray(first.leave_one_out, dtype=np.float64)
    loo2 = np.asarray(second.leave_one_out, dtype=np.float64)
    if loo1.size != loo2.size:
        raise ValueError(f"second must have the replicates of first: {loo2.size} leave-one-out "
                         f"exponents against {loo1.size}")
    delta = loo2 - loo1
    S = delta.size
    stderr = float(np.sqrt((S - 1) / S * np.sum((delta - delta.mean()) ** 2)))
    return JackknifeDifference(float(second.exponent - first.exponent), stderr)


class LogErrorRate(NamedTuple):
    """Exponent of the typical size of random errors, its standard error and degrees of
    freedom (see :func:`log_error_rate`)."""

    exponent: float
    stderr: float
    dof: int

    def z(self, exponent):
        """Distance of the fitted exponent from ``exponent``, in standard errors."""
        return (self.exponent - float(exponent)) / self.stderr


def log_error_rate(sizes: ArrayLike, squared_errors: Sequence[ArrayLike]) -> LogErrorRate:
    r"""Exponent :math:`p` of random errors :math:`\varepsilon_n \approx C n^{p}` from the
    logarithms of every draw.

    ``squared_errors[k]`` holds the squared errors :math:`e_{k1}, \dots, e_{kR_k}` of
    independent draws at size :math:`n_k` (an array ``(K, R)`` or a list of arrays). The
    least-squares line through all the points :math:`(\log n_k, \tfrac12 \log e_{kr})` has
    slope :math:`\hat p`, with the usual standard error from its residuals,

    .. math::

        \widehat{\mathrm{se}}(\hat p) = \Big(\frac{\sum_{k,r} \hat u_{kr}^2 / (N - 2)}
        {\sum_{k,r} (\log n_k - \overline{\log n})^2}\Big)^{1/2}, \qquad
        N = \sum_k R_k .

    If :math:`n_k e_{kr}` has the same law at every size (the central limit theorem's
    :math:`\sqrt n` scaling of a Monte Carlo error), :math:`\hat p` estimates :math:`-1/2` and
    :math:`(\hat p + 1/2)/\widehat{\mathrm{se}}` follows nearly a Student law with
    :math:`N - 2` degrees of freedom: the logarithm turns a heavy-tailed squared error into a
    variable with exponential tails, and with sizes placed symmetrically in
    :math:`\log n` and equal :math:`R_k` the slope's skewness cancels at first order (its
    weights :math:`\log n_k - \overline{\log n}` sum to zero with their cubes). The exponent
    is that of the geometric mean of the errors, a typical draw, not of the root-mean-square
    error (:func:`transformer_pde.gaussian.rms_error_rate`); both agree when the law of
    :math:`n e` does not depend on :math:`n`. Used for the mean-field rate of the Transformer
    PDE (Castin, Ablin, Carrillo and Peyré, 2025).

    Returns a :class:`LogErrorRate` ``(exponent, stderr, dof)``.

    Parameters
    ----------
    sizes : array (K,)
        Positive sizes :math:`n_k`, at least two distinct.
    squared_errors : sequence of K arrays, or array (K, R)
        Positive, finite squared errors of the draws of each size (at least 3 draws in all).

    Returns
    -------
    LogErrorRate
        ``(exponent, stderr, dof)``.

    Raises
    ------
    ValueError
        If the sizes or the errors are not valid.

    Examples
    --------
    Squared errors exactly :math:`c_r / n`: slope :math:`-1/2`, its error from the spread of
    the draws:

    >>> r = log_error_rate([10, 100], [[0.1, 0.3], [0.01, 0.03]])
    >>> print(f"{r.exponent:.6f} {r.stderr:.6f}", r.dof)
    -0.500000 0.168688 2

    References
    ----------
    :cite:`castin2025unified`
    """
    n = _checks.real_array(sizes, "sizes")
    if not isinstance(squared_errors, (Sequence, np.ndarray)) or isinstance(squared_errors, str):
        raise ValueError(f"squared_errors must be a sequence of arrays, got {squared_errors!r}")
    if n.ndim != 1 or n.size < 2 or not np.all(np.isfinite(n)) or np.any(n <= 0):
        raise ValueError(f"sizes must be a 1-D array of at least 2 positive sizes, got {sizes!r}")
    if len(squared_errors) != n.size:
        raise ValueError(f"squared_errors must hold one array of draws per size ({n.size}), "
                         f"got {len(squared_errors)}")
    errs = [_checks.real_array(e, "squared_errors").ravel() for e in squared_errors]
    if any(e.size < 1 or not np.all(np.isfinite(e)) or np.any(e <= 0) for e in errs):
        raise ValueError("squared_errors must be positive and finite, at least one draw a size")
    x = np.concatenate([np.full(e.size, np.log(nk)) for nk, e in zip(n, errs, strict=True)])
    y = 0.5 * np.log(np.concatenate(errs))
    if np.ptp(x) == 0:
        raise ValueError("sizes must take at least two distinct values")
    if x.size < 3:
        raise ValueError("need at least 3 draws in all for a standard error")
    xc = x - x.mean()
    slope = float(xc @ (y - y.mean()) / (xc @ xc))
    resid = y - y.mean() - slope * xc
    dof = x.size - 2
    stderr = float(np.sqrt(resid @ resid / dof / (xc @ xc)))
    return LogErrorRate(slope, stderr, int(dof))


class BatchRates(NamedTuple):
    """Per-batch statistics of squared errors split into independent batches
    (see :func:`batch_rates`)."""

    exponent: np.ndarray  # (B,) exponent of the typical error (log_error_rate) of each batch
    scaled_mean: np.ndarray  # (B,) mean over the sizes of n_k times the batch mean of e
    log_mean: np.ndarray  # (B,) mean of log(n_k e_kr) over the batch's draws


def batch_rates(sizes: ArrayLike, squared_errors: Sequence[ArrayLike],
                batches: int) -> BatchRates:
    r"""Split the draws of every size into ``batches`` independent batches and compute, for
    each batch :math:`b`, three statistics of the squared errors :math:`e_{kr}` at sizes
    :math:`n_k`.

    Draw :math:`r` of size :math:`n_k` goes to batch :math:`r \bmod B`, so every batch holds
    :math:`R_k/B` draws of every size and the batches are independent when the draws are.
    For batch :math:`b` with draws :math:`D_{kb}`:

    .. math::

        \hat p_b = \text{slope of } \tfrac12\log e_{kr} \text{ on } \log n_k
        \ (r \in D_{kb}), \qquad
        m_b = \frac1K\sum_k \frac{n_k}{|D_{kb}|}\sum_{r\in D_{kb}} e_{kr}, \qquad
        \ell_b = \operatorname{mean}_{k,\, r \in D_{kb}} \log(n_k e_{kr}).

    Each is linear in the draws (or their logarithms) with the same weights in every batch,
    so the mean over the batches of :math:`\hat p_b`, :math:`m_b`, :math:`\ell_b` is the
    statistic of all the draws together (:func:`log_error_rate`'s exponent, the mean of
    :math:`n_k\bar e_k` over the sizes, the mean of :math:`\log(n e)`), and their spread over
    the batches estimates its standard error with :math:`B - 1` degrees of freedom, whatever
    the law of the draws (:func:`transformer_pde.replicates.batch_t`). Used for the
    :math:`n^{-1/2}` rate of the mean-field limit (Castin, Ablin, Carrillo and Peyré, 2025)
    and of one attention layer (Bohbot et al., 2026).

    Parameters
    ----------
    sizes : array (K,)
        At least two distinct positive sizes.
    squared_errors : sequence of K arrays
        Positive, finite squared errors; the number of draws of every size a multiple of
        ``batches``.
    batches : int
        Number of batches :math:`B`, at least 2.

    Returns
    -------
    BatchRates
        ``(exponent, scaled_mean, log_mean)``, arrays of shape ``(B,)``.

    Raises
    ------
    ValueError
        If the sizes or errors are not valid, ``batches < 2``, or a number of draws is not a
        multiple of ``batches``.

    Examples
    --------
    Errors exactly :math:`c/n`: every batch has exponent :math:`-1/2` and scaled mean
    :math:`c`:

    >>> b = batch_rates([10, 100], [[0.2, 0.2, 0.2, 0.2], [0.02, 0.02]], 2)
    >>> print(np.round(b.exponent, 12), np.round(b.scaled_mean, 12))
    [-0.5 -0.5] [2. 2.]

    References
    ----------
    :cite:`castin2025unified,bohbot2026token`
    """
    n = _checks.real_array(sizes, "sizes")
    B = _checks.positive_int(batches, "batches")
    if B < 2:
        raise ValueError(f"batches must be at least 2, got {batches!r}")
    if n.ndim != 1 or n.size < 2 or not np.all(np.isfinite(n)) or np.any(n <= 0):
        raise ValueError(f"sizes must be a 1-D array of at least 2 positive sizes, got {sizes!r}")
    if (not isinstance(squared_errors, (Sequence, np.ndarray))
            or len(squared_errors) != n.size):
        raise ValueError(f"squared_errors must hold one array of draws per size ({n.size})")
    errs = [_checks.real_array(e, "squared_errors").ravel() for e in squared_errors]
    if any(e.size % B or e.size == 0 or not np.all(np.isfinite(e)) or np.any(e <= 0)
           for e in errs):
        raise ValueError("squared_errors must be positive and finite, with a number of draws "
                         f"per size that is a positive multiple of batches = {B}")
    out = np.empty((3, B))
    for b in range(B):
        part = [e[b::B] for e in errs]
        out[0, b] = log_error_rate(n, part).exponent
        out[1, b] = np.mean([nk * p.mean() for nk, p in zip(n, part, strict=True)])
        out[2, b] = np.mean(np.log(np.concatenate(
            [nk * p for nk, p in zip(n, part, strict=True)])))
    return BatchRates(*out)
