r"""Gaussian moment equations against particles: moment rates, z-tests, error exponents.

The exact moment rates of a particle system (:func:`particle_moment_rates`), independent
particle estimates of them at several sample sizes (:func:`particle_moment_samples`), a
:math:`z`-test of their mean over replicates (:func:`replicate_z_scores`) and the decay
exponent of a Monte Carlo error with a replicate-based standard error
(:func:`rms_error_rate`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _checks
from ..fitting import PowerLawFit


def particle_moment_rates(X: ArrayLike, velocities: ArrayLike, *, weights: ArrayLike | None = None
                          ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Empirical rates of the mean and covariance of particles ``X`` moving with ``velocities``.

    .. math::

        \dot{\hat\alpha} = \sum_i w_i v_i, \qquad
        \dot{\hat\Sigma} = \sum_i w_i\big((x_i - \hat\alpha)v_i^\top
                                          + v_i(x_i - \hat\alpha)^\top\big),
        \qquad \hat\alpha = \sum_i w_i x_i,

    the exact time derivatives of the mean and covariance of the weighted empirical measure
    :math:`\sum_i w_i\delta_{x_i}` (default :math:`w_i = 1/n`) moved by
    :math:`\dot x_i = v_i`. Used to check the moment ODEs of Castin et al. (2025) against
    particles (uniform weights) or against a quadrature rule (weights of the rule).
    Returns ``(dalpha, dSigma)``.

    Parameters
    ----------
    X : array (n, d)
        Particle positions.
    velocities : array (n, d)
        Their velocities.
    weights : array (n,), optional
        Non-negative weights summing to one (default uniform).

    Returns
    -------
    dalpha : array (d,)
    dSigma : array (d, d)

    Raises
    ------
    ValueError
        If ``X`` or ``velocities`` is not a finite ``(n, d)`` array, their shapes differ, or
        ``weights`` is not a probability vector of length ``n``.

    Examples
    --------
    Under :math:`\dot x = x` the covariance grows at twice its value:

    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [-1.0, 0.0]])
    >>> da, dS = particle_moment_rates(X, X)
    >>> print(da.tolist(), dS.tolist())
    [0.0, 0.0] [[2.0, 0.0], [0.0, 0.0]]

    References
    ----------
    :cite:`castin2025unified`
    """
    X = _checks.points(X, "X")
    v = _checks.points(velocities, "velocities")
    if v.shape != X.shape:
        raise ValueError(f"velocities must have the shape of X {X.shape}, got {v.shape}")
    w = _checks.weights(weights, X.shape[0])
    Xc = X - w @ X
    C = (Xc * w[:, None]).T @ v
    return w @ v, C + C.T


def replicate_z_scores(samples: ArrayLike, target: ArrayLike) -> NDArray[np.float64]:
    r"""Distance of the mean of independent replicates from a target, in standard errors.

    .. math::

        z_j = \frac{|\bar s_j - t_j|}{\hat\sigma_j / \sqrt R}, \qquad
        \bar s_j = \frac1R\sum_r s_{rj}, \quad
        \hat\sigma_j^2 = \frac1{R-1}\sum_r (s_{rj} - \bar s_j)^2,

    for ``samples`` of shape ``(R, m)`` (``R >= 2`` independent estimates of an ``m``-vector)
    and ``target`` of shape ``(m,)``. If the estimates are unbiased and roughly Gaussian,
    each :math:`z_j` follows a Student :math:`t` law with :math:`R - 1` degrees of freedom.
    Returns the array ``z`` of shape ``(m,)``.

    Parameters
    ----------
    samples : array (R, m)
        ``R >= 2`` independent estimates, one per row.
    target : array (m,)
        The value they estimate.

    Returns
    -------
    array (m,)
        The scores :math:`z_j`.

    Raises
    ------
    ValueError
        If there are fewer than two replicates, ``target`` has the wrong shape or is not finite,
        or a column does not vary across replicates.

    Examples
    --------
    >>> print(replicate_z_scores([[1.0], [3.0]], [0.0]).tolist())
    [2.0]

    References
    ----------
    :cite:`castin2025unified`
    """
    s = _checks.points(samples, "samples")
    if s.shape[0] < 2:
        raise ValueError(f"samples needs at least 2 replicates (rows), got {s.shape[0]}")
    t = _checks.real_array(target, "target")
    if t.shape != (s.shape[1],) or not np.all(np.isfinite(t)):
        raise ValueError(f"target must be a finite array of shape ({s.shape[1]},), got {t.shape}")
    se = s.std(axis=0, ddof=1) / np.sqrt(s.shape[0])
    if np.any(se <= 0):
        raise ValueError("samples must vary across replicates in every column")
    return np.abs(s.mean(axis=0) - t) / se


