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

__all__ = ["interaction_strength", "softmax_weight_second_moment",
           "normalised_weight_second_moment", "key_projection_second_moment",
           "weight_tail_exponents", "meanfield_errors", "local_rms_slopes",
           "covariance_rate_influence", "covariance_rate_variance", "field_error_variance"]


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



def normalised_weight_second_moment(A, alpha, Sigma):
    r"""Second moment of the normalised softmax weight, :math:`\mathbb E_{x,y}[w(x,y)^2]`.

    For :math:`x, y \sim \mathcal N(\alpha, \Sigma)` independent, the weight that softmax
    attention gives a key :math:`y` at a query :math:`x`, normalised by its mean over keys, is

    .. math::

        w(x, y) = \frac{e^{\langle Ax, y\rangle}}{\mathbb E_y e^{\langle Ax, y\rangle}}
        = \exp\big(\langle Ax, y - \alpha\rangle - \tfrac12 q(x)\big), \qquad
        q(x) = x^\top A^\top \Sigma A x,

    so :math:`\mathbb E_y w^2 = e^{q(x)}`, and with :math:`x = \alpha + Su`,
    :math:`S = \Sigma^{1/2}`, :math:`K = SA^\top\Sigma AS = B^\top B`, :math:`B = SAS`,

    .. math::

        \mathbb E_x e^{q(x)} = \det(I - 2K)^{-1/2}
        \exp\big(\alpha^\top M\alpha + 2\alpha^\top M S (I - 2K)^{-1} S M \alpha\big),
        \qquad M = A^\top\Sigma A,

    finite if and only if :math:`\lambda_{\max}(K) = \rho^2 < 1/2`, i.e.
    :math:`\rho = \|\Sigma^{1/2}A\Sigma^{1/2}\|_2 < 1/\sqrt2`. Derived here for the mean-field
    limit of the Transformer PDE (Castin, Ablin, Carrillo and Peyré, 2025).

    Returns
    -------
    float
        The second moment, ``numpy.inf`` when :math:`\rho \ge 1/\sqrt 2` or on overflow.
    """
    alpha, Sigma = _gaussian(alpha, Sigma)
    d = alpha.shape[0]
    A = _checks.matrix(A, "A", (d, d))
    S = psd_sqrt(Sigma)
    M = A.T @ Sigma @ A
    K = S @ M @ S
    K = (K + K.T) / 2
    if np.linalg.eigvalsh(K)[-1] >= 0.5 - 1e-12:  # rounding of rho^2 = 1/2
        return np.inf
    I_2K = np.eye(d) - 2 * K
    _, logdet = np.linalg.slogdet(I_2K)
    c = S @ M @ alpha
    log_moment = -0.5 * logdet + alpha @ M @ alpha + 2 * c @ np.linalg.solve(I_2K, c)
    with np.errstate(over="ignore"):
        return float(np.exp(log_moment))


def key_projection_second_moment(A, alpha, Sigma):
    r"""Second moment of the mean normalised weight of a key, :math:`\mathbb E_y[\bar w(y)^2]`.

    With :math:`w` as in :func:`normalised_weight_second_moment`,
    :math:`\bar w(y) = \mathbb E_x w(x, y)`, the total (normalised) attention that the
    queries of :math:`\mathcal N(\alpha, \Sigma)` pay to the key :math:`y`. It drives the
    leading :math:`O(1/n)` term of the mean-square error of the particle system (the
    projection of the error on the keys). With :math:`x = \alpha + Su`, :math:`y = \alpha + Sv`,
    :math:`B = SAS` (:math:`S = \Sigma^{1/2}`),
    :math:`w = \exp(v^\top B u - \tfrac12 |Bu|^2)` and

    .. math::

        \bar w(y) = \det(I + B^\top B)^{-1/2}
        \exp\big(\tfrac12 v^\top B (I + B^\top B)^{-1} B^\top v\big), \qquad
        \mathbb E_y \bar w^2 = \det(I + B^\top B)^{-1}\det(I - 2G)^{-1/2},

    :math:`G = B(I + B^\top B)^{-1}B^\top`, whose eigenvalues are
    :math:`\sigma_i^2/(1 + \sigma_i^2)`: finite if and only if
    :math:`\rho = \sigma_{\max}(B) < 1`. Derived here (Castin, Ablin, Carrillo and Peyré, 2025,
    for the model). The mean :math:`\alpha` does not enter.

    Returns
    -------
    float
        The second moment, ``numpy.inf`` when :math:`\rho \ge 1`.
    """
    alpha, Sigma = _gaussian(alpha, Sigma)
    d = alpha.shape[0]
    A = _checks.matrix(A, "A", (d, d))
    S = psd_sqrt(Sigma)
    B = S @ A @ S
    s = np.linalg.svd(B, compute_uv=False)
    if s[0] >= 1 - 1e-12:  # rounding of a singular value equal to 1
        return np.inf
    g = s**2 / (1 + s**2)
    return float(np.prod(1 + s**2) ** -1 * np.prod(1 - 2 * g) ** -0.5)


