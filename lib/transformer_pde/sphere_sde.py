r"""Stochastic differential equations on the unit sphere (chapter 10).

The noisy attention dynamics of Rigollet's survey (arXiv 2512.01868, section "Noisy
Transformers"),

.. math::

    dX_i = P_{X_i}\Big(\frac1n\sum_j e^{\beta\langle X_i, X_j\rangle}X_j\Big)dt
    + \sqrt{2/\kappa}\,dW_i ,

with :math:`W_i` independent Brownian motions on :math:`\mathbb S^{d-1}` (generator
:math:`\frac12\Delta`), so that the noise alone has generator :math:`\kappa^{-1}\Delta`.

- :func:`projected_em_step` and :func:`exponential_em_step`: one Euler-Maruyama step, the
  tangent increment :math:`v = b\,h + \sqrt{2h/\kappa}\,P_x\xi` then either
  :math:`(x + v)/|x + v|` or the exponential map :math:`\cos|v|\,x + \sin|v|\,v/|v|`;
- :func:`step_multiplier`: the exact factor by which one drift-free step multiplies a
  zonal spherical harmonic (both steps are rotation-invariant Markov kernels), hence the
  exact weak error of either scheme on the heat kernel;
- :func:`zonal_harmonic`, :func:`heat_decay_rate`: :math:`G_\ell(\langle x, e\rangle)` and
  its decay rate :math:`\ell(\ell + d - 2)/\kappa` under the heat semigroup;
- :func:`usa_drift`, :func:`circle_usa_drift`: the USA drift, dense in any dimension and
  through its Fourier series on the circle;
- :func:`simulate_circle`: many independent systems on the circle, seeded, vectorised.

Every draw comes from a :class:`numpy.random.Generator` in a fixed order (one standard
normal array per step), so results do not depend on threads or workers.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.integrate import quad
from scipy.special import eval_chebyt, eval_gegenbauer, gammaln, ive

from . import _checks, _sphere

__all__ = [
    "tangent_noise",
    "projected_em_step",
    "exponential_em_step",
    "zonal_harmonic",
    "heat_decay_rate",
    "step_multiplier",
    "usa_drift",
    "circle_usa_drift",
    "simulate_circle",
]

_SCHEMES = ("projected", "exponential")


def _scheme(scheme):
    if scheme not in _SCHEMES:
        raise ValueError(f"scheme must be one of {_SCHEMES}, got {scheme!r}")
    return scheme


def tangent_noise(X: ArrayLike, xi: ArrayLike) -> NDArray[np.float64]:
    r"""Project Gaussian draws on the tangent spaces: :math:`P_{x_i}\xi_i = \xi_i -
    \langle\xi_i, x_i\rangle x_i`.

    Parameters
    ----------
    X : array (n, d)
        Points with unit rows.
    xi : array (n, d)
        Standard normal draws.

    Returns
    -------
    array (n, d)
        The tangent Gaussians (standard normal in :math:`x_i^\perp`).

    Raises
    ------
    ValueError
        If the shapes differ or the rows of ``X`` are not unit vectors.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0, 0.0]])
    >>> tangent_noise(X, np.array([[2.0, 1.0, -1.0]])).tolist()
    [[0.0, 1.0, -1.0]]

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    X = _sphere.unit_rows(X, 1e-8)
    xi = _checks.matrix(xi, "xi", X.shape)
    return xi - np.einsum("ij,ij->i", xi, X)[:, None] * X


def _increment(X, drift, dt, kappa, xi):
    X = _sphere.unit_rows(X, 1e-8)
    drift = _checks.matrix(drift, "drift", X.shape)
    dt = _checks.positive_float(dt, "dt")
    kappa = _checks.positive_float(kappa, "kappa")
    drift = drift - np.einsum("ij,ij->i", drift, X)[:, None] * X
    return X, drift * dt + math.sqrt(2.0 * dt / kappa) * tangent_noise(X, xi)


