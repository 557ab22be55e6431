r"""Time integration of the particle system :math:`\dot x_i = \Gamma_{\mu(t)}(x_i)`.

A *field* is any callable ``field(t, X) -> array (n, d)``; :func:`attention_field` builds
one from an attention function of :mod:`transformer_pde.attention` with constant or
time-dependent parameters. :func:`integrate` solves the ODE with explicit Euler, classical
RK4 or SciPy's adaptive :func:`scipy.integrate.solve_ivp`; :func:`residual_stack` is a deep
residual Transformer of depth ``L``, which is exactly the explicit Euler scheme with step
``T/L`` (Castin et al., 2025; Sander et al., 2022; E, 2017).

Blow-up is never silent: when the tokens leave the ball of radius ``blowup_radius`` or a
value stops being finite, integration stops and :class:`BlowUpError` reports the time, the
reason and the trajectory up to the last recorded time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.integrate import BDF, DOP853, LSODA, RK23, RK45, Radau
from scipy.optimize import brentq

from . import _checks, _linalg, attention

__all__ = [
    "BlowUpError",
    "integrate",
    "residual_stack",
    "attention_field",
    "rescale",
    "rescaled_field",
    "FIXED_STEP_METHODS",
    "ADAPTIVE_METHODS",
]

FIXED_STEP_METHODS = ("euler", "rk4")
_SOLVERS = {"RK45": RK45, "RK23": RK23, "DOP853": DOP853, "Radau": Radau, "BDF": BDF,
            "LSODA": LSODA}
ADAPTIVE_METHODS = tuple(_SOLVERS)


class _NonFinite(Exception):
    def __init__(self, time):
        super().__init__(time)
        self.time = float(time)


class BlowUpError(RuntimeError):
    r"""Integration stopped because the solution blew up.

    Attributes
    ----------
    time : float
        Time at which the blow-up was detected.
    times : array (k,)
        The requested times reached before it.
    trajectory : array (k, n, d)
        The solution at those times.

    Examples
    --------
    :math:`\dot x = x^2` from :math:`x(0) = 1` blows up at :math:`t = 1`:

    >>> try:
    ...     integrate(lambda t, X: X**2, [[1.0]], [0.0, 0.5, 2.0])
    ... except BlowUpError as err:
    ...     print(f"{err.time:.3f}", err.times.tolist(), err.trajectory.shape)
    1.000 [0.0, 0.5] (2, 1, 1)
    """

    def __init__(self, message, *, time, times, trajectory):
        super().__init__(message)
        self.time = float(time)
        self.times = np.asarray(times)
        self.trajectory = np.asarray(trajectory)


def attention_field(attention: Callable[..., Any], /, **params: Any) -> Callable[..., Any]:
    r"""The field ``(t, X) -> attention(X, **params_at_t)`` of an attention variant.

    Each keyword whose value is callable is treated as a time-dependent parameter and
    evaluated at ``t`` (e.g. ``V=lambda t: np.cos(t) * np.eye(2)``); the others are passed
    unchanged. Example::

        field = attention_field(attention.softmax, A=A, V=lambda t: V0 + t * V1)

    Parameters
    ----------
    attention : callable
        An attention function ``attention(X, **params)``.
    **params
        Its parameters, constants or callables of ``t``.

    Returns
    -------
    callable
        ``field(t, X)``.

    Raises
    ------
    ValueError
        If ``attention`` is not callable.

    Examples
    --------
    With :math:`A = 0` softmax attention is the mean, here times :math:`V(2) = 2I`:

    >>> import numpy as np
    >>> from transformer_pde import attention
    >>> field = attention_field(attention.softmax, A=np.zeros((2, 2)), V=lambda t: t * np.eye(2))
    >>> print(field(2.0, np.array([[1.0, 0.0], [3.0, 0.0]])).tolist())
    [[4.0, 0.0], [4.0, 0.0]]

    References
    ----------
    :cite:`castin2025unified,sander2022sinkformers`
    """
    if not callable(attention):
        raise ValueError("attention must be callable, e.g. transformer_pde.attention.softmax")

    def field(t, X):
        kwargs = {k: (v(t) if callable(v) else v) for k, v in params.items()}
        return attention(X, **kwargs)

    field.__name__ = f"{getattr(attention, '__name__', 'attention')}_field"
    return field


def _check_times(times):
    t = _checks.real_array(times, "times")
    if t.ndim != 1 or t.size < 1:
        raise ValueError(f"times must be a 1-D array with at least one entry, got shape {t.shape}")
    if not np.all(np.isfinite(t)):
        raise ValueError("times contains non-finite values")
    if np.any(np.diff(t) <= 0):
        raise ValueError("times must be strictly increasing")
    return t


def _evaluate(field, t, X, shape):
    v = np.asarray(field(t, X), dtype=np.float64)
    if v.shape != shape:
        raise ValueError(f"field(t, X) must return an array of shape {shape}, got {v.shape}")
    return v


def _check_state(X, t, radius, times_done, traj_done):
    """Raise :class:`BlowUpError` if ``X`` is non-finite or outside the ball."""
    if not np.all(np.isfinite(X)):
        reason = "the state stopped being finite (NaN or inf)"
    else:
        r = float(np.max(np.linalg.norm(X, axis=-1)))
        if r <= radius:
            return
        reason = f"max |x_i| = {r:.4g} exceeds blowup_radius = {radius:.4g}"
    raise BlowUpError(f"blow-up detected at t = {t:.6g}: {reason}", time=t,
                      times=times_done, trajectory=traj_done)


def _fixed_step(field, X0, t, method, max_step, radius):
    n, d = X0.shape
    traj = np.empty((t.size, n, d))
    traj[0] = X0
    X = X0.copy()
    for k in range(t.size - 1):
        t0, t1 = t[k], t[k + 1]
        m = 1 if max_step is None else max(1, math.ceil((t1 - t0) / max_step - 1e-12))
        h = (t1 - t0) / m
        for s in range(m):
            ts = t0 + s * h
            with np.errstate(over="ignore", invalid="ignore"):
                if method == "euler":
                    X = X + h * _evaluate(field, ts, X, (n, d))
                else:
                    k1 = _evaluate(field, ts, X, (n, d))
                    k2 = _evaluate(field, ts + h / 2, X + (h / 2) * k1, (n, d))
                    k3 = _evaluate(field, ts + h / 2, X + (h / 2) * k2, (n, d))
                    k4 = _evaluate(field, ts + h, X + h * k3, (n, d))
                    X = X + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
            _check_state(X, ts + h, radius, t[: k + 1], traj[: k + 1])
        traj[k + 1] = X
    return traj


def _adaptive(field, X0, t, method, max_step, radius, rtol, atol):
    """SciPy's adaptive solvers (the steppers behind :func:`scipy.integrate.solve_ivp`).

    Stepping the solver ourselves keeps, on blow-up, the solution at every requested time
    reached, and locates the exit from the ball on the step's dense output.
    """
    n, d = X0.shape
    traj = [X0.copy()]
    if t.size == 1:
        return np.stack(traj)

    def rhs(s, y):
        with np.errstate(over="ignore", invalid="ignore"):
            v = _evaluate(field, s, y.reshape(n, d), (n, d))
        if not np.all(np.isfinite(v)):
            raise _NonFinite(s)
        return v.ravel()

    def radius_excess(s, dense):
        return float(np.max(np.linalg.norm(dense(s).reshape(n, d), axis=1))) - radius

    def non_finite(exc, k):
        return BlowUpError(f"blow-up detected at t = {exc.time:.6g}: the velocity field "
                           "stopped being finite (NaN or inf)", time=exc.time, times=t[:k],
                           trajectory=np.stack(traj))

    try:  # the solver evaluates the field at the initial state when it is built
        solver = _SOLVERS[method](rhs, t[0], X0.ravel(), t[-1], rtol=rtol, atol=atol,
                                  max_step=np.inf if max_step is None else max_step)
    except _NonFinite as exc:
        raise non_finite(exc, 1) from None
    k = 1
    while k < t.size:
        t_old = solver.t
        try:
            message = solver.step()
        except _NonFinite as exc:
            raise non_finite(exc, k) from None
        if solver.status == "failed":
            raise BlowUpError(f"blow-up suspected near t = {solver.t:.6g}: the {method} solver "
                              f"failed ({message})", time=solver.t, times=t[:k],
                              trajectory=np.stack(traj))
        dense = solver.dense_output()
        y_end = solver.y.reshape(n, d)
        outside = (not np.all(np.isfinite(y_end))
                   or np.max(np.linalg.norm(y_end, axis=1)) > radius)
        t_exit = solver.t
        if outside and np.all(np.isfinite(y_end)):
            t_exit = brentq(radius_excess, t_old, solver.t, args=(dense,), xtol=1e-14)
        while k < t.size and t[k] <= t_exit:
            traj.append(dense(t[k]).reshape(n, d))
            k += 1
        if outside:
            raise BlowUpError(f"blow-up detected at t = {t_exit:.6g}: max |x_i| reached "
                              f"blowup_radius = {radius:.4g}", time=t_exit, times=t[:k],
                              trajectory=np.stack(traj))
    return np.stack(traj)


def integrate(field: Callable[..., Any], X0: ArrayLike, times: ArrayLike, *, method: str = "DOP853",
              max_step: float | None = None, rtol: float = 1e-9, atol: float = 1e-12,
              blowup_radius: float = 1e8) -> NDArray[np.float64]:
    r"""Solve :math:`\dot X = \text{field}(t, X)` from ``X0`` at ``times[0]``.

    Parameters
    ----------
    field : callable
        ``field(t, X) -> array (n, d)``, e.g. from :func:`attention_field`.
    X0 : array (n, d)
        Initial tokens.
    times : array (k,)
        Strictly increasing times; the first is the initial time.
    method : str
        ``"euler"`` (explicit Euler, order 1) or ``"rk4"`` (classical Runge-Kutta, order 4):
        fixed steps, one per interval of ``times`` unless ``max_step`` subdivides them;
        or an adaptive method of :func:`scipy.integrate.solve_ivp` (``"DOP853"``, ``"RK45"``,
        ...) with tolerances ``rtol`` and ``atol``, stepped exactly as ``solve_ivp`` does.
    max_step : float, optional
        Largest step (fixed-step methods split each interval into equal steps no larger).
    blowup_radius : float
        Integration stops with :class:`BlowUpError` when a token leaves this ball or a
        value stops being finite.
    rtol, atol : float
        Tolerances of the adaptive methods.

    Returns
    -------
    array (k, n, d)
        The tokens at each of ``times``.

    Raises
    ------
    ValueError
        If ``field`` is not callable, ``X0`` is not a finite ``(n, d)`` array, ``times`` is not
        strictly increasing, ``method`` is unknown, ``field`` returns another shape, or
        ``max_step``, ``blowup_radius`` is not positive.
    BlowUpError
        If a token leaves the ball of radius ``blowup_radius`` or a value stops being finite.

    Examples
    --------
    >>> print(f"{integrate(lambda t, X: -X, [[1.0]], [0.0, 1.0])[-1, 0, 0]:.6f}")
    0.367879

    References
    ----------
    :cite:`hairer1993solving,virtanen2020scipy,castin2025unified`
    """
    if not callable(field):
        raise ValueError("field must be callable as field(t, X)")
    X0 = _checks.points(X0, "X0")
    t = _check_times(times)
    if max_step is not None:
        max_step = _checks.positive_float(max_step, "max_step")
    radius = _checks.positive_float(blowup_radius, "blowup_radius")
    rtol, atol = _checks.positive_float(rtol, "rtol"), _checks.nonnegative_float(atol, "atol")
    _check_state(X0, float(t[0]), radius, t[:0], np.empty((0, *X0.shape)))
    if method in FIXED_STEP_METHODS:
        return _fixed_step(field, X0, t, method, max_step, radius)
    if method in ADAPTIVE_METHODS:
        return _adaptive(field, X0, t, method, max_step, radius, rtol, atol)
    raise ValueError(f"method must be one of {FIXED_STEP_METHODS + ADAPTIVE_METHODS}, "
                     f"got {method!r}")


def residual_stack(field: Callable[..., Any], X0: ArrayLike, T: float,
                   L: int) -> NDArray[np.float64]:
    r"""Outputs of a residual network of depth ``L``.

    .. math::

        X^{\ell+1} = X^\ell + \frac{T}{L}\,\text{field}(\ell T/L, X^\ell), \qquad 0 \le \ell < L.

    This is the explicit Euler scheme of :math:`\dot X = \text{field}(t, X)` on
    :math:`[0, T]` with step :math:`T/L`; returns all ``L + 1`` layers' tokens,
    shape ``(L + 1, n, d)``.

    Parameters
    ----------
    field : callable
        ``field(t, X) -> array (n, d)``.
    X0 : array (n, d)
        Input tokens.
    T : float
        Total time, positive.
    L : int
        Depth, positive.

    Returns
    -------
    array (L + 1, n, d)

    Raises
    ------
    ValueError
        If ``T`` or ``L`` is not positive, or as in :func:`integrate`.
    BlowUpError
        As in :func:`integrate`.

    Examples
    --------
    Two layers of :math:`x \mapsto x + \tfrac12 x`:

    >>> print(residual_stack(lambda t, X: X, [[1.0]], 1.0, 2)[:, 0, 0].tolist())
    [1.0, 1.5, 2.25]

    References
    ----------
    :cite:`e2017proposal,he2016deep,sander2022residual`
    """
    L = _checks.positive_int(L, "L")
    T = _checks.positive_float(T, "T")
    return integrate(field, X0, np.linspace(0.0, T, L + 1), method="euler")


def rescale(trajectory: ArrayLike, times: ArrayLike, V: ArrayLike) -> NDArray[np.float64]:
    r"""Rescaled tokens :math:`z_i(t) = e^{-tV} x_i(t)` (Geshkovski et al., 2023).

    ``trajectory`` has shape ``(k, n, d)`` at ``times`` (shape ``(k,)``); ``V`` is constant.
    :math:`e^{-tV}` is computed directly (never as the inverse of :math:`e^{tV}`): exactly
    from the exponentials of the diagonal when ``V`` is diagonal, through the eigenvectors of
    ``V`` when they are well conditioned, with :func:`scipy.linalg.expm` otherwise.

    Parameters
    ----------
    trajectory : array (k, n, d)
        Tokens at ``times``.
    times : array (k,)
        Finite times.
    V : array (d, d)
        Value matrix.

    Returns
    -------
    array (k, n, d)

    Raises
    ------
    ValueError
        If the shapes do not match or a time is not finite.

    Examples
    --------
    Tokens moving as :math:`e^{t}x_0` under :math:`V = I` rescale to :math:`x_0`:

    >>> import numpy as np
    >>> t = np.array([0.0, 0.5, 1.0])
    >>> traj = np.exp(t)[:, None, None] * np.array([[1.0, 2.0]])
    >>> print(bool(np.allclose(rescale(traj, t, np.eye(2)), [[1.0, 2.0]], atol=1e-12)))
    True

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    traj = _checks.real_array(trajectory, "trajectory")
    t = _checks.real_array(times, "times")
    if traj.ndim != 3 or t.shape != (traj.shape[0],):
        raise ValueError(f"trajectory must have shape (k, n, d) with k = len(times), got "
                         f"{traj.shape} and times of shape {t.shape}")
    if not np.all(np.isfinite(t)):
        raise ValueError("times contains non-finite values")
    if not np.all(np.isfinite(traj)):
        raise ValueError("trajectory contains non-finite values (NaN or inf)")
    V = _checks.matrix(V, "V", shape=(traj.shape[2], traj.shape[2]))
    exp_V = _linalg.exponential(V)
    return np.stack([x @ exp_V(-tk).T for tk, x in zip(t, traj, strict=True)])


