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
    """
    s = _checks.points(samples, "samples")
    if s.shape[0] < 2:
        raise ValueError(f"samples needs at least 2 replicates (rows), got {s.shape[0]}")
    t = np.asarray(target, dtype=np.float64)
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
    """
    n = np.asarray(ns, dtype=np.float64)
    e = np.asarray(squared_errors, dtype=np.float64)
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
    """
    a = np.asarray(dalpha, dtype=np.float64)
    if a.ndim != 1:
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
    """
    s = np.asarray(samples, dtype=np.float64)
    t = np.asarray(target, dtype=np.float64)
    if t.ndim != 1 or s.ndim < 1 or s.shape[-1] != t.size:
        raise ValueError(f"target must have shape (m,) with m = samples.shape[-1], "
                         f"got {t.shape} and {s.shape}")
    scale = float(t @ t)
    if not np.isfinite(scale) or scale == 0:
        raise ValueError("target must be finite and non-zero")
    return ((s - t) ** 2).sum(axis=-1) / scale


