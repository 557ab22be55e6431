r"""Gaussian solutions of the Transformer PDE: the ODEs of the mean and the covariance.

For softmax, L2, Sinkhorn and multi-head attention, the velocity field of a Gaussian
:math:`\mu = \mathcal N(\alpha, \Sigma)` is *affine*, :math:`\Gamma_\mu(x) = M x + b` with
:math:`(M, b)` depending on :math:`(\alpha, \Sigma)` only. An affine field pushes a Gaussian to a
Gaussian, so :math:`\mu(t) = \mathcal N(\alpha(t), \Sigma(t))` with

.. math::

    \dot\alpha = M \alpha + b, \qquad \dot\Sigma = M \Sigma + \Sigma M^\top

(Castin, Ablin, Carrillo and Peyré, 2025). The ``*_field`` functions return :math:`(M, b)`,
the ``*_rhs`` functions return :math:`(\dot\alpha, \dot\Sigma)`. The derivations (completing
the square, the Gaussian entropic transport plan) are in :mod:`transformer_pde.symbolic` and
in the chapter "Gaussian initial data".

:func:`integrate_moments` integrates these ODEs. For the fields of this module it integrates
a *factor* :math:`L` with :math:`\Sigma = L L^\top` and :math:`\dot L = M L` (the linear part of
the particles' flow map applied to :math:`\Sigma_0^{1/2}`), so :math:`\Sigma(t)` is symmetric
positive semi-definite by construction, with no projection step. It stops on blow-up
(reporting the time) and on convergence of :math:`\Sigma` (reporting the limit and its
numerical rank).

:func:`particle_moment_rates`, :func:`replicate_z_scores` and :func:`rms_error_rate` compare
these ODEs with particles: the exact moment rates of a particle system, a :math:`z`-test over
independent replicates, and the decay exponent of a Monte Carlo error with a replicate-based
standard error.

Parameters follow :mod:`transformer_pde.attention`: ``A = K.T @ Q`` (``(d, d)``), ``Q`` and
``K`` of shape ``(k, d)``, and here ``V`` of shape ``(d, d)`` (the dynamics lives in
:math:`\mathbb R^d`).
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from joblib import Parallel, delayed
from scipy.integrate import BDF, DOP853, LSODA, RK23, RK45, Radau
from scipy.optimize import brentq

from . import _checks
from .fitting import PowerLawFit

__all__ = [
    "MomentTrajectory",
    "affine_moments_rhs",
    "softmax_field",
    "softmax_rhs",
    "l2_field",
    "l2_rhs",
    "sinkhorn_field",
    "sinkhorn_rhs",
    "sinkhorn_plan_cross_covariance",
    "sinkhorn_rhs_published",
    "multihead_field",
    "multihead_rhs",
    "softmax_identity_covariance",
    "softmax_identity_blowup_time",
    "softmax_identity_limit",
    "numerical_rank",
    "particle_moment_rates",
    "replicate_z_scores",
    "rms_error_rate",
    "psd_sqrt",
    "integrate_moments",
    "moment_vector",
    "particle_moment_samples",
    "relative_squared_errors",
    "cone_coordinates",
    "covariance_from_cone",
    "softmax_lyapunov",
    "l2_growth_rate_bound",
    "ClusteringDraw",
    "clustering_rank_draws",
    "RankReading",
    "read_limit_rank",
    "SYMMETRY_TOL",
    "PSD_TOL",
]

_SOLVERS = {"RK45": RK45, "RK23": RK23, "DOP853": DOP853, "Radau": Radau, "BDF": BDF,
            "LSODA": LSODA}

#: Relative tolerance on :math:`\|\Sigma - \Sigma^\top\|_F / \|\Sigma\|_F` for a valid covariance.
SYMMETRY_TOL = 1e-10
#: Relative tolerance on the smallest eigenvalue:
#: :math:`\lambda_{\min} \ge -\text{tol}\,\|\Sigma\|_F`.
PSD_TOL = 1e-10


# --------------------------------------------------------------------------------------
# validation and small linear algebra
# --------------------------------------------------------------------------------------

def _check_moments(alpha, Sigma, alpha_name="alpha", Sigma_name="Sigma"):
    """Validate a mean ``(d,)`` and a symmetric PSD covariance ``(d, d)``; return float arrays."""
    alpha = np.asarray(alpha, dtype=np.float64)
    if alpha.ndim != 1 or alpha.size < 1:
        raise ValueError(f"{alpha_name} must be a 1-D array of shape (d,), got shape {alpha.shape}")
    if not np.all(np.isfinite(alpha)):
        raise ValueError(f"{alpha_name} contains non-finite values (NaN or inf)")
    d = alpha.size
    Sigma = _checks.matrix(Sigma, Sigma_name, shape=(d, d))
    scale = max(np.linalg.norm(Sigma), np.finfo(float).tiny)
    if np.linalg.norm(Sigma - Sigma.T) > SYMMETRY_TOL * scale:
        raise ValueError(f"{Sigma_name} must be symmetric (a covariance matrix), got "
                         f"|Sigma - Sigma.T|_F = {np.linalg.norm(Sigma - Sigma.T):.3g}")
    Sigma = 0.5 * (Sigma + Sigma.T)
    lam_min = np.linalg.eigvalsh(Sigma)[0]
    if lam_min < -PSD_TOL * scale:
        raise ValueError(f"{Sigma_name} must be positive semi-definite (a covariance matrix), "
                         f"got smallest eigenvalue {lam_min:.3g}")
    return alpha, Sigma


def _square(M, name, d):
    return _checks.matrix(M, name, shape=(d, d))


def psd_sqrt(S):
    r"""Symmetric square root :math:`S^{1/2}` of a symmetric PSD matrix (eigenvalues clipped at 0).
    """
    lam, U = np.linalg.eigh(0.5 * (S + S.T))
    R = (U * np.sqrt(np.clip(lam, 0.0, None))) @ U.T
    return 0.5 * (R + R.T)


def numerical_rank(Sigma, rel_tol=1e-3):
    r"""Number of eigenvalues of the PSD matrix ``Sigma`` above ``rel_tol`` times the largest."""
    lam = np.linalg.eigvalsh(0.5 * (Sigma + Sigma.T))
    if lam[-1] <= 0:
        return 0
    return int(np.sum(lam > rel_tol * lam[-1]))


def particle_moment_rates(X, velocities, *, weights=None):
    r"""Empirical rates of the mean and covariance of particles ``X`` moving with ``velocities``.

    .. math::

        \dot{\hat\alpha} = \sum_i w_i v_i, \qquad
        \dot{\hat\Sigma} = \sum_i w_i\big((x_i - \hat\alpha)v_i^\top
                                          + v_i(x_i - \hat\alpha)^\top\big),
        \qquad \hat\alpha = \sum_i w_i x_i,

    the exact time derivatives of the mean and covariance of the weighted empirical measure
    :math:`\sum_i w_i\delta_{x_i}` (default :math:`w_i = 1/n`) moved by
    :math:`\dot x_i = v_i`. Used to check the moment ODEs of Castin et al. (2025) against
    particles (uniform weights) or against a quadrature rule (weights of the rule).
    Returns ``(dalpha, dSigma)``.
    """
    X = _checks.points(X, "X")
    v = _checks.points(velocities, "velocities")
    if v.shape != X.shape:
        raise ValueError(f"velocities must have the shape of X {X.shape}, got {v.shape}")
    w = _checks.weights(weights, X.shape[0])
    Xc = X - w @ X
    C = (Xc * w[:, None]).T @ v
    return w @ v, C + C.T


def replicate_z_scores(samples, target):
    r"""Distance of the mean of independent replicates from a target, in standard errors.

    .. math::

        z_j = \frac{|\bar s_j - t_j|}{\hat\sigma_j / \sqrt R}, \qquad
        \bar s_j = \frac1R\sum_r s_{rj}, \quad
        \hat\sigma_j^2 = \frac1{R-1}\sum_r (s_{rj} - \bar s_j)^2,

    for ``samples`` of shape ``(R, m)`` (``R >= 2`` independent estimates of an ``m``-vector)
    and ``target`` of shape ``(m,)``. If the estimates are unbiased and roughly Gaussian,
    each :math:`z_j` follows a Student :math:`t` law with :math:`R - 1` degrees of freedom.
    Returns the array ``z`` of shape ``(m,)``.
    """
    s = _checks.points(samples, "samples")
    if s.shape[0] < 2:
        raise ValueError(f"samples needs at least 2 replicates (rows), got {s.shape[0]}")
    t = np.asarray(target, dtype=np.float64)
    if t.shape != (s.shape[1],) or not np.all(np.isfinite(t)):
        raise ValueError(f"target must be a finite array of shape ({s.shape[1]},), got {t.shape}")
    se = s.std(axis=0, ddof=1) / np.sqrt(s.shape[0])
    if np.any(se <= 0):
        raise ValueError("samples must vary across replicates in every column")
    return np.abs(s.mean(axis=0) - t) / se


def rms_error_rate(ns, squared_errors):
    r"""Exponent of a root-mean-square error :math:`\varepsilon(n) \approx C n^{p}` from replicates.

    ``squared_errors[k, r]`` is the squared error of replicate :math:`r` at sample size
    :math:`n_k`. The exponent is the least-squares slope of
    :math:`\log\varepsilon_k = \tfrac12\log\big(\frac1R\sum_r e_{kr}\big)` against
    :math:`\log n_k`. Its standard error comes from the spread of the replicates, not from
    the residuals of the fit (with a handful of points those are themselves very noisy): by the
    delta method :math:`\operatorname{sd}(\log\varepsilon_k) \approx \kappa/(2\sqrt R)`, with
    the coefficient of variation of one squared error pooled over the sample sizes,

    .. math::

        \kappa^2 = \frac1{K}\sum_k \frac{\widehat{\operatorname{Var}}_r(e_{kr})}
        {\big(\frac1R\sum_r e_{kr}\big)^2}, \qquad
        \operatorname{se}(p) = \frac{\kappa}{2\sqrt R\,
        \big(\sum_k (\log n_k - \overline{\log n})^2\big)^{1/2}}.

    Pooling is exact when :math:`e_{kr} = n_k^{2p} Z_{kr}` with :math:`Z` identically
    distributed (a pure power law). The estimate is slightly optimistic for skewed errors (for
    :math:`\chi^2_3`-distributed squared errors and :math:`R = 8`, :math:`\pm 2` standard
    errors cover about 93% instead of 95%), so test agreement at :math:`\pm 3` standard errors.
    Returns a :class:`transformer_pde.fitting.PowerLawFit` ``(exponent, prefactor, stderr)``
    for :math:`\varepsilon(n)`.
    """
    n = np.asarray(ns, dtype=np.float64)
    e = np.asarray(squared_errors, dtype=np.float64)
    if n.ndim != 1 or n.size < 2 or not np.all(np.isfinite(n)) or np.any(n <= 0):
        raise ValueError(f"ns must be a 1-D array of at least 2 positive sizes, got {n!r}")
    if np.ptp(np.log(n)) == 0:
        raise ValueError("ns must take at least two distinct values")
    if e.ndim != 2 or e.shape[0] != n.size or e.shape[1] < 2:
        raise ValueError(f"squared_errors must have shape ({n.size}, R) with R >= 2, "
                         f"got {e.shape}")
    if not np.all(np.isfinite(e)) or np.any(e < 0):
        raise ValueError("squared_errors must be finite and non-negative")
    mse = e.mean(axis=1)
    if np.any(mse <= 0):
        raise ValueError("squared_errors must not vanish at every replicate of a sample size")
    lx = np.log(n)
    ly = 0.5 * np.log(mse)
    slope, intercept = np.polyfit(lx, ly, 1)
    kappa2 = np.mean(e.var(axis=1, ddof=1) / mse**2)
    R = e.shape[1]
    stderr = np.sqrt(kappa2) / (2.0 * np.sqrt(R) * np.sqrt(np.sum((lx - lx.mean()) ** 2)))
    return PowerLawFit(float(slope), float(np.exp(intercept)), float(stderr))


# --------------------------------------------------------------------------------------
# affine fields and right-hand sides
# --------------------------------------------------------------------------------------

def affine_moments_rhs(M, b, alpha, Sigma):
    r"""Moments of the affine flow :math:`\dot x = M x + b` on :math:`\mathcal N(\alpha, \Sigma)`.

    .. math:: \dot\alpha = M\alpha + b, \qquad \dot\Sigma = M\Sigma + \Sigma M^\top.

    Returns ``(dalpha, dSigma)``; ``dSigma`` is exactly symmetric.
    """
    MS = M @ Sigma
    return M @ alpha + b, MS + MS.T


def softmax_field(alpha, Sigma, A, V):
    r"""Affine softmax field on a Gaussian: :math:`\Gamma(x) = V(\alpha + \Sigma A x)`.

    The reweighted measure :math:`e^{\langle Ax, y\rangle}\mathcal N(\alpha,\Sigma)(dy)/Z` is
    :math:`\mathcal N(\alpha + \Sigma A x, \Sigma)` (completing the square), hence
    :math:`M = V\Sigma A`, :math:`b = V\alpha` (Castin et al., 2025). Returns ``(M, b)``.
    """
    alpha, Sigma = _check_moments(alpha, Sigma)
    d = alpha.size
    return _softmax_Mb(alpha, Sigma, _square(A, "A", d), _square(V, "V", d))


def _softmax_Mb(alpha, Sigma, A, V):
    return V @ Sigma @ A, V @ alpha


def softmax_rhs(alpha, Sigma, A, V):
    r"""Moment ODE of softmax attention on :math:`\mathcal N(\alpha, \Sigma)`.

    .. math::

        \dot\alpha = V(I + \Sigma A)\alpha, \qquad
        \dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top \Sigma V^\top

    (Castin, Ablin, Carrillo and Peyré, 2025). ``A = K.T @ Q`` and ``V`` are ``(d, d)``.
    Returns ``(dalpha, dSigma)``.
    """
    M, b = softmax_field(alpha, Sigma, A, V)
    return affine_moments_rhs(M, b, np.asarray(alpha, float), 0.5 * (Sigma + np.transpose(Sigma)))


def l2_field(alpha, Sigma, Q, K, V):
    r"""Affine L2 field on a Gaussian.

    .. math:: \Gamma(x) = V(I + 2\Sigma K^\top K)^{-1}(\alpha + 2\Sigma A x).


    The reweighted measure :math:`e^{-|Qx - Ky|^2}\mathcal N(\alpha,\Sigma)(dy)/Z` has precision
    :math:`P = \Sigma^{-1} + 2K^\top K` and mean :math:`P^{-1}(\Sigma^{-1}\alpha + 2Ax)`,
    :math:`A = K^\top Q`; written with :math:`P^{-1} = (I + 2\Sigma K^\top K)^{-1}\Sigma` it also
    holds for singular :math:`\Sigma`. Kim et al. (2021); Castin et al. (2025). Returns ``(M, b)``.
    """
    alpha, Sigma = _check_moments(alpha, Sigma)
    d = alpha.size
    Q, K = _checks.query_key(Q, K, d)
    return _l2_Mb(alpha, Sigma, Q, K, _square(V, "V", d))


def _l2_Mb(alpha, Sigma, Q, K, V):
    d = alpha.size
    R = np.linalg.inv(np.eye(d) + 2.0 * Sigma @ (K.T @ K))  # (I + 2 Sigma K^T K)^{-1}
    return 2.0 * V @ R @ Sigma @ (K.T @ Q), V @ R @ alpha


def l2_rhs(alpha, Sigma, Q, K, V):
    r"""Moment ODE of L2 attention on :math:`\mathcal N(\alpha, \Sigma)`.

    .. math::

        \dot\alpha = V P^{-1}(\Sigma^{-1} + 2A)\alpha, \qquad
        \dot\Sigma = 2VP^{-1}A\Sigma + 2\Sigma A^\top P^{-1} V^\top, \qquad
        P = \Sigma^{-1} + 2K^\top K,

    (Castin et al., 2025; L2 attention of Kim et al., 2021), evaluated through
    :math:`P^{-1} = (I + 2\Sigma K^\top K)^{-1}\Sigma` so that singular :math:`\Sigma` is allowed.
    Returns ``(dalpha, dSigma)``.
    """
    M, b = l2_field(alpha, Sigma, Q, K, V)
    return affine_moments_rhs(M, b, np.asarray(alpha, float), 0.5 * (Sigma + np.transpose(Sigma)))


def _sinkhorn_M(Sigma, A, V, epsilon):
    r""":math:`M = 2cV\Sigma^{1/2}(I + (I + 4c^2 BB^\top)^{1/2})^{-1}\Sigma^{1/2}A`, c = 2/eps."""
    c = 2.0 / epsilon
    S12 = psd_sqrt(Sigma)
    B = S12 @ A @ S12
    lam, U = np.linalg.eigh(B @ B.T)
    lam = np.clip(lam, 0.0, None)
    middle = (U / (1.0 + np.sqrt(1.0 + 4.0 * c * c * lam))) @ U.T
    return 2.0 * c * V @ S12 @ middle @ S12 @ A


def sinkhorn_plan_cross_covariance(Sigma, Q, K, *, epsilon=1.0):
    r"""Cross-covariance :math:`C = \mathrm{Cov}_\pi(x, y)` of the entropic self-plan of a Gaussian.

    The plan of cost :math:`|Qx - Ky|^2` and regularisation :math:`\varepsilon` (kernel
    :math:`e^{-|Qx-Ky|^2/\varepsilon}`) is the Gaussian
    :math:`\mathcal N\big((\alpha,\alpha), [[\Sigma, C], [C^\top, \Sigma]]\big)` with

    .. math::

        C = \Sigma^{1/2} G \Sigma^{1/2}, \quad
        G = 2c\,B^\top\big(I + (I + 4c^2 BB^\top)^{1/2}\big)^{-1},
        \quad B = \Sigma^{1/2} A \Sigma^{1/2},\ c = 2/\varepsilon,

    the solution of :math:`G(I - G^\top G)^{-1} = c\,B^\top` (the off-diagonal block of the
    joint precision must be :math:`-cA^\top`). Closed forms of Gaussian entropic transport:
    Janati et al. (2020), Mallasto et al. (2022). ``Q``, ``K`` are ``(k, d)``.
    """
    Sigma = _check_moments(np.zeros(np.shape(Sigma)[0]), Sigma)[1]
    Q, K = _checks.query_key(Q, K, Sigma.shape[0])
    epsilon = _checks.positive_float(epsilon, "epsilon")
    c = 2.0 / epsilon
    A = K.T @ Q
    S12 = psd_sqrt(Sigma)
    B = S12 @ A @ S12
    lam, U = np.linalg.eigh(B @ B.T)
    lam = np.clip(lam, 0.0, None)
    G = 2.0 * c * B.T @ ((U / (1.0 + np.sqrt(1.0 + 4.0 * c * c * lam))) @ U.T)
    return S12 @ G @ S12


def sinkhorn_field(alpha, Sigma, Q, K, V, epsilon=1.0):
    r"""Affine Sinkhorn field on a Gaussian.

    .. math:: \Gamma(x) = V\,\mathbb E_\pi[y \mid x] = V\alpha + M(x - \alpha).


    :math:`\pi` is the entropic optimal transport plan (cost :math:`|Qx - Ky|^2`,
    regularisation :math:`\varepsilon`, i.e. the Sinkhorn limit of
    :math:`e^{-|Qx-Ky|^2/\varepsilon}`)
    from :math:`\mathcal N(\alpha,\Sigma)` to itself (Sander et al., 2022). It is Gaussian with
    cross-covariance :math:`C` (:func:`sinkhorn_plan_cross_covariance`), so
    :math:`M = VC^\top\Sigma^{-1}`, which simplifies, with :math:`c = 2/\varepsilon`,
    :math:`B = \Sigma^{1/2}A\Sigma^{1/2}`, to

    .. math::

        M = 2c\,V\Sigma^{1/2}\big(I + (I + 4c^2 BB^\top)^{1/2}\big)^{-1}\Sigma^{1/2}A,

    valid for every PSD :math:`\Sigma` and every :math:`A` (no inverse needed). Janati et al.
    (2020), Mallasto et al. (2022), Castin et al. (2025). Returns ``(M, b)`` with
    :math:`b = (V - M)\alpha`.
    """
    alpha, Sigma = _check_moments(alpha, Sigma)
    d = alpha.size
    Q, K = _checks.query_key(Q, K, d)
    V = _square(V, "V", d)
    epsilon = _checks.positive_float(epsilon, "epsilon")
    return _sinkhorn_Mb(alpha, Sigma, Q, K, V, epsilon)


def _sinkhorn_Mb(alpha, Sigma, Q, K, V, epsilon=1.0):
    M = _sinkhorn_M(Sigma, K.T @ Q, V, float(epsilon))
    return M, V @ alpha - M @ alpha


def sinkhorn_rhs(alpha, Sigma, Q, K, V, epsilon=1.0):
    r"""Moment ODE of Sinkhorn attention on :math:`\mathcal N(\alpha, \Sigma)`.

    .. math::

        \dot\alpha = V\alpha, \qquad \dot\Sigma = M\Sigma + \Sigma M^\top, \qquad
        M = 2c\,V\Sigma^{1/2}\big(I + (I + 4c^2 BB^\top)^{1/2}\big)^{-1}\Sigma^{1/2}A,

    :math:`B = \Sigma^{1/2}A\Sigma^{1/2}`, :math:`c = 2/\varepsilon` (``epsilon=1`` is the
    kernel :math:`e^{-|Qx-Ky|^2}` of :func:`transformer_pde.attention.sinkhorn`). The mean moves
    as :math:`V\alpha` because the plan's second marginal is :math:`\mu` itself. See
    :func:`sinkhorn_field`; Sander et al. (2022), Janati et al. (2020), Castin et al. (2025).
    Returns ``(dalpha, dSigma)``.
    """
    M, b = sinkhorn_field(alpha, Sigma, Q, K, V, epsilon=epsilon)
    return affine_moments_rhs(M, b, np.asarray(alpha, float), 0.5 * (Sigma + np.transpose(Sigma)))


def sinkhorn_rhs_published(Sigma, Q, K, V):
    r"""The covariance ODE of Sinkhorn attention as computed by the authors' public code.

    .. math::

        C_\Sigma = \tfrac12\big(\Sigma^{1/2}(I + 4\Sigma^{1/2}A^\top\Sigma A\Sigma^{1/2})^{1/2}
        \Sigma^{-1/2} - I\big), \qquad
        \dot\Sigma = VA^{-\top}\Sigma^{-1}C_\Sigma\Sigma + (\cdot)^\top,

    with :math:`A = K^\top Q` (Castin et al., 2025, public code). It needs :math:`A` and
    :math:`\Sigma` invertible (``ValueError`` otherwise). It equals :func:`sinkhorn_rhs` with
    ``epsilon=2`` (kernel :math:`e^{-|Qx-Ky|^2/2}`, which has the same Sinkhorn limit as the
    dot-product kernel :math:`e^{\langle Ax, y\rangle}`: the factors
    :math:`e^{-|Qx|^2/2}`, :math:`e^{-|Ky|^2/2}` are absorbed by the normalisations), not
    ``epsilon=1``: see the chapter "Gaussian initial data". Returns ``dSigma``.
    """
    Sigma = _check_moments(np.zeros(np.shape(Sigma)[0]), Sigma)[1]
    d = Sigma.shape[0]
    Q, K = _checks.query_key(Q, K, d)
    V = _square(V, "V", d)
    A = K.T @ Q
    for M, name in ((A, "K.T @ Q"), (Sigma, "Sigma")):
        if np.linalg.cond(M) > 1e12:
            raise ValueError(f"{name} must be invertible for the published formula")
    S12 = psd_sqrt(Sigma)
    S12_inv = np.linalg.inv(S12)
    inner = psd_sqrt(np.eye(d) + 4.0 * S12 @ A.T @ Sigma @ A @ S12)
    C = 0.5 * (S12 @ inner @ S12_inv - np.eye(d))
    term = V @ np.linalg.solve(A.T, np.linalg.solve(Sigma, C @ Sigma))
    return term + term.T


def multihead_field(alpha, Sigma, As, Vs):
    r"""Affine multi-head softmax field: :math:`\Gamma(x) = \sum_h V_h(\alpha + \Sigma A_h x)`.

    :math:`M = \sum_h V_h\Sigma A_h`, :math:`b = \sum_h V_h\alpha` (output projections folded into
    :math:`V_h`, as in :func:`transformer_pde.attention.multihead`). Castin et al. (2025).
    ``As`` and ``Vs`` have shape ``(H, d, d)``. Returns ``(M, b)``.
    """
    alpha, Sigma = _check_moments(alpha, Sigma)
    d = alpha.size
    As = _checks.stack(As, "As", cols=d)
    Vs = _checks.stack(Vs, "Vs", cols=d)
    if As.shape[1] != d or Vs.shape[1] != d:
        raise ValueError(f"As and Vs must have shape (H, {d}, {d}), got {As.shape} and {Vs.shape}")
    if As.shape[0] != Vs.shape[0]:
        raise ValueError(f"As and Vs must have the same number of heads, got {As.shape[0]} "
                         f"and {Vs.shape[0]}")
    return _multihead_Mb(alpha, Sigma, As, Vs)


def _multihead_Mb(alpha, Sigma, As, Vs):
    M = np.einsum("hij,jk,hkl->il", Vs, Sigma, As)
    return M, Vs.sum(axis=0) @ alpha


def multihead_rhs(alpha, Sigma, As, Vs):
    r"""Moment ODE of multi-head softmax attention: the sum of the heads' terms.

    .. math::

        \dot\alpha = \sum_h V_h(I + \Sigma A_h)\alpha, \qquad
        \dot\Sigma = \sum_h \big(V_h\Sigma A_h\Sigma + \Sigma A_h^\top\Sigma V_h^\top\big)

    (Castin et al., 2025). Returns ``(dalpha, dSigma)``.
    """
    M, b = multihead_field(alpha, Sigma, As, Vs)
    return affine_moments_rhs(M, b, np.asarray(alpha, float), 0.5 * (Sigma + np.transpose(Sigma)))


# attach the affine fields so that integrate_moments can integrate a factor of Sigma
# (``_unchecked_field``: the same map without input validation, for the solver's inner loop)
for _rhs, _field, _fast in ((softmax_rhs, softmax_field, _softmax_Mb),
                            (l2_rhs, l2_field, _l2_Mb),
                            (sinkhorn_rhs, sinkhorn_field, _sinkhorn_Mb),
                            (multihead_rhs, multihead_field, _multihead_Mb)):
    _rhs.affine_field = _field
    _rhs._unchecked_field = _fast
del _rhs, _field, _fast


# --------------------------------------------------------------------------------------
# closed forms for V = I, softmax
# --------------------------------------------------------------------------------------

def _sym_part(A, d):
    A = _square(A, "A", d)
    return 0.5 * (A + A.T)


def softmax_identity_blowup_time(Sigma0, A):
    r"""Blow-up time of :math:`\dot\Sigma = 2\Sigma A_s\Sigma` (softmax, :math:`V = I`).

    .. math::

        t^* = \frac{1}{2\lambda_{\max}(\Sigma_0^{1/2} A_s \Sigma_0^{1/2})}, \qquad
        A_s = \tfrac12(A + A^\top),

    and :math:`t^* = +\infty` when :math:`\lambda_{\max} \le 0` (up to a relative
    :math:`10^{-12}`) (Castin et al., 2025). Follows from
    :math:`\frac{d}{dt}\Sigma^{-1} = -2A_s`.
    """
    Sigma0 = _check_moments(np.zeros(np.shape(Sigma0)[0]), Sigma0, Sigma_name="Sigma0")[1]
    S12 = psd_sqrt(Sigma0)
    lams = np.linalg.eigvalsh(S12 @ _sym_part(A, Sigma0.shape[0]) @ S12)
    lam = lams[-1]
    # rounding makes a zero eigenvalue ~1e-17: treat |lam| <= 1e-12 |lams|_max as zero
    return np.inf if lam <= 1e-12 * np.abs(lams).max() else 1.0 / (2.0 * lam)


def softmax_identity_covariance(Sigma0, A, t):
    r"""Closed form :math:`\Sigma(t) = (\Sigma_0^{-1} - 2tA_s)^{-1}` of softmax attention, V = I.

    Written as :math:`\Sigma_0^{1/2}(I - 2t\Sigma_0^{1/2}A_s\Sigma_0^{1/2})^{-1}\Sigma_0^{1/2}`,
    which
    also holds for singular :math:`\Sigma_0`. ``t`` may be a scalar or an array of times
    ``(k,)`` (returns ``(k, d, d)``); times at or beyond the blow-up time raise ``ValueError``.
    Castin et al. (2025).
    """
    Sigma0 = _check_moments(np.zeros(np.shape(Sigma0)[0]), Sigma0, Sigma_name="Sigma0")[1]
    d = Sigma0.shape[0]
    S12 = psd_sqrt(Sigma0)
    N = S12 @ _sym_part(A, d) @ S12
    ts = np.asarray(t, dtype=np.float64)
    if not np.all(np.isfinite(ts)):
        raise ValueError("t must be finite")
    t_star = softmax_identity_blowup_time(Sigma0, A)
    if np.any(ts >= t_star):
        raise ValueError(f"t must be below the blow-up time t* = {t_star:.6g}")
    lam, U = np.linalg.eigh(N)
    denom = 1.0 - 2.0 * ts[..., None] * lam  # (..., d)
    W = S12 @ U
    return np.einsum("ij,...j,kj->...ik", W, 1.0 / denom, W)


def softmax_identity_limit(Sigma0, A, *, rank_tol=1e-10):
    r"""Limit :math:`\lim_{t\to\infty}(\Sigma_0^{-1} - 2tA_s)^{-1}` when :math:`A_s = -P \preceq 0`.

    .. math::

        \Sigma_\infty = \Sigma_0^{1/2}\,\Pi_{\ker(\Sigma_0^{1/2}P\Sigma_0^{1/2})}\,\Sigma_0^{1/2},

    of rank :math:`d - \mathrm{rank}(P)` when :math:`\Sigma_0 \succ 0` (the clustering effect,
    Castin et al., 2025). ``ValueError`` if :math:`A_s` has a positive eigenvalue (then the
    solution blows up in finite time).
    """
    Sigma0 = _check_moments(np.zeros(np.shape(Sigma0)[0]), Sigma0, Sigma_name="Sigma0")[1]
    d = Sigma0.shape[0]
    As = _sym_part(A, d)
    lam_A = np.linalg.eigvalsh(As)
    if lam_A[-1] > rank_tol * max(1.0, abs(lam_A[0])):
        raise ValueError("A must have a negative semi-definite symmetric part (A_s = -P)")
    S12 = psd_sqrt(Sigma0)
    lam, U = np.linalg.eigh(S12 @ (-As) @ S12)
    kernel = U[:, lam <= rank_tol * max(lam[-1], 1e-300)]
    W = S12 @ kernel
    return W @ W.T


# --------------------------------------------------------------------------------------
# integration
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MomentTrajectory:
    r"""Solution of a moment ODE from :func:`integrate_moments`.

    Attributes
    ----------
    times : array (k,)
        The requested times reached, followed by ``t_stop`` when the integration stopped
        between two requested times.
    alpha : array (k, d)
        Means at ``times``.
    Sigma : array (k, d, d)
        Covariances at ``times`` (symmetric PSD).
    status : str
        ``"finished"`` (reached ``times[-1]``), ``"blowup"`` (the second moment
        :math:`|\\alpha|^2 + \\mathrm{tr}\\Sigma` exceeded ``blowup_norm``, or the solver could not
        continue) or ``"converged"`` (:math:`\\Sigma` stopped moving, see ``conv_tol``).
    t_stop : float
        Time at which the integration stopped.
    limit : array (d, d) or None
        For ``"converged"``: :math:`\\Sigma(t_{stop})`, the estimate of the limit.
    rank : int or None
        For ``"converged"``: the numerical rank of ``limit``, the number of its eigenvalues
        that neither vanish (``log_rates`` below ``-rate_threshold``) nor fall below
        ``rank_tol`` times the largest.
    log_rates : array (d,) or None
        For ``"converged"``: for the eigenvalues :math:`\lambda_1 \le \dots \le \lambda_d` of
        :math:`\Sigma`, the average of :math:`d\log\lambda_k / d\log(1 + t - t_0)` over the last
        decade of time before ``t_stop``. An eigenvalue decaying like :math:`t^{-\gamma}` has
        rate :math:`\approx -\gamma` (the clustering regime: :math:`-1`); one converging to a
        positive limit has rate :math:`\approx 0`.
    """

    times: np.ndarray
    alpha: np.ndarray
    Sigma: np.ndarray
    status: str
    t_stop: float
    limit: np.ndarray | None
    rank: int | None
    message: str
    log_rates: np.ndarray | None = None


def _check_times(times):
    t = np.asarray(times, dtype=np.float64)
    if t.ndim != 1 or t.size < 2:
        raise ValueError("times must be a 1-D array with at least two entries, "
                         f"got shape {t.shape}")
    if not np.all(np.isfinite(t)):
        raise ValueError("times contains non-finite values")
    if np.any(np.diff(t) <= 0):
        raise ValueError("times must be strictly increasing")
    return t


def integrate_moments(rhs, alpha0, Sigma0, times, *, args=(), formulation="auto",
                      method="DOP853", rtol=1e-10, atol=1e-12, blowup_norm=None,
                      conv_tol=1e-7, rank_tol=1e-12, rate_threshold=0.5, t_origin=None):
    r"""Integrate the moment ODE :math:`(\dot\alpha, \dot\Sigma) = \mathrm{rhs}(\alpha, \Sigma)`.

    Parameters
    ----------
    rhs : callable
        ``rhs(alpha, Sigma, *args) -> (dalpha, dSigma)``, e.g. :func:`softmax_rhs`.
    alpha0 : array (d,)
        Initial mean.
    Sigma0 : array (d, d)
        Initial covariance (symmetric PSD).
    times : array (k,)
        Strictly increasing output times; ``times[0]`` is the initial time.
    args : tuple
        Extra arguments of ``rhs`` (e.g. ``(A, V)``).
    formulation : {"auto", "factor", "covariance"}
        ``"factor"`` integrates :math:`\dot\alpha = M\alpha + b`, :math:`\dot L = ML` with
        :math:`\Sigma = LL^\top`, :math:`L_0 = \Sigma_0^{1/2}` and :math:`(M, b)` the affine field
        ``rhs.affine_field(alpha, Sigma, *args)``: :math:`L(t)` is the linear part of the
        particles' flow map times :math:`\Sigma_0^{1/2}`, so :math:`\Sigma(t)` is symmetric PSD
        exactly, whatever the step errors. ``"covariance"`` integrates :math:`\Sigma` itself for
        any ``rhs`` (symmetrised at every evaluation) and checks at every output time that its
        smallest eigenvalue is :math:`\ge -10^{-8}\|\Sigma\|_2`, stopping with ``RuntimeError``
        otherwise. ``"auto"``: ``"factor"`` when ``rhs`` has an ``affine_field`` (all
        right-hand sides of this module), else ``"covariance"``.
    method : str
        A solver class of :mod:`scipy.integrate` (``"DOP853"``, ``"RK45"``, ``"LSODA"``,
        ``"BDF"``, ``"Radau"``, ``"RK23"``), stepped one step at a time; the stiff solvers
        (``"LSODA"``) are much faster on the long runs of the clustering regime.
    rtol, atol : float
        Tolerances of the solver.
    blowup_norm : float, optional
        Stop with status ``"blowup"`` when :math:`|\alpha|^2 + \mathrm{tr}\,\Sigma` reaches it
        (default :math:`10^{8}\max(1, |\alpha_0|^2 + \mathrm{tr}\,\Sigma_0)`). Near a blow-up
        :math:`\mathrm{tr}\,\Sigma \sim c/(t^* - t)`, so ``t_stop`` approximates :math:`t^*` to
        relative accuracy about ``1 / blowup_norm``.
    conv_tol : float
        Stop with status ``"converged"`` when :math:`(1 + t - t_0)\|\dot\Sigma\|_F \le
        \text{conv\_tol}\,\max(\|\Sigma\|_F, \|\Sigma_0\|_F)`: the change still to come, at
        the current rate over a time of order :math:`t`, is a fraction ``conv_tol`` of the size
        of :math:`\Sigma` (suited to the :math:`1/t` convergence of the clustering regime,
        including a total collapse :math:`\Sigma \to 0`). Only :math:`\Sigma` is tested: the
        mean may keep moving (e.g. :math:`\alpha(t) = e^{tV}\alpha_0` for Sinkhorn).
    rank_tol : float
        Eigenvalues of the limit below ``rank_tol`` times the largest do not count in its rank.
    t_origin : float, optional
        The origin of the clock :math:`t_0` in the convergence test and in ``log_rates``
        (default ``times[0]``); pass the original start time when continuing a run from a
        later state, so that :math:`1/t` decays are measured on the right clock.
    rate_threshold : float
        An eigenvalue of the limit counts as vanishing when its ``log_rates`` entry is below
        ``-rate_threshold``: over the last decade of time it still decayed at least like
        :math:`t^{-\text{rate\_threshold}}`. In the clustering regime the vanishing eigenvalues
        decay like :math:`1/t` (rate :math:`-1`) and the others have rates near 0, so the
        default ``0.5`` separates them with a wide margin, even when a surviving eigenvalue is
        much smaller than the largest (which defeats a plain threshold on eigenvalues).

    Returns
    -------
    MomentTrajectory
    """
    alpha0, Sigma0, t, formulation = _integration_inputs(rhs, alpha0, Sigma0, times,
                                                         formulation, method)
    conv_tol = _checks.positive_float(conv_tol, "conv_tol")
    rank_tol = _checks.positive_float(rank_tol, "rank_tol")
    rate_threshold = _checks.positive_float(rate_threshold, "rate_threshold")
    m2_0 = float(alpha0 @ alpha0 + np.trace(Sigma0))
    if blowup_norm is None:
        blowup_norm = 1e8 * max(1.0, m2_0)
    blowup_norm = _checks.positive_float(blowup_norm, "blowup_norm")
    if blowup_norm <= m2_0:
        raise ValueError(f"blowup_norm must exceed the initial second moment {m2_0:.4g}")
    ode = _MomentODE(rhs, tuple(args), alpha0, Sigma0, formulation, blowup_norm)
    t0 = float(t[0]) if t_origin is None else float(t_origin)
    if t0 > t[0]:
        raise ValueError("t_origin must not be later than times[0]")
    run = _MomentRun(ode, t, t0, conv_tol)
    # already at rest?
    t_start = float(t[0])
    rate0, size0 = ode.sigma_rate(ode.y0)
    if (1.0 + t_start - t0) * rate0 <= conv_tol * size0:
        run.times_out, run.ys, run.t_stop = [t_start], [ode.y0], t_start
        run.status, run.message = "converged", f"Sigma is stationary at t = {t_start:.6g}"
    else:
        run.integrate(_SOLVERS[method](ode.flow, t_start, ode.y0, float(t[-1]), rtol=rtol,
                                       atol=atol), size0)
    return run.trajectory(rank_tol, rate_threshold)


def _integration_inputs(rhs, alpha0, Sigma0, times, formulation, method):
    """Validated ``(alpha0, Sigma0, times, formulation)`` of :func:`integrate_moments`."""
    if not callable(rhs):
        raise ValueError("rhs must be callable as rhs(alpha, Sigma, *args)")
    alpha0, Sigma0 = _check_moments(alpha0, Sigma0, "alpha0", "Sigma0")
    t = _check_times(times)
    if formulation == "auto":
        formulation = "factor" if hasattr(rhs, "affine_field") else "covariance"
    if formulation not in ("factor", "covariance"):
        raise ValueError("formulation must be 'auto', 'factor' or 'covariance', "
                         f"got {formulation!r}")
    if formulation == "factor" and not hasattr(rhs, "affine_field"):
        raise ValueError("formulation='factor' needs rhs.affine_field(alpha, Sigma, *args) "
                         "-> (M, b)")
    if method not in _SOLVERS:
        raise ValueError(f"method must be one of {tuple(_SOLVERS)}, got {method!r}")
    return alpha0, Sigma0, t, formulation


class _MomentODE:
    r"""The moment ODE as one first-order system for the solvers of :mod:`scipy.integrate`.

    ``"factor"``: the state is :math:`(\alpha, L)` with :math:`\Sigma = LL^\top`,
    :math:`\dot\alpha = M\alpha + b`, :math:`\dot L = ML`, :math:`(M, b)` the affine field;
    ``"covariance"``: the state is :math:`(\alpha, \Sigma)`, symmetrised at every evaluation.
    """

    def __init__(self, rhs, args, alpha0, Sigma0, formulation, blowup_norm):
        self.rhs, self.args, self.formulation = rhs, args, formulation
        self.d = alpha0.size
        self.blowup_norm = blowup_norm
        if formulation == "factor":
            rhs.affine_field(alpha0, Sigma0, *args)  # validates the parameters once
            self.field = getattr(rhs, "_unchecked_field", rhs.affine_field)
            self.args = tuple(a if np.isscalar(a) else np.asarray(a, dtype=np.float64)
                              for a in args)
            self.y0 = np.concatenate([alpha0, psd_sqrt(Sigma0).ravel()])
            self.flow = self._factor_flow
        else:
            self.y0 = np.concatenate([alpha0, Sigma0.ravel()])
            self.flow = self._covariance_flow

    def unpack(self, y):
        """``(alpha, Sigma)`` of a state."""
        d = self.d
        if self.formulation == "factor":
            L = y[d:].reshape(d, d)
            return y[:d], L @ L.T
        S = y[d:].reshape(d, d)
        return y[:d], 0.5 * (S + S.T)

    def _factor_flow(self, s, y):  # the solver's inner loop: few NumPy calls, no concatenation
        d = self.d
        alpha, L = y[:d], y[d:].reshape(d, d)
        M, b = self.field(alpha, L @ L.T, *self.args)
        out = np.empty_like(y)
        np.dot(M, alpha, out=out[:d])
        out[:d] += b
        np.dot(M, L, out=out[d:].reshape(d, d))
        return out

    def _covariance_flow(self, s, y):
        alpha, Sigma = self.unpack(y)
        da, dS = self.rhs(alpha, Sigma, *self.args)
        dS = np.asarray(dS, dtype=np.float64)
        return np.concatenate([np.asarray(da, dtype=np.float64), (0.5 * (dS + dS.T)).ravel()])

    def second_moment(self, y):
        r""":math:`|\alpha|^2 + \mathrm{tr}\,\Sigma` minus the blow-up level."""
        alpha, Sigma = self.unpack(y)
        return float(alpha @ alpha + np.trace(Sigma)) - self.blowup_norm

    def sigma_rate(self, y):
        r""":math:`(\|\dot\Sigma\|_F, \|\Sigma\|_F)` at a state."""
        alpha, Sigma = self.unpack(y)
        if self.formulation == "factor":
            MS = self.field(alpha, Sigma, *self.args)[0] @ Sigma
            dS = MS + MS.T
        else:
            dS = np.asarray(self.rhs(alpha, Sigma, *self.args)[1], dtype=np.float64)
        return np.linalg.norm(dS), np.linalg.norm(Sigma)


class _MomentRun:
    """One run of :func:`integrate_moments`: the solver's steps, the stopping tests, the
    states at the requested times and the history of states (for the decay rates)."""

    def __init__(self, ode, t, t0, conv_tol):
        self.ode, self.t, self.t0, self.conv_tol = ode, t, t0, conv_tol
        self.history = [(float(t[0]), ode.y0)]  # (time, state) after every step
        self.times_out, self.ys = [float(t[0])], [ode.y0]
        self.status, self.message = "finished", f"reached t = {float(t[-1]):.6g}"
        self.t_stop = float(t[-1])

    def integrate(self, solver, size0):
        """Step ``solver`` until the last requested time, a blow-up or convergence."""
        ode, t = self.ode, self.t
        k = 1  # next requested time
        y_stop = None
        with np.errstate(over="ignore", invalid="ignore"):
            while solver.status == "running":
                t_old = solver.t
                solver.step()
                if solver.status == "failed" or not np.all(np.isfinite(solver.y)):
                    self.status = "blowup"
                    why = "step size too small" if solver.status == "failed" else "overflow"
                    self.message = f"the solver stopped at t = {t_old:.6g}: {why}"
                    t_stop, y_stop = t_old, self.history[-1][1]
                    break
                t_new, y_new = solver.t, solver.y.copy()
                dense = solver.dense_output()
                t_stop, y_stop = self._stop_test(t_old, t_new, y_new, dense, size0)
                while k < t.size and t[k] <= t_stop:
                    self.times_out.append(float(t[k]))
                    self.ys.append(y_new if t[k] == t_new else dense(t[k]))
                    k += 1
                self.history.append((t_new, y_new))
                if self.status != "finished":
                    break
        if self.status != "finished":
            self.t_stop = t_stop
            if t_stop > self.times_out[-1]:
                self.times_out.append(float(t_stop))
                self.ys.append(y_stop)
        if ode.formulation == "covariance":
            self._check_psd()

    def _stop_test(self, t_old, t_new, y_new, dense, size0):
        """Blow-up (located by root finding on the dense output) or convergence after a step;
        returns ``(t_stop, y_stop)``, the step's end unless a blow-up came earlier."""
        ode = self.ode
        t_stop, y_stop = t_new, y_new
        if ode.second_moment(y_new) >= 0:
            self.status = "blowup"
            if ode.second_moment(dense(t_old)) < 0:
                t_stop = brentq(lambda s, f=dense: ode.second_moment(f(s)), t_old, t_new,
                                xtol=1e-14 * max(1.0, abs(t_new)), rtol=1e-15)
                y_stop = dense(t_stop)
            alpha, Sigma = ode.unpack(y_stop)
            part = "covariance" if np.trace(Sigma) >= alpha @ alpha else "mean"
            self.message = (f"blow-up at t = {t_stop:.6g}: |alpha|^2 + tr Sigma reached "
                            f"{ode.blowup_norm:.3g} (dominated by the {part})")
        else:
            rate, size = ode.sigma_rate(y_new)
            if (1.0 + t_new - self.t0) * rate <= self.conv_tol * max(size, size0):
                self.status = "converged"
                self.message = (f"Sigma converged at t = {t_new:.6g} "
                                f"(relative rate below {self.conv_tol:.3g})")
        return t_stop, y_stop

    def _check_psd(self):
        for s_, y in zip(self.times_out, self.ys, strict=True):
            lam = np.linalg.eigvalsh(self.ode.unpack(y)[1])
            if lam[0] < -1e-8 * max(abs(lam[-1]), 1e-300):
                raise RuntimeError(f"Sigma lost positive semi-definiteness at t = {s_:.6g} "
                                   f"(smallest eigenvalue {lam[0]:.3g}); use "
                                   "formulation='factor' or smaller tolerances")

    def decay_rates(self, Sigma_stop):
        """Average of d log(lambda_k) / d log(1 + t - t0) over the last decade of time."""
        t0, t_stop = self.t0, self.t_stop
        target = t0 - 1.0 + (1.0 + t_stop - t0) / 10.0
        t_ref, y_ref = min(self.history, key=lambda h: abs(h[0] - target))
        span = np.log((1.0 + t_stop - t0) / (1.0 + t_ref - t0))
        lam_stop = np.linalg.eigvalsh(Sigma_stop)
        lam_ref = np.linalg.eigvalsh(self.ode.unpack(y_ref)[1])
        tiny = np.finfo(float).tiny
        if span <= 0:
            return np.zeros(self.ode.d), lam_stop
        ratio = np.clip(lam_stop, tiny, None) / np.clip(lam_ref, tiny, None)
        return np.log(ratio) / span, lam_stop

    def trajectory(self, rank_tol, rate_threshold):
        """The :class:`MomentTrajectory` of the run (limit, rank and rates when converged)."""
        d = self.ode.d
        ys = np.asarray(self.ys).reshape(len(self.times_out), -1)
        Sigmas = np.array([self.ode.unpack(y)[1] for y in ys])
        limit = rank = rates = None
        if self.status == "converged":
            limit = Sigmas[-1]
            rates, lam = self.decay_rates(limit)
            scale = max(lam[-1], np.finfo(float).tiny)
            rank = int(np.sum((rates >= -rate_threshold) & (lam > rank_tol * scale)))
        return MomentTrajectory(np.asarray(self.times_out, dtype=np.float64), ys[:, :d], Sigmas,
                                self.status, float(self.t_stop), limit, rank, self.message,
                                rates)


