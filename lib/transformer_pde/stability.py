r"""Stability of the Transformer PDE in Wasserstein distance: a Grönwall rate and the flow Jacobian.

- :func:`gronwall_rate`: the rate :math:`L_p(t)` of an explicit stability constant
  :math:`C_p(T, R_0) = \exp\int_0^T L_p` for softmax attention, by Dobrushin's coupling
  argument (Dobrushin, 1979; Golse, 2016) applied to the Transformer PDE of Castin, Ablin,
  Carrillo and Peyré (2025);
- :func:`flow_jacobian`: the Jacobian :math:`\partial X(t) / \partial X_0` of the particle
  flow, by the variational equation, whose top singular value is the worst-case
  amplification of an infinitesimal perturbation in :math:`W_2`;
- :func:`heads_growth_rate`, :func:`support_radius`: the growth rate of the support of
  multi-head attention and the support radius of a trajectory;
- :func:`cumulative_integral`, :func:`log_gronwall_constant`: :math:`\int_0^t g` by
  Gauss-Legendre quadrature, and :math:`\log C_p(t)` with the a-priori radius;
- :func:`l1_l2_norm`: the :math:`\ell^1(\ell^2)` operator norm of a flow Jacobian (the
  worst-case amplification in :math:`W_1`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.integrate import solve_ivp

from . import _checks, attention, lipschitz

__all__ = ["gronwall_rate", "flow_jacobian", "heads_growth_rate", "support_radius",
           "smallest_distance", "cumulative_integral", "log_gronwall_constant", "l1_l2_norm"]


def gronwall_rate(a: ArrayLike, v: ArrayLike, R: ArrayLike,
                  p: float) -> float | NDArray[np.float64]:
    r"""Grönwall rate :math:`L_p = v\big(aR^2 + (1 + 2aR^2)\, e^{2aR^2/p}\big)` (softmax attention).

    With :math:`a = \|A(t)\|_2`, :math:`v = \|V(t)\|_2` and :math:`R` a bound on the supports
    of both solutions at time :math:`t`, the coupling cost
    :math:`D_p(t) = \|x - y\|_{L^p(\pi_t)}` of two solutions of the Transformer PDE
    (Castin, Ablin, Carrillo and Peyré, 2025) obeys :math:`\dot D_p \le L_p D_p`: the first
    term is the Lipschitz constant :math:`vaR^2` of :math:`\Gamma_\mu` in :math:`x`, the
    second bounds the dependence of :math:`\Gamma_\mu` on :math:`\mu` (Dobrushin, 1979;
    Golse, 2016). As :math:`R \to 0`, :math:`L_p \to v`.

    Parameters
    ----------
    a, v, R : float or arrays (broadcast together)
        Non-negative.
    p : float
        Order of the Wasserstein distance, ``p >= 1``.

    Returns
    -------
    float or array
        :math:`L_p` (``inf`` where it overflows float64).

    Examples
    --------
    As :math:`R \to 0`, :math:`L_p \to v`:

    >>> print(f"{gronwall_rate(1.0, 2.0, 0.0, 2.0):.6f}")
    2.000000

    References
    ----------
    :cite:`castin2025unified`
    """
    p = _checks.float_at_least(p, "p", 1.0)
    arrays = []
    for value, name in ((a, "a"), (v, "v"), (R, "R")):
        arr = _checks.real_array(value, name)
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(f"{name} must be finite and non-negative")
        arrays.append(arr)
    a, v, R = arrays
    aR2 = a * R**2
    with np.errstate(over="ignore"):
        rate = v * (aR2 + (1 + 2 * aR2) * np.exp(2 * aR2 / p))
    return float(rate) if rate.ndim == 0 else rate


def flow_jacobian(A: ArrayLike, V: ArrayLike, X0: ArrayLike, times: ArrayLike, *,
                  rtol: float = 1e-9,
                  atol: float = 1e-12) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Softmax particle flow :math:`X(t)` and Jacobian :math:`J(t) = \partial X(t)/\partial X_0`.

    .. math::

        \dot X = f(t, X), \quad f(t, X)_i = \Gamma_{\mu_X}(x_i) \text{ (softmax, } A(t), V(t)),
        \qquad \dot J = D_X f(t, X(t))\, J, \quad J(0) = I_{nd},

    the variational equation, with the exact Jacobian :math:`D_X f` of self-attention
    (:func:`transformer_pde.lipschitz.jacobian_matrix`; Castin, Ablin and Peyré, 2024),
    integrated jointly by ``solve_ivp`` (DOP853). For ``n`` tokens with uniform weights,
    :math:`\|J(t)\|_2` is the supremum of :math:`W_2(\mu(t), \nu(t)) / W_2(\mu_0, \nu_0)` over
    infinitesimal perturbations :math:`\nu_0` of the atoms of :math:`\mu_0`. Dense,
    :math:`O((nd)^2)` memory: for small ``n``.

    Parameters
    ----------
    A, V : arrays (d, d) or callables of t returning them
        Key-query and value matrices.
    X0 : array (n, d)
        Initial tokens (row-major: column ``i d + k`` of ``J`` is coordinate ``k`` of token
        ``i``).
    times : array (m,)
        Increasing times, ``times[0]`` the initial time.
    rtol, atol : float
        Tolerances of ``solve_ivp``.

    Returns
    -------
    X : array (m, n, d)
        The tokens at ``times``.
    J : array (m, n d, n d)
        The Jacobians at ``times``.

    Raises
    ------
    ValueError
        On bad shapes or non-increasing ``times``.
    RuntimeError
        If the integrator fails.

    Examples
    --------
    With :math:`V = 0` the tokens do not move and :math:`J(t) = I`:

    >>> import numpy as np
    >>> X0 = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> X, J = flow_jacobian(np.eye(2), np.zeros((2, 2)), X0, np.linspace(0.0, 1.0, 3))
    >>> print(J.shape, bool(np.allclose(J[-1], np.eye(4))), bool(np.allclose(X[-1], X0)))
    (3, 4, 4) True True

    References
    ----------
    :cite:`castin2025unified`
    """
    X0 = _checks.points(X0, "X0")
    n, d = X0.shape
    times = _checks.real_array(times, "times")
    rtol, atol = _checks.positive_float(rtol, "rtol"), _checks.nonnegative_float(atol, "atol")
    if times.ndim != 1 or times.size < 2 or not np.all(np.isfinite(times)) \
            or np.any(np.diff(times) <= 0):
        raise ValueError("times must be a finite, strictly increasing 1-D array of length >= 2")
    A_of, V_of = A, V
    if not callable(A):
        A_const = _checks.matrix(A, "A", (d, d))
        A_of = lambda t: A_const  # noqa: E731
    if not callable(V):
        V_const = _checks.matrix(V, "V", (d, d))
        V_of = lambda t: V_const  # noqa: E731
    nd = n * d

    def rhs(t, y):
        X = y[:nd].reshape(n, d)
        J = y[nd:].reshape(nd, nd)
        At, Vt = A_of(t), V_of(t)
        return np.concatenate([attention.softmax(X, At, Vt).ravel(),
                               (lipschitz.jacobian_matrix(X, At, Vt) @ J).ravel()])

    y0 = np.concatenate([X0.ravel(), np.eye(nd).ravel()])
    sol = solve_ivp(rhs, (times[0], times[-1]), y0, t_eval=times, method="DOP853",
                    rtol=rtol, atol=atol)
    if not sol.success:
        raise RuntimeError(f"flow_jacobian: integration failed: {sol.message}")
    return sol.y[:nd].T.reshape(-1, n, d), sol.y[nd:].T.reshape(-1, nd, nd)


