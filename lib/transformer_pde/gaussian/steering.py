r"""Steering Gaussians with attention, affine MLP layers, and the regimes they produce.

With an affine feed-forward (MLP) layer :math:`x \mapsto Wx + b` added to softmax attention, the
field on :math:`\mathcal N(\alpha, \Sigma)` is still affine,
:math:`x \mapsto (V\Sigma A + W)x + V\alpha + b`, so Gaussians stay Gaussian and

.. math::

    \dot\alpha = (V\Sigma A + W)\alpha + V\alpha + b, \qquad
    \dot\Sigma = W\Sigma + \Sigma W^\top + V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top,

a Riccati-type control system in the parameters :math:`(A, V, W, b)` (Alcalde, Ji and Zuazua,
2026, study it as a control system; the formulas here are derived in the chapter "Gaussian
initial data"). With :math:`V = I` the precision :math:`P = \Sigma^{-1}` solves a *linear*
equation, :math:`\dot P = -W^\top P - PW - 2A_s`, which gives the closed forms of this module:

- :func:`harmonic_steering_matrix` and :func:`harmonic_covariance`: one constant key-query
  matrix that takes :math:`\Sigma_0 \succ 0` to any :math:`\Sigma_1 \succ 0` in a prescribed time,
  along :math:`\Sigma(t)^{-1} = (1 - t/T)\Sigma_0^{-1} + (t/T)\Sigma_1^{-1}`;
- :func:`mean_rotation_value`: a value matrix with uniform attention (:math:`A = 0`) that moves
  a non-zero mean to any other non-zero mean without changing the covariance;
- :func:`steer_gaussian`: the two segments together, a piecewise-constant schedule of
  :math:`(Q, K, V)` from :math:`\mathcal N(\alpha_0, \Sigma_0)` to
  :math:`\mathcal N(\alpha_1, \Sigma_1)`;
  :func:`schedule_moments` and :func:`schedule_particles` run a schedule on the moment ODE and
  on (weighted) particles, :func:`gauss_hermite_measure` gives the weighted particles;
- :func:`softmax_mlp_rhs`, :func:`identity_mlp_covariance` and :func:`scalar_mlp_regime`: the
  moment ODE with an MLP, its closed form for :math:`V = I`, and the three regimes for
  :math:`W = wI`;
- :func:`rotation_covariance`: the isospectral regime of :math:`Q = K = I`, :math:`V = J` in
  :math:`d = 2`, a rigid rotation of the covariance at angular speed :math:`\mathrm{tr}\,\Sigma_0`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import scipy.integrate
import scipy.linalg
from numpy.typing import ArrayLike, NDArray

from .. import _checks, attention, dynamics
from .._linalg import psd_sqrt

__all__ = ["Segment", "Steering", "harmonic_steering_matrix", "harmonic_covariance",
           "mean_rotation_value", "steer_gaussian", "schedule_moments", "schedule_trajectory",
           "schedule_particles",
           "gauss_hermite_measure", "weighted_moments", "softmax_mlp_field", "softmax_mlp_rhs",
           "identity_mlp_covariance", "scalar_mlp_regime", "rotation_covariance"]


class Segment(NamedTuple):
    """One constant piece of a schedule: softmax attention with ``A = K.T @ Q`` and ``V``
    for a time ``duration``.

    Examples
    --------
    >>> import numpy as np
    >>> seg = Segment(1.0, np.zeros((2, 2)), np.eye(2))
    >>> print(seg.duration, seg.A.shape)
    1.0 (2, 2)
    """

    duration: float
    A: np.ndarray
    V: np.ndarray


class Steering(NamedTuple):
    """A piecewise-constant schedule and the mean it reaches after its first segment.

    Examples
    --------
    :func:`steer_gaussian` returns one:

    >>> import numpy as np
    >>> plan = steer_gaussian([1.0, 0.0], np.eye(2), [0.0, 1.0], 0.5 * np.eye(2))
    >>> print(type(plan).__name__, all(isinstance(s, Segment) for s in plan.segments))
    Steering True
    """

    segments: tuple
    alpha_mid: np.ndarray


def _precision(Sigma, name):
    Sigma = _checks.covariance(Sigma, name)
    lam = np.linalg.eigvalsh(Sigma)
    if lam[0] <= 1e-12 * lam[-1]:
        raise ValueError(f"{name} must be positive definite (smallest eigenvalue "
                         f"{lam[0]:.3g})")
    P = np.linalg.inv(Sigma)
    return Sigma, 0.5 * (P + P.T)


def harmonic_steering_matrix(Sigma0: ArrayLike, Sigma1: ArrayLike,
                             duration: float = 1.0) -> NDArray[np.float64]:
    r"""Key-query matrix that steers :math:`\Sigma_0` to :math:`\Sigma_1` with :math:`V = I`.

    .. math:: A = \frac{\Sigma_0^{-1} - \Sigma_1^{-1}}{2T}

    (symmetric). With :math:`V = I`, :math:`\frac{d}{dt}\Sigma^{-1} = -2A_s` along softmax
    attention, so the precision moves on the segment from :math:`\Sigma_0^{-1}` to
    :math:`\Sigma_1^{-1}` and stays positive definite; derived in the chapter "Gaussian initial
    data" (reachability of full-rank Gaussians is announced by Alcalde, Ji and Zuazua, 2026).

    Parameters
    ----------
    Sigma0, Sigma1 : array (d, d)
        Positive definite covariances.
    duration : float
        The time :math:`T > 0` of the segment.

    Returns
    -------
    array (d, d)

    Raises
    ------
    ValueError
        If a covariance is not symmetric positive definite or ``duration`` is not positive.

    Examples
    --------
    >>> import numpy as np
    >>> A = harmonic_steering_matrix(np.eye(2), 0.5 * np.eye(2))
    >>> print((np.round(A, 3) + 0.0).tolist())
    [[-0.5, 0.0], [0.0, -0.5]]

    References
    ----------
    :cite:`castin2025unified,alcalde2026reachability`
    """
    _, P0 = _precision(Sigma0, "Sigma0")
    _, P1 = _precision(Sigma1, "Sigma1")
    if P0.shape != P1.shape:
        raise ValueError(f"Sigma1 must have the shape of Sigma0 {P0.shape}, got {P1.shape}")
    T = _checks.positive_float(duration, "duration")
    return (P0 - P1) / (2.0 * T)


def harmonic_covariance(Sigma0: ArrayLike, Sigma1: ArrayLike, duration: float,
                        t: ArrayLike) -> NDArray[np.float64]:
    r"""The covariance along :func:`harmonic_steering_matrix`, in closed form.

    .. math:: \Sigma(t) = \Big(\big(1 - \tfrac tT\big)\Sigma_0^{-1}
              + \tfrac tT\,\Sigma_1^{-1}\Big)^{-1}, \qquad 0 \le t \le T.

    Parameters
    ----------
    Sigma0, Sigma1 : array (d, d)
        Positive definite covariances.
    duration : float
        :math:`T > 0`.
    t : float or array (k,)
        Times in :math:`[0, T]`.

    Returns
    -------
    array (d, d) or (k, d, d)

    Raises
    ------
    ValueError
        On invalid covariances or times outside :math:`[0, T]`.

    Examples
    --------
    >>> import numpy as np
    >>> S = harmonic_covariance(np.eye(2), 0.5 * np.eye(2), 1.0, 0.5)
    >>> print(np.round(np.diag(S), 4).tolist())
    [0.6667, 0.6667]

    References
    ----------
    :cite:`alcalde2026reachability`
    """
    _, P0 = _precision(Sigma0, "Sigma0")
    _, P1 = _precision(Sigma1, "Sigma1")
    T = _checks.positive_float(duration, "duration")
    ts = _checks.real_array(t, "t")
    if not np.all(np.isfinite(ts)) or np.any(ts < 0) or np.any(ts > T):
        raise ValueError(f"t must lie in [0, duration] = [0, {T:g}]")
    s = (ts / T)[..., None, None]
    return np.linalg.inv((1.0 - s) * P0 + s * P1)


def mean_rotation_value(alpha_from: ArrayLike, alpha_to: ArrayLike,
                        duration: float = 1.0) -> NDArray[np.float64]:
    r"""Value matrix :math:`V` with :math:`e^{TV}\alpha_{\mathrm{from}} = \alpha_{\mathrm{to}}`.

    .. math::

        V = \frac1T\Big(\log\frac{|\alpha_{\mathrm{to}}|}{|\alpha_{\mathrm{from}}|}\,I
            + \theta\,(w u^\top - u w^\top)\Big),

    :math:`u = \alpha_{\mathrm{from}}/|\alpha_{\mathrm{from}}|`, :math:`w` the unit vector of the
    plane of the two means orthogonal to :math:`u` on the side of :math:`\alpha_{\mathrm{to}}`, and
    :math:`\theta` the angle between them. With uniform attention (:math:`A = 0`, e.g.
    :math:`Q = 0`) the field is the constant :math:`V\alpha`: every particle moves by the same
    vector, the covariance does not change and :math:`\dot\alpha = V\alpha`.

    Parameters
    ----------
    alpha_from, alpha_to : array (d,)
        Non-zero means, ``d >= 2`` (or ``d = 1`` with the same sign).
    duration : float
        :math:`T > 0`.

    Returns
    -------
    array (d, d)

    Raises
    ------
    ValueError
        On a zero mean, different shapes, or opposite signs in ``d = 1``.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.linalg import expm
    >>> V = mean_rotation_value([1.0, 0.0], [0.0, 2.0])
    >>> print((np.round(expm(V) @ [1.0, 0.0], 6) + 0.0).tolist())
    [0.0, 2.0]

    References
    ----------
    :cite:`alcalde2026reachability`
    """
    a0 = _checks.real_array(alpha_from, "alpha_from")
    a1 = _checks.real_array(alpha_to, "alpha_to")
    if a0.ndim != 1 or a0.shape != a1.shape or not np.all(np.isfinite(a0 + a1)):
        raise ValueError("alpha_from and alpha_to must be finite vectors of the same shape")
    T = _checks.positive_float(duration, "duration")
    r0, r1 = np.linalg.norm(a0), np.linalg.norm(a1)
    if r0 == 0 or r1 == 0:
        raise ValueError("alpha_from and alpha_to must be non-zero (e^{TV} is invertible)")
    d = a0.size
    u, v = a0 / r0, a1 / r1
    cos = float(np.clip(u @ v, -1.0, 1.0))
    gen = np.zeros((d, d))
    if cos < 1.0:
        if d == 1:
            raise ValueError("in d = 1 alpha_from and alpha_to must have the same sign")
        w = v - cos * u
        if np.linalg.norm(w) < 1e-12:          # opposite: any direction orthogonal to u
            w = np.linalg.svd(u[None, :])[2][1]
        w = w / np.linalg.norm(w)
        gen = np.arccos(cos) * (np.outer(w, u) - np.outer(u, w))
    return (np.log(r1 / r0) * np.eye(d) + gen) / T


def steer_gaussian(alpha0: ArrayLike, Sigma0: ArrayLike, alpha1: ArrayLike,
                   Sigma1: ArrayLike, *, durations: tuple = (1.0, 1.0),
                   rtol: float = 1e-12) -> Steering:
    r"""A two-segment schedule of softmax attention from :math:`\mathcal N(\alpha_0, \Sigma_0)`
    to :math:`\mathcal N(\alpha_1, \Sigma_1)`.

    Segment 1 (time :math:`T_1`): :math:`V = I`, :math:`A` of :func:`harmonic_steering_matrix`
    takes :math:`\Sigma_0` to :math:`\Sigma_1` exactly and the mean to
    :math:`\alpha_{\mathrm{mid}}`,
    computed by integrating :math:`\dot\alpha = (I + \Sigma A)\alpha` (the moment ODE, with
    :func:`schedule_moments`). Segment 2 (time :math:`T_2`):
    :math:`A = 0`, :math:`V` of :func:`mean_rotation_value` takes :math:`\alpha_{\mathrm{mid}}` to
    :math:`\alpha_1` without moving :math:`\Sigma`.

    Parameters
    ----------
    alpha0, alpha1 : array (d,)
        Initial and target means; :math:`\alpha_0 \ne 0` (else the mean stays 0) and
        :math:`\alpha_1 \ne 0`.
    Sigma0, Sigma1 : array (d, d)
        Positive definite initial and target covariances.
    durations : (float, float)
        :math:`(T_1, T_2)`.
    rtol : float
        Relative tolerance of the integration of segment 1.

    Returns
    -------
    Steering
        ``segments`` (two :class:`Segment`) and ``alpha_mid``.

    Raises
    ------
    ValueError
        On invalid moments, a zero mean or non-positive durations.

    Examples
    --------
    >>> import numpy as np
    >>> st = steer_gaussian([1.0, 0.0], np.eye(2), [0.0, 1.0], np.diag([0.5, 2.0]))
    >>> a, S = schedule_moments(st.segments, [1.0, 0.0], np.eye(2))
    >>> bool(np.allclose(a, [0.0, 1.0]) and np.allclose(S, np.diag([0.5, 2.0])))
    True

    References
    ----------
    :cite:`alcalde2026reachability`
    """
    alpha0, Sigma0 = _checks.moments(alpha0, Sigma0, "alpha0", "Sigma0")
    alpha1 = _checks.moments(alpha1, Sigma1, "alpha1", "Sigma1")[0]
    if isinstance(durations, (str, bytes)) or np.ndim(durations) != 1 or len(durations) != 2:
        raise ValueError(f"durations must be a pair (T1, T2), got {durations!r}")
    T1 = _checks.positive_float(durations[0], "durations[0]")
    T2 = _checks.positive_float(durations[1], "durations[1]")
    if np.linalg.norm(alpha0) == 0:
        raise ValueError("alpha0 must be non-zero: from alpha0 = 0 the mean stays 0")
    d = alpha0.size
    A1 = harmonic_steering_matrix(Sigma0, Sigma1, T1)
    seg1 = Segment(T1, A1, np.eye(d))
    alpha_mid = schedule_moments((seg1,), alpha0, Sigma0, rtol=rtol)[0]
    seg2 = Segment(T2, np.zeros((d, d)), mean_rotation_value(alpha_mid, alpha1, T2))
    return Steering((seg1, seg2), alpha_mid)


def _check_segments(segments, d):
    if len(segments) < 1:
        raise ValueError("segments must hold at least one Segment")
    out = []
    for k, seg in enumerate(segments):
        if len(seg) != 3:
            raise ValueError(f"segments[{k}] must be (duration, A, V)")
        out.append(Segment(_checks.positive_float(seg[0], f"segments[{k}].duration"),
                           _checks.matrix(seg[1], f"segments[{k}].A", shape=(d, d)),
                           _checks.matrix(seg[2], f"segments[{k}].V", shape=(d, d))))
    return out


def schedule_moments(segments: Sequence[Segment], alpha0: ArrayLike, Sigma0: ArrayLike, *,
                     rtol: float = 1e-12) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Run a piecewise-constant schedule on the softmax moment ODE.

    .. math:: \dot\alpha = V_k(I + \Sigma A_k)\alpha, \quad
              \dot\Sigma = V_k\Sigma A_k\Sigma + \Sigma A_k^\top\Sigma V_k^\top
              \quad\text{on segment } k

    (Castin et al., 2025), integrated segment by segment with
    :func:`scipy.integrate.solve_ivp` (DOP853) on :math:`(\alpha, \Sigma)`.

    Parameters
    ----------
    segments : sequence of :class:`Segment`
        ``(duration, A, V)`` triples.
    alpha0 : array (d,)
    Sigma0 : array (d, d)
    rtol : float
        Relative tolerance of the solver (absolute tolerance ``1e-3 * rtol``).

    Returns
    -------
    (alpha, Sigma) at the end of the schedule.

    Raises
    ------
    ValueError
        On invalid input; ``RuntimeError`` if the solution blows up during the schedule.

    Examples
    --------
    >>> import numpy as np
    >>> a, S = schedule_moments([Segment(1.0, np.zeros((2, 2)), np.eye(2))],
    ...                         [1.0, 0.0], np.eye(2))
    >>> print(np.round(a, 6).tolist())
    [2.718282, 0.0]

    References
    ----------
    :cite:`castin2025unified`
    """
    rtol = _checks.positive_float(rtol, "rtol")
    _, alphas, Sigmas = _run_schedule(segments, alpha0, Sigma0, rtol, 2)
    return alphas[-1], Sigmas[-1]