def projected_em_step(X: ArrayLike, drift: ArrayLike, dt: float, kappa: float,
                      xi: ArrayLike) -> NDArray[np.float64]:
    r"""One projected Euler-Maruyama step on the sphere.

    .. math::

        v_i = P_{x_i}b_i\,h + \sqrt{2h/\kappa}\,P_{x_i}\xi_i, \qquad
        x_i \leftarrow \frac{x_i + v_i}{|x_i + v_i|}.

    Its generator is :math:`\langle b, \nabla f\rangle + \kappa^{-1}\Delta f + O(h)`: the
    normalisation supplies the Itô drift :math:`-\frac{d-1}{\kappa}x` of Brownian motion on
    :math:`\mathbb S^{d-1}`, and the scheme has weak order one (chapter 10).

    Parameters
    ----------
    X : array (n, d)
        Current points (unit rows).
    drift : array (n, d)
        The drift :math:`b` at ``X`` (projected on the tangent spaces here).
    dt : float
        Step :math:`h > 0`.
    kappa : float
        Inverse noise level :math:`\kappa > 0` (noise :math:`\sqrt{2/\kappa}\,dW`).
    xi : array (n, d)
        Standard normal draws for this step.

    Returns
    -------
    array (n, d)
        The points after one step.

    Raises
    ------
    ValueError
        On bad shapes, non-unit rows, or ``dt``/``kappa`` not positive.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0]])
    >>> Y = projected_em_step(X, np.zeros((1, 2)), 0.5, 1.0, np.array([[0.0, 1.0]]))
    >>> bool(abs(np.linalg.norm(Y) - 1) < 1e-15 and abs(Y[0, 1] - 1 / 2**0.5) < 1e-15)
    True

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    X, v = _increment(X, drift, dt, kappa, xi)
    Y = X + v
    return Y / np.linalg.norm(Y, axis=1, keepdims=True)


def exponential_em_step(X: ArrayLike, drift: ArrayLike, dt: float, kappa: float,
                        xi: ArrayLike) -> NDArray[np.float64]:
    r"""One exponential-map (geodesic) Euler-Maruyama step on the sphere.

    .. math::

        v_i = P_{x_i}b_i\,h + \sqrt{2h/\kappa}\,P_{x_i}\xi_i, \qquad
        x_i \leftarrow \cos|v_i|\,x_i + \sin|v_i|\,\frac{v_i}{|v_i|}.

    On the circle it is exactly :math:`\theta \leftarrow \theta + b\,h +
    \sqrt{2h/\kappa}\,\xi`. Weak order one (chapter 10).

    Parameters
    ----------
    X, drift, dt, kappa, xi
        As in :func:`projected_em_step`.

    Returns
    -------
    array (n, d)
        The points after one step.

    Raises
    ------
    ValueError
        On bad shapes, non-unit rows, or ``dt``/``kappa`` not positive.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0]])
    >>> Y = exponential_em_step(X, np.zeros((1, 2)), 0.5, 1.0, np.array([[0.0, 1.0]]))
    >>> bool(np.allclose(Y, [[np.cos(1.0), np.sin(1.0)]], atol=1e-15))
    True

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    X, v = _increment(X, drift, dt, kappa, xi)
    s = np.linalg.norm(v, axis=1, keepdims=True)
    sinc = np.where(s > 0, np.sin(s) / np.where(s > 0, s, 1.0), 1.0)
    Y = np.cos(s) * X + sinc * v
    return Y / np.linalg.norm(Y, axis=1, keepdims=True)