def _half_circle(n_angles):
    angles = np.linspace(0.0, np.pi, n_angles, endpoint=False)
    return angles, np.stack([np.cos(angles), np.sin(angles)])


def heads_growth_rate(Vs: ArrayLike, n_angles: int = 4096) -> float:
    r"""Upper bound on :math:`\kappa = \max_{|u|=1} \sum_h |V_h^\top u|` (:math:`d = 2`).

    The growth rate of the support radius of multi-head attention,
    :math:`\frac{d}{dt}|x_i| \le R\,\kappa` with :math:`u = x_i/|x_i|` (derived in chapter 2 from
    the support bound of Castin, Ablin, Carrillo and Peyré, 2025). Maximised over
    ``n_angles`` directions of the half circle (:math:`u` and :math:`-u` give the same
    value), plus the grid's worst-case gap: the function is :math:`(\sum_h\|V_h\|_2)`-Lipschitz
    in the angle, so the value returned is :math:`\ge \kappa` and exceeds it by at most
    :math:`\frac{\pi}{2\,n_{\text{angles}}}\sum_h \|V_h\|_2`.

    Parameters
    ----------
    Vs : array (heads, 2, 2)
    n_angles : int

    Returns
    -------
    float
        An upper bound on :math:`\kappa`, within :math:`\frac{\pi}{2 n_{\text{angles}}}
        \sum_h\|V_h\|_2` of it.

    Raises
    ------
    ValueError
        If ``Vs`` is not a finite ``(heads, 2, 2)`` stack or ``n_angles`` is not a positive
        integer.

    Examples
    --------
    One head :math:`V = I`: :math:`\kappa = 1`:

    >>> import numpy as np
    >>> print(f"{heads_growth_rate(np.eye(2)[None]):.3f}")
    1.000

    References
    ----------
    :cite:`castin2025unified`
    """
    Vs = _checks.stack(Vs, "Vs", cols=2)
    if Vs.shape[1] != 2:
        raise ValueError(f"Vs must have shape (heads, 2, 2), got {Vs.shape}")
    n_angles = _checks.positive_int(n_angles, "n_angles")
    angles, directions = _half_circle(n_angles)
    values = np.linalg.norm(np.einsum("hij,ik->hjk", Vs, directions), axis=1).sum(axis=0)
    lip = sum(np.linalg.norm(V, 2) for V in Vs)
    return float(values.max() + lip * (np.pi / n_angles) / 2)