def rescaled_field(field: Callable[..., Any] | None, V: ArrayLike, *,
                   A: ArrayLike | None = None) -> Callable[..., Any]:
    r"""The velocity field of the rescaled tokens :math:`z = e^{-tV} x`.

    .. math::

        \dot z = -Vz + e^{-tV}\,\text{field}(t, e^{tV} z).

    For softmax self-attention with constant :math:`A = K^\top Q` and :math:`V` (pass
    ``field=None`` and ``A``), :math:`e^{-tV} V x_j = V z_j` gives the closed form of
    Geshkovski, Letrouit, Polyanskiy and Rigollet (2023),

    .. math::

        \dot z_i = \sum_j P_{ij}(t)\, V (z_j - z_i), \qquad
        P_{ij}(t) = \frac{e^{\langle A e^{tV} z_i,\, e^{tV} z_j\rangle}}
                         {\sum_k e^{\langle A e^{tV} z_i,\, e^{tV} z_k\rangle}},

    the same attention matrix as for :math:`x`. It is evaluated with the logits
    :math:`\langle B(t) z_i, z_j\rangle`, :math:`B(t) = e^{tV^\top} A e^{tV}`, through
    log-sum-exp, so it stays accurate when :math:`e^{tV}` is large (attention is then a
    hardmax): no inverse of :math:`e^{tV}` is formed and no cancellation between
    :math:`-Vz` and a large term occurs. The logits overflow only when :math:`\|B(t)\|`
    approaches :math:`10^{308}` (e.g. :math:`t \approx 350` for :math:`V = A = I`).

    For a general ``field`` the first formula is used with :math:`e^{-tV}` computed
    directly (as in :func:`rescale`), never as an inverse of :math:`e^{tV}`.

    Parameters
    ----------
    field : callable or None
        ``field(t, X)``, or ``None`` for softmax attention with ``A`` and ``V``.
    V : array (d, d)
        Value matrix.
    A : array (d, d), optional
        Key-query matrix, with ``field=None`` only.

    Returns
    -------
    callable
        ``zfield(t, Z)``.

    Raises
    ------
    ValueError
        If ``A`` is missing with ``field=None``, given with a ``field``, or a shape is wrong.

    Examples
    --------
    The closed form of softmax agrees with the general formula:

    >>> import numpy as np
    >>> from transformer_pde import attention
    >>> A, V = np.array([[1.0, 0.2], [0.0, 0.5]]), np.array([[0.5, 0.1], [0.0, 0.3]])
    >>> Z = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5]])
    >>> closed = rescaled_field(None, V, A=A)(0.3, Z)
    >>> general = rescaled_field(attention_field(attention.softmax, A=A, V=V), V)(0.3, Z)
    >>> print(bool(np.allclose(closed, general, atol=1e-12)))
    True

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    V = _checks.matrix(V, "V", square=True)
    d = V.shape[0]
    exp_V = _linalg.exponential(V)
    if field is None:
        if A is None:
            raise ValueError("A must be given when field is None (the softmax field)")
        A = _checks.matrix(A, "A", shape=(d, d))

        def zfield(t, Z):
            E = exp_V(t)
            B = E.T @ A @ E
            # logits <A e^{tV} z_i, e^{tV} z_j> = <B z_i, z_j>: softmax attention of Z with B
            return attention.softmax(Z, B, V) - Z @ V.T

        zfield.__name__ = "rescaled_softmax_field"
        return zfield
    if A is not None:
        raise ValueError("A is only used with field=None (the softmax field)")
    if not callable(field):
        raise ValueError("field must be callable as field(t, X), or None with A given")

    def general_zfield(t, Z):
        X = Z @ exp_V(t).T
        return -Z @ V.T + np.asarray(field(t, X)) @ exp_V(-t).T

    return general_zfield