def _run_schedule(segments, alpha0, Sigma0, rtol, points):
    alpha, Sigma = _checks.moments(alpha0, Sigma0, "alpha0", "Sigma0")
    d = alpha.size
    t0, ts, alphas, Sigmas = 0.0, [0.0], [alpha], [Sigma]
    for seg in _check_segments(segments, d):
        def flow(_, y, seg=seg):
            a, S = y[:d], y[d:].reshape(d, d)
            M, c = seg.V @ S @ seg.A, seg.V @ a
            MS = M @ S
            return np.concatenate([M @ a + c, (MS + MS.T).ravel()])
        grid = np.linspace(0.0, seg.duration, points)
        sol = scipy.integrate.solve_ivp(flow, (0.0, seg.duration),
                                        np.concatenate([alpha, Sigma.ravel()]),
                                        method="DOP853", rtol=rtol, atol=1e-3 * rtol,
                                        t_eval=grid)
        if sol.status != 0 or not np.all(np.isfinite(sol.y)):
            raise RuntimeError(f"the moment ODE stopped inside a segment: {sol.message}")
        for k in range(1, points):
            S = sol.y[d:, k].reshape(d, d)
            ts.append(t0 + grid[k])
            alphas.append(sol.y[:d, k])
            Sigmas.append(0.5 * (S + S.T))
        alpha, Sigma, t0 = alphas[-1], Sigmas[-1], t0 + seg.duration
    return np.array(ts), np.array(alphas), np.array(Sigmas)


