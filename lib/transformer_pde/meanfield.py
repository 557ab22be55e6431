r"""When is the mean-field Monte Carlo error of softmax attention square-integrable?

For Gaussian tokens :math:`x, y \sim \mathcal N(\alpha, \Sigma)` (independent), the softmax
interaction weight :math:`e^{\langle Ax, y\rangle}` has a finite second moment if and only if

.. math::

    \rho = \|\Sigma^{1/2} A \Sigma^{1/2}\|_2 < \tfrac12 ,

and then :math:`\mathbb E[e^{2\langle Ax, y\rangle}]` is an explicit Gaussian integral. This is
the condition under which the central limit theorem gives the :math:`n^{-1/2}` rate to the
particle approximation of the Transformer PDE of Castin, Ablin, Carrillo and Peyré (2025).
"""

import numpy as np

from . import _checks
from .gaussian import _check_moments, psd_sqrt

__all__ = ["interaction_strength", "softmax_weight_second_moment"]


def _gaussian(alpha, Sigma):
    """A mean (d,) and a symmetric positive definite covariance (d, d)."""
    alpha, Sigma = _check_moments(alpha, Sigma)
    if np.linalg.eigvalsh(Sigma)[0] <= 0:
        raise ValueError("Sigma must be positive definite")
    return alpha, Sigma


def interaction_strength(A, Sigma):
    r"""The interaction strength :math:`\rho = \|\Sigma^{1/2} A \Sigma^{1/2}\|_2`.

    :math:`\langle Ax, y\rangle` for independent :math:`x, y \sim \mathcal N(\alpha, \Sigma)`
    has the quadratic part :math:`w^\top B u`, :math:`B = \Sigma^{1/2} A \Sigma^{1/2}`,
    :math:`u, w` standard Gaussian; :math:`\rho = \sigma_{\max}(B)` sets the tail of the
    softmax weights: :math:`P(e^{\langle Ax, y\rangle} > s)` decays like :math:`s^{-1/\rho}`
    up to slower factors (Castin, Ablin, Carrillo and Peyré, 2025, for the model).

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix.
    Sigma : array (d, d)
        Covariance, symmetric positive definite.

    Returns
    -------
    float
    """
    Sigma = _checks.matrix(Sigma, "Sigma", square=True)
    _, Sigma = _gaussian(np.zeros(Sigma.shape[0]), Sigma)
    A = _checks.matrix(A, "A", Sigma.shape)
    S = psd_sqrt(Sigma)
    return float(np.linalg.norm(S @ A @ S, 2))


def softmax_weight_second_moment(A, alpha, Sigma):
    r"""Second moment :math:`\mathbb E[e^{2\langle Ax, y\rangle}]`, :math:`x, y` i.i.d. Gaussian.

    With :math:`S = \Sigma^{1/2}`, :math:`B = SAS`, :math:`z = (u, w) \sim \mathcal N(0, I_{2d})`,
    :math:`x = \alpha + Su`, :math:`y = \alpha + Sw`:

    .. math::

        2\langle Ax, y\rangle = 2c + 2 b^\top z + z^\top H z, \quad
        H = \begin{pmatrix} 0 & B^\top \\ B & 0 \end{pmatrix}, \quad
        b = \begin{pmatrix} S A^\top \alpha \\ S A \alpha \end{pmatrix}, \quad
        c = \alpha^\top A \alpha,

    and the eigenvalues of :math:`H` are :math:`\pm\sigma_i(B)`. The Gaussian integral is
    finite if and only if :math:`I - 2H \succ 0`, that is :math:`\rho = \sigma_{\max}(B) < 1/2`,
    and then

    .. math::

        \mathbb E[e^{2\langle Ax, y\rangle}] = \det(I - 2H)^{-1/2}
        \exp\big(2c + 2 b^\top (I - 2H)^{-1} b\big),
        \qquad \det(I - 2H) = \prod_i \big(1 - 4\sigma_i(B)^2\big).

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix.
    alpha : array (d,)
        Mean.
    Sigma : array (d, d)
        Covariance, symmetric positive definite.

    Returns
    -------
    float
        The second moment, or ``numpy.inf`` when :math:`\rho \ge 1/2` (the integrand does
        not decay along the top singular direction of :math:`B`) or when the finite value
        overflows float64.
    """
    alpha, Sigma = _gaussian(alpha, Sigma)
    d = alpha.shape[0]
    A = _checks.matrix(A, "A", (d, d))
    S = psd_sqrt(Sigma)
    B = S @ A @ S
    if np.linalg.norm(B, 2) >= 0.5:
        return np.inf
    H = np.block([[np.zeros((d, d)), B.T], [B, np.zeros((d, d))]])
    M = np.eye(2 * d) - 2 * H
    b = np.concatenate([S @ A.T @ alpha, S @ A @ alpha])
    _, logdet = np.linalg.slogdet(M)
    log_moment = -0.5 * logdet + 2 * alpha @ A @ alpha + 2 * b @ np.linalg.solve(M, b)
    with np.errstate(over="ignore"):
        return float(np.exp(log_moment))