def rms_error_rate(ns: ArrayLike, squared_errors: ArrayLike) -> PowerLawFit:
    r"""Exponent of a root-mean-square error :math:`\varepsilon(n) \approx C n^{p}` from replicates.

    ``squared_errors[k, r]`` is the squared error of replicate :math:`r` at sample size
    :math:`n_k`. The exponent is the least-squares slope of
    :math:`\log\varepsilon_k = \tfrac12\log\big(\frac1R\sum_r e_{kr}\big)` against
    :math:`\log n_k`. Its standard error comes from the spread of the replicates, not from
    the residuals of the fit (with a handful of points those are themselves very noisy): by the
    delta method :math:`\operatorname{sd}(\log\varepsilon_k) \approx \kappa/(2\sqrt R)`, with
    the coefficient of variation of one squared error pooled over the sample sizes,

    .. math::

        \kappa^2 = \frac1{K}\sum_k \frac{\widehat{\operatorname{Var}}_r(e_{kr})}
        {\big(\frac1R\sum_r e_{kr}\big)^2}, \qquad
        \operatorname{se}(p) = \frac{\kappa}{2\sqrt R\,
        \big(\sum_k (\log n_k - \overline{\log n})^2\big)^{1/2}}.

    Pooling is exact when :math:`e_{kr} = n_k^{2p} Z_{kr}` with :math:`Z` identically
    distributed (a pure power law). The estimate is slightly optimistic for skewed errors (for
    :math:`\chi^2_3`-distributed squared errors and :math:`R = 8`, :math:`\pm 2` standard
    errors cover about 93% instead of 95%), so test agreement at :math:`\pm 3` standard errors.
    Returns a :class:`transformer_pde.fitting.PowerLawFit` ``(exponent, prefactor, stderr)``
    for :math:`\varepsilon(n)`.

    Parameters
    ----------
    ns : array (K,)
        Positive sample sizes, at least two distinct.
    squared_errors : array (K, R)
        Squared errors, ``R >= 2`` replicates per sample size.

    Returns
    -------
    PowerLawFit
        ``(exponent, prefactor, stderr)`` of :math:`\varepsilon(n) \approx C n^p`.

    Raises
    ------
    ValueError
        If ``ns`` is not a 1-D array of at least two distinct positive sizes, the shape of
        ``squared_errors`` does not match, an error is negative or not finite, or all replicates
        of a sample size vanish.

    Examples
    --------
    Squared errors proportional to :math:`1/n` give the exponent :math:`-1/2`; here
    :math:`\kappa^2 = 1/2`, so :math:`\operatorname{se} = \sqrt{1/2}/(2\sqrt 2\cdot\sqrt 2\ln 10)`:

    >>> import numpy as np
    >>> fit = rms_error_rate([10, 100, 1000], [[1.0, 3.0], [0.1, 0.3], [0.01, 0.03]])
    >>> print(f"{fit.exponent:.6f} {fit.prefactor:.6f} {fit.stderr:.6f}")
    -0.500000 4.472136 0.076773

    References
    ----------
    :cite:`castin2025unified`
    """
    n = _checks.real_array(ns, "ns")
    e = _checks.real_array(squared_errors, "squared_errors")
    if n.ndim != 1 or n.size < 2 or not np.all(np.isfinite(n)) or np.any(n <= 0):
        raise ValueError(f"ns must be a 1-D array of at least 2 positive sizes, got {n!r}")
    if np.ptp(np.log(n)) == 0:
        raise ValueError("ns must take at least two distinct values")
    if e.ndim != 2 or e.shape[0] != n.size or e.shape[1] < 2:
        raise ValueError(f"squared_errors must have shape ({n.size}, R) with R >= 2, "
                         f"got {e.shape}")
    if not np.all(np.isfinite(e)) or np.any(e < 0):
        raise ValueError("squared_errors must be finite and non-negative")
    mse = e.mean(axis=1)
    if np.any(mse <= 0):
        raise ValueError("squared_errors must not vanish at every replicate of a sample size")
    lx = np.log(n)
    ly = 0.5 * np.log(mse)
    slope, intercept = np.polyfit(lx, ly, 1)
    kappa2 = np.mean(e.var(axis=1, ddof=1) / mse**2)
    R = e.shape[1]
    stderr = np.sqrt(kappa2) / (2.0 * np.sqrt(R) * np.sqrt(np.sum((lx - lx.mean()) ** 2)))
    return PowerLawFit(float(slope), float(np.exp(intercept)), float(stderr))




def moment_vector(dalpha: ArrayLike, dSigma: ArrayLike) -> NDArray[np.float64]:
    r"""Stack :math:`(\dot\alpha, \dot\Sigma)` into one vector: :math:`\dot\alpha` then the
    upper triangle of :math:`\dot\Sigma` (row by row), of length :math:`d + d(d+1)/2`.

    The independent entries of a moment rate, compared component by component with a
    :math:`z`-test (:func:`replicate_z_scores`) in the chapter on Castin et al. (2025).

    Parameters
    ----------
    dalpha : array (d,)
        Rate of the mean.
    dSigma : array (d, d)
        Rate of the covariance.

    Returns
    -------
    array (d + d(d+1)/2,)

    Raises
    ------
    ValueError
        If ``dalpha`` is not 1-D or ``dSigma`` is not ``(d, d)``.

    Examples
    --------
    >>> print(moment_vector([1.0, 2.0], [[3.0, 4.0], [4.0, 5.0]]).tolist())
    [1.0, 2.0, 3.0, 4.0, 5.0]

    References
    ----------
    :cite:`castin2025unified`
    """
    a = _checks.real_array(dalpha, "dalpha")
    if a.ndim != 1 or a.size < 1 or not np.all(np.isfinite(a)):
        raise ValueError(f"dalpha must be a 1-D array of shape (d,), got shape {a.shape}")
    S = _checks.matrix(dSigma, "dSigma", shape=(a.size, a.size))
    return np.concatenate([a, S[np.triu_indices(a.size)]])


