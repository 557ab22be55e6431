r"""Stability of the Transformer PDE in Wasserstein distance: a Grönwall rate and the flow Jacobian.

- :func:`gronwall_rate`: the rate :math:`L_p(t)` of an explicit stability constant
  :math:`C_p(T, R_0) = \exp\int_0^T L_p` for softmax attention, by Dobrushin's coupling
  argument (Dobrushin, 1979; Golse, 2016) applied to the Transformer PDE of Castin, Ablin,
  Carrillo and Peyré (2025);
- :func:`flow_jacobian`: the Jacobian :math:`\partial X(t) / \partial X_0` of the particle
  flow, by the variational equation, whose top singular value is the worst-case
  amplification of an infinitesimal perturbation in :math:`W_2`.
"""

import numpy as np
from scipy.integrate import solve_ivp

from . import _checks, attention, lipschitz

__all__ = ["gronwall_rate", "flow_jacobian"]


def gronwall_rate(a, v, R, p):
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
    """
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise ValueError(f"p must be a number >= 1, got {p!r}") from None
    if not np.isfinite(p) or p < 1:
        raise ValueError(f"p must be a finite number >= 1, got {p!r}")
    arrays = []
    for value, name in ((a, "a"), (v, "v"), (R, "R")):
        arr = np.asarray(value, dtype=float)
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(f"{name} must be finite and non-negative")
        arrays.append(arr)
    a, v, R = arrays
    aR2 = a * R**2
    with np.errstate(over="ignore"):
        rate = v * (aR2 + (1 + 2 * aR2) * np.exp(2 * aR2 / p))
    return float(rate) if rate.ndim == 0 else rate


def flow_jacobian(A, V, X0, times, *, rtol=1e-9, atol=1e-12):
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
    """
    X0 = _checks.points(X0, "X0")
    n, d = X0.shape
    times = np.asarray(times, dtype=float)
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