def zonal_harmonic(ell: int, d: int, t: ArrayLike) -> NDArray[np.float64]:
    r"""The zonal spherical harmonic of degree :math:`\ell` on :math:`\mathbb S^{d-1}`,
    normalised to 1 at the pole.

    .. math::

        G_\ell(t) = C_\ell^{(d-2)/2}(t)\,/\,C_\ell^{(d-2)/2}(1) \quad (d \ge 3), \qquad
        G_\ell(t) = T_\ell(t) = \cos(\ell\arccos t) \quad (d = 2),

    :math:`C` the Gegenbauer and :math:`T` the Chebyshev polynomials;
    :math:`x \mapsto G_\ell(\langle x, e\rangle)` is an eigenfunction of the
    Laplace-Beltrami operator with eigenvalue :math:`-\ell(\ell + d - 2)`.

    Parameters
    ----------
    ell : int
        Degree, >= 0.
    d : int
        Ambient dimension, >= 2.
    t : array
        Values in :math:`[-1, 1]`.

    Returns
    -------
    array
        :math:`G_\ell(t)`.

    Raises
    ------
    ValueError
        If ``ell < 0``, ``d < 2`` or ``t`` is not finite.

    Examples
    --------
    >>> round(float(zonal_harmonic(2, 3, 0.0)), 12)
    -0.5

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    ell = _degree(ell)
    d = _dim(d)
    t = _checks.real_array(t, "t")
    if not np.all(np.isfinite(t)):
        raise ValueError("t contains non-finite values (NaN or inf)")
    if d == 2:
        return np.asarray(eval_chebyt(ell, t), dtype=float)
    a = (d - 2) / 2.0
    return np.asarray(eval_gegenbauer(ell, a, t) / eval_gegenbauer(ell, a, 1.0), dtype=float)


def _degree(ell):
    if isinstance(ell, bool) or not isinstance(ell, (int, np.integer)) or ell < 0:
        raise ValueError(f"ell must be an integer >= 0, got {ell!r}")
    return int(ell)


def _dim(d):
    d = _checks.positive_int(d, "d")
    if d < 2:
        raise ValueError(f"d must be at least 2 (the sphere S^(d-1)), got {d}")
    return d


def heat_decay_rate(ell: int, d: int, kappa: float) -> float:
    r"""Decay rate of a degree-:math:`\ell` harmonic under the noise alone:
    :math:`\lambda_\ell = \ell(\ell + d - 2)/\kappa`.

    With the drift off, :math:`\mathbb E\,G_\ell(\langle X_t, e\rangle) =
    e^{-\lambda_\ell t}\,G_\ell(\langle X_0, e\rangle)` (the generator is
    :math:`\kappa^{-1}\Delta`).

    Parameters
    ----------
    ell : int
        Degree >= 0.
    d : int
        Ambient dimension >= 2.
    kappa : float
        Inverse noise level > 0.

    Returns
    -------
    float
        :math:`\ell(\ell + d - 2)/\kappa`.

    Raises
    ------
    ValueError
        On bad arguments.

    Examples
    --------
    >>> heat_decay_rate(1, 3, 2.0)
    1.0

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    ell, d = _degree(ell), _dim(d)
    kappa = _checks.positive_float(kappa, "kappa")
    return ell * (ell + d - 2) / kappa


