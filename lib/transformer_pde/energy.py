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

__all__ = ["log_interaction_energy", "log_energy_gradient", "attention_metric_weights"]


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