def weight_tail_exponents(rho):
    r"""Tail exponents of the softmax weights of Gaussian tokens at interaction strength ``rho``.

    For :math:`B = \rho I` (isotropic interaction, any :math:`d`), up to slower factors:

    - pair weight :math:`w(x,y)` (:func:`normalised_weight_second_moment`):
      :math:`P(w > \tau) \approx \tau^{-\gamma_w}`,
      :math:`\gamma_w = \tfrac12 + \sqrt{\rho^{-2} + \tfrac14}` (Laplace's method on
      :math:`\log w = \rho r Z - \tfrac12\rho^2 r^2`, :math:`r = |u|`, :math:`Z` standard
      Gaussian); :math:`\gamma_w > 2` iff :math:`\rho < 1/\sqrt2`;
    - key weight :math:`\bar w(y)` (:func:`key_projection_second_moment`):
      :math:`\gamma_k = 1 + \rho^{-2}`; :math:`\gamma_k > 2` iff :math:`\rho < 1`;
    - unnormalised pair weight :math:`e^{\langle Ax,y\rangle}`: :math:`\gamma_e = 1/\rho`
      in :math:`d = 2` (Laplace-distributed exponent); :math:`\gamma_e > 2` iff
      :math:`\rho < 1/2`.

    Derived here. Returns ``(gamma_w, gamma_k, gamma_e)`` (arrays if ``rho`` is).
    """
    rho = np.asarray(rho, dtype=float)
    if not np.all(np.isfinite(rho)) or np.any(rho <= 0):
        raise ValueError("rho must be positive and finite")
    out = (0.5 + np.sqrt(rho**-2 + 0.25), 1 + rho**-2, 1 / rho)
    return tuple(float(x) for x in out) if rho.ndim == 0 else out


