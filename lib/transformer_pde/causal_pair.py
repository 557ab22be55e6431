r"""The first two tokens of causal (masked) attention dynamics, exactly.

Under masked attention token 1 sees itself only and token 2 sees tokens 1 and 2, so their
motion does not depend on the others. This module collects what that two-token problem gives,
derived in the chapter on masked attention, for every key-query matrix :math:`A` and
:math:`V = I`.

**On the sphere** (layer normalisation; Karagodin, Polyanskiy and Rigollet, 2024, prove that
for almost every start all tokens converge to :math:`x_1(0)`):
:math:`\dot x_i = P_{x_i}\big(\sum_{j \le i} P_{ij} x_j\big)`, :math:`P_{ij} \propto
e^{\langle A x_i, x_j\rangle}` over :math:`j \le i`, :math:`P_x y = y - \langle x, y\rangle x`.
Token 1 never moves; :math:`\dot x_2 = P_{21} P_{x_2} x_1` keeps token 2 on the great circle
through :math:`x_1` and, for the angle :math:`\theta` between them,

.. math::

    \dot\theta = -P_{21}\sin\theta, \qquad
    P_{21} = \frac{1}{1 + e^{\langle A x_2,\, x_2 - x_1\rangle}}, \qquad
    \frac{d}{dt}\log|x_2 - x_1| = -P_{21}\cos^2\tfrac\theta2 .

So :math:`|x_2 - x_1|` decreases, with the explicit bound of :func:`pair_distance_bound`,
and its decay rate tends to :math:`\frac12`, within the band of :func:`pair_rate_band` once
:math:`|x_2 - x_1| \le \delta`; :func:`pair_decay` follows it until it is small.

**Without normalisation**, in the rescaled coordinates :math:`z = e^{-t}x` of Geshkovski et
al. (2023), :math:`\dot z_i = \sum_{j \le i} P_{ij}(t)(z_j - z_i)` with :math:`P_{ij}(t)
\propto e^{e^{2t}\langle A z_i, z_j\rangle}`: :func:`leader_pair_bound` gives a condition on
the start under which token 2 never reaches token 1 (a *leader*), so the tokens never form
a single cluster.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import exp1

from . import _checks, attention, dynamics, sphere

__all__ = ["pair_distance_bound", "pair_rate_band", "pair_decay", "leader_pair_bound"]


def _unit(x, name):
    x = _checks.real_array(x, name)
    if x.ndim != 1 or not np.all(np.isfinite(x)) or abs(np.linalg.norm(x) - 1) > 1e-8:
        raise ValueError(f"{name} must be a finite unit vector (1-D), got {x!r}")
    return x


def pair_distance_bound(A: ArrayLike, x1: ArrayLike, x2: ArrayLike,
                        times: ArrayLike) -> NDArray[np.float64]:
    r"""Upper bound on :math:`|x_2(t) - x_1|` for the causal dynamics on the sphere, any A.

    .. math::

        |x_2(t) - x_1| \le \min\Big(|x_2(0) - x_1|,\;
            2\tan\tfrac{\theta_0}{2}\, e^{-p t}\Big), \qquad
        p = \frac{1}{1 + e^{\|A\|_2 |x_2(0) - x_1|}},

    :math:`\theta_0` the initial angle (:math:`< \pi`). Since :math:`\dot\theta = -P_{21}\sin
    \theta \le 0`, the distance decreases, so :math:`|\langle A x_2, x_2 - x_1\rangle| \le
    \|A\|_2 |x_2(0) - x_1|` and :math:`P_{21} \ge p`; then :math:`\frac{d}{dt}\log\tan\frac
    \theta2 = \dot\theta/\sin\theta \le -p`, and :math:`2\sin\frac\theta2 \le 2\tan\frac
    \theta2`. For the masked dynamics of Karagodin, Polyanskiy and Rigollet (2024).

    Parameters
    ----------
    A : array (d, d)
    x1, x2 : arrays (d,)
        Unit tokens 1 and 2 at time 0, not antipodal.
    times : array (k,)
        Non-negative times.

    Returns
    -------
    array (k,)

    Examples
    --------
    Orthogonal tokens: the bound starts at :math:`|x_2(0) - x_1| = \sqrt 2` and then decays:

    >>> b = pair_distance_bound(np.eye(2), [1.0, 0.0], [0.0, 1.0], [0.0, 10.0])
    >>> print(round(float(b[0]) ** 2, 12), bool(b[1] < 0.3))
    2.0 True

    References
    ----------
    :cite:`karagodin2024clustering`
    """
    x1, x2 = _unit(x1, "x1"), _unit(x2, "x2")
    A = _checks.matrix(A, "A", shape=(x1.size, x1.size))
    if x2.size != x1.size:
        raise ValueError(f"x1 and x2 must have the same dimension, got {x1.size} and {x2.size}")
    t = _checks.real_array(times, "times")
    if np.any(~np.isfinite(t)) or np.any(t < 0):
        raise ValueError("times must be finite and >= 0")
    dist0 = float(np.linalg.norm(x2 - x1))
    theta0 = 2 * np.arcsin(min(dist0 / 2, 1.0))
    if np.pi - theta0 < 1e-12:
        raise ValueError("x2 is antipodal to x1: an equilibrium, no decay to bound")
    p = 1.0 / (1.0 + np.exp(np.linalg.norm(A, 2) * dist0))
    return np.minimum(dist0, 2 * np.tan(theta0 / 2) * np.exp(-p * t))


def pair_rate_band(A: ArrayLike, delta: float) -> tuple[float, float]:
    r"""Interval of the decay rate of :math:`|x_2 - x_1|` while :math:`|x_2 - x_1| \le \delta`.

    .. math::

        -\frac{d}{dt}\log|x_2 - x_1| = P_{21}\cos^2\tfrac\theta2 \in
        \Big[\frac{1 - \delta^2/4}{1 + e^{\|A\|_2\delta}},\;
             \frac{1}{1 + e^{-\|A\|_2\delta}}\Big],

    since :math:`|\langle A x_2, x_2 - x_1\rangle| \le \|A\|_2\delta` and
    :math:`\cos^2\frac\theta2 = 1 - |x_2 - x_1|^2/4`. Both ends tend to :math:`\frac12` as
    :math:`\delta \to 0` (width about :math:`\|A\|_2\delta/2`): the rate :math:`e^{-t/2}` of the
    last stage of causal clustering (Karagodin, Polyanskiy and Rigollet, 2024). A
    least-squares slope of :math:`\log|x_2 - x_1|` over times where the distance stays below
    :math:`\delta` is a weighted mean of secant slopes, so it lies in the same interval.
    Returns ``(low, high)``.

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix.
    delta : float
        Largest distance :math:`\delta \in (0, 2]`.

    Returns
    -------
    (float, float)
        The interval ``(low, high)`` of the rate.

    Examples
    --------
    >>> low, high = pair_rate_band(np.eye(2), 0.01)
    >>> print(bool(low < 0.5 < high), bool(high - low < 0.01))
    True True

    References
    ----------
    :cite:`karagodin2024clustering`
    """
    A = _checks.matrix(A, "A", square=True)
    delta = _checks.positive_float(delta, "delta")
    if delta > 2:
        raise ValueError(f"delta must be <= 2 (the diameter of the sphere), got {delta}")
    a = np.linalg.norm(A, 2) * delta
    return float((1 - delta**2 / 4) / (1 + np.exp(a))), float(1 / (1 + np.exp(-a)))


def pair_decay(A: ArrayLike, X0: ArrayLike, times: ArrayLike, trajectory: ArrayLike | None = None,
               *, below: float = 1e-8, t_max: float = 1e4, rtol: float = 1e-11,
               atol: float = 1e-13) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Sampled :math:`|x_2(t) - x_1(t)|` of the causal sphere dynamics until it is below ``below``.

    Tokens 1 and 2 of the masked dynamics on the sphere (:math:`V = I`, Karagodin, Polyanskiy
    and Rigollet, 2024) do not see the others, so their motion is that of the two-token
    problem. If ``trajectory`` (shape ``(len(times), n, d)``, from
    :func:`transformer_pde.sphere.integrate_on_sphere` of the full causal dynamics at
    ``times``) is given, its first two tokens are used; while the last distance is not below
    ``below``, the two-token problem is integrated further, from the last state, with the
    same sampling step, over intervals as long as ``times``, up to ``t_max`` (then
    :class:`RuntimeError`). Returns ``(t, distances)``.

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix.
    X0 : array (n, d)
        Unit tokens at time 0, ``n >= 2`` (only the first two are used).
    times : array (k,)
        Increasing sampling times from 0.
    trajectory : array (k, n, d), optional
        The full causal dynamics at ``times``, if already integrated.
    below : float
        The distance at which to stop.
    t_max : float
        The longest time allowed.
    rtol, atol : float
        Tolerances of :func:`transformer_pde.sphere.integrate_on_sphere`.

    Returns
    -------
    (array, array)
        Times and distances :math:`|x_2(t) - x_1(t)|`.

    Raises
    ------
    RuntimeError
        If the distance is still above ``below`` at ``t_max``.

    Examples
    --------
    The distance decreases, below the bound of :func:`pair_distance_bound`:

    >>> X0 = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    >>> t, dist = pair_decay(np.eye(2), X0, np.linspace(0.0, 5.0, 11), below=1e-3)
    >>> bound = pair_distance_bound(np.eye(2), X0[0], X0[1], t)
    >>> print(bool(dist[-1] < 1e-3), bool(np.all(dist <= bound * (1 + 1e-9))))
    True True

    References
    ----------
    :cite:`karagodin2024clustering`
    """
    X0 = _checks.points(X0, "X0")
    if X0.shape[0] < 2:
        raise ValueError(f"X0 must hold at least 2 tokens, got shape {X0.shape}")
    d = X0.shape[1]
    A = _checks.matrix(A, "A", shape=(d, d))
    t = _checks.real_array(times, "times")
    if t.ndim != 1 or t.size < 2 or t[0] != 0 or np.any(np.diff(t) <= 0):
        raise ValueError("times must be increasing, start at 0 and have at least 2 samples")
    below = _checks.positive_float(below, "below")
    t_max = _checks.positive_float(t_max, "t_max")
    rtol, atol = _checks.positive_float(rtol, "rtol"), _checks.nonnegative_float(atol, "atol")
    field = dynamics.attention_field(attention.softmax, A=A, V=np.eye(d), causal=True)
    if trajectory is None:
        pair = sphere.integrate_on_sphere(field, X0[:2], t, rtol=rtol, atol=atol)
    else:
        traj = np.asarray(trajectory, dtype=np.float64)
        if traj.ndim != 3 or traj.shape[0] != t.size or traj.shape[2] != d:
            raise ValueError(f"trajectory must have shape ({t.size}, n, {d}), got {traj.shape}")
        pair = traj[:, :2]
    ts, dists = [t], [np.linalg.norm(pair[:, 1] - pair[:, 0], axis=1)]
    while dists[-1][-1] >= below:
        start = ts[-1][-1]
        if start >= t_max:
            raise RuntimeError(f"|x_2 - x_1| = {dists[-1][-1]:.3g} is still >= {below:.3g} at "
                               f"t = {start:.4g} >= t_max")
        more = sphere.integrate_on_sphere(field, pair[-1], t, rtol=rtol, atol=atol)
        pair = more
        ts.append(start + t[1:])
        dists.append(np.linalg.norm(more[1:, 1] - more[1:, 0], axis=1))
    return np.concatenate(ts), np.concatenate(dists)