def support_radius(trajectory: ArrayLike) -> NDArray[np.float64]:
    r"""Support radius :math:`R(t) = \max_i |x_i(t)|` of a trajectory of shape ``(m, n, d)``.

    Parameters
    ----------
    trajectory : array (m, n, d)
        Tokens at ``m`` times.

    Returns
    -------
    array (m,)
        :math:`R(t_k) = \max_i |x_i(t_k)|`.

    Raises
    ------
    ValueError
        If ``trajectory`` is not a finite ``(m, n, d)`` array.

    Examples
    --------
    >>> import numpy as np
    >>> support_radius(np.array([[[3.0, 4.0], [1.0, 0.0]]])).tolist()
    [5.0]

    References
    ----------
    :cite:`castin2025unified`
    """
    traj = _checks.real_array(trajectory, "trajectory")
    if traj.ndim != 3 or not np.all(np.isfinite(traj)):
        raise ValueError(f"trajectory must be a finite array (m, n, d), got shape {traj.shape}")
    return np.linalg.norm(traj, axis=-1).max(axis=-1)


def smallest_distance(X: ArrayLike) -> float:
    r"""Smallest distance :math:`\min_{i < j} |x_i - x_j|` between the tokens ``X`` ``(n, d)``.

    When every token of :math:`\mu = \frac1n\sum_i\delta_{x_i}` moves by less than half of it,
    to :math:`y_i`, the identity coupling is optimal for :math:`W_p(\mu, \nu)`,
    :math:`\nu = \frac1n\sum_i\delta_{y_i}`, :math:`p \ge 1`: any other permutation
    :math:`\sigma` pairs some :math:`x_i` with :math:`y_{\sigma(i)}`, :math:`\sigma(i) \ne i`, at
    distance at least :math:`|x_i - x_{\sigma(i)}| - |x_{\sigma(i)} - y_{\sigma(i)}|`, more than
    half of it. Used to keep perturbations in the regime of the stability constants of
    Castin, Ablin, Carrillo and Peyré (2025) where :math:`W_p` is the norm of the displacement.

    Parameters
    ----------
    X : array (n, d)
        Tokens, ``n >= 2``.

    Returns
    -------
    float
        :math:`\min_{i < j} |x_i - x_j|`.

    Raises
    ------
    ValueError
        If ``X`` is not a finite ``(n, d)`` array with ``n >= 2``.

    Examples
    --------
    >>> import numpy as np
    >>> smallest_distance(np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]]))
    1.0

    References
    ----------
    :cite:`castin2025unified`
    """
    X = _checks.points(X, "X")
    if X.shape[0] < 2:
        raise ValueError(f"X must hold at least 2 tokens, got {X.shape[0]}")
    gaps = np.linalg.norm(X[:, None, :] - X[None, :, :], axis=-1)
    return float(gaps[np.triu_indices(X.shape[0], 1)].min())


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(10)