def meanfield_errors(A, V, alpha, Sigma, sizes, draws, seed):
    r"""Errors of the softmax particle system against the Gaussian mean field at :math:`t = 0`.

    For each size :math:`n` and each draw, :math:`x_1, \dots, x_n \sim \mathcal N(\alpha,
    \Sigma)` i.i.d., :math:`\Gamma_i = \Gamma_{\hat\mu_n}(x_i)` (softmax attention on the
    empirical measure) and :math:`\Gamma(x) = V(\alpha + \Sigma A x)` (the field of the
    Gaussian solution of the Transformer PDE; Castin, Ablin, Carrillo and Peyré, 2025). Two
    squared errors:

    - of the rate of the empirical covariance, an average over the particles:

      .. math::

          \Big\|\dot{\hat\Sigma}_n - \dot\Sigma\Big\|_F^2, \quad
          \dot{\hat\Sigma}_n = \frac1n\sum_i \big((x_i - \hat\alpha)\Gamma_i^\top
          + \Gamma_i (x_i - \hat\alpha)^\top\big), \quad
          \dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top;

    - of the field at the particles, averaged over them:
      :math:`\frac1n\sum_i |\Gamma_i - \Gamma(x_i)|^2`.

    Parameters
    ----------
    A, V : arrays (d, d)
    alpha : array (d,)
    Sigma : array (d, d), symmetric positive definite
    sizes : sequence of int
        The numbers of particles :math:`n`.
    draws : int or sequence of int
        Independent draws per size (one number for all sizes, or one per size).
    seed : int or sequence of int
        Draw ``r`` of size index ``k`` uses ``numpy.random.default_rng([*seed, k, r])``.

    Returns
    -------
    covariance, field : lists of arrays
        Element ``k`` of each has shape ``(draws[k],)``.
    """
    from . import attention, gaussian

    alpha, Sigma = _gaussian(alpha, Sigma)
    d = alpha.shape[0]
    A = _checks.matrix(A, "A", (d, d))
    V = _checks.matrix(V, "V", (d, d))
    sizes = [_checks.positive_int(n, "sizes") for n in np.atleast_1d(sizes)]
    draws = np.broadcast_to(np.asarray(draws), (len(sizes),))
    draws = [_checks.positive_int(r, "draws") for r in draws]
    seed = list(np.atleast_1d(seed))
    chol = np.linalg.cholesky(Sigma)
    _, target = gaussian.softmax_rhs(alpha, Sigma, A, V)
    cov_err, field_err = [], []
    for k, (n, R) in enumerate(zip(sizes, draws, strict=True)):
        c, f = np.empty(R), np.empty(R)
        for r in range(R):
            X = alpha + np.random.default_rng([*seed, k, r]).standard_normal((n, d)) @ chol.T
            G = attention.softmax(X, A, V)
            _, dSigma = gaussian.particle_moment_rates(X, G)
            c[r] = np.sum((dSigma - target) ** 2)
            f[r] = np.mean(np.sum((G - (alpha + X @ (Sigma @ A).T) @ V.T) ** 2, axis=1))
        cov_err.append(c)
        field_err.append(f)
    return cov_err, field_err


def local_rms_slopes(sizes, squared_errors, *, n_boot=400, seed=0):
    r"""Local exponents of a root-mean-square error between consecutive sample sizes.

    .. math::

        p_k = \frac{\tfrac12\log(\overline{e}_{k+1}/\overline{e}_k)}{\log(n_{k+1}/n_k)},
        \qquad \overline{e}_k = \frac1{R_k}\sum_r e_{kr},

    with a bootstrap standard deviation (resampling the draws of each size independently).
    Heavy-tailed squared errors make the bootstrap optimistic; use it as a lower bound on
    the uncertainty. Returns ``(slopes, sds)``, arrays of length ``len(sizes) - 1``.
    """
    n = np.asarray(sizes, dtype=float)
    if n.ndim != 1 or n.size < 2 or np.any(n <= 0) or np.any(np.diff(n) <= 0):
        raise ValueError("sizes must be an increasing 1-D array of at least 2 positive sizes")
    if len(squared_errors) != n.size:
        raise ValueError("squared_errors must have one array of draws per size")
    errs = [np.asarray(e, dtype=float) for e in squared_errors]
    if any(e.ndim != 1 or e.size < 2 or not np.all(np.isfinite(e)) or np.any(e < 0)
           for e in errs):
        raise ValueError("squared_errors must hold finite, non-negative arrays of >= 2 draws")
    gen = np.random.default_rng(seed)
    log_n = np.log(n)

    def slopes(mse):
        return 0.5 * np.diff(np.log(mse)) / np.diff(log_n)

    point = slopes(np.array([e.mean() for e in errs]))
    boot = np.array([slopes(np.array([e[gen.integers(0, e.size, e.size)].mean() for e in errs]))
                     for _ in range(n_boot)])
    return point, boot.std(axis=0)


