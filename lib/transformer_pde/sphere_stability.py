r"""Linear stability of the attention dynamics on the sphere (chapter 7).

Three linearisations of the flows of :mod:`transformer_pde.sphere`:

- :func:`energy_hessian`: the Riemannian Hessian of the interaction energy
  :math:`E_\beta = \frac{1}{2\beta}\sum_{i,j} w_iw_j e^{\beta\langle x_i, Dx_j\rangle}` on
  :math:`(\mathbb S^{d-1})^n`, in the orthonormal tangent bases of :func:`tangent_basis`. At
  a critical point, USA (:math:`\dot x_i = \frac{1}{w_i}\operatorname{grad}_{x_i}E_\beta`)
  linearises to :math:`W^{-1}` times it, so its signs decide stability;
- :func:`antipodal_spectrum`: the closed form of that linearisation at two antipodal clusters
  on a top eigenvector of :math:`D` (derived in chapter 7);
- :func:`uniform_instability_rates`: the growth rates of the spherical harmonics of degree
  :math:`\ell` around the uniform measure (Funk-Hecke), whose maximiser is the number of
  clusters that emerge from a nearly uniform start (Bruno, Pasqualotto and Agazzi, 2025).

And :func:`two_cluster_merge_time`, the time two point clusters take to merge, the simplest
instance of the metastability of Geshkovski, Koubbi, Polyanskiy and Rigollet (2024).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.integrate import quad
from scipy.special import gammaln, ive

from . import _checks, _sphere
from ._sphere import MAX_LOGIT

__all__ = [
    "tangent_basis",
    "energy_hessian",
    "antipodal_spectrum",
    "uniform_instability_rates",
    "two_cluster_merge_time",
]


def tangent_basis(X: ArrayLike) -> NDArray[np.float64]:
    r"""Orthonormal bases of the tangent spaces :math:`x_i^\perp`, shape ``(n, d, d - 1)``.

    Column :math:`k` of ``tangent_basis(X)[i]`` is :math:`e_k` of an orthonormal basis of
    :math:`\{u : \langle u, x_i\rangle = 0\}` (from a QR factorisation of
    :math:`[x_i, I_d]`). ``X`` must have unit rows.

    Parameters
    ----------
    X : array (n, d)
        Points of the sphere (unit rows), :math:`d \ge 2`.

    Returns
    -------
    array (n, d, d - 1)

    Raises
    ------
    ValueError
        If a row is not a unit vector or :math:`d < 2`.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.6, 0.0, 0.8]])
    >>> B = tangent_basis(x)[0]
    >>> print(B.shape, bool(np.allclose(B.T @ B, np.eye(2), atol=1e-12)),
    ...       bool(np.allclose(x @ B, 0, atol=1e-12)))
    (3, 2) True True

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    X = _sphere.unit_rows(X, 1e-8)
    n, d = X.shape
    if d < 2:
        raise ValueError(f"X must have at least 2 columns (a sphere of dimension >= 1), got {d}")
    out = np.empty((n, d, d - 1))
    for i, x in enumerate(X):
        Q, _ = np.linalg.qr(np.column_stack([x, np.eye(d)]))
        out[i] = Q[:, 1:d]
    return out