def cumulative_integral(g: Callable[[float], float], times: ArrayLike) -> NDArray[np.float64]:
    r""":math:`\int_{t_0}^{t_k} g(s)\,ds` at every :math:`t_k` of ``times``.

    10-point Gauss-Legendre quadrature on each interval :math:`[t_{k-1}, t_k]` (exact for
    polynomials of degree 19). ``g`` is a scalar function of one time.

    Parameters
    ----------
    g : callable
        ``g(s) -> float``.
    times : array (m,)
        Finite, strictly increasing times, ``m >= 2``.

    Returns
    -------
    array (m,)
        :math:`\int_{t_0}^{t_k} g`, 0 at ``times[0]``.

    Raises
    ------
    ValueError
        If ``times`` is not a finite, strictly increasing 1-D array of length >= 2.

    Examples
    --------
    >>> print([f"{v:.6f}" for v in cumulative_integral(lambda s: s, [0.0, 1.0, 2.0])])
    ['0.000000', '0.500000', '2.000000']
    """
    times = _checks.increasing_times(times, "times")
    a, b = times[:-1, None], times[1:, None]
    nodes = (a + b) / 2 + (b - a) / 2 * _GL_NODES
    values = np.array([[g(s) for s in row] for row in nodes])
    return np.concatenate([[0.0], np.cumsum((values @ _GL_WEIGHTS) * (b - a)[:, 0] / 2)])


