r"""Tests of Monte Carlo estimates against a target, from independent replicates.

An estimator :math:`Y_n` of a vector :math:`\theta` computed from :math:`n` samples is drawn
``R`` times independently at each of several sample sizes :math:`n_1, \dots, n_K`. If it is
unbiased with covariance proportional to :math:`1/n` (the Monte Carlo rate), the sample sizes
can be pooled: each component of the weighted mean

.. math::

    \hat\theta = \frac{\sum_{k,r} n_k Y_{kr}}{R \sum_k n_k}

has standard error :math:`\sigma / \sqrt{R \sum_k n_k}`, and :math:`\sigma^2` is estimated from
all :math:`N = KR` replicates with :math:`N - 1` degrees of freedom. This is weighted least
squares with one parameter and weights :math:`n_k`; for Gaussian errors the distance of
:math:`\hat\theta` to :math:`\theta`, in standard errors, follows a Student law with
:math:`N - 1` degrees of freedom. Pooling gives the test many more degrees of freedom than a
test at the largest sample size alone, hence light tails and a threshold that holds a small
false-alarm probability over many components (:func:`bonferroni_threshold`).

Used by the chapter on Gaussian initial data to check moment ODEs against particles
(Castin et al., 2025).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from . import _checks

__all__ = ["PooledZ", "pooled_z_scores", "bonferroni_threshold", "BatchT", "batch_t"]


class PooledZ(NamedTuple):
    r"""Pooled estimate, its standard errors, the distances to the target and their degrees
    of freedom.

    Attributes
    ----------
    estimate : array (m,)
        The :math:`n`-weighted mean :math:`\hat\theta`.
    stderr : array (m,)
        Its standard errors.
    z : array (m,)
        The distances to the target, in standard errors.
    dof : int
        Degrees of freedom, :math:`N - 1`.

    Examples
    --------
    >>> print(pooled_z_scores([1, 1], [[[1.0], [3.0]], [[1.0], [3.0]]], [0.0]).dof)
    3
    """

    estimate: np.ndarray
    stderr: np.ndarray
    z: np.ndarray
    dof: int


def pooled_z_scores(ns: ArrayLike, samples: ArrayLike, target: ArrayLike) -> PooledZ:
    r"""Distance of the :math:`n`-weighted mean of replicates from a target, in standard errors.

    .. math::

        \hat\theta_j = \frac{\sum_{k,r} n_k\, s_{krj}}{R\sum_k n_k}, \qquad
        \hat\sigma_j^2 = \frac{\sum_{k,r} n_k (s_{krj} - \hat\theta_j)^2}{N - 1}, \qquad
        z_j = \frac{|\hat\theta_j - t_j|}{\hat\sigma_j / \sqrt{R\sum_k n_k}},

    for ``samples`` of shape ``(K, R, m)`` (``R`` independent estimates of an ``m``-vector at
    each of the ``K`` sample sizes ``ns``), ``target`` of shape ``(m,)`` and :math:`N = KR`.
    If the estimates are unbiased with variance :math:`\sigma_j^2 / n_k`, :math:`\hat\sigma_j^2`
    is unbiased and, for Gaussian errors, :math:`z_j` is the absolute value of a Student
    :math:`t` variable with :math:`N - 1` degrees of freedom (weighted least squares with
    weights :math:`n_k`). A bias :math:`b_k = O(1/n_k)` of the estimator shifts
    :math:`\hat\theta_j` by :math:`K\,O(1)/\sum_k n_k`, small against the standard error when
    the sizes are large. Used to test the moment ODEs of Castin et al. (2025) against particles.

    Returns a :class:`PooledZ` ``(estimate, stderr, z, dof)`` with ``dof = N - 1``.

    Parameters
    ----------
    ns : array (K,)
        Positive sample sizes.
    samples : array (K, R, m)
        The replicates, at least two in all.
    target : array (m,)
        The value they estimate.

    Returns
    -------
    PooledZ

    Raises
    ------
    ValueError
        If ``ns`` is not a 1-D array of positive sizes, ``samples`` is not a finite
        ``(K, R, m)`` array with at least two replicates, ``target`` has the wrong shape or is
        not finite, or a component does not vary.

    Examples
    --------
    Four replicates 1, 3, 1, 3 at equal sizes: :math:`\hat\theta = 2`,
    :math:`\hat\sigma^2 = 4/3`, standard error :math:`1/\sqrt 3`:

    >>> r = pooled_z_scores([1, 1], [[[1.0], [3.0]], [[1.0], [3.0]]], [0.0])
    >>> print(f"{r.estimate[0]:.6f} {r.stderr[0]:.6f} {r.z[0]:.6f}", r.dof)
    2.000000 0.577350 3.464102 3

    References
    ----------
    :cite:`castin2025unified`
    """
    n = _checks.real_array(ns, "ns")
    if n.ndim != 1 or n.size < 1 or not np.all(np.isfinite(n)) or np.any(n <= 0):
        raise ValueError(f"ns must be a 1-D array of positive sample sizes, got {ns!r}")
    s = _checks.real_array(samples, "samples")
    if s.ndim != 3 or s.shape[0] != n.size:
        raise ValueError(f"samples must have shape (len(ns), R, m) = ({n.size}, R, m), "
                         f"got {s.shape}")
    if s.shape[0] * s.shape[1] < 2:
        raise ValueError("samples needs at least 2 replicates in all")
    if not np.all(np.isfinite(s)):
        raise ValueError("samples must be finite")
    t = _checks.real_array(target, "target")
    if t.shape != (s.shape[2],) or not np.all(np.isfinite(t)):
        raise ValueError(f"target must be a finite array of shape ({s.shape[2]},), got {t.shape}")
    K, R, _ = s.shape
    w = n[:, None, None]
    total = R * n.sum()
    estimate = (w * s).sum(axis=(0, 1)) / total
    dof = K * R - 1
    sigma2 = (w * (s - estimate) ** 2).sum(axis=(0, 1)) / dof
    if np.any(sigma2 <= 0):
        raise ValueError("samples must vary across replicates in every component")
    stderr = np.sqrt(sigma2 / total)
    return PooledZ(estimate, stderr, np.abs(estimate - t) / stderr, int(dof))


def bonferroni_threshold(n_tests: int, dof: int, alpha: float = 1e-3) -> float:
    r"""The distance in standard errors that ``n_tests`` Student tests exceed with total
    probability at most ``alpha``.

    .. math::

        z^* = t_{\nu}^{-1}\Big(1 - \frac{\alpha}{2\,\text{n\_tests}}\Big), \qquad \nu = \text{dof},

    so that :math:`P(\max_j |T_j| > z^*) \le \alpha` for any ``n_tests`` Student variables
    :math:`T_j` with ``dof`` degrees of freedom, dependent or not (Bonferroni's union bound).
    With :func:`pooled_z_scores` it gives a check of Monte Carlo estimates that a correct
    target fails with probability at most ``alpha``.

    Parameters
    ----------
    n_tests : int
        Number of tests, positive.
    dof : int
        Degrees of freedom, positive.
    alpha : float
        Total false-alarm probability, in :math:`(0, 1)`.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``n_tests`` or ``dof`` is not a positive integer or ``alpha`` is not in
        :math:`(0, 1)`.

    Examples
    --------
    One test with many degrees of freedom: the Gaussian two-sided quantile:

    >>> print(f"{bonferroni_threshold(1, 10**6, 0.05):.3f}")
    1.960

    References
    ----------
    :cite:`castin2025unified`
    """
    n_tests = _checks.positive_int(n_tests, "n_tests")
    dof = _checks.positive_int(dof, "dof")
    alpha = _checks.positive_float(alpha, "alpha")
    if alpha >= 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return float(stats.t.isf(alpha / (2 * n_tests), dof))


class BatchT(NamedTuple):
    """Mean of independent batch values, its standard error, the Student statistic and its
    degrees of freedom (see :func:`batch_t`)."""

    estimate: float
    stderr: float
    t: float
    dof: int


def batch_t(values: ArrayLike, target: float = 0.0) -> BatchT:
    r"""Student statistic of the mean of :math:`B` independent batch values.

    .. math::

        \bar v = \frac1B\sum_b v_b, \qquad
        \widehat{\mathrm{se}} = \frac{s}{\sqrt B}, \qquad
        T = \frac{\bar v - \text{target}}{\widehat{\mathrm{se}}},

    :math:`s` the sample standard deviation of the :math:`v_b`. If the :math:`v_b` are
    independent and Gaussian with mean ``target``, :math:`T` follows exactly Student's law
    with :math:`B - 1` degrees of freedom; when each :math:`v_b` is itself an average over
    many independent draws, the law is nearly Student's by the central limit theorem. The
    standard error comes from the batches, each carrying all the randomness of its draws, so
    no model of the draws' dependence or spread is needed. Used for the rates of the
    mean-field limit of Castin, Ablin, Carrillo and Peyré (2025).

    Parameters
    ----------
    values : array (B,)
        Finite batch values, ``B >= 2``, not all equal.
    target : float
        The mean under the claim.

    Returns
    -------
    BatchT
        ``(estimate, stderr, t, dof)``.

    Raises
    ------
    ValueError
        If ``values`` is not a finite 1-D array of at least two values with a positive
        spread, or ``target`` is not finite.

    Examples
    --------
    >>> r = batch_t([1.0, 2.0, 3.0], 0.0)
    >>> print(f"{r.estimate:.1f} {r.stderr:.4f} {r.t:.4f} {r.dof}")
    2.0 0.5774 3.4641 2

    References
    ----------
    :cite:`castin2025unified`
    """
    v = _checks.real_array(values, "values")
    if v.ndim != 1 or v.size < 2 or not np.all(np.isfinite(v)):
        raise ValueError(f"values must be a finite 1-D array of at least 2 values, got {values!r}")
    target = _checks.finite_float(target, "target")
    se = float(v.std(ddof=1) / np.sqrt(v.size))
    if not se > 0:
        raise ValueError("values must not all be equal (no spread, no standard error)")
    mean = float(v.mean())
    return BatchT(mean, se, (mean - target) / se, int(v.size - 1))