def schedule_trajectory(segments: Sequence[Segment], alpha0: ArrayLike, Sigma0: ArrayLike, *,
                        points: int = 50, rtol: float = 1e-12
                        ) -> tuple[NDArray[np.float64], NDArray[np.float64],
                                   NDArray[np.float64]]:
    r"""The moments along a piecewise-constant schedule, at ``points`` times per segment.

    The same integration as :func:`schedule_moments` (the softmax moment ODE of Castin et
    al., 2025, segment by segment), with dense output.

    Parameters
    ----------
    segments : sequence of :class:`Segment`
    alpha0 : array (d,)
    Sigma0 : array (d, d)
    points : int
        Output times per segment, equally spaced, both ends included (``>= 2``).
    rtol : float
        Relative tolerance of the solver.

    Returns
    -------
    (times, alphas, Sigmas) of shapes ``(k,)``, ``(k, d)``, ``(k, d, d)``.

    Raises
    ------
    ValueError
        On invalid input; ``RuntimeError`` if the solution blows up during the schedule.

    Examples
    --------
    >>> import numpy as np
    >>> t, a, S = schedule_trajectory([Segment(1.0, np.zeros((2, 2)), np.eye(2))],
    ...                               [1.0, 0.0], np.eye(2), points=3)
    >>> print(t.tolist(), np.round(a[:, 0], 4).tolist())
    [0.0, 0.5, 1.0] [1.0, 1.6487, 2.7183]

    References
    ----------
    :cite:`castin2025unified`
    """
    points = _checks.positive_int(points, "points")
    if points < 2:
        raise ValueError(f"points must be at least 2, got {points}")
    return _run_schedule(segments, alpha0, Sigma0, _checks.positive_float(rtol, "rtol"),
                         points)


