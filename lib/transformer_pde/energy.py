r"""The interaction energy of softmax self-attention in :math:`\mathbb R^d` and its gradient flows.

For a symmetric key-query matrix :math:`A = K^\top Q`,

.. math::

    E(x_1, \dots, x_n) = \sum_{i,j=1}^n e^{\langle A x_i, x_j\rangle},
    \qquad \nabla_{x_i} E = 2 \sum_j e^{\langle A x_i, x_j\rangle} A x_j
    = 2 Z_i\, A \sum_j P_{ij} x_j ,

with :math:`Z_i = \sum_k e^{\langle A x_i, x_k\rangle}` and :math:`P` the attention matrix. So the
*unnormalised* dynamics :math:`\dot x_i = \frac1n \sum_j e^{\langle A x_i, x_j\rangle} A x_j` is
the Euclidean gradient flow of :math:`E/2n`, and softmax self-attention with :math:`V = I_d`,
:math:`\dot x_i = \sum_j P_{ij} x_j`, is the gradient flow of :math:`E` for the metric
:math:`g_x(\xi, \xi) = \sum_i 2 Z_i(x) \langle A\xi_i, \xi_i\rangle` when :math:`A \succ 0`. On
the sphere these are the energies of Geshkovski, Letrouit, Polyanskiy and Rigollet (*A
mathematical perspective on Transformers*, Bull. AMS 2025). Everything is computed in the log
domain: :math:`E` overflows as soon as the logits pass about 700.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

from . import _checks

__all__ = ["log_interaction_energy", "log_energy_gradient", "attention_metric_weights",
           "log_energy_rate", "energy_balance", "energy_identity_gap"]


def _tokens_and_A(X, A):
    X = _checks.points(X, "X")
    d = X.shape[1]
    A = _checks.matrix(A, "A", shape=(d, d))
    if np.max(np.abs(A - A.T)) > 1e-12 * max(float(np.max(np.abs(A))), 1e-300):
        raise ValueError("A must be symmetric (the energy's gradient uses A = A^T)")
    return X, A


def log_interaction_energy(X: ArrayLike, A: ArrayLike) -> float:
    r""":math:`\log E = \log \sum_{i,j} e^{\langle A x_i, x_j\rangle}` (log-sum-exp).

    Parameters
    ----------
    X : array (n, d)
    A : array (d, d), symmetric

    Returns
    -------
    float

    Examples
    --------
    Two orthogonal unit tokens, :math:`A = I`: :math:`E = 2e + 2`:

    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> bool(abs(log_interaction_energy(X, np.eye(2)) - np.log(2 * np.e + 2)) < 1e-12)
    True

    References
    ----------
    geshkovski2025mathematical, sander2022sinkformers
    """
    X, A = _tokens_and_A(X, A)
    return float(logsumexp(X @ A @ X.T))


def log_energy_gradient(X: ArrayLike, A: ArrayLike) -> NDArray[np.float64]:
    r"""The gradient of :math:`\log E`, shape ``(n, d)``.

    .. math::

        \nabla_{x_i} \log E = \frac{2}{E}\sum_j e^{\langle A x_i, x_j\rangle} A x_j .

    Parameters
    ----------
    X : array (n, d)
        Tokens :math:`x_i`.
    A : array (d, d), symmetric

    Returns
    -------
    array (n, d)
        :math:`\nabla_{x_i}\log E` for each token.

    Raises
    ------
    ValueError
        If ``X`` is not a finite ``(n, d)`` array or ``A`` is not a symmetric ``(d, d)`` matrix.

    Examples
    --------
    The gradient matches a central finite difference of :func:`log_interaction_energy`:

    >>> import numpy as np
    >>> X, A = np.array([[1.0, 0.2], [0.1, 0.8]]), np.array([[1.0, 0.3], [0.3, 0.5]])
    >>> E = np.zeros_like(X); E[0, 1] = 1e-6
    >>> fd = (log_interaction_energy(X + E, A) - log_interaction_energy(X - E, A)) / 2e-6
    >>> bool(abs(log_energy_gradient(X, A)[0, 1] - fd) < 1e-8)
    True

    References
    ----------
    geshkovski2025mathematical, sander2022sinkformers
    """
    X, A = _tokens_and_A(X, A)
    logits = X @ A @ X.T
    weights = np.exp(logits - logsumexp(logits))
    return 2.0 * (weights @ X) @ A


def attention_metric_weights(X: ArrayLike, A: ArrayLike) -> NDArray[np.float64]:
    r"""The weights :math:`2 Z_i / E` of the metric of self-attention as a gradient flow.

    With :math:`V = I_d` and :math:`A \succ 0`, the velocity of softmax self-attention is
    :math:`\dot x_i = \sum_j P_{ij} x_j = (2 Z_i A)^{-1} \nabla_{x_i} E
    = (c_i A)^{-1} \nabla_{x_i} \log E` with :math:`c_i = 2 Z_i / E`, returned here (shape
    ``(n,)``); along the flow :math:`\frac{d}{dt}\log E = \sum_i c_i \langle A \dot x_i,
    \dot x_i\rangle \ge 0`.

    Parameters
    ----------
    X : array (n, d)
        Tokens :math:`x_i`.
    A : array (d, d), symmetric

    Returns
    -------
    array (n,)
        :math:`c_i = 2 Z_i / E`, :math:`Z_i = \sum_j e^{\langle A x_i, x_j\rangle}`,
        :math:`E = \sum_i Z_i`; they sum to 2.

    Raises
    ------
    ValueError
        If ``X`` is not a finite ``(n, d)`` array or ``A`` is not a symmetric ``(d, d)`` matrix.

    Examples
    --------
    Symmetric configurations give equal weights :math:`2/n`:

    >>> import numpy as np
    >>> c = attention_metric_weights(np.array([[1.0, 0.0], [-1.0, 0.0]]), np.eye(2))
    >>> print([f"{ci:.6f}" for ci in c])
    ['1.000000', '1.000000']

    References
    ----------
    geshkovski2025mathematical, sander2022sinkformers
    """
    X, A = _tokens_and_A(X, A)
    logits = X @ A @ X.T
    return 2.0 * np.exp(logsumexp(logits, axis=1) - logsumexp(logits))


def log_energy_rate(X: ArrayLike, A: ArrayLike) -> float:
    r"""The rate :math:`\frac{d}{dt}\log E` along softmax self-attention with :math:`V = I_d`.

    .. math::

        \frac{d}{dt}\log E = \sum_i c_i \langle A m_i, m_i\rangle, \qquad
        m_i = \sum_j P_{ij} x_j = \dot x_i, \qquad c_i = \frac{2 Z_i}{E},

    the dissipation identity of the gradient-flow reading (Geshkovski, Letrouit, Polyanskiy and
    Rigollet; Sander et al.), evaluated at the configuration ``X`` in the log domain.

    Parameters
    ----------
    X : array (n, d)
        Unrescaled tokens :math:`x_i`.
    A : array (d, d), symmetric

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``X`` is not a finite ``(n, d)`` array or ``A`` is not a symmetric ``(d, d)`` matrix.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> round(log_energy_rate(X, np.eye(2)), 12) > 0
    True

    References
    ----------
    geshkovski2025mathematical, sander2022sinkformers
    """
    X, A = _tokens_and_A(X, A)
    logits = X @ A @ X.T
    log_Z = logsumexp(logits, axis=1)
    M = np.exp(logits - log_Z[:, None]) @ X
    c = 2.0 * np.exp(log_Z - logsumexp(log_Z))
    return float(np.sum(c * np.einsum("id,de,ie->i", M, A, M)))


def energy_balance(z: ArrayLike, t: ArrayLike, A: ArrayLike) -> NDArray[np.float64]:
    r"""Relative mismatch of the energy identity along a rescaled trajectory (:math:`V = I_d`).

    For :math:`x = e^{t} z` sampled on an equally spaced grid with an even number of steps,
    compares on each pair of steps :math:`[t_{2k}, t_{2k+2}]` the increment of
    :math:`\log E(x)` with Simpson's rule applied to :func:`log_energy_rate`:

    .. math::

        r_k = \frac{\big|\log E(t_{2k+2}) - \log E(t_{2k})
              - \tfrac{h}{3}(\rho_{2k} + 4\rho_{2k+1} + \rho_{2k+2})\big|}
              {|\log E(t_{2k+2}) - \log E(t_{2k})|}.

    On a solution of softmax self-attention :math:`r_k` is Simpson's error, of order
    :math:`h^4`; a trajectory that is not one (tokens frozen, or moving at another speed)
    breaks the identity at order one wherever the tokens are not yet clustered.

    Parameters
    ----------
    z : array (T, n, d)
        Rescaled tokens on the grid.
    t : array (T,)
        Equally spaced times, ``T`` odd (an even number of steps).
    A : array (d, d), symmetric

    Returns
    -------
    array (T // 2,)
        The relative mismatches :math:`r_k`.

    Raises
    ------
    ValueError
        If the shapes disagree, the grid is not equally spaced or has an odd number of steps.

    Examples
    --------
    >>> import numpy as np
    >>> t = np.linspace(0.0, 0.2, 3)
    >>> z = np.repeat(np.array([[[1.0, 0.0], [0.0, 1.0]]]), 3, axis=0)
    >>> bool(energy_balance(z, t, np.eye(2))[0] > 0.1)  # frozen tokens: not a solution
    True

    References
    ----------
    geshkovski2025mathematical, sander2022sinkformers
    """
    z, t = _checks.real_array(z, "z"), _checks.real_array(t, "t")
    if not (np.all(np.isfinite(z)) and np.all(np.isfinite(t))):
        raise ValueError("z and t must be finite (no NaN or inf)")
    if z.ndim != 3 or t.ndim != 1 or len(t) != len(z):
        raise ValueError("z must have shape (T, n, d) and t shape (T,)")
    if len(t) < 3 or len(t) % 2 == 0:
        raise ValueError("t must have an odd number of points (an even number of steps)")
    h = np.diff(t)
    if np.max(np.abs(h - h[0])) > 1e-9 * abs(h[0]) or h[0] <= 0:
        raise ValueError("t must be equally spaced and increasing")
    x = np.exp(t)[:, None, None] * z
    logE = np.array([log_interaction_energy(xk, A) for xk in x])
    rate = np.array([log_energy_rate(xk, A) for xk in x])
    increment = logE[2::2] - logE[:-2:2]
    simpson = h[0] / 3.0 * (rate[:-2:2] + 4.0 * rate[1::2] + rate[2::2])
    return np.abs(increment - simpson) / np.maximum(np.abs(increment), 1e-300)


def _attention_average(t, Z, A):
    """sum_j P_ij z_j and log Z_i at x = e^t z (V = I), for a stack Z of shape (k, n, d)."""
    logits = np.exp(2.0 * t) * (Z @ A) @ Z.transpose(0, 2, 1)
    top = logits.max(axis=2, keepdims=True)
    weights = np.exp(logits - top)
    total = weights.sum(axis=2, keepdims=True)
    return (weights / total) @ Z, (top + np.log(total))[..., 0]


def _rescaled_attention_velocity(t, Z, A):
    """The rescaled self-attention velocity sum_j P_ij z_j - z_i (V = I), stacked runs."""
    return _attention_average(t, Z, A)[0] - Z


def _velocity_and_rate(t, Z, A):
    r"""The velocity of the rescaled tokens and d/dt log E at x = e^t z, stacked runs."""
    M, log_Z = _attention_average(t, Z, A)  # M_i = sum_j P_ij z_j = e^-t m_i
    top = log_Z.max(axis=1, keepdims=True)
    c = np.exp(log_Z - top)
    c *= 2.0 / c.sum(axis=1, keepdims=True)
    return M - Z, np.exp(2.0 * t) * np.einsum("ki,kid,kid->k", c, M @ A, M)


def energy_identity_gap(Z0: ArrayLike, times: ArrayLike, A: ArrayLike, *,
                        velocity: Callable[..., Any] | None = None, accuracy: float = 1e-8,
                        rtol: float = 1e-12, atol: float = 1e-14
                        ) -> tuple[NDArray[np.float64], NDArray[np.float64],
                                   NDArray[np.float64]]:
    r"""The energy identity along runs of self-attention, integrated with the runs.

    Integrates, for each run :math:`r` of a stack, the rescaled tokens
    :math:`\dot z_i = \sum_j P_{ij} z_j - z_i` (:math:`V = I_d`, logits
    :math:`e^{2t}\langle A z_i, z_j\rangle`) together with the integral of the rate of
    :func:`log_energy_rate`,

    .. math::

        L(t) = \int_0^t \sum_i c_i \langle A m_i, m_i\rangle\,ds, \qquad
        m_i = \sum_j P_{ij} x_j,\quad c_i = \frac{2 Z_i}{E},\quad x = e^{s} z,

    as one system with one adaptive solver (DOP853, tolerances ``rtol``, ``atol``), and
    returns on each step :math:`[t_k, t_{k+1}]` of ``times`` the relative gap

    .. math::

        g_k = \frac{\big|\log E(x(t_{k+1})) - \log E(x(t_k)) - (L(t_{k+1}) - L(t_k))\big|}
                   {|\log E(x(t_{k+1})) - \log E(x(t_k))|}.

    By the identity :math:`\frac{d}{dt}\log E = \sum_i c_i\langle A\dot x_i, \dot x_i\rangle`
    (Geshkovski, Letrouit, Polyanskiy and Rigollet's gradient-flow reading), :math:`g_k = 0`
    on exact solutions: no quadrature error enters, only the solver's. With
    ``velocity`` the tokens follow another motion while :math:`L` integrates the same rate
    (tokens frozen, moving at another speed): the identity then fails, at order one wherever
    the attention is spread.

    What the solver's errors can contribute is bounded a priori. If every computed token is
    within :math:`\varepsilon` of the exact one and :math:`|x_j| \le R`, the mean value theorem
    and :math:`\nabla_{x_i}\log E = \frac{2}{E}\sum_j e^{\langle A x_i, x_j\rangle} A x_j`
    (weights summing to one over :math:`i, j`) give
    :math:`|\delta \log E| \le 2\|A\|_2 (R + \varepsilon)\varepsilon`. With
    :math:`\varepsilon = ` ``accuracy`` :math:`\cdot e^{t}\max_j |z_j|` and an error of at
    most ``accuracy`` :math:`\cdot (|L| + 1)` in :math:`L`, the returned allowance is

    .. math::

        a_k = \frac{\sum_{l \in \{k, k+1\}} 2\|A\|_2 (R_l + \varepsilon_l)\varepsilon_l
              + \mathrm{accuracy}\,(|L(t_l)| + 1)}{|\log E(x(t_{k+1})) - \log E(x(t_k))|},

    so that :math:`g_k \le a_k` on a solution computed to that accuracy: a check
    :math:`g_k \le \tau + a_k` has no false alarm, whatever the draw.

    Parameters
    ----------
    Z0 : array (k, n, d)
        Initial tokens of ``k`` runs.
    times : array (m,)
        Increasing times from which the gaps are read, the first the initial time.
    A : array (d, d), symmetric positive semi-definite
    velocity : callable, optional
        ``velocity(t, Z) -> array (k, n, d)``, the motion of the rescaled tokens; default
        self-attention, as above.
    rtol, atol : float
        Tolerances of the solver.

    Returns
    -------
    z : array (m, k, n, d)
        The rescaled tokens at ``times``.
    gaps : array (m - 1, k)
        The relative gaps :math:`g_k` of each run.
    allowance : array (m - 1, k)
        The bound :math:`a_k` on what the solver's errors contribute to :math:`g_k`.

    Raises
    ------
    ValueError
        If ``Z0`` is not a finite ``(k, n, d)`` array, ``A`` not symmetric ``(d, d)``,
        ``times`` not increasing, ``velocity`` not callable, or a tolerance or
        ``accuracy`` not positive.

    Examples
    --------
    >>> import numpy as np
    >>> Z0 = np.array([[[1.0, 0.0], [0.0, 1.0], [-0.5, -0.5]]])
    >>> z, gaps, allowance = energy_identity_gap(Z0, np.linspace(0.0, 1.0, 11), np.eye(2))
    >>> bool(np.all(gaps <= allowance) and allowance.max() < 1e-5)
    True

    References
    ----------
    geshkovski2025mathematical, sander2022sinkformers
    """
    from scipy.integrate import solve_ivp

    Z0 = _checks.real_array(Z0, "Z0")
    if Z0.ndim != 3 or 0 in Z0.shape or not np.all(np.isfinite(Z0)):
        raise ValueError(f"Z0 must be a finite array of shape (k, n, d), got {Z0.shape}")
    k, n, d = Z0.shape
    _, A = _tokens_and_A(Z0[0], A)
    t = _checks.increasing_times(times, "times")
    rtol = _checks.positive_float(rtol, "rtol")
    atol = _checks.positive_float(atol, "atol")
    accuracy = _checks.positive_float(accuracy, "accuracy")
    if velocity is not None and not callable(velocity):
        raise ValueError("velocity must be callable as velocity(t, Z)")

    def field(s, y):
        Z = y[: k * n * d].reshape(k, n, d)
        dZ, rate = _velocity_and_rate(s, Z, A)
        if velocity is not None:
            dZ = np.asarray(velocity(s, Z), dtype=np.float64)
        return np.concatenate([dZ.reshape(-1), rate])

    y0 = np.concatenate([Z0.reshape(-1), np.zeros(k)])
    sol = solve_ivp(field, (t[0], t[-1]), y0, method="DOP853", t_eval=t, rtol=rtol,
                    atol=atol)
    if not sol.success:
        raise RuntimeError(f"the solver failed: {sol.message}")
    z = sol.y[: k * n * d].T.reshape(len(t), k, n, d)
    L = sol.y[k * n * d:].T
    x = np.exp(t)[:, None, None, None] * z
    logE = np.array([[log_interaction_energy(x[m, r], A) for r in range(k)]
                     for m in range(len(t))])
    increment = np.maximum(np.abs(np.diff(logE, axis=0)), 1e-300)
    gaps = np.abs(np.diff(logE, axis=0) - np.diff(L, axis=0)) / increment
    R = np.exp(t)[:, None] * np.linalg.norm(z, axis=3).max(axis=2)
    eps = accuracy * R
    per_time = (2.0 * np.linalg.norm(A, 2) * (R + eps) * eps
                + accuracy * (np.abs(L) + 1.0))
    return z, gaps, (per_time[:-1] + per_time[1:]) / increment