def step_multiplier(ell: int, d: int, dt: float, kappa: float,
                    scheme: str = "projected") -> float:
    r"""Exact factor by which one drift-free step multiplies a zonal harmonic.

    Both steps are rotation invariant, so :math:`\mathbb E[G_\ell(\langle X_1, e\rangle)
    \mid X_0 = x] = m_\ell(h)\,G_\ell(\langle x, e\rangle)` with (Funk-Hecke)
    :math:`m_\ell(h) = \mathbb E\,G_\ell(\langle X_1, x\rangle)`. With :math:`\sigma^2 =
    2h/\kappa` and :math:`R^2 \sim \chi^2_{d-1}`, :math:`\langle X_1, x\rangle =
    (1 + \sigma^2R^2)^{-1/2}` (projected) or :math:`\cos(\sigma R)` (exponential). After
    :math:`N = T/h` steps the weak error on :math:`G_\ell` is exactly
    :math:`|m_\ell(h)^N - e^{-\lambda_\ell T}|\,|G_\ell(\langle x_0, e\rangle)|`.

    Parameters
    ----------
    ell, d : int
        Degree (>= 0) and ambient dimension (>= 2).
    dt : float
        Step :math:`h > 0`.
    kappa : float
        Inverse noise level > 0.
    scheme : {"projected", "exponential"}
        Which step.

    Returns
    -------
    float
        :math:`m_\ell(h)`, computed by adaptive quadrature over the law of :math:`R`
        (absolute error below 1e-13).

    Raises
    ------
    ValueError
        On bad arguments.

    Examples
    --------
    >>> m = step_multiplier(1, 3, 1e-3, 1.0)
    >>> bool(abs(m - (1 - 2e-3)) < 2e-5)  # 1 - 2h + 12h^2 + O(h^3)
    True

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    ell, d = _degree(ell), _dim(d)
    dt = _checks.positive_float(dt, "dt")
    kappa = _checks.positive_float(kappa, "kappa")
    scheme = _scheme(scheme)
    sigma = math.sqrt(2.0 * dt / kappa)
    k = d - 1  # chi distribution with k degrees of freedom
    log_norm = (1 - k / 2.0) * math.log(2.0) - gammaln(k / 2.0)

    def density(r):
        return math.exp(log_norm + (k - 1) * math.log(r) - r * r / 2) if r > 0 else 0.0

    def cosine(r):
        if scheme == "projected":
            return 1.0 / math.sqrt(1.0 + sigma * sigma * r * r)
        return math.cos(sigma * r)

    def integrand(r):
        return float(zonal_harmonic(ell, d, cosine(r))) * density(r)

    top = math.sqrt(k) + 40.0
    val, _ = quad(integrand, 0.0, top, epsabs=1e-14, epsrel=1e-13, limit=400)
    return float(val)


def usa_drift(X: ArrayLike, beta: float) -> NDArray[np.float64]:
    r"""The USA drift :math:`b_i = P_{x_i}\frac1n\sum_j e^{\beta\langle x_i, x_j\rangle}x_j`
    (dense, :math:`O(n^2d)`).

    Parameters
    ----------
    X : array (n, d)
        Points with unit rows.
    beta : float
        Inverse temperature >= 0 (at 0, :math:`b_i = P_{x_i}\bar x`).

    Returns
    -------
    array (n, d)
        The drift, tangent at each point.

    Raises
    ------
    ValueError
        On bad input.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> usa_drift(X, 0.0).tolist()
    [[0.0, 0.5], [0.5, 0.0]]

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    X = _sphere.unit_rows(X, 1e-8)
    beta = _sphere.beta(beta, allow_zero=True)
    if beta == 0.0:
        M = np.broadcast_to(X.mean(axis=0), X.shape)
    else:
        W = np.exp(beta * (X @ X.T))
        M = W @ X / X.shape[0]
    return M - np.einsum("ij,ij->i", M, X)[:, None] * X


def _fourier_cutoff(beta):
    """Smallest K with I_K(beta) <= 1e-17 I_1(beta) (at least 1)."""
    if beta == 0.0:
        return 1
    k = 1
    ref = ive(1, beta)
    while ive(k + 1, beta) > 1e-17 * ref and k < 400:
        k += 1
    return k