def log_gronwall_constant(As: Callable[[float], ArrayLike], Vs: Callable[[float], ArrayLike],
                          R0: float, times: ArrayLike, p: float, *,
                          refine: int = 10) -> NDArray[np.float64]:
    r""":math:`\log C_p(t)` of the Grönwall constant at each of ``times``, a-priori radius.

    .. math::

        \log C_p(t) = \int_0^t \sum_h L_p\big(\|A_h(s)\|_2, \|V_h(s)\|_2, R(s)\big)\, ds,
        \qquad R(s) = R_0 \exp\int_0^s r(\tau)\,d\tau,

    with :math:`L_p` of :func:`gronwall_rate` (Dobrushin's coupling argument applied to the
    Transformer PDE of Castin, Ablin, Carrillo and Peyré, 2025), :math:`r = \|V\|_2` for
    one head and :math:`r = \kappa` (:func:`heads_growth_rate`) for several heads (the rates
    of the heads add). Trapezoid rule on a grid ``refine`` times finer than ``times``.

    Parameters
    ----------
    As, Vs : callables of t
        Returning ``(d, d)`` matrices (one head) or ``(heads, d, d)`` stacks.
    R0 : float
        Initial support radius.
    times : array (m,)
        Increasing times, ``times[0] = 0`` for the constant from time 0.
    p : float
        Order of the Wasserstein distance.

    Returns
    -------
    array (m,)
        :math:`\log C_p(t_k)`.

    Raises
    ------
    ValueError
        If ``R0``, ``p``, ``refine`` or ``times`` are not valid.

    Examples
    --------
    With :math:`A = 0` and :math:`V = I`, :math:`L_p = 1` and :math:`\log C_p(t) = t`:

    >>> import numpy as np
    >>> logC = log_gronwall_constant(lambda t: np.zeros((2, 2)), lambda t: np.eye(2), 1.0,
    ...                              [0.0, 0.5, 1.0], 2.0)
    >>> print([f"{v:.6f}" for v in logC])
    ['0.000000', '0.500000', '1.000000']

    References
    ----------
    :cite:`castin2025unified`
    """
    R0 = _checks.positive_float(R0, "R0")
    refine = _checks.positive_int(refine, "refine")
    times = _checks.increasing_times(times, "times")
    heads = np.ndim(Vs(times[0])) == 3

    def rate_of_support(t):
        return heads_growth_rate(Vs(t)) if heads else float(np.linalg.norm(Vs(t), 2))

    fine = np.linspace(times[0], times[-1], refine * (len(times) - 1) + 1)
    R = R0 * np.exp(cumulative_integral(rate_of_support, fine))
    rate = np.zeros_like(fine)
    for k, t in enumerate(fine):
        for A, V in zip(np.reshape(As(t), (-1,) + np.shape(As(t))[-2:]),
                        np.reshape(Vs(t), (-1,) + np.shape(Vs(t))[-2:]), strict=True):
            rate[k] += gronwall_rate(np.linalg.norm(A, 2), np.linalg.norm(V, 2), R[k], p)
    log_C = np.concatenate([[0.0], np.cumsum((rate[1:] + rate[:-1]) / 2 * np.diff(fine))])
    return log_C[::refine]


def l1_l2_norm(J: ArrayLike, n: int, d: int = 2, n_angles: int = 4096) -> float:
    r"""The :math:`\ell^1(\ell^2)` operator norm :math:`\max_j\max_{|u|=1}\sum_i |J_{ij}u|`.

    ``J`` is an ``(n d, n d)`` flow Jacobian with ``(d, d)`` blocks :math:`J_{ij}`. For
    infinitesimal perturbations of ``n`` distinct atoms of equal weights, it is the supremum
    of :math:`W_1(\mu(t), \nu(t)) / W_1(\mu_0, \nu_0)` (a single-atom perturbation is
    extremal, by convexity). :math:`d = 2`: the inner maximum is taken over ``n_angles``
    directions of the half circle, so the value is a lower bound, within a relative
    :math:`\pi / (2 n_{\text{angles}})` of the norm.

    Parameters
    ----------
    J : array (n d, n d)
        A flow Jacobian with ``(d, d)`` blocks.
    n : int
        Number of atoms.
    d : int
        Dimension, 2.
    n_angles : int
        Directions of the half circle.

    Returns
    -------
    float
        A lower bound on the norm, within a relative :math:`\pi/(2 n_{\text{angles}})`.

    Raises
    ------
    ValueError
        If ``d != 2`` or ``J`` is not a finite ``(n d, n d)`` matrix.

    Examples
    --------
    The identity moves each atom alone: norm 1.

    >>> import numpy as np
    >>> print(f"{l1_l2_norm(np.eye(4), 2):.6f}")
    1.000000

    References
    ----------
    :cite:`castin2025unified`
    """
    n = _checks.positive_int(n, "n")
    if d != 2:
        raise ValueError(f"d must be 2, got {d!r}")
    J = _checks.matrix(J, "J", (n * d, n * d))
    _, directions = _half_circle(_checks.positive_int(n_angles, "n_angles"))
    blocks = J.reshape(n, d, n, d)
    images = np.einsum("iajb,bk->jika", blocks, directions)
    return float(np.linalg.norm(images, axis=-1).sum(axis=1).max())