def covariance_rate_influence(A, V, alpha, Sigma, Y):
    r"""Influence function of :math:`\mu \mapsto \dot\Sigma[\mu]` (softmax) at a Gaussian.

    The rate of the covariance of a measure under softmax attention is
    :math:`F(\mu) = C(\mu) + C(\mu)^\top`,
    :math:`C(\mu) = \int (x - m_\mu)\,\Gamma_\mu(x)^\top d\mu(x)` (Castin, Ablin, Carrillo and
    Peyré, 2025). Its derivative along :math:`\mu_\varepsilon = (1-\varepsilon)\mu +
    \varepsilon\delta_y` at :math:`\mu = \mathcal N(\alpha, \Sigma)` is
    :math:`\mathrm{IF}(y) = \mathrm{IF}_C(y) + \mathrm{IF}_C(y)^\top` with

    .. math::

        \mathrm{IF}_C(y) = (y - \alpha)\big(\Gamma(y) - \bar\Gamma\big)^\top - C
        + \int (x - \alpha)\, w(x, y)\, \big(y - b(x)\big)^\top d\mu(x)\; V^\top,

    :math:`b(x) = \alpha + \Sigma A x`, :math:`\Gamma = Vb`, :math:`\bar\Gamma = \int\Gamma
    d\mu`, :math:`C = \Sigma A^\top\Sigma V^\top`, and the normalised weight
    :math:`w(x, y) = \exp(\langle Ax, y - \alpha\rangle - \frac12 x^\top A^\top\Sigma A x)`
    (:func:`normalised_weight_second_moment`). The last integral is a Gaussian integral:
    :math:`w(x,y)\,d\mu(x) = Z(y)\,\mathcal N(m_y, P^{-1})`, :math:`P = \Sigma^{-1} +
    A^\top\Sigma A`, :math:`P m_y = \Sigma^{-1}\alpha + A^\top(y - \alpha)`. By the delta
    method, :math:`n\,\mathbb E\|\dot{\hat\Sigma}_n - \dot\Sigma\|_F^2 \to
    \mathbb E_y\|\mathrm{IF}(y)\|_F^2` when this is finite (:func:`covariance_rate_variance`).
    Derived here.

    Parameters
    ----------
    A, V : arrays (d, d)
    alpha : array (d,)
    Sigma : array (d, d)
    Y : array (m, d)
        Points :math:`y`.

    Returns
    -------
    base, tilt, log_Z : arrays (m, d, d), (m, d, d), (m,)
        :math:`\mathrm{IF}(y) = \text{base} + e^{\log Z}\,\text{tilt}` (kept apart so that
        callers can avoid overflow far in the tails).
    """
    alpha, Sigma = _gaussian(alpha, Sigma)
    d = alpha.shape[0]
    A = _checks.matrix(A, "A", (d, d))
    V = _checks.matrix(V, "V", (d, d))
    Y = _checks.points(Y, "Y")
    if Y.shape[1] != d:
        raise ValueError(f"Y must have shape (m, {d}), got {Y.shape}")
    Sinv = np.linalg.inv(Sigma)
    SA = Sigma @ A
    Pm = Sinv + A.T @ Sigma @ A
    Pinv = np.linalg.inv(Pm)
    C = Sigma @ A.T @ Sigma @ V.T
    Gbar = V @ (alpha + SA @ alpha)
    D = Y - alpha
    G = (alpha + Y @ SA.T) @ V.T
    base = np.einsum("mi,mj->mij", D, G - Gbar) - C
    h = Sinv @ alpha + D @ A
    my = h @ Pinv.T
    _, logdet_S = np.linalg.slogdet(Sigma)
    _, logdet_P = np.linalg.slogdet(Pm)
    log_Z = (-0.5 * logdet_S - 0.5 * logdet_P + 0.5 * np.einsum("mi,mi->m", h, my)
             - 0.5 * alpha @ Sinv @ alpha)
    tilt = (np.einsum("mi,mj->mij", my - alpha, Y - alpha - my @ SA.T)
            - Pinv @ A.T @ Sigma) @ V.T
    base = base + np.swapaxes(base, 1, 2)
    tilt = tilt + np.swapaxes(tilt, 1, 2)
    return base, tilt, log_Z