def particle_moment_samples(velocity: Callable[..., Any], alpha: ArrayLike, Sigma: ArrayLike,
                            ns: ArrayLike, reps: int,
                            rng: np.random.Generator) -> NDArray[np.float64]:
    r"""Independent particle estimates of the moment rates at several sample sizes.

    For each :math:`n` in ``ns`` and each of ``reps`` replicates, draw
    :math:`x_1, \dots, x_n \sim \mathcal N(\alpha, \Sigma)`, evaluate ``velocity(X)`` (the
    attention of the empirical measure at its atoms, ``(n, d)``) and store
    :func:`moment_vector` of :func:`particle_moment_rates`. Returns an array of shape
    ``(len(ns), reps, d + d(d+1)/2)``, the input of :func:`replicate_z_scores` (one row of
    sample sizes) and of :func:`rms_error_rate` (through :func:`relative_squared_errors`).
    Castin et al. (2025): the particle rates converge to the moment ODEs as :math:`n\to\infty`.

    Parameters
    ----------
    velocity : callable
        ``velocity(X) -> (n, d)``, the velocities of the particles ``X``.
    alpha : array (d,)
        Mean of the Gaussian.
    Sigma : array (d, d)
        Covariance of the Gaussian.
    ns : array of int
        Sample sizes.
    reps : int
        Replicates per sample size.
    rng : numpy.random.Generator
        Source of the draws.

    Returns
    -------
    array (len(ns), reps, d + d(d+1)/2)

    Raises
    ------
    ValueError
        If ``velocity`` is not callable, the moments are not valid, a size is not a positive
        integer or ``rng`` is not a Generator.

    Examples
    --------
    Under :math:`\dot x = 0` every rate vanishes:

    >>> import numpy as np
    >>> out = particle_moment_samples(np.zeros_like, [0.0, 0.0], np.eye(2), [5, 10], 3,
    ...                               np.random.default_rng(0))
    >>> print(out.shape, bool(np.all(out == 0)))
    (2, 3, 5) True

    References
    ----------
    :cite:`castin2025unified`
    """
    if not callable(velocity):
        raise ValueError("velocity must be callable as velocity(X) -> (n, d) velocities")
    alpha, Sigma = _checks.moments(alpha, Sigma)
    ns = [_checks.positive_int(n, "ns") for n in np.atleast_1d(ns)]
    reps = _checks.positive_int(reps, "reps")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")
    d = alpha.size
    out = np.empty((len(ns), reps, d + d * (d + 1) // 2))
    for i, n in enumerate(ns):
        for r in range(reps):
            X = rng.multivariate_normal(alpha, Sigma, size=n)
            out[i, r] = moment_vector(*particle_moment_rates(X, velocity(X)))
    return out


def relative_squared_errors(samples: ArrayLike, target: ArrayLike) -> NDArray[np.float64]:
    r"""Squared relative errors :math:`|s - t|^2 / |t|^2` of estimates ``samples`` ``(..., m)``.

    Returns an array of shape ``samples.shape[:-1]``; with ``samples`` from
    :func:`particle_moment_samples` it is the ``squared_errors`` input of
    :func:`rms_error_rate`.

    Parameters
    ----------
    samples : array (..., m)
        Estimates.
    target : array (m,)
        Finite, non-zero target.

    Returns
    -------
    array
        Of shape ``samples.shape[:-1]``.

    Raises
    ------
    ValueError
        If the shapes do not match or ``target`` is zero or not finite.

    Examples
    --------
    >>> print(relative_squared_errors([[3.0, 4.0], [0.0, 0.0]], [0.0, 5.0]).tolist())
    [0.4, 1.0]

    References
    ----------
    :cite:`castin2025unified`
    """
    s = _checks.real_array(samples, "samples")
    t = _checks.real_array(target, "target")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(t))):
        raise ValueError("samples and target must be finite (no NaN or inf)")
    if t.ndim != 1 or s.ndim < 1 or s.shape[-1] != t.size:
        raise ValueError(f"target must have shape (m,) with m = samples.shape[-1], "
                         f"got {t.shape} and {s.shape}")
    scale = float(t @ t)
    if not np.isfinite(scale) or scale == 0:
        raise ValueError("target must be finite and non-zero")
    return ((s - t) ** 2).sum(axis=-1) / scale


