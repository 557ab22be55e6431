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

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

from . import _checks

__all__ = ["log_interaction_energy", "log_energy_gradient", "attention_metric_weights",
           "log_energy_rate", "energy_balance"]


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
    """
    X, A = _tokens_and_A(X, A)
    return float(logsumexp(X @ A @ X.T))


def log_energy_gradient(X: ArrayLike, A: ArrayLike) -> NDArray[np.float64]:
    r"""The gradient of :math:`\log E`, shape ``(n, d)``.

    .. math::

        \nabla_{x_i} \log E = \frac{2}{E}\sum_j e^{\langle A x_i, x_j\rangle} A x_j .
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
    z = np.asarray(z, dtype=float)
    t = np.asarray(t, dtype=float)
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