def schedule_particles(segments: Sequence[Segment], X0: ArrayLike, *,
                       weights: ArrayLike | None = None,
                       rtol: float = 1e-11, W: ArrayLike | None = None,
                       b: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""Run a piecewise-constant schedule on particles moved by softmax attention.

    .. math:: \dot x_i = \frac{\sum_j w_j e^{\langle A_k x_i, x_j\rangle} V_k x_j}
                              {\sum_j w_j e^{\langle A_k x_i, x_j\rangle}} + Wx_i + b
              \quad\text{on segment } k,

    integrated segment by segment with :func:`~transformer_pde.dynamics.integrate` (DOP853).

    Parameters
    ----------
    segments : sequence of :class:`Segment`
    X0 : array (n, d)
        Initial particles.
    weights : array (n,), optional
        Their weights (uniform by default).
    rtol : float
        Relative tolerance of the solver.
    W : array (d, d), optional
        Matrix of an affine MLP layer added to the field on every segment (0 by default).
    b : array (d,), optional
        Its bias (0 by default).

    Returns
    -------
    array (n, d)
        The particles at the end of the schedule.

    Raises
    ------
    ValueError
        On invalid input.

    Examples
    --------
    >>> import numpy as np
    >>> X = schedule_particles([Segment(1.0, np.zeros((2, 2)), np.eye(2))],
    ...                        np.array([[1.0, 0.0], [-1.0, 0.0], [1.0, 1.0]]))
    >>> print(np.round(X.mean(axis=0), 6).tolist())
    [0.906094, 0.906094]

    References
    ----------
    :cite:`castin2025unified`
    """
    X = _checks.points(X0, "X0")
    rtol = _checks.positive_float(rtol, "rtol")
    if weights is not None:
        weights = _checks.weights(weights, X.shape[0])
    d = X.shape[1]
    W = np.zeros((d, d)) if W is None else _checks.matrix(W, "W", shape=(d, d))
    b = np.zeros(d) if b is None else _checks.real_array(b, "b")
    if b.shape != (d,) or not np.all(np.isfinite(b)):
        raise ValueError(f"b must be a finite array of shape ({d},), got {b!r}")
    for seg in _check_segments(segments, d):
        def field(t, Y, seg=seg):
            return attention.softmax(Y, seg.A, seg.V, weights=weights) + Y @ W.T + b
        X = dynamics.integrate(field, X, [0.0, seg.duration], rtol=rtol,
                               atol=1e-3 * rtol)[-1]
    return X


def gauss_hermite_measure(alpha: ArrayLike, Sigma: ArrayLike,
                          m: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Weighted points of the tensor Gauss–Hermite rule of :math:`\mathcal N(\alpha, \Sigma)`.

    .. math:: x_{\mathbf k} = \alpha + \Sigma^{1/2} z_{\mathbf k}, \qquad
              w_{\mathbf k} = \prod_j \omega_{k_j},

    :math:`(z, \omega)` the :math:`m`-point rule of :math:`\mathcal N(0, 1)`: exact for
    polynomials of degree :math:`\le 2m - 1` in each coordinate. An affine map sends the rule of
    :math:`\mathcal N(\alpha, \Sigma)` to a rule of its image with the same exactness.

    Parameters
    ----------
    alpha : array (d,)
    Sigma : array (d, d)
        Symmetric positive semi-definite.
    m : int
        Points per dimension (``m ** d`` points in all).

    Returns
    -------
    (X, w) : arrays (m**d, d) and (m**d,), weights summing to one.

    Raises
    ------
    ValueError
        On invalid moments or ``m < 1``.

    Examples
    --------
    >>> import numpy as np
    >>> X, w = gauss_hermite_measure([1.0, 0.0], np.diag([2.0, 0.5]), 5)
    >>> a, S = weighted_moments(X, w)
    >>> bool(np.allclose(a, [1.0, 0.0]) and np.allclose(S, np.diag([2.0, 0.5])))
    True

    References
    ----------
    :cite:`castin2025unified`
    """
    alpha, Sigma = _checks.moments(alpha, Sigma)
    m = _checks.positive_int(m, "m")
    z, omega = np.polynomial.hermite_e.hermegauss(m)
    omega = omega / omega.sum()
    d = alpha.size
    grids = np.meshgrid(*([z] * d), indexing="ij")
    Z = np.stack([g.ravel() for g in grids], axis=1)
    wgrids = np.meshgrid(*([omega] * d), indexing="ij")
    w = np.prod(np.stack([g.ravel() for g in wgrids], axis=1), axis=1)
    return alpha + Z @ psd_sqrt(Sigma), w / w.sum()


def weighted_moments(X: ArrayLike, weights: ArrayLike | None = None
                     ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Mean and covariance of a weighted point cloud.

    .. math:: \hat\alpha = \sum_i w_i x_i, \qquad
              \hat\Sigma = \sum_i w_i (x_i - \hat\alpha)(x_i - \hat\alpha)^\top.

    Parameters
    ----------
    X : array (n, d)
    weights : array (n,), optional
        Non-negative, summing to one; uniform by default.

    Returns
    -------
    (alpha, Sigma)

    Raises
    ------
    ValueError
        On invalid points or weights.

    Examples
    --------
    >>> import numpy as np
    >>> a, S = weighted_moments(np.array([[0.0, 0.0], [2.0, 0.0]]))
    >>> print(a.tolist(), S.tolist())
    [1.0, 0.0] [[1.0, 0.0], [0.0, 0.0]]

    References
    ----------
    :cite:`castin2025unified`
    """
    X = _checks.points(X, "X")
    n = X.shape[0]
    w = np.full(n, 1.0 / n) if weights is None else _checks.weights(weights, n)
    a = w @ X
    Y = X - a
    S = (Y * w[:, None]).T @ Y
    return a, 0.5 * (S + S.T)


# --------------------------------------------------------------------------------------
# attention plus an affine MLP layer
# --------------------------------------------------------------------------------------

def _mlp_Mb(alpha, Sigma, A, V, W, b):
    return V @ Sigma @ A + W, V @ alpha + b


def softmax_mlp_field(alpha: ArrayLike, Sigma: ArrayLike, A: ArrayLike, V: ArrayLike,
                      W: ArrayLike, b: ArrayLike
                      ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Affine field of softmax attention plus an affine MLP layer on a Gaussian.

    .. math:: x \mapsto V(\alpha + \Sigma A x) + Wx + b, \qquad M = V\Sigma A + W, \quad
              b' = V\alpha + b.

    Parameters
    ----------
    alpha : array (d,)
    Sigma : array (d, d)
    A, V, W : arrays (d, d)
    b : array (d,)

    Returns
    -------
    (M, b')

    Raises
    ------
    ValueError
        On invalid shapes or moments.

    Examples
    --------
    >>> import numpy as np
    >>> M, c = softmax_mlp_field(np.zeros(2), np.eye(2), np.eye(2), np.eye(2),
    ...                          -np.eye(2), np.ones(2))
    >>> print(M.tolist(), c.tolist())
    [[0.0, 0.0], [0.0, 0.0]] [1.0, 1.0]

    References
    ----------
    :cite:`castin2025unified,alcalde2026reachability`
    """
    alpha, Sigma = _checks.moments(alpha, Sigma)
    d = alpha.size
    b = _checks.real_array(b, "b")
    if b.shape != (d,) or not np.all(np.isfinite(b)):
        raise ValueError(f"b must be a finite vector of shape ({d},), got {b.shape}")
    return _mlp_Mb(alpha, Sigma, _checks.matrix(A, "A", shape=(d, d)),
                   _checks.matrix(V, "V", shape=(d, d)), _checks.matrix(W, "W", shape=(d, d)), b)


def softmax_mlp_rhs(alpha: ArrayLike, Sigma: ArrayLike, A: ArrayLike, V: ArrayLike,
                    W: ArrayLike, b: ArrayLike
                    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Moment ODE of softmax attention plus an affine MLP layer :math:`x \mapsto Wx + b`.

    .. math::

        \dot\alpha = (V\Sigma A + W)\alpha + V\alpha + b, \qquad
        \dot\Sigma = W\Sigma + \Sigma W^\top + V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top.

    Parameters
    ----------
    alpha : array (d,)
    Sigma : array (d, d)
    A, V, W : arrays (d, d)
    b : array (d,)

    Returns
    -------
    (dalpha, dSigma)

    Raises
    ------
    ValueError
        On invalid shapes or moments.

    Examples
    --------
    >>> import numpy as np
    >>> da, dS = softmax_mlp_rhs(np.zeros(2), np.eye(2), -np.eye(2), np.eye(2),
    ...                          np.eye(2), np.zeros(2))
    >>> print(dS.tolist())
    [[0.0, 0.0], [0.0, 0.0]]

    References
    ----------
    :cite:`castin2025unified,alcalde2026reachability`
    """
    M, c = softmax_mlp_field(alpha, Sigma, A, V, W, b)
    alpha, Sigma = np.asarray(alpha, dtype=np.float64), np.asarray(Sigma, dtype=np.float64)
    MS = M @ Sigma
    return M @ alpha + c, MS + MS.T


# the rhs.affine_field protocol of integrate_moments (function attributes mypy cannot declare)
softmax_mlp_rhs.affine_field = softmax_mlp_field  # type: ignore[attr-defined]
softmax_mlp_rhs._unchecked_field = _mlp_Mb  # type: ignore[attr-defined]


def identity_mlp_covariance(Sigma0: ArrayLike, A: ArrayLike, W: ArrayLike,
                            t: ArrayLike) -> NDArray[np.float64]:
    r"""Closed form of the covariance for :math:`V = I` with an MLP layer :math:`Wx + b`.

    .. math::

        \Sigma(t) = e^{tW}\big(\Sigma_0^{-1} - 2G(t)\big)^{-1}e^{tW^\top}, \qquad
        G(t) = \int_0^t e^{sW^\top}A_s e^{sW}\,ds,

    from the linear equation :math:`\dot P = -W^\top P - PW - 2A_s` of the precision
    :math:`P = \Sigma^{-1}`; :math:`G` by Van Loan's block exponential. Valid while
    :math:`\Sigma_0^{-1} - 2G(t) \succ 0`.

    Parameters
    ----------
    Sigma0 : array (d, d)
        Positive definite.
    A, W : arrays (d, d)
    t : float or array (k,)
        Non-negative times.

    Returns
    -------
    array (d, d) or (k, d, d)

    Raises
    ------
    ValueError
        On invalid input, or a time at or after the blow-up (the precision is no longer
        positive definite).

    Examples
    --------
    >>> import numpy as np
    >>> S = identity_mlp_covariance(np.eye(2), -np.eye(2), np.eye(2), 50.0)
    >>> print(np.round(S, 8).tolist())
    [[1.0, 0.0], [0.0, 1.0]]

    References
    ----------
    :cite:`alcalde2026reachability`
    """
    _, P0 = _precision(Sigma0, "Sigma0")
    d = P0.shape[0]
    A = _checks.matrix(A, "A", shape=(d, d))
    W = _checks.matrix(W, "W", shape=(d, d))
    As = 0.5 * (A + A.T)
    ts = _checks.real_array(t, "t")
    if not np.all(np.isfinite(ts)) or np.any(ts < 0):
        raise ValueError("t must be finite and non-negative")
    block = np.block([[-W.T, As], [np.zeros((d, d)), W]])
    out = []
    for s in np.atleast_1d(ts):
        F = scipy.linalg.expm(s * block)
        E = F[d:, d:]                         # e^{sW}
        G = E.T @ F[:d, d:]                   # e^{sW^T} int_0^s e^{-(s-r)W^T} A_s e^{rW} dr
        P = P0 - (G + G.T)
        lam = np.linalg.eigvalsh(0.5 * (P + P.T))
        if lam[0] <= 0:
            raise ValueError(f"t = {s:g} is at or after the blow-up: the precision is not "
                             "positive definite")
        out.append(E @ np.linalg.solve(P, E.T))
    res = np.array(out)
    res = 0.5 * (res + np.swapaxes(res, -1, -2))
    return res if ts.ndim else res[0]


def scalar_mlp_regime(Sigma0: ArrayLike, A: ArrayLike, w: float) -> dict:
    r"""Regime of softmax attention with :math:`V = I` and an MLP layer :math:`W = wI`.

    With :math:`\lambda = \lambda_{\max}(\Sigma_0^{1/2}A_s\Sigma_0^{1/2})` and
    :math:`P(t) = e^{-2wt}\big(\Sigma_0^{-1} - 2s(t)A_s\big)`, :math:`s(t) = (e^{2wt} - 1)/(2w)`:

    - ``"blowup"`` iff :math:`\lambda > \max(0, -w)`, at
      :math:`t^* = \log(1 + 2w s^*)/(2w)`, :math:`s^* = 1/(2\lambda)` (:math:`t^* = s^*` if
      :math:`w = 0`);
    - ``"equilibrium"`` iff :math:`w > 0` and :math:`A_s \prec 0`:
      :math:`\Sigma(t) \to w(-A_s)^{-1}`;
    - ``"collapse"`` iff :math:`w < 0` and :math:`\lambda < -w`: :math:`\Sigma(t) \to 0`;
    - ``"unbounded"`` iff :math:`w > 0`, :math:`A_s \preceq 0` singular (growth like
      :math:`e^{2wt}` on :math:`\ker A_s`);
    - ``"identity"`` for :math:`w = 0` without blow-up (the chapter's first theorem), and
      ``"boundary"`` for :math:`w < 0`, :math:`\lambda = -w` (not classified here).

    Parameters
    ----------
    Sigma0 : array (d, d)
        Positive definite.
    A : array (d, d)
    w : float

    Returns
    -------
    dict with ``regime``, ``t_star`` (``inf`` without blow-up), ``limit`` (``None`` unless
    ``"equilibrium"``) and ``lam``.

    Raises
    ------
    ValueError
        On invalid input.

    Examples
    --------
    >>> import numpy as np
    >>> r = scalar_mlp_regime(np.eye(2), -np.eye(2), 0.5)
    >>> r["regime"], np.round(r["limit"], 6).tolist()
    ('equilibrium', [[0.5, 0.0], [0.0, 0.5]])

    References
    ----------
    :cite:`alcalde2026reachability`
    """
    Sigma0, _ = _precision(Sigma0, "Sigma0")
    d = Sigma0.shape[0]
    A = _checks.matrix(A, "A", shape=(d, d))
    w = _checks.finite_float(w, "w")
    As = 0.5 * (A + A.T)
    S12 = psd_sqrt(Sigma0)
    lams = np.linalg.eigvalsh(S12 @ As @ S12)
    lam, scale = float(lams[-1]), float(np.abs(lams).max()) or 1.0
    out = {"lam": lam, "t_star": np.inf, "limit": None}
    tol = 1e-12 * scale
    if lam > max(0.0, -w) + tol:
        s_star = 1.0 / (2.0 * lam)
        t_star = s_star if w == 0 else np.log1p(2.0 * w * s_star) / (2.0 * w)
        return {**out, "regime": "blowup", "t_star": float(t_star)}
    if w == 0:
        return {**out, "regime": "identity"}
    if w < 0:
        regime = "collapse" if lam < -w - tol else "boundary"
        return {**out, "regime": regime}
    lam_A = np.linalg.eigvalsh(As)
    if lam_A[-1] < -1e-12 * np.abs(lam_A).max():
        return {**out, "regime": "equilibrium", "limit": w * np.linalg.inv(-As)}
    return {**out, "regime": "unbounded"}


def rotation_covariance(Sigma0: ArrayLike, t: ArrayLike, *,
                        kind: str = "softmax") -> NDArray[np.float64]:
    r"""Covariance of softmax or L2 attention with :math:`Q = K = I`, :math:`V = J`, :math:`d = 2`.

    .. math:: \Sigma(t) = R(\omega t)\,\Sigma_0\,R(\omega t)^\top,
              \qquad J = \begin{pmatrix}0 & -1\\ 1 & 0\end{pmatrix},

    :math:`R(\varphi)` the rotation by :math:`\varphi`, with :math:`\omega = \mathrm{tr}\,\Sigma_0`
    (softmax, :math:`\dot\Sigma = [J, \Sigma^2]`) or
    :math:`\omega = 2\,(h(\lambda_1) - h(\lambda_2))/(\lambda_1 - \lambda_2)`, :math:`h(\lambda) =
    \lambda^2/(1 + 2\lambda)`, :math:`\lambda_{1,2}` the eigenvalues of :math:`\Sigma_0`
    (L2, :math:`\dot\Sigma = 2[J, h(\Sigma)]`; :math:`\omega = 2h'(\lambda)` when they coincide,
    where :math:`\Sigma_0` is stationary anyway). Derived in the chapter "Gaussian initial
    data": the flow is isospectral, and in :math:`d = 2` a rigid rotation.

    Parameters
    ----------
    Sigma0 : array (2, 2)
        Symmetric positive semi-definite.
    t : float or array (k,)
    kind : {"softmax", "l2"}

    Returns
    -------
    array (2, 2) or (k, 2, 2)

    Raises
    ------
    ValueError
        On an invalid covariance, non-finite times or an unknown ``kind``.

    Examples
    --------
    >>> import numpy as np
    >>> S = rotation_covariance(np.diag([1.0, 0.0]), np.pi / 2)
    >>> print((np.round(S, 6) + 0.0).tolist())
    [[0.0, 0.0], [0.0, 1.0]]

    References
    ----------
    :cite:`castin2025unified`
    """
    Sigma0 = _checks.moments(np.zeros(2), Sigma0, Sigma_name="Sigma0")[1]
    ts = _checks.real_array(t, "t")
    if not np.all(np.isfinite(ts)):
        raise ValueError("t must be finite")
    if kind == "softmax":
        omega = np.trace(Sigma0)
    elif kind == "l2":
        l1, l2 = np.linalg.eigvalsh(Sigma0)
        if l2 - l1 > 1e-12 * max(l2, 1e-300):
            h1, h2 = l1**2 / (1 + 2 * l1), l2**2 / (1 + 2 * l2)
            omega = 2 * (h2 - h1) / (l2 - l1)
        else:
            omega = 2 * (2 * l2 * (1 + l2)) / (1 + 2 * l2) ** 2
    else:
        raise ValueError(f"kind must be 'softmax' or 'l2', got {kind!r}")
    phi = ts * omega
    c, s = np.cos(phi), np.sin(phi)
    R = np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)
    return R @ Sigma0 @ np.swapaxes(R, -1, -2)
