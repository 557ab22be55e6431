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

import numpy as np
from scipy.linalg import solve_continuous_lyapunov

from . import _checks
from .gaussian import _check_moments, psd_sqrt

__all__ = ["wasserstein2", "tangent_matrix", "metric_speed", "field_norm"]


def wasserstein2(alpha1, Sigma1, alpha2, Sigma2):
    r"""The 2-Wasserstein distance between two Gaussian measures.

    .. math::

        W_2^2 = |\alpha_1 - \alpha_2|^2 + \operatorname{tr}\Sigma_1 + \operatorname{tr}\Sigma_2
        - 2\operatorname{tr}\big(\Sigma_1^{1/2}\Sigma_2\Sigma_1^{1/2}\big)^{1/2}

    (Takatsu, 2011; Bhatia, Jain and Lim, 2019). Covariances may be singular. Returns
    :math:`W_2` (the square root, clipped at 0 against rounding).
    """
    alpha1, Sigma1 = _check_moments(alpha1, Sigma1, "alpha1", "Sigma1")
    alpha2, Sigma2 = _check_moments(alpha2, Sigma2, "alpha2", "Sigma2")
    if alpha1.shape != alpha2.shape:
        raise ValueError(f"alpha1 and alpha2 must have the same shape, got {alpha1.shape} "
                         f"and {alpha2.shape}")
    R = psd_sqrt(Sigma1)
    lam = np.linalg.eigvalsh(R @ Sigma2 @ R)
    cross = np.sqrt(np.clip(lam, 0.0, None)).sum()
    diff = alpha1 - alpha2
    w2 = diff @ diff + np.trace(Sigma1) + np.trace(Sigma2) - 2.0 * cross
    return float(np.sqrt(max(w2, 0.0)))


def tangent_matrix(Sigma, dSigma):
    r"""The symmetric :math:`S` with :math:`S\Sigma + \Sigma S = \dot\Sigma`, for Sigma > 0.

    The linear part of the tangent (gradient) velocity field :math:`x \mapsto S(x - \alpha)`
    of a curve of centred Gaussians through :math:`\mathcal N(\alpha, \Sigma)` with velocity
    :math:`\dot\Sigma` in the Bures–Wasserstein geometry (Takatsu, 2011). Solved with
    :func:`scipy.linalg.solve_continuous_lyapunov`.
    """
    _, Sigma = _check_moments(np.zeros(np.shape(Sigma)[0]), Sigma)
    d = Sigma.shape[0]
    dSigma = _checks.matrix(dSigma, "dSigma", shape=(d, d))
    if np.linalg.norm(dSigma - dSigma.T) > 1e-10 * max(np.linalg.norm(dSigma), 1e-300):
        raise ValueError("dSigma must be symmetric (a tangent vector to the covariances)")
    if np.linalg.eigvalsh(Sigma)[0] <= 1e-14 * np.linalg.norm(Sigma, 2):
        raise ValueError("Sigma must be positive definite for the tangent matrix to be unique")
    S = solve_continuous_lyapunov(Sigma, 0.5 * (dSigma + dSigma.T))
    return 0.5 * (S + S.T)


def metric_speed(dalpha, Sigma, dSigma):
    r"""Metric speed :math:`|\dot\mu|_{W_2}` of a Gaussian curve through :math:`(\alpha, \Sigma)`.

    .. math::

        |\dot\mu|_{W_2} = \big(|\dot\alpha|^2 + \operatorname{tr}(S\Sigma S)\big)^{1/2},
        \qquad S\Sigma + \Sigma S = \dot\Sigma,

    the norm of the tangent vector :math:`(\dot\alpha, \dot\Sigma)` in the Bures–Wasserstein
    metric (Takatsu, 2011; Bhatia, Jain and Lim, 2019): the limit of
    :math:`W_2(\mu(t), \mu(t + h)) / h` as :math:`h \to 0`.
    """
    dalpha = np.asarray(dalpha, dtype=np.float64)
    if dalpha.ndim != 1 or not np.all(np.isfinite(dalpha)):
        raise ValueError(f"dalpha must be a finite 1-D array, got shape {dalpha.shape}")
    S = tangent_matrix(Sigma, dSigma)
    Sigma = np.asarray(Sigma, dtype=np.float64)
    if dalpha.size != Sigma.shape[0]:
        raise ValueError(f"dalpha must have shape ({Sigma.shape[0]},), got {dalpha.shape}")
    return float(np.sqrt(dalpha @ dalpha + np.trace(S @ Sigma @ S)))


def field_norm(M, b, alpha, Sigma):
    r"""The :math:`L^2(\mu)` norm of the affine field :math:`v(x) = Mx + b` on
    :math:`\mu = \mathcal N(\alpha, \Sigma)`.

    .. math::

        \|v\|_{L^2(\mu)} = \big(|M\alpha + b|^2 + \operatorname{tr}(M\Sigma M^\top)\big)^{1/2}.

    For the attention field of a Gaussian solution (Castin et al., 2025) this is at least the
    metric speed :func:`metric_speed` of the solution, with equality iff :math:`M` is
    symmetric (then :math:`M` is the tangent matrix).
    """
    alpha, Sigma = _check_moments(alpha, Sigma)
    d = alpha.size
    M = _checks.matrix(M, "M", shape=(d, d))
    b = np.asarray(b, dtype=np.float64)
    if b.shape != (d,) or not np.all(np.isfinite(b)):
        raise ValueError(f"b must be a finite array of shape ({d},), got {b.shape}")
    m = M @ alpha + b
    return float(np.sqrt(m @ m + np.trace(M @ Sigma @ M.T)))