def energy_hessian(X: ArrayLike, beta: float = 1.0, D: ArrayLike | None = None,
                   weights: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""Riemannian Hessian of the interaction energy on :math:`(\mathbb S^{d-1})^n`.

    For :math:`E(x) = \frac{1}{2\beta}\sum_{i,j} w_iw_j e^{\beta\langle x_i, Dx_j\rangle}`
    (:func:`transformer_pde.sphere.energy`, ``D`` symmetric), with Euclidean gradient
    :math:`g_i = w_i\sum_j w_j e^{\beta s_{ij}} Dx_j` and Euclidean Hessian blocks

    .. math::

        H_{ij} = w_iw_j e^{\beta s_{ij}}\big(D + \beta\, Dx_j (Dx_i)^\top\big) \ (i \ne j),
        \quad
        H_{ii} = w_i^2 e^{\beta s_{ii}}\big(D + 2\beta\, Dx_i(Dx_i)^\top\big)
               + \beta w_i\sum_{k\ne i} w_k e^{\beta s_{ik}} Dx_k(Dx_k)^\top,

    the Riemannian Hessian is :math:`B_i^\top\big(H_{ij} - \delta_{ij}\langle x_i,
    g_i\rangle I\big)B_j` in the tangent bases :math:`B_i` of :func:`tangent_basis`
    (Absil, Mahony and Sepulchre, 2008, for the sphere). Returns the symmetric matrix of
    shape ``(n (d - 1), n (d - 1))``, token by token. At a critical point its quadratic form
    is the second derivative of :math:`E` along geodesics.

    Parameters
    ----------
    X : array (n, d)
        Tokens, unit rows.
    beta : float
        Inverse temperature, positive.
    D : array (d, d), optional
        Symmetric interaction matrix (default the identity).
    weights : array (n,), optional
        Weights :math:`w_i` (default uniform).

    Returns
    -------
    array (n (d - 1), n (d - 1))

    Raises
    ------
    ValueError
        If a row is not a unit vector, ``beta`` is not valid, ``D`` is not symmetric, the
        weights are not a probability vector, or the logits overflow.

    Examples
    --------
    At two antipodal clusters, :math:`n` times the Hessian has the spectrum of
    :func:`antipodal_spectrum`:

    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
    >>> spectrum = np.linalg.eigvalsh(3 * energy_hessian(X, 1.0))
    >>> print(bool(np.allclose(spectrum, antipodal_spectrum(2, 1, 1.0, [1.0, 1.0]), atol=1e-12)))
    True

    References
    ----------
    :cite:`geshkovski2025mathematical,burger2025analysis`
    """
    X = _sphere.unit_rows(X, 1e-8)
    n, d = X.shape
    beta = _sphere.beta(beta)
    D = _sphere.interaction_matrix(D, d)
    if not np.allclose(D, D.T, rtol=0, atol=1e-12 * max(1.0, np.abs(D).max())):
        raise ValueError("D must be symmetric (the energy's gradient flow needs D = D^T)")
    w = _checks.weights(weights, n)
    DX = X @ D
    S = beta * (X @ DX.T)
    if S.max() > MAX_LOGIT:
        raise ValueError("the logits beta <x, D y> overflow exp: lower beta or the scale of D")
    Kw = np.exp(S) * w[None, :] * w[:, None]  # w_i w_j e^{beta s_ij}
    g = Kw @ DX  # Euclidean gradient, row i
    H = np.einsum("ij,ab->iajb", Kw, D) + beta * np.einsum("ij,ja,ib->iajb", Kw, DX, DX)
    # diagonal blocks: the pair (i, i) counts twice in s_ii, plus the k != i terms
    for i in range(n):
        H[i, :, i, :] += beta * Kw[i, i] * np.outer(DX[i], DX[i])
        others = Kw[i].copy()
        others[i] = 0.0
        H[i, :, i, :] += beta * (DX.T * others) @ DX - (X[i] @ g[i]) * np.eye(d)
    B = tangent_basis(X)
    R = np.einsum("iap,iajb,jbq->ipjq", B, H, B).reshape(n * (d - 1), n * (d - 1))
    return (R + R.T) / 2


def antipodal_spectrum(n_plus: int, n_minus: int, beta: float,
                       eigenvalues: ArrayLike) -> NDArray[np.float64]:
    r"""Eigenvalues of USA linearised at two antipodal clusters on a top eigenvector of ``D``.

    ``n_plus`` tokens at :math:`v` and ``n_minus`` at :math:`-v`, where :math:`Dv =
    \lambda_1 v` and :math:`\lambda_1 > 0` is the largest of ``eigenvalues`` (those of the
    symmetric :math:`D`, the first one being :math:`\lambda_1`), :math:`n = n_+ + n_-`,
    :math:`p = n_+/n`, :math:`q = n_-/n`, :math:`E = e^{\beta\lambda_1}`. Perturbing
    :math:`x_i = \pm v + \varepsilon_i`, :math:`\varepsilon_i \perp v`, the USA field
    :math:`P_{x}\frac1n\sum_j e^{\beta\langle x, Dx_j\rangle}Dx_j` linearises to

    - :math:`-\lambda_1 r_\pm` on the modes that keep each cluster's mean fixed, with
      :math:`r_+ = pE - q/E` and :math:`r_- = qE - p/E` (multiplicities
      :math:`(n_\pm - 1)(d - 1)`);
    - on the cluster means :math:`(a, b)` along an eigenvector of eigenvalue
      :math:`\lambda_k`, :math:`k \ge 2`, the matrix

      .. math::

          M_k = \begin{pmatrix} -\lambda_1 r_+ + \lambda_k pE & \lambda_k q/E \\
          \lambda_k p/E & -\lambda_1 r_- + \lambda_k qE \end{pmatrix}

      (only its first or last entry when one cluster is empty).

    Derived in chapter 7 (setting of Burger, Kabri, Korolev, Roith and Weigand, 2025).
    Returns all :math:`n(d-1)` eigenvalues, sorted (the spectrum of ``n`` times
    :func:`energy_hessian` at that configuration).

    Parameters
    ----------
    n_plus : int
        Tokens at :math:`v`, positive.
    n_minus : int
        Tokens at :math:`-v`, non-negative.
    beta : float
        Inverse temperature, non-negative.
    eigenvalues : array (d,)
        Eigenvalues of ``D``, the largest (positive) first.

    Returns
    -------
    array (n (d - 1),)

    Raises
    ------
    ValueError
        If a count is not valid, ``eigenvalues`` is not a finite 1-D array of at least two with
        the largest positive first, or :math:`\beta\lambda_1` overflows.

    Examples
    --------
    In :math:`d = 2` with :math:`D = I`, :math:`\beta = 1`, :math:`n_+ = 2`, :math:`n_- = 1`: the
    mode inside the larger cluster decays at :math:`\lambda_1 r_+ = 2e/3 - 1/(3e)`:

    >>> import numpy as np
    >>> s = antipodal_spectrum(2, 1, 1.0, [1.0, 1.0])
    >>> print(len(s), bool(abs(s[0] + 2 * np.e / 3 - 1 / (3 * np.e)) < 1e-12))
    3 True

    References
    ----------
    :cite:`burger2025analysis`
    """
    n_plus = _checks.positive_int(n_plus, "n_plus")
    if isinstance(n_minus, bool) or not isinstance(n_minus, (int, np.integer)) or n_minus < 0:
        raise ValueError(f"n_minus must be an integer >= 0, got {n_minus!r}")
    n_minus = int(n_minus)
    beta = _sphere.beta(beta, allow_zero=True)
    lam = _checks.real_array(eigenvalues, "eigenvalues")
    if lam.ndim != 1 or lam.size < 2 or not np.all(np.isfinite(lam)):
        raise ValueError("eigenvalues must be a finite 1-D array of at least 2 eigenvalues")
    lam1, rest = float(lam[0]), lam[1:]
    if lam1 <= 0 or np.any(rest > lam1):
        raise ValueError("eigenvalues[0] must be the largest eigenvalue of D, and positive")
    n = n_plus + n_minus
    p, q = n_plus / n, n_minus / n
    if beta * lam1 > MAX_LOGIT:
        raise ValueError("beta * lambda_1 overflows exp: lower beta")
    E = math.exp(beta * lam1)
    r_plus, r_minus = p * E - q / E, q * E - p / E
    d1 = lam.size - 1  # dimension of the tangent space
    out = [-lam1 * r_plus] * ((n_plus - 1) * d1)
    out += [-lam1 * r_minus] * (max(n_minus - 1, 0) * d1)
    for lk in rest:
        if n_minus == 0:
            out.append(-lam1 * r_plus + lk * p * E)
        else:
            M = np.array([[-lam1 * r_plus + lk * p * E, lk * q / E],
                          [lk * p / E, -lam1 * r_minus + lk * q * E]])
            out += list(np.linalg.eigvals(M).real)
    return np.sort(np.array(out))


def uniform_instability_rates(ell: ArrayLike, d: int, beta: float,
                              model: str = "usa") -> float | NDArray[np.float64]:
    r"""Growth rates of the degree-:math:`\ell` modes around the uniform measure on the sphere.

    Linearising :math:`\partial_t\mu + \operatorname{div}(\mu v_\mu) = 0`, :math:`v_\mu(x) =
    P_x\int e^{\beta\langle x, y\rangle}y\,d\mu(y)` (USA, :math:`D = I`), at the uniform
    measure :math:`\sigma` with :math:`\mu = \sigma + \varepsilon f`: :math:`v_f =
    \frac1\beta\nabla_{\mathbb S}(K f)` with :math:`Kf(x) = \int e^{\beta\langle x,
    y\rangle}f(y)\,d\sigma(y)`, so :math:`\partial_t f = -\frac1\beta\Delta_{\mathbb S}Kf`. A
    spherical harmonic of degree :math:`\ell` is an eigenfunction of both (Funk-Hecke), and
    grows at

    .. math::

        \lambda_\ell = \frac{\ell(\ell + d - 2)}{\beta}\,\kappa_\ell, \qquad
        \kappa_\ell = \Gamma(\tfrac d2)\big(\tfrac2\beta\big)^{d/2-1}
        I_{\ell + d/2 - 1}(\beta),

    :math:`I_\nu` the modified Bessel function (in :math:`d = 2`, :math:`\lambda_\ell =
    \ell^2 I_\ell(\beta)/\beta`). For SA divide by :math:`Z_\sigma = \kappa_0`. Every mode
    :math:`\ell \ge 1` grows: :math:`\sigma` is linearly unstable for every :math:`\beta > 0`
    (derived in chapter 7; the most unstable degree is the index of Bruno, Pasqualotto and
    Agazzi, 2025). ``ell`` may be an array of integers >= 0; ``model`` is ``"usa"`` or
    ``"sa"``.

    Parameters
    ----------
    ell : int or array of int
        Degrees, non-negative.
    d : int
        Dimension of the ambient space, at least 2.
    beta : float
        Inverse temperature, positive.
    model : {"usa", "sa"}
        Attention model.

    Returns
    -------
    float or array

    Raises
    ------
    ValueError
        If ``ell`` is not made of non-negative integers, :math:`d < 2`, ``beta`` is not valid or
        ``model`` is unknown.

    Examples
    --------
    In :math:`d = 2`, :math:`\lambda_\ell = \ell^2 I_\ell(\beta)/\beta`:

    >>> import numpy as np
    >>> from scipy.special import iv
    >>> rates = uniform_instability_rates(np.arange(4), 2, 1.0)
    >>> print(bool(np.allclose(rates, np.arange(4) ** 2 * iv(np.arange(4), 1.0), rtol=1e-12)))
    True

    References
    ----------
    :cite:`bruno2025emergence,geshkovski2025mathematical`
    """
    model = _sphere.model(model)
    d = _checks.positive_int(d, "d")
    if d < 2:
        raise ValueError(f"d must be at least 2, got {d}")
    beta = _sphere.beta(beta)
    ell_arr = np.asarray(ell)
    if not np.issubdtype(ell_arr.dtype, np.integer) or np.any(ell_arr < 0):
        raise ValueError("ell must be integers >= 0 (degrees of spherical harmonics)")
    nu = ell_arr + d / 2.0 - 1.0
    # log kappa_l, with the exponentially scaled Bessel function (ive = iv e^{-beta})
    log_kappa = (gammaln(d / 2.0) + (d / 2.0 - 1.0) * np.log(2.0 / beta)
                 + np.log(ive(nu, beta)) + beta)
    if model == "sa":
        log_kappa = log_kappa - np.log(ive(d / 2.0 - 1.0, beta)) - beta - gammaln(d / 2.0) \
            - (d / 2.0 - 1.0) * np.log(2.0 / beta)
    out = ell_arr * (ell_arr + d - 2.0) / beta * np.exp(log_kappa)
    return out if out.ndim else float(out)


def two_cluster_merge_time(theta0: float, theta1: float, beta: float, model: str = "sa") -> float:
    r"""Time for two point clusters of equal mass to go from angle ``theta0`` to ``theta1``.

    Two clusters of equal mass at angle :math:`\theta` (:math:`Q = K = V = I`, any
    :math:`d \ge 2`) stay point clusters and approach each other along their great circle:
    :math:`\dot\theta = -2\,\frac{e^{\beta\cos\theta}}{e^{\beta} + e^{\beta\cos\theta}}
    \sin\theta` (SA) and :math:`\dot\theta = -e^{\beta\cos\theta}\sin\theta` (USA). Hence

    .. math::

        T_{\mathrm{SA}} = \int_{\theta_1}^{\theta_0}
        \frac{1 + e^{\beta(1 - \cos\theta)}}{2\sin\theta}\,d\theta
        \;\sim\; \frac{e^{\beta(1-\cos\theta_0)}}{2\beta\sin^2\theta_0}
        \quad (\beta \to \infty),

    exponentially long in :math:`\beta`: the simplest instance of the metastability of
    Geshkovski, Koubbi, Polyanskiy and Rigollet (2024) (derived in chapter 7). Requires
    :math:`0 < \theta_1 < \theta_0 < \pi`; computed by adaptive quadrature.

    Parameters
    ----------
    theta0, theta1 : float
        Initial and final angles, :math:`0 < \theta_1 < \theta_0 < \pi`.
    beta : float
        Inverse temperature, non-negative.
    model : {"sa", "usa"}
        Attention model.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If the angles are not ordered in :math:`(0, \pi)`, ``beta`` is not valid or ``model`` is
        unknown.

    Examples
    --------
    At :math:`\beta = 0` both models give :math:`\int d\theta/\sin\theta =
    \log\tan(\theta_0/2) - \log\tan(\theta_1/2)`:

    >>> import numpy as np
    >>> T = two_cluster_merge_time(np.pi / 2, np.pi / 4, 0.0)
    >>> print(f"{T:.9f}", f"{-np.log(np.tan(np.pi / 8)):.9f}")
    0.881373587 0.881373587

    References
    ----------
    :cite:`geshkovski2024dynamic,geshkovski2025mathematical`
    """
    model = _sphere.model(model)
    beta = _sphere.beta(beta, allow_zero=True)
    theta0 = _checks.finite_float(theta0, "theta0")
    theta1 = _checks.finite_float(theta1, "theta1")
    if not (0.0 < theta1 < theta0 < np.pi):
        raise ValueError(f"need 0 < theta1 < theta0 < pi, got theta0 = {theta0!r}, "
                         f"theta1 = {theta1!r}")

    if model == "sa":
        def rate(th):  # 1 / |theta'|
            return (1.0 + np.exp(beta * (1.0 - np.cos(th)))) / (2.0 * np.sin(th))
    else:
        def rate(th):
            return np.exp(-beta * np.cos(th)) / np.sin(th)
    value, _ = quad(rate, theta1, theta0, epsabs=0.0, epsrel=1e-12, limit=200)
    return float(value)