def covariance_rate_variance(A, V, alpha, Sigma, *, radial=4000, angles=128, tail=60.0):
    r"""Limit :math:`\mathbb E_y\|\mathrm{IF}(y)\|_F^2` of :math:`n` times the mean-square error.

    :math:`y \sim \mathcal N(\alpha, \Sigma)` in :math:`d = 2`, by quadrature in whitened
    polar coordinates :math:`y = \alpha + \Sigma^{1/2} r(\cos\theta, \sin\theta)`
    (trapezoid rule: ``radial`` radii, ``angles`` angles), up to the radius where the
    integrand has decayed by :math:`e^{-\text{tail}}`: it behaves like
    :math:`e^{-(1/2 - \rho^2/(1+\rho^2)) r^2}` times a polynomial
    (:func:`key_projection_second_moment`), so the value is finite if and only if
    :math:`\rho < 1`, and ``inf`` is returned for :math:`\rho \ge 1`. Uses
    :func:`covariance_rate_influence`. Derived here.
    """
    alpha, Sigma = _gaussian(alpha, Sigma)
    if alpha.shape[0] != 2:
        raise ValueError("covariance_rate_variance is implemented for d = 2")
    rho = interaction_strength(A, Sigma)
    if rho >= 1 - 1e-12:
        return np.inf
    decay = 0.5 - rho**2 / (1 + rho**2)
    r_max = np.sqrt(tail / decay) + 6.0
    r = np.linspace(0.0, r_max, _checks.positive_int(radial, "radial"))
    th = np.linspace(0.0, 2 * np.pi, _checks.positive_int(angles, "angles"), endpoint=False)
    R, TH = np.meshgrid(r, th, indexing="ij")
    U = np.stack([R * np.cos(TH), R * np.sin(TH)], axis=-1).reshape(-1, 2)
    Y = alpha + U @ psd_sqrt(Sigma).T
    base, tilt, log_Z = covariance_rate_influence(A, V, alpha, Sigma, Y)
    log_phi = -0.5 * np.sum(U**2, axis=1) - np.log(2 * np.pi)
    sq = (np.sum(base**2, axis=(1, 2)) * np.exp(log_phi)
          + 2 * np.sum(base * tilt, axis=(1, 2)) * np.exp(log_Z + log_phi)
          + np.sum(tilt**2, axis=(1, 2)) * np.exp(2 * log_Z + log_phi))
    f = (sq.reshape(R.shape) * R).mean(axis=1) * 2 * np.pi  # angular average x 2 pi
    return float(np.sum((f[1:] + f[:-1]) / 2 * np.diff(r)))


def field_error_variance(A, V, alpha, Sigma):
    r"""Linearised limit of :math:`n` times the mean-square error of the field at the particles.

    .. math::

        n\,\mathbb E\,\frac1n\sum_i |\Gamma_{\hat\mu_n}(x_i) - \Gamma_\mu(x_i)|^2 \to
        \mathbb E_{x,y}\big[w(x,y)^2\, |V(y - b(x))|^2\big]
        = \mathbb E_x\Big[e^{q(x)}\big(|V\Sigma A x|^2 + \operatorname{tr}(V\Sigma V^\top)\big)
        \Big],

    :math:`b(x) = \alpha + \Sigma A x`, :math:`q(x) = x^\top A^\top\Sigma A x`, for
    :math:`x, y \sim \mathcal N(\alpha, \Sigma)` and softmax attention (the field
    :math:`\Gamma_\mu(x) = V b(x)` of the Gaussian solution of Castin, Ablin, Carrillo and
    Peyré, 2025): under the weight :math:`w^2` the key :math:`y` is
    :math:`\mathcal N(\alpha + 2\Sigma A x, \Sigma)` times :math:`e^{q(x)}`, and
    :math:`e^{q(x)}\mathcal N(\alpha, \Sigma)(dx)` is
    :math:`\mathbb E_x e^{q}\cdot\mathcal N(\mu', \Sigma')`,
    :math:`\Sigma'^{-1} = \Sigma^{-1} - 2A^\top\Sigma A`, :math:`\mu' = \Sigma'\Sigma^{-1}\alpha`.
    Finite iff :math:`\rho < 1/\sqrt2` (``inf`` otherwise). Derived here.
    """
    alpha, Sigma = _gaussian(alpha, Sigma)
    d = alpha.shape[0]
    A = _checks.matrix(A, "A", (d, d))
    V = _checks.matrix(V, "V", (d, d))
    mass = normalised_weight_second_moment(A, alpha, Sigma)
    if not np.isfinite(mass):
        return np.inf
    Sp = np.linalg.inv(np.linalg.inv(Sigma) - 2 * A.T @ Sigma @ A)
    mp = Sp @ np.linalg.solve(Sigma, alpha)
    VSA = V @ Sigma @ A
    return float(mass * (np.sum((VSA @ mp) ** 2) + np.trace(VSA @ Sp @ VSA.T)
                         + np.trace(V @ Sigma @ V.T)))