def leader_pair_bound(A: ArrayLike, z1: ArrayLike, z2: ArrayLike) -> tuple[bool, float]:
    r"""A start for which token 2 of the rescaled causal dynamics never reaches token 1.

    In :math:`\dot z_2 = P_{21}(t)(z_1 - z_2)`, :math:`P_{21}(t) = 1/(1 + e^{e^{2t} D})`,
    :math:`D = \langle A z_2, z_2 - z_1\rangle` (masked attention with :math:`V = I` after the
    rescaling :math:`z = e^{-t}x` of Geshkovski et al., 2023; :math:`z_1` is fixed), let
    :math:`D_0 = D(0)` and :math:`r_0 = |z_2(0) - z_1|`. If

    .. math::

        D_0 > 0 \quad\text{and}\quad (D_0 + \|A\|_2 r_0^2)\, E_1(D_0/2) < D_0,

    :math:`E_1` the exponential integral, then for all :math:`t \ge 0`

    .. math::

        |z_2(t) - z_1| \ge r_0\, e^{-E_1(D_0/2)/2} > 0 .

    Proof: :math:`\frac{d}{dt}|z_2 - z_1|^2 = -2P_{21}|z_2 - z_1|^2` and
    :math:`\dot D = -P_{21}(D + \langle A\delta, \delta\rangle)`, :math:`\delta = z_2 - z_1`;
    while :math:`D \ge D_0/2`, :math:`P_{21} \le e^{-e^{2t}D_0/2}`, whose integral over
    :math:`[0, \infty)` is :math:`E_1(D_0/2)/2`, so :math:`D` loses at most
    :math:`(D_0 + \|A\|_2 r_0^2)E_1(D_0/2)/2 < D_0/2` and never reaches :math:`D_0/2`.

    Returns ``(holds, bound)``: whether the condition holds, and the lower bound (``0.0``
    when it does not).

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix.
    z1, z2 : arrays (d,)
        Tokens 1 and 2 at time 0 (rescaled coordinates).

    Returns
    -------
    (bool, float)
        Whether the condition holds, and the lower bound on :math:`|z_2(t) - z_1|`.

    Examples
    --------
    >>> holds, bound = leader_pair_bound(np.eye(2), [0.0, 0.0], [3.0, 0.0])
    >>> print(holds, bool(2.9 < bound < 3.0))
    True True
    >>> leader_pair_bound(np.eye(2), [1.0, 0.0], [0.0, 1.0])
    (False, 0.0)

    References
    ----------
    :cite:`geshkovski2023emergence,karagodin2024clustering`
    """
    z1 = _checks.real_array(z1, "z1")
    z2 = _checks.real_array(z2, "z2")
    if z1.ndim != 1 or z2.shape != z1.shape or not np.all(np.isfinite(z1)) \
            or not np.all(np.isfinite(z2)):
        raise ValueError(f"z1 and z2 must be finite 1-D arrays of the same length, got shapes "
                         f"{z1.shape} and {z2.shape}")
    A = _checks.matrix(A, "A", shape=(z1.size, z1.size))
    D0 = float(z2 @ A.T @ (z2 - z1))
    r0 = float(np.linalg.norm(z2 - z1))
    if D0 <= 0:
        return False, 0.0
    e1 = float(exp1(D0 / 2))
    if (D0 + np.linalg.norm(A, 2) * r0**2) * e1 >= D0:
        return False, 0.0
    return True, r0 * float(np.exp(-e1 / 2))