def circle_usa_drift(theta: ArrayLike, beta: float) -> NDArray[np.float64]:
    r"""The USA drift on the circle through its Fourier series.

    With :math:`x_j = (\cos\theta_j, \sin\theta_j)`, the drift is
    :math:`\frac1n\sum_j e^{\beta\cos s_{ij}}\sin s_{ij}` (:math:`s_{ij} = \theta_j -
    \theta_i`) and :math:`e^{\beta\cos s}\sin s = \frac2\beta\sum_{k\ge1} k I_k(\beta)\sin ks`,
    so

    .. math::

        b_i = \frac{2}{\beta}\sum_{k=1}^{K} k I_k(\beta)\,
        \operatorname{Im}\big(e^{-ik\theta_i}Z_k\big), \qquad
        Z_k = \frac1n\sum_j e^{ik\theta_j},

    truncated where :math:`I_K(\beta) \le 10^{-17} I_1(\beta)`; at :math:`\beta = 0`,
    :math:`b_i = \operatorname{Im}(e^{-i\theta_i}Z_1)` (Kuramoto). Cost :math:`O(nK)`.

    Parameters
    ----------
    theta : array (..., n)
        Angles; leading axes are independent systems.
    beta : float
        Inverse temperature >= 0.

    Returns
    -------
    array (..., n)
        The angular drift :math:`\dot\theta_i`.

    Raises
    ------
    ValueError
        On non-finite angles or bad ``beta``.

    Examples
    --------
    >>> import numpy as np
    >>> b = circle_usa_drift(np.array([0.0, np.pi / 2]), 1.0)
    >>> bool(np.allclose(b, [np.e**0 * 0.5, -0.5]))
    True

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    theta = _checks.real_array(theta, "theta")
    if theta.ndim < 1 or theta.shape[-1] < 1 or not np.all(np.isfinite(theta)):
        raise ValueError("theta must be a finite array of angles of shape (..., n)")
    beta = _sphere.beta(beta, allow_zero=True)
    E = np.exp(1j * theta)
    if beta == 0.0:
        Z = E.mean(axis=-1, keepdims=True)
        return np.imag(np.conj(E) * Z)
    K = _fourier_cutoff(beta)
    coef = 2.0 / beta * np.arange(1, K + 1) * ive(np.arange(1, K + 1), beta) * math.exp(beta)
    out = np.zeros(theta.shape)
    P = E.copy()
    for k in range(K):
        Z = P.mean(axis=-1, keepdims=True)
        out += coef[k] * np.imag(np.conj(P) * Z)
        P *= E
    return out


def simulate_circle(theta0: ArrayLike, beta: float, kappa: float, dt: float, steps: int,
                    rng: np.random.Generator, record_every: int = 1
                    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Euler-Maruyama for the noisy USA dynamics on the circle, many systems at once.

    .. math::

        \theta_i \leftarrow \theta_i + b_i(\theta)\,h + \sqrt{2h/\kappa}\,\xi_i,

    :math:`b` from :func:`circle_usa_drift` (on the circle the projected-tangent and
    exponential-map steps of the angle coincide with this one). One standard normal array of
    the shape of ``theta0`` is drawn per step, in order, from ``rng``.

    Parameters
    ----------
    theta0 : array (R, n) or (n,)
        Initial angles of R independent systems of n particles.
    beta : float
        Inverse temperature >= 0.
    kappa : float
        Inverse noise level > 0.
    dt : float
        Step > 0.
    steps : int
        Number of steps >= 1.
    rng : numpy.random.Generator
        Source of the noise.
    record_every : int
        Record the order parameter every this many steps.

    Returns
    -------
    order : array (steps // record_every + 1, ...)
        :math:`|Z_1| = |\frac1n\sum_j e^{i\theta_j}|` at the recorded times (time 0 first).
    theta : array like ``theta0``
        The final angles (in :math:`[-\pi, \pi)`).

    Raises
    ------
    ValueError
        On bad input.

    Examples
    --------
    >>> import numpy as np
    >>> r, th = simulate_circle(np.zeros(4), 0.0, 1e9, 0.1, 3, np.random.default_rng(0))
    >>> bool(np.allclose(r, 1.0))
    True

    References
    ----------
    :cite:`rigollet2025meanfield,bertini2010dynamical`
    """
    theta = _checks.real_array(theta0, "theta0").copy()
    if theta.ndim not in (1, 2) or theta.shape[-1] < 1 or not np.all(np.isfinite(theta)):
        raise ValueError(f"theta0 must be finite of shape (n,) or (R, n), got {theta.shape}")
    beta = _sphere.beta(beta, allow_zero=True)
    kappa = _checks.positive_float(kappa, "kappa")
    dt = _checks.positive_float(dt, "dt")
    steps = _checks.positive_int(steps, "steps")
    record_every = _checks.positive_int(record_every, "record_every")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")
    sigma = math.sqrt(2.0 * dt / kappa)
    out = [np.abs(np.exp(1j * theta).mean(axis=-1))]
    for s in range(1, steps + 1):
        theta = theta + dt * circle_usa_drift(theta, beta) + sigma * rng.standard_normal(
            theta.shape)
        if s % record_every == 0:
            out.append(np.abs(np.exp(1j * theta).mean(axis=-1)))
    theta = np.mod(theta + np.pi, 2 * np.pi) - np.pi
    return np.array(out), theta
