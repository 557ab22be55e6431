r"""The Bures–Wasserstein geometry of Gaussian measures.

The Gaussian measures :math:`\mathcal N(\alpha, \Sigma)`, :math:`\Sigma \succ 0`, form a
totally geodesic submanifold of :math:`(\mathcal P_2(\mathbb R^d), W_2)` (Takatsu, 2011), with

.. math::

    W_2^2\big(\mathcal N(\alpha_1, \Sigma_1), \mathcal N(\alpha_2, \Sigma_2)\big)
    = |\alpha_1 - \alpha_2|^2 + \operatorname{tr}\Sigma_1 + \operatorname{tr}\Sigma_2
      - 2\operatorname{tr}\big(\Sigma_1^{1/2}\Sigma_2\Sigma_1^{1/2}\big)^{1/2}

(the covariance part is the Bures–Wasserstein distance; Bhatia, Jain and Lim, 2019). A curve
:math:`t \mapsto \mathcal N(\alpha(t), \Sigma(t))` is moved, in the sense of the continuity
equation, by the affine *tangent* field :math:`x \mapsto \dot\alpha + S(x - \alpha)` with
:math:`S` symmetric solving the Lyapunov equation :math:`S\Sigma + \Sigma S = \dot\Sigma`; its
metric speed is the :math:`L^2(\mu)` norm of that field,

.. math::

    |\dot\mu|_{W_2}^2 = |\dot\alpha|^2 + \operatorname{tr}(S\Sigma S).

Any other field moving the same curve, e.g. the attention field :math:`x \mapsto Mx + b` of a
Gaussian solution of the Transformer PDE (Castin et al., 2025), has at least this
:math:`L^2(\mu)` norm, with equality iff :math:`M` is symmetric.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.linalg import solve_continuous_lyapunov

from . import _checks
from ._linalg import psd_sqrt
from .gaussian import integrate_moments

__all__ = ["wasserstein2", "tangent_matrix", "metric_speed", "field_norm", "ChordAndLength",
           "chord_and_length"]


def wasserstein2(alpha1: ArrayLike, Sigma1: ArrayLike, alpha2: ArrayLike,
                 Sigma2: ArrayLike) -> float:
    r"""The 2-Wasserstein distance between two Gaussian measures.

    .. math::

        W_2^2 = |\alpha_1 - \alpha_2|^2 + \operatorname{tr}\Sigma_1 + \operatorname{tr}\Sigma_2
        - 2\operatorname{tr}\big(\Sigma_1^{1/2}\Sigma_2\Sigma_1^{1/2}\big)^{1/2}

    (Takatsu, 2011; Bhatia, Jain and Lim, 2019). Covariances may be singular. Returns
    :math:`W_2` (the square root, clipped at 0 against rounding).

    Parameters
    ----------
    alpha1, alpha2 : array (d,)
        Means.
    Sigma1, Sigma2 : array (d, d)
        Covariances, symmetric positive semi-definite.

    Returns
    -------
    float
        :math:`W_2`.

    Raises
    ------
    ValueError
        If a pair of moments is not valid or the dimensions differ.

    Examples
    --------
    Equal covariances: the distance of the means. In :math:`d = 1`:
    :math:`W_2 = (|\alpha_1 - \alpha_2|^2 + (\sigma_1 - \sigma_2)^2)^{1/2}`:

    >>> import numpy as np
    >>> print(f"{wasserstein2([0.0, 0.0], np.eye(2), [3.0, 4.0], np.eye(2)):.9f}")
    5.000000000
    >>> print(f"{wasserstein2([0.0], [[1.0]], [0.0], [[4.0]]):.9f}")
    1.000000000

    References
    ----------
    :cite:`takatsu2011wasserstein,bhatia2019bures`
    """
    alpha1, Sigma1 = _checks.moments(alpha1, Sigma1, "alpha1", "Sigma1")
    alpha2, Sigma2 = _checks.moments(alpha2, Sigma2, "alpha2", "Sigma2")
    if alpha1.shape != alpha2.shape:
        raise ValueError(f"alpha1 and alpha2 must have the same shape, got {alpha1.shape} "
                         f"and {alpha2.shape}")
    R = psd_sqrt(Sigma1)
    lam = np.linalg.eigvalsh(R @ Sigma2 @ R)
    cross = np.sqrt(np.clip(lam, 0.0, None)).sum()
    diff = alpha1 - alpha2
    w2 = diff @ diff + np.trace(Sigma1) + np.trace(Sigma2) - 2.0 * cross
    return float(np.sqrt(max(w2, 0.0)))


def tangent_matrix(Sigma: ArrayLike, dSigma: ArrayLike) -> NDArray[np.float64]:
    r"""The symmetric :math:`S` with :math:`S\Sigma + \Sigma S = \dot\Sigma`, for Sigma > 0.

    The linear part of the tangent (gradient) velocity field :math:`x \mapsto S(x - \alpha)`
    of a curve of centred Gaussians through :math:`\mathcal N(\alpha, \Sigma)` with velocity
    :math:`\dot\Sigma` in the Bures–Wasserstein geometry (Takatsu, 2011). Solved with
    :func:`scipy.linalg.solve_continuous_lyapunov`.

    Parameters
    ----------
    Sigma : array (d, d)
        Covariance, symmetric positive definite.
    dSigma : array (d, d)
        Symmetric velocity of the covariance.

    Returns
    -------
    array (d, d)
        The symmetric :math:`S`.

    Raises
    ------
    ValueError
        If ``Sigma`` is not positive definite, ``dSigma`` is not symmetric or the shapes differ.

    Examples
    --------
    For commuting matrices :math:`S = \dot\Sigma\,\Sigma^{-1}/2`:

    >>> import numpy as np
    >>> S = tangent_matrix(np.diag([1.0, 2.0]), np.diag([2.0, 8.0]))
    >>> print((np.round(S, 9) + 0.0).tolist())
    [[1.0, 0.0], [0.0, 2.0]]

    References
    ----------
    :cite:`takatsu2011wasserstein,bhatia2019bures`
    """
    Sigma = _checks.matrix(Sigma, "Sigma", square=True)
    _, Sigma = _checks.moments(np.zeros(Sigma.shape[0]), Sigma)
    d = Sigma.shape[0]
    dSigma = _checks.matrix(dSigma, "dSigma", shape=(d, d))
    if np.linalg.norm(dSigma - dSigma.T) > 1e-10 * max(float(np.linalg.norm(dSigma)), 1e-300):
        raise ValueError("dSigma must be symmetric (a tangent vector to the covariances)")
    if np.linalg.eigvalsh(Sigma)[0] <= 1e-14 * np.linalg.norm(Sigma, 2):
        raise ValueError("Sigma must be positive definite for the tangent matrix to be unique")
    S = solve_continuous_lyapunov(Sigma, 0.5 * (dSigma + dSigma.T))
    return 0.5 * (S + S.T)


def metric_speed(dalpha: ArrayLike, Sigma: ArrayLike, dSigma: ArrayLike) -> float:
    r"""Metric speed :math:`|\dot\mu|_{W_2}` of a Gaussian curve through :math:`(\alpha, \Sigma)`.

    .. math::

        |\dot\mu|_{W_2} = \big(|\dot\alpha|^2 + \operatorname{tr}(S\Sigma S)\big)^{1/2},
        \qquad S\Sigma + \Sigma S = \dot\Sigma,

    the norm of the tangent vector :math:`(\dot\alpha, \dot\Sigma)` in the Bures–Wasserstein
    metric (Takatsu, 2011; Bhatia, Jain and Lim, 2019): the limit of
    :math:`W_2(\mu(t), \mu(t + h)) / h` as :math:`h \to 0`.

    Parameters
    ----------
    dalpha : array (d,)
        Velocity of the mean.
    Sigma : array (d, d)
        Covariance, symmetric positive definite.
    dSigma : array (d, d)
        Symmetric velocity of the covariance.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``dalpha`` is not a finite ``(d,)`` array or ``Sigma``, ``dSigma`` are not valid
        (:func:`tangent_matrix`).

    Examples
    --------
    :math:`\dot\Sigma = 2I` at :math:`\Sigma = I` gives :math:`S = I`, so the speed is
    :math:`(|\dot\alpha|^2 + 2)^{1/2}`:

    >>> import numpy as np
    >>> print(f"{metric_speed([1.0, 1.0], np.eye(2), 2 * np.eye(2)):.9f}")
    2.000000000

    References
    ----------
    :cite:`takatsu2011wasserstein,bhatia2019bures`
    """
    dalpha = _checks.real_array(dalpha, "dalpha")
    if dalpha.ndim != 1 or not np.all(np.isfinite(dalpha)):
        raise ValueError(f"dalpha must be a finite 1-D array, got shape {dalpha.shape}")
    S = tangent_matrix(Sigma, dSigma)
    Sigma = np.asarray(Sigma, dtype=np.float64)
    if dalpha.size != Sigma.shape[0]:
        raise ValueError(f"dalpha must have shape ({Sigma.shape[0]},), got {dalpha.shape}")
    return float(np.sqrt(dalpha @ dalpha + np.trace(S @ Sigma @ S)))


def field_norm(M: ArrayLike, b: ArrayLike, alpha: ArrayLike, Sigma: ArrayLike) -> float:
    r"""The :math:`L^2(\mu)` norm of the affine field :math:`v(x) = Mx + b` on
    :math:`\mu = \mathcal N(\alpha, \Sigma)`.

    .. math::

        \|v\|_{L^2(\mu)} = \big(|M\alpha + b|^2 + \operatorname{tr}(M\Sigma M^\top)\big)^{1/2}.

    For the attention field of a Gaussian solution (Castin et al., 2025) this is at least the
    metric speed :func:`metric_speed` of the solution, with equality iff :math:`M` is
    symmetric (then :math:`M` is the tangent matrix).

    Parameters
    ----------
    M : array (d, d)
        Linear part of the field.
    b : array (d,)
        Constant part of the field.
    alpha : array (d,)
        Mean of :math:`\mu`.
    Sigma : array (d, d)
        Covariance of :math:`\mu`.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If the moments are not valid or ``M``, ``b`` have the wrong shape or are not finite.

    Examples
    --------
    For a symmetric :math:`M` the norm is the metric speed of the curve it moves:

    >>> import numpy as np
    >>> M, b, a, S = np.array([[1.0, 0.5], [0.5, 2.0]]), [1.0, 0.0], [1.0, 1.0], np.eye(2)
    >>> speed = metric_speed(M @ a + b, S, M @ S + S @ M.T)
    >>> print(bool(abs(field_norm(M, b, a, S) - speed) < 1e-12))
    True

    References
    ----------
    :cite:`takatsu2011wasserstein,castin2025unified`
    """
    alpha, Sigma = _checks.moments(alpha, Sigma)
    d = alpha.size
    M = _checks.matrix(M, "M", shape=(d, d))
    b = _checks.real_array(b, "b")
    if b.shape != (d,) or not np.all(np.isfinite(b)):
        raise ValueError(f"b must be a finite array of shape ({d},), got {b.shape}")
    m = M @ alpha + b
    return float(np.sqrt(m @ m + np.trace(M @ Sigma @ M.T)))


class ChordAndLength(NamedTuple):
    r"""Distance between the ends of a short Gaussian curve, the curve's length, their relative
    gap, and the rounding allowance of the gap.

    Attributes
    ----------
    chord : float
        :math:`W_2(\mu(0), \mu(h))`.
    length : float
        The integral of the speed over :math:`[0, h]`.
    defect : float
        ``(length - chord) / length``.
    rounding : float
        Bound on the rounding error of ``defect``.

    Examples
    --------
    See :func:`chord_and_length`.

    >>> print(ChordAndLength._fields)
    ('chord', 'length', 'defect', 'rounding')
    """

    chord: float  # W2(mu(0), mu(h))
    length: float  # integral of the speed over [0, h]
    defect: float  # (length - chord) / length
    rounding: float  # bound on the rounding error of defect


def chord_and_length(rhs: Callable[..., Any], alpha: ArrayLike, Sigma: ArrayLike, h: float, *,
                     args: tuple = (), speed: Callable[..., Any] = metric_speed, nodes: int = 8,
                     rtol: float = 1e-13, atol: float = 1e-15) -> ChordAndLength:
    r"""The chord :math:`W_2(\mu(0), \mu(h))` and the length of a Gaussian solution over
    :math:`[0, h]`.

    .. math::

        L(h) = \int_0^h |\dot\mu|_{W_2}\, dt, \qquad
        \delta(h) = \frac{L(h) - W_2(\mu(0), \mu(h))}{L(h)} ,

    with :math:`\mu(t) = \mathcal N(\alpha(t), \Sigma(t))` the solution of the moment ODE
    ``rhs`` (e.g. :func:`transformer_pde.gaussian.softmax_rhs`) from
    :math:`(\alpha, \Sigma)`, integrated by
    :func:`transformer_pde.gaussian.integrate_moments` (tolerances ``rtol``, ``atol``), the
    speed given by ``speed(dalpha, Sigma, dSigma)`` (default :func:`metric_speed`) at the
    ``nodes`` Gauss–Legendre nodes of :math:`[0, h]`, and :math:`W_2` by
    :func:`wasserstein2`. In a Riemannian manifold a chord is never longer than a curve,
    and a smooth curve parametrised at non-zero speed differs from the geodesic between its
    ends at third order: :math:`0 \le \delta(h) = O(h^2)` (Takatsu, 2011, for the
    Bures–Wasserstein metric). A speed formula off by a relative :math:`\varepsilon` gives
    :math:`\delta \approx \varepsilon` instead, so the two-sided bound
    :math:`0 \le \delta(h) \le Kh^2` tests the formula.

    ``rounding`` bounds the rounding error of ``defect``: :math:`W_2^2` is a difference of
    traces of size :math:`\operatorname{tr}\Sigma(0) + \operatorname{tr}\Sigma(h)`, which
    loses :math:`10^{-14}` of that size, i.e. :math:`10^{-14}(\operatorname{tr}\Sigma(0) +
    \operatorname{tr}\Sigma(h)) / (2 W_2)` in :math:`W_2`, plus the integration error,
    ``rtol`` times :math:`\|\Sigma\|_2 / \lambda_{\min}(\Sigma)^{1/2}` (the Bures distance of
    a perturbation of :math:`\Sigma` of that size).

    Returns a :class:`ChordAndLength`.

    Parameters
    ----------
    rhs : callable
        ``rhs(alpha, Sigma, *args) -> (dalpha, dSigma)``.
    alpha : array (d,)
        Initial mean.
    Sigma : array (d, d)
        Initial covariance, symmetric positive definite.
    h : float
        Length of the time interval, positive.
    args : tuple
        Extra arguments of ``rhs``.
    speed : callable
        ``speed(dalpha, Sigma, dSigma) -> float``.
    nodes : int
        Gauss–Legendre nodes.
    rtol, atol : float
        Tolerances of the integration.

    Returns
    -------
    ChordAndLength

    Raises
    ------
    ValueError
        If the inputs are not valid, the solution does not move, or it does not reach
        :math:`t = h` (blow-up).

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_pde.gaussian import softmax_rhs
    >>> c = chord_and_length(softmax_rhs, [1.0, 0.0], np.eye(2), 0.1,
    ...                      args=(np.diag([0.5, -0.5]), np.eye(2)))
    >>> print(f"{c.length:.4f}", bool(c.rounding < c.defect < 1e-3))
    0.1798 True

    References
    ----------
    :cite:`takatsu2011wasserstein,castin2025unified`
    """
    alpha, Sigma = _checks.moments(alpha, Sigma)
    h = _checks.positive_float(h, "h")
    nodes = _checks.positive_int(nodes, "nodes")
    rtol, atol = _checks.positive_float(rtol, "rtol"), _checks.nonnegative_float(atol, "atol")
    if not callable(speed):
        raise ValueError("speed must be callable as speed(dalpha, Sigma, dSigma)")
    x, w = np.polynomial.legendre.leggauss(nodes)
    times = np.concatenate([[0.0], h * (x + 1) / 2, [h]])
    path = integrate_moments(rhs, alpha, Sigma, times, args=tuple(args), rtol=rtol, atol=atol,
                             conv_tol=1e-300)
    if path.status == "converged":
        raise ValueError("the solution does not move: Sigma is stationary")
    if path.status != "finished":
        raise ValueError(f"the solution does not reach t = h = {h:g}: {path.message}")
    speeds = []
    for a, S in zip(path.alpha[1:-1], path.Sigma[1:-1], strict=True):
        da, dS = rhs(a, S, *args)
        speeds.append(speed(da, S, dS))
    length = h / 2 * float(np.dot(w, speeds))
    chord = wasserstein2(alpha, Sigma, path.alpha[-1], path.Sigma[-1])
    if not length > 0 or not chord > 0:
        raise ValueError("the solution does not move over [0, h]: length or chord is 0")
    scale = np.trace(Sigma) + np.trace(path.Sigma[-1])
    lam = np.linalg.eigvalsh(Sigma)
    integration = rtol * lam[-1] / np.sqrt(max(lam[0], np.finfo(float).tiny))
    rounding = (1e-14 * scale / (2 * chord) + integration) / length
    return ChordAndLength(chord, length, (length - chord) / length, float(rounding))