# --------------------------------------------------------------------------------------
# helpers of the chapter "Gaussian initial data": particles, the cone picture, clustering
# --------------------------------------------------------------------------------------

def moment_vector(dalpha, dSigma):
    r"""Stack :math:`(\dot\alpha, \dot\Sigma)` into one vector: :math:`\dot\alpha` then the
    upper triangle of :math:`\dot\Sigma` (row by row), of length :math:`d + d(d+1)/2`.

    The independent entries of a moment rate, compared component by component with a
    :math:`z`-test (:func:`replicate_z_scores`) in the chapter on Castin et al. (2025).
    """
    a = np.asarray(dalpha, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"dalpha must be a 1-D array of shape (d,), got shape {a.shape}")
    S = _square(dSigma, "dSigma", a.size)
    return np.concatenate([a, S[np.triu_indices(a.size)]])


def particle_moment_samples(velocity, alpha, Sigma, ns, reps, rng):
    r"""Independent particle estimates of the moment rates at several sample sizes.

    For each :math:`n` in ``ns`` and each of ``reps`` replicates, draw
    :math:`x_1, \dots, x_n \sim \mathcal N(\alpha, \Sigma)`, evaluate ``velocity(X)`` (the
    attention of the empirical measure at its atoms, ``(n, d)``) and store
    :func:`moment_vector` of :func:`particle_moment_rates`. Returns an array of shape
    ``(len(ns), reps, d + d(d+1)/2)``, the input of :func:`replicate_z_scores` (one row of
    sample sizes) and of :func:`rms_error_rate` (through :func:`relative_squared_errors`).
    Castin et al. (2025): the particle rates converge to the moment ODEs as :math:`n\to\infty`.
    """
    if not callable(velocity):
        raise ValueError("velocity must be callable as velocity(X) -> (n, d) velocities")
    alpha, Sigma = _check_moments(alpha, Sigma)
    ns = [_checks.positive_int(n, "ns") for n in np.atleast_1d(ns)]
    reps = _checks.positive_int(reps, "reps")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")
    d = alpha.size
    out = np.empty((len(ns), reps, d + d * (d + 1) // 2))
    for i, n in enumerate(ns):
        for r in range(reps):
            X = rng.multivariate_normal(alpha, Sigma, size=n)
            out[i, r] = moment_vector(*particle_moment_rates(X, velocity(X)))
    return out


def relative_squared_errors(samples, target):
    r"""Squared relative errors :math:`|s - t|^2 / |t|^2` of estimates ``samples`` ``(..., m)``.

    Returns an array of shape ``samples.shape[:-1]``; with ``samples`` from
    :func:`particle_moment_samples` it is the ``squared_errors`` input of
    :func:`rms_error_rate`.
    """
    s = np.asarray(samples, dtype=np.float64)
    t = np.asarray(target, dtype=np.float64)
    if t.ndim != 1 or s.ndim < 1 or s.shape[-1] != t.size:
        raise ValueError(f"target must have shape (m,) with m = samples.shape[-1], "
                         f"got {t.shape} and {s.shape}")
    scale = float(t @ t)
    if not np.isfinite(scale) or scale == 0:
        raise ValueError("target must be finite and non-zero")
    return ((s - t) ** 2).sum(axis=-1) / scale


def cone_coordinates(Sigma):
    r"""The point :math:`(a - b,\ 2c,\ a + b)` of a :math:`2\times 2` covariance
    :math:`\left[\begin{smallmatrix} a & c\\ c & b\end{smallmatrix}\right]`.

    The authors of Castin et al. (2025) draw :math:`d = 2` covariance trajectories this way:
    :math:`\Sigma \succeq 0` iff :math:`a + b \ge \sqrt{(a - b)^2 + 4c^2}`, so the cone of
    covariance matrices is the Lorentz cone and rank-one matrices are its surface. ``Sigma``
    has shape ``(..., 2, 2)``; returns ``(..., 3)``.
    """
    S = np.asarray(Sigma, dtype=np.float64)
    if S.ndim < 2 or S.shape[-2:] != (2, 2):
        raise ValueError(f"Sigma must have shape (..., 2, 2), got {S.shape}")
    return np.stack([S[..., 0, 0] - S[..., 1, 1], S[..., 0, 1] + S[..., 1, 0],
                     S[..., 0, 0] + S[..., 1, 1]], axis=-1)


def covariance_from_cone(u, w, v):
    r"""Inverse of :func:`cone_coordinates`: the symmetric matrix
    :math:`\tfrac12\left[\begin{smallmatrix} v + u & w\\ w & v - u\end{smallmatrix}\right]`
    (positive semi-definite iff :math:`v \ge \sqrt{u^2 + w^2}`)."""
    u, w, v = (float(z) for z in (u, w, v))
    if not np.all(np.isfinite([u, w, v])):
        raise ValueError("u, w, v must be finite")
    return np.array([[(v + u) / 2, w / 2], [w / 2, (v - u) / 2]])


def softmax_lyapunov(Sigma, V):
    r"""The Lyapunov function :math:`\operatorname{tr}(V^{-1}\Sigma)` of softmax attention.

    For :math:`V` symmetric positive definite and :math:`A_s = \tfrac12(A + A^\top) = -P
    \preceq 0`, along :math:`\dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top\Sigma V`,

    .. math::

        \frac{d}{dt}\operatorname{tr}(V^{-1}\Sigma) = 2\operatorname{tr}(\Sigma A_s\Sigma)
        = -2\|P^{1/2}\Sigma\|_F^2 \le 0

    (derived in the chapter "Gaussian initial data" on the ODE of Castin et al., 2025; the
    first equality uses :math:`V^\top = V`). ``Sigma`` has shape ``(..., d, d)``; returns
    shape ``Sigma.shape[:-2]``. ``ValueError`` unless ``V`` is symmetric positive definite.
    """
    S = np.asarray(Sigma, dtype=np.float64)
    if S.ndim < 2 or S.shape[-1] != S.shape[-2]:
        raise ValueError(f"Sigma must have shape (..., d, d), got {S.shape}")
    d = S.shape[-1]
    V = _square(V, "V", d)
    if np.linalg.norm(V - V.T) > SYMMETRY_TOL * np.linalg.norm(V):
        raise ValueError("V must be symmetric (the Lyapunov identity needs V = V^T)")
    lam = np.linalg.eigvalsh(V)
    if lam[0] <= 0:
        raise ValueError(f"V must be positive definite, got smallest eigenvalue {lam[0]:.3g}")
    return np.einsum("ij,...ji->...", np.linalg.inv(V), S)


def l2_growth_rate_bound(Q, K, V):
    r"""A rate :math:`c` with :math:`\operatorname{tr}\Sigma(t) \le e^{2ct}\operatorname{tr}
    \Sigma_0` for L2 attention, :math:`K` square and invertible.

    .. math::

        c = \frac{\|V\|_2\,\|K^\top Q\|_2}{\sigma_{\min}(K)^2}.

    The L2 field is affine with :math:`M = 2VP^{-1}A`, :math:`P = \Sigma^{-1} + 2K^\top K
    \succeq 2K^\top K`, so :math:`\|M\|_2 \le c` whatever :math:`\Sigma`, and
    :math:`\frac{d}{dt}\operatorname{tr}\Sigma = 2\operatorname{tr}(M\Sigma) \le
    2c\operatorname{tr}\Sigma`: no finite-time blow-up, the global existence stated on the
    poster of Castin et al. (2025) (derived here for invertible :math:`K`).
    """
    Q = _checks.matrix(Q, "Q")
    d = Q.shape[1]
    Q, K = _checks.query_key(Q, K, d)
    if K.shape != (d, d):
        raise ValueError(f"K must be square (d, d) = ({d}, {d}) for this bound, got {K.shape}")
    V = _square(V, "V", d)
    s_min = np.linalg.svd(K, compute_uv=False)[-1]
    if s_min <= 1e-12 * max(np.linalg.norm(K, 2), 1e-300):
        raise ValueError("K must be invertible for this bound")
    return float(np.linalg.norm(V, 2) * np.linalg.norm(K.T @ Q, 2) / s_min**2)


@dataclass(frozen=True)
class ClusteringDraw:
    """One random draw of :func:`clustering_rank_draws`: the run, ``P = Q^T Q`` and ``V``."""

    run: MomentTrajectory
    P: np.ndarray
    V: np.ndarray


def _clustering_run(P, V, Sigma0, times, conv_tol, rank_tol, rtol, atol):
    """One run of :func:`clustering_rank_draws` (module level, so that joblib can send it to
    other processes or machines)."""
    return integrate_moments(softmax_rhs, np.zeros(P.shape[0]), Sigma0, times, args=(-P, V),
                             method="LSODA", rtol=rtol, atol=atol, conv_tol=conv_tol,
                             rank_tol=rank_tol)


def clustering_rank_draws(d, n_draws, rng, *, V="identity", times=None, conv_tol=1e-6,
                          rank_tol=1e-6, rtol=1e-7, atol=1e-12, n_jobs=None):
    r"""The limiting-rank experiment of Castin et al. (2025) for softmax attention, K = -Q.

    Each draw: :math:`Q \in \mathbb R^{\lfloor d/2\rfloor\times d}` and :math:`W` with standard
    Gaussian entries, :math:`A = -Q^\top Q` (so :math:`A_s = -P`, :math:`P = Q^\top Q` of rank
    :math:`\lfloor d/2\rfloor` almost surely), :math:`\Sigma_0 = WW^\top`, :math:`\alpha_0 = 0`
    and :math:`V = I` (``V="identity"``) or :math:`V = W'^\top W'` with :math:`W'` Gaussian
    (``V="random"``, symmetric positive definite almost surely). Integrates
    :math:`\dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top\Sigma V` with :func:`integrate_moments`
    (LSODA) up to ``times[-1]`` (default :math:`10^8`, 25 geometric output times).

    ``rank_tol`` (default equal to ``conv_tol``): when the stopping rule
    :math:`(1 + t)\|\dot\Sigma\|_F \le \text{conv\_tol}\,\|\Sigma\|_F` fires, an eigenvalue
    decaying like :math:`1/t` contributes about its own size to the left-hand side, so the
    collapsing eigenvalues are then at most about ``conv_tol`` times :math:`\|\Sigma\|_F`;
    they are not counted even when two of them are so close that their decay over the last
    decade (``MomentTrajectory.log_rates``) cannot be read off the sorted eigenvalues.

    The runs are independent tasks of :class:`joblib.Parallel`; the matrices are drawn first,
    in order, from ``rng``, and each run is deterministic, so the result does not depend on
    the number of jobs or on the backend. The library fixes neither: they come from the
    caller's :func:`joblib.parallel_config` (one job in the calling process by default),
    e.g. ``with joblib.parallel_config(backend="loky", n_jobs=2):`` for two processes, or
    ``backend="dask"`` for a Dask cluster; ``n_jobs``, when given, is passed to
    :class:`joblib.Parallel`. Some draws with :math:`V` random run to :math:`t = 10^8` in
    thousands of steps: two jobs halve the wall-clock time on two free cores.
    Returns a list of :class:`ClusteringDraw`.
    """
    d = _checks.positive_int(d, "d")
    if d < 2:
        raise ValueError("d must be at least 2 (Q has floor(d/2) >= 1 rows)")
    n_draws = _checks.positive_int(n_draws, "n_draws")
    if V not in ("identity", "random"):
        raise ValueError(f"V must be 'identity' or 'random', got {V!r}")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")
    if times is None:
        times = np.concatenate([[0.0], np.geomspace(1e-2, 1e8, 25)])
    times = _check_times(times)
    problems = []
    for _ in range(n_draws):
        Q = rng.normal(size=(d // 2, d))
        W = rng.normal(size=(d, d))
        Wv = rng.normal(size=(d, d))
        problems.append((Q.T @ Q, np.eye(d) if V == "identity" else Wv.T @ Wv, W @ W.T))
    settings = (times, conv_tol, rank_tol, rtol, atol)
    runs = Parallel(n_jobs=n_jobs)(delayed(_clustering_run)(*p, *settings) for p in problems)
    return [ClusteringDraw(run, P, Vd) for run, (P, Vd, _) in zip(runs, problems, strict=True)]


class RankReading(NamedTuple):
    r"""The rank of the limit of a clustering run, read on :math:`\ker P` (see
    :func:`read_limit_rank`)."""

    rank: int | None  # number of settled eigenvalues; None when one is still moving
    ratios: np.ndarray  # eigenvalues of U^T Sigma U at the end, over the largest
    rates: np.ndarray  # their d log / d log(1 + t) over the last decade of output times
    margin: float  # smallest distance of a rate to a threshold


def read_limit_rank(run, P, *, settled=0.04, collapsing=0.9):
    r"""Read the rank of the limit of :math:`\Sigma(t)` from its compression to :math:`\ker P`.

    For softmax attention with :math:`A_s = -P \preceq 0` and :math:`V` symmetric positive
    definite (or :math:`V = I`), every limit point of :math:`\Sigma(t)` has its range in
    :math:`\ker P` (the Lyapunov argument of the chapter on Gaussian initial data, for the
    ODE of Castin et al., 2025), so its rank is that of its compression
    :math:`C = U^\top\Sigma U`, :math:`U` an orthonormal basis of :math:`\ker P`
    (:math:`d - \operatorname{rank}P` columns). With :math:`c_1 \le \dots \le c_m` the
    eigenvalues of :math:`C` at the end of ``run`` (``t_stop``) and at the last output time
    :math:`t_k` with :math:`1 + t_k \le (1 + t_{\text{stop}})/10`, the rate of
    :math:`c_j` is :math:`\log(c_j(t_{\text{stop}})/c_j(t_k)) / \log\frac{1 + t_{\text{stop}}}
    {1 + t_k}`. An eigenvalue converging to a positive limit has a rate near 0, one collapsing
    like :math:`1/t` a rate near :math:`-1`. Each eigenvalue is *settled* (rate
    :math:`\ge -\text{settled}`), *collapsing* (rate :math:`\le -\text{collapsing}`) or
    *moving*; the reading is the number of settled eigenvalues, or ``None`` (unsettled) when
    one is moving. ``margin`` is the smallest distance of a rate to the two thresholds: a
    perturbation of the run that moves no rate by more than it (another CPU's rounding,
    another step sequence) gives the same reading.

    Parameters
    ----------
    run : MomentTrajectory
        A run of :func:`integrate_moments` (any status), e.g. ``ClusteringDraw.run``.
    P : array (d, d)
        Symmetric positive semi-definite, with ``A_s = -P``; its numerical kernel (eigenvalues
        below ``1e-10`` times the largest) is used.
    settled, collapsing : float
        The thresholds, ``0 < settled < collapsing``.

    Returns
    -------
    RankReading
    """
    if not isinstance(run, MomentTrajectory):
        raise ValueError("run must be a MomentTrajectory from integrate_moments")
    d = run.Sigma.shape[-1]
    P = _square(P, "P", d)
    if np.linalg.norm(P - P.T) > SYMMETRY_TOL * max(np.linalg.norm(P), 1e-300):
        raise ValueError("P must be symmetric")
    settled = _checks.positive_float(settled, "settled")
    collapsing = _checks.positive_float(collapsing, "collapsing")
    if settled >= collapsing:
        raise ValueError(f"need settled < collapsing, got {settled} and {collapsing}")
    lam, U = np.linalg.eigh(0.5 * (P + P.T))
    if lam[-1] < 0 or lam[0] < -1e-10 * max(lam[-1], 1e-300):
        raise ValueError("P must be positive semi-definite")
    kernel = U[:, lam <= 1e-10 * max(lam[-1], 1e-300)]
    if kernel.shape[1] == 0:
        return RankReading(0, np.zeros(0), np.zeros(0), np.inf)
    t = run.times
    k = int(np.searchsorted(1.0 + t, (1.0 + t[-1]) / 10.0, side="right")) - 1
    k = max(k, 0)
    tiny = np.finfo(float).tiny
    c_end = np.clip(np.linalg.eigvalsh(kernel.T @ run.Sigma[-1] @ kernel), tiny, None)
    c_ref = np.clip(np.linalg.eigvalsh(kernel.T @ run.Sigma[k] @ kernel), tiny, None)
    span = np.log((1.0 + t[-1]) / (1.0 + t[k]))
    rates = np.log(c_end / c_ref) / span if span > 0 else np.zeros_like(c_end)
    is_settled = rates >= -settled
    moving = ~is_settled & (rates > -collapsing)
    margin = float(np.min(np.minimum(np.abs(rates + settled), np.abs(rates + collapsing))))
    rank = None if np.any(moving) else int(np.sum(is_settled))
    return RankReading(rank, c_end / c_end[-1], rates, margin)
