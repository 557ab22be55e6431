r"""Causal attention on the circle and the lost-in-the-middle profile.

Duerinckx, Geshkovski and Rossi (2026) study tokens :math:`\theta_1, \dots, \theta_N` on the
circle :math:`\mathbb T = \mathbb R / 2\pi\mathbb Z` moved by causal, unnormalised
self-attention with an ALiBi positional bias,

.. math::

    \dot\theta_j = \frac{1}{Z_{N,j}} \sum_{k < j} e^{-\lambda (j - k)/N}\,
    w_\beta'(\theta_j - \theta_k), \qquad
    Z_{N,j} = \sum_{k < j} e^{-\lambda (j - k)/N}, \qquad w_\beta(\theta) = e^{\beta\cos\theta},

(the first token does not move), prove a mean-field limit with next-order correlations, and
for iid uniform tokens solve the correlation equation in closed form: the mode-:math:`n`
cross-correlation of the last token at time :math:`t` with the initial value of the token at
relative position :math:`\sigma_0` is :math:`g_{a_n}(t, 1; \sigma_0)/N` to leading order, with
:math:`a_n = n^2 I_n(\beta)` and

.. math::

    g_a(t, \sigma; \sigma_0) = k_\lambda(\sigma, \sigma_0)
    \sqrt{\frac{a t}{Y}}\; I_1\big(2\sqrt{a t Y}\big), \quad
    Y = \log\frac{e^{\lambda\sigma} - 1}{e^{\lambda\sigma_0} - 1}, \quad
    k_\lambda(\sigma, \sigma_0) = \frac{\lambda e^{-\lambda(\sigma - \sigma_0)}}
    {1 - e^{-\lambda\sigma}} .

This module gives the closed form (:func:`hardy_profile`, :func:`retrieval_correction`), the
smallness condition (:func:`smallness`), the exact slope at the last position
(:func:`end_slope`), the particle system with the exact derivative of the last token with
respect to every initial token (:func:`last_token_response`), the particle estimate of the
profile (:func:`particle_profile`), and, for the causal dynamics on the circle with
:math:`A = \beta I` of Karagodin, Polyanskiy and Rigollet (2024), the Rényi and strong Rényi
centres of a sequence (:func:`renyi_centres`) and the angle dynamics
(:func:`circle_causal_flow`).

References: duerinckx2026kinetic, karagodin2024clustering.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.integrate import solve_ivp
from scipy.special import iv

from . import _checks

__all__ = [
    "mode_eigenvalue",
    "graphon",
    "hardy_profile",
    "retrieval_correction",
    "smallness",
    "end_slope",
    "retrieval_end_slope",
    "usa_field",
    "last_token_response",
    "particle_profile",
    "renyi_centres",
    "circle_causal_flow",
    "pooled_ratio",
    "bin_difference",
    "interior_minima",
]


def _positive(x, name):
    x = float(_checks.real_array(x, name))
    if not np.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a finite positive number, got {x}")
    return x


def _count(x, name, minimum=1):
    if not isinstance(x, (int, np.integer)) or isinstance(x, bool) or x < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {x!r}")
    return int(x)


def _nonneg(x, name):
    x = float(_checks.real_array(x, name))
    if not np.isfinite(x) or x < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {x}")
    return x


def mode_eigenvalue(beta: float, n: int) -> float:
    r"""The growth rate :math:`a_n = n^2 \hat w_\beta(n) = n^2 I_n(\beta)` of mode :math:`n`.

    :math:`\hat w_\beta(n) = \frac{1}{2\pi}\int_{\mathbb T} e^{-in\theta} e^{\beta\cos\theta}
    d\theta = I_n(\beta)`, the modified Bessel function (Duerinckx, Geshkovski and Rossi,
    2026, Section 1).

    Parameters
    ----------
    beta : float
        Inverse temperature, :math:`\beta > 0`.
    n : int
        Fourier mode, :math:`n \ge 1`.

    Returns
    -------
    float
        :math:`a_n`.

    Raises
    ------
    ValueError
        If ``beta`` is not positive or ``n`` is not an integer >= 1.

    Examples
    --------
    >>> round(mode_eigenvalue(1.0, 1), 6)
    0.565159

    References
    ----------
    duerinckx2026kinetic
    """
    beta = _positive(beta, "beta")
    _count(n, "n", 1)
    return float(n * n * iv(int(n), beta))


def graphon(lam: float, sigma: ArrayLike, sigma0: ArrayLike) -> NDArray[np.float64]:
    r"""The limiting directed graphon :math:`k_\lambda(\sigma, \sigma_0)` of ALiBi attention.

    :math:`k_\lambda(\sigma, \sigma_0) = \lambda e^{-\lambda(\sigma - \sigma_0)} /
    (1 - e^{-\lambda\sigma})` for :math:`\sigma_0 < \sigma`, :math:`0` otherwise, and
    :math:`1/\sigma` at :math:`\lambda = 0`: the limit of :math:`N e^{-\lambda(j-k)/N} /
    Z_{N,j}` at :math:`j/N \to \sigma`, :math:`k/N \to \sigma_0` (Duerinckx, Geshkovski and
    Rossi, 2026, Section 1).

    Parameters
    ----------
    lam : float
        ALiBi slope :math:`\lambda \ge 0`.
    sigma, sigma0 : array_like
        Positions in :math:`(0, 1]`, broadcast together.

    Returns
    -------
    ndarray
        :math:`k_\lambda(\sigma, \sigma_0)`.

    Raises
    ------
    ValueError
        If ``lam`` is negative or a position lies outside ``(0, 1]``.

    Examples
    --------
    >>> float(graphon(0.0, 0.5, 0.25))
    2.0

    References
    ----------
    duerinckx2026kinetic
    """
    lam = _nonneg(lam, "lam")
    s = _checks.real_array(sigma, "sigma")
    s0 = _checks.real_array(sigma0, "sigma0")
    for arr, name in ((s, "sigma"), (s0, "sigma0")):
        if not np.all((arr > 0) & (arr <= 1)):
            raise ValueError(f"{name} must lie in (0, 1]")
    s, s0 = np.broadcast_arrays(s, s0)
    if lam == 0:
        k = 1.0 / s
    else:
        k = lam * np.exp(-lam * (s - s0)) / (-np.expm1(-lam * s))
    return np.where(s0 < s, k, 0.0)


def _y(lam, s, s0):
    if lam == 0:
        return np.log(s / s0)
    return np.log(np.expm1(lam * s) / np.expm1(lam * s0))


def hardy_profile(
    lam: float, a: float, t: float, sigma: ArrayLike, sigma0: ArrayLike
) -> NDArray[np.float64]:
    r"""The closed-form correlation profile :math:`g_a(t, \sigma; \sigma_0)`.

    The unique solution of the Volterra–Hardy equation
    :math:`\partial_t g = a\big(k_\lambda(\sigma, \sigma_0) + \int_{\sigma_0}^{\sigma}
    k_\lambda(\sigma, \sigma') g(t, \sigma')\, d\sigma'\big)`, :math:`g(0) = 0`, is
    :math:`g_a = k_\lambda(\sigma, \sigma_0)\sqrt{at/Y}\, I_1(2\sqrt{atY})` with
    :math:`Y = \log\frac{e^{\lambda\sigma} - 1}{e^{\lambda\sigma_0} - 1}`
    (:math:`\log(\sigma/\sigma_0)` at :math:`\lambda = 0`); Duerinckx, Geshkovski and
    Rossi (2026), Proposition ``prop:Bessel`` of Section 1. At :math:`Y = 0` the value is the
    limit :math:`a t\, k_\lambda`.

    Parameters
    ----------
    lam : float
        ALiBi slope :math:`\lambda \ge 0`.
    a : float
        Mode eigenvalue :math:`a \ge 0` (:func:`mode_eigenvalue`).
    t : float
        Time :math:`t \ge 0`.
    sigma, sigma0 : array_like
        Positions in :math:`(0, 1]` with :math:`\sigma_0 \le \sigma`, broadcast together.

    Returns
    -------
    ndarray
        :math:`g_a(t, \sigma; \sigma_0)`.

    Raises
    ------
    ValueError
        If a parameter is negative, a position is outside ``(0, 1]`` or
        ``sigma0 > sigma``.

    Examples
    --------
    >>> round(float(hardy_profile(0.0, 1.0, 1.0, 1.0, np.exp(-1.0))), 6)
    1.590637

    References
    ----------
    duerinckx2026kinetic
    """
    lam = _nonneg(lam, "lam")
    a = _nonneg(a, "a")
    t = _nonneg(t, "t")
    graphon(lam, sigma, sigma0)  # validates the positions
    s, s0 = np.broadcast_arrays(
        _checks.real_array(sigma, "sigma"), _checks.real_array(sigma0, "sigma0")
    )
    if np.any(s0 > s):
        raise ValueError("sigma0 must not exceed sigma")
    # the graphon's formula, continued to sigma0 = sigma
    k = 1.0 / s if lam == 0 else lam * np.exp(-lam * (s - s0)) / (-np.expm1(-lam * s))
    y = _y(lam, s, s0)
    x = a * t * y
    with np.errstate(invalid="ignore", divide="ignore"):
        body = np.where(y > 0, np.sqrt(a * t / np.where(y > 0, y, 1.0))
                        * iv(1, 2 * np.sqrt(np.maximum(x, 0.0))), a * t)
    return k * body


def retrieval_correction(
    beta: float, lam: float, t: float, sigma0: ArrayLike, vocabulary: float, modes: int = 60
) -> NDArray[np.float64]:
    r"""The leading positional correction :math:`\mathcal S_t(\sigma_0)` of the retrieval score.

    :math:`\mathcal S_t(\sigma_0) = \sum_{n \ge 1} e^{-\pi^2 n^2/(2M^2)}\,
    g_{a_n}(t, 1; \sigma_0)` (Duerinckx, Geshkovski and Rossi, 2026, equation ``Sb-def``):
    the soft accuracy of retrieving the token at :math:`\sigma_0` from the last token is
    :math:`\sqrt{\pi/2}/M + \sqrt{2\pi}\, \mathcal S_t(\sigma_0)/(MN) + o(1/N)`.

    Parameters
    ----------
    beta, lam, t : float
        :math:`\beta > 0`, :math:`\lambda \ge 0`, :math:`t \ge 0`.
    sigma0 : array_like
        Source positions in :math:`(0, 1]`.
    vocabulary : float
        Vocabulary size :math:`M > 0`.
    modes : int
        Number of modes summed (the terms decay like :math:`(\beta/2)^n/n!`).

    Returns
    -------
    ndarray
        :math:`\mathcal S_t(\sigma_0)`.

    Raises
    ------
    ValueError
        On a non-positive ``beta``, ``vocabulary`` or ``modes``, or bad positions.

    Examples
    --------
    >>> bool(retrieval_correction(1.0, 3.0, 2.0, 0.5, 10.0) > 0)
    True

    References
    ----------
    duerinckx2026kinetic
    """
    beta = _positive(beta, "beta")
    m = _positive(vocabulary, "vocabulary")
    _count(modes, "modes", 1)
    s0 = _checks.real_array(sigma0, "sigma0")
    total = np.zeros(np.shape(s0))
    for n in range(1, int(modes) + 1):
        weight = np.exp(-np.pi**2 * n * n / (2 * m * m))
        total = total + weight * hardy_profile(lam, mode_eigenvalue(beta, n), t, 1.0, s0)
    return total


def smallness(beta: float, lam: float, t: float, modes: int = 60) -> tuple[float, float]:
    r"""Both sides of the smallness condition of the U-shape theorem.

    :math:`t \sup_{n \ge 1} a_n \le \min\{3 - \sqrt 3,\; 2(1 - e^{-\lambda})\}`
    (Duerinckx, Geshkovski and Rossi, 2026, equation ``affine-smallness``).

    Parameters
    ----------
    beta, lam, t : float
        :math:`\beta > 0`, :math:`\lambda \ge 0`, :math:`t \ge 0`.
    modes : int
        Modes over which the supremum is taken (:math:`a_n \to 0` super-exponentially).

    Returns
    -------
    (float, float)
        :math:`t \sup_n a_n` and :math:`\min\{3 - \sqrt 3, 2(1 - e^{-\lambda})\}`.

    Raises
    ------
    ValueError
        On a non-positive ``beta`` or negative ``lam`` or ``t``.

    Examples
    --------
    >>> lhs, rhs = smallness(1.0, 3.0, 2.0)
    >>> bool(lhs <= rhs)
    True

    References
    ----------
    duerinckx2026kinetic
    """
    lam = _nonneg(lam, "lam")
    t = _nonneg(t, "t")
    sup = max(mode_eigenvalue(beta, n) for n in range(1, _count(modes, "modes") + 1))
    return t * sup, min(3 - np.sqrt(3), -2 * np.expm1(-lam))


def end_slope(lam: float, a: float, t: float) -> float:
    r"""The exact slope :math:`\partial_{\sigma_0} g_a(t, 1; \sigma_0)` at :math:`\sigma_0 = 1`.

    Derived in the chapter on masked attention from the closed form: with
    :math:`k_1 = \lambda/(1 - e^{-\lambda})`,
    :math:`\partial_{\sigma_0} g_a(t, 1; 1^-) = a t\, \lambda k_1
    \big(1 - \frac{a t}{2(1 - e^{-\lambda})}\big)` (:math:`\lambda > 0`), positive (recency)
    if and only if :math:`a t < 2(1 - e^{-\lambda})`.

    Parameters
    ----------
    lam : float
        ALiBi slope :math:`\lambda > 0`.
    a, t : float
        Mode eigenvalue and time, both :math:`\ge 0`.

    Returns
    -------
    float
        The slope.

    Raises
    ------
    ValueError
        If ``lam`` is not positive or ``a``, ``t`` negative.

    Examples
    --------
    >>> bool(end_slope(3.0, 0.5, 1.0) > 0), bool(end_slope(0.3, 0.5, 2.0) > 0)
    (True, False)

    References
    ----------
    duerinckx2026kinetic
    """
    lam = _positive(lam, "lam")
    a = _nonneg(a, "a")
    t = _nonneg(t, "t")
    q = -np.expm1(-lam)
    return float(a * t * lam * (lam / q) * (1 - a * t / (2 * q)))


def retrieval_end_slope(beta: float, lam: float, t: float, vocabulary: float,
                        modes: int = 60) -> float:
    r"""The exact slope of :math:`\mathcal S_t` at :math:`\sigma_0 = 1`.

    :math:`\mathcal S_t'(1^-) = \sum_{n \ge 1} e^{-\pi^2 n^2/(2M^2)}\, \partial_{\sigma_0}
    g_{a_n}(t, 1; 1^-)`, each term from :func:`end_slope`: recency holds if and only if it is
    positive (derived in the chapter on masked attention).

    Parameters
    ----------
    beta, lam, t : float
        :math:`\beta > 0`, :math:`\lambda > 0`, :math:`t \ge 0`.
    vocabulary : float
        :math:`M > 0`.
    modes : int
        Number of modes summed.

    Returns
    -------
    float
        The slope.

    Raises
    ------
    ValueError
        On bad parameters.

    Examples
    --------
    >>> bool(retrieval_end_slope(1.0, 3.0, 2.0, 8.0) > 0)
    True

    References
    ----------
    duerinckx2026kinetic
    """
    m = _positive(vocabulary, "vocabulary")
    modes = _checks.positive_int(modes, "modes")
    return float(sum(
        np.exp(-np.pi**2 * n * n / (2 * m * m)) * end_slope(lam, mode_eigenvalue(beta, n), t)
        for n in range(1, modes + 1)
    ))


def _weights(n, lam):
    j = np.arange(n)
    diff = j[:, None] - j[None, :]
    K = np.where(diff > 0, np.exp(-lam * diff / n), 0.0)
    z = K.sum(axis=1, keepdims=True)
    return np.divide(K, z, out=np.zeros_like(K), where=z > 0)


def usa_field(theta: ArrayLike, beta: float, lam: float) -> NDArray[np.float64]:
    r"""The causal ALiBi field :math:`\dot\theta_j = Z_{N,j}^{-1}\sum_{k<j}
    e^{-\lambda(j-k)/N} w_\beta'(\theta_j - \theta_k)`.

    :math:`w_\beta'(x) = -\beta\sin x\, e^{\beta\cos x}` (Duerinckx, Geshkovski and Rossi,
    2026, Section 1, equation ``gpt-dyn-alibi``); the first token does not move.

    Parameters
    ----------
    theta : array_like, shape (..., N)
        Angles, last axis the token index.
    beta, lam : float
        :math:`\beta > 0`, :math:`\lambda \ge 0`.

    Returns
    -------
    ndarray, shape (..., N)
        The velocities.

    Raises
    ------
    ValueError
        On bad parameters or non-finite angles.

    Examples
    --------
    >>> v = usa_field([0.0, 1.0], 1.0, 0.0)
    >>> float(v[0]), round(float(v[1]), 6)
    (0.0, -1.444407)

    References
    ----------
    duerinckx2026kinetic
    """
    beta = _positive(beta, "beta")
    lam = _nonneg(lam, "lam")
    th = _checks.real_array(theta, "theta")
    if th.ndim < 1 or th.shape[-1] < 1 or not np.all(np.isfinite(th)):
        raise ValueError("theta must be a finite array with the tokens on its last axis")
    return _field(th, beta, _weights(th.shape[-1], lam))


def _pair_trig(th):
    # cos and sin of theta_j - theta_k by the addition formulas (one exp per pair)
    c, s = np.cos(th), np.sin(th)
    cos_d = c[..., :, None] * c[..., None, :] + s[..., :, None] * s[..., None, :]
    sin_d = s[..., :, None] * c[..., None, :] - c[..., :, None] * s[..., None, :]
    return cos_d, sin_d


def _field(th, beta, K):
    cos_d, sin_d = _pair_trig(th)
    wp = -beta * sin_d * np.exp(beta * cos_d)
    return np.einsum("...jk,jk->...j", wp, K)


def _vjp(th, beta, K, v):
    cos_d, sin_d = _pair_trig(th)
    W = K * (beta * (beta * sin_d**2 - cos_d) * np.exp(beta * cos_d))
    return v * W.sum(axis=-1) - np.einsum("...j,...jk->...k", v, W)


def last_token_response(
    theta0: ArrayLike, beta: float, lam: float, t: float, steps: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""The last token at time :math:`t` and its exact derivative in every initial token.

    Integrates :func:`usa_field` with ``steps`` classical Runge–Kutta steps and returns
    :math:`\theta_N(t)` and the row :math:`\partial\theta_N(t)/\partial\theta_k(0)`,
    :math:`k = 1, \dots, N`, of the Jacobian of the discrete flow map, computed by the
    exact reverse (adjoint) sweep through the Runge–Kutta stages.

    Parameters
    ----------
    theta0 : array_like, shape (R, N)
        ``R`` independent initial sequences of ``N`` angles.
    beta, lam : float
        :math:`\beta > 0`, :math:`\lambda \ge 0`.
    t : float
        Final time, :math:`t > 0`.
    steps : int
        Number of Runge–Kutta steps, at least 1.

    Returns
    -------
    theta_last : ndarray, shape (R,)
        :math:`\theta_N(t)`.
    response : ndarray, shape (R, N)
        :math:`\partial\theta_N(t)/\partial\theta_k(0)`.

    Raises
    ------
    ValueError
        On bad shapes or parameters.

    Examples
    --------
    >>> last, resp = last_token_response([[0.0, 2.0]], 1.0, 0.0, 1.0, 20)
    >>> bool(abs(resp.sum() - 1.0) < 1e-12)  # a common rotation moves every token alike
    True

    References
    ----------
    duerinckx2026kinetic
    """
    beta = _positive(beta, "beta")
    lam = _nonneg(lam, "lam")
    t = _positive(t, "t")
    th = _checks.matrix(theta0, "theta0")
    _count(steps, "steps", 1)
    K = _weights(th.shape[1], lam)
    h = t / steps
    states = []
    y = th.copy()
    for _ in range(steps):
        k1 = _field(y, beta, K)
        y2 = y + 0.5 * h * k1
        k2 = _field(y2, beta, K)
        y3 = y + 0.5 * h * k2
        k3 = _field(y3, beta, K)
        y4 = y + h * k3
        k4 = _field(y4, beta, K)
        states.append((y, y2, y3, y4))
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    v = np.zeros_like(th)
    v[:, -1] = 1.0
    for y1, y2, y3, y4 in reversed(states):
        w4 = _vjp(y4, beta, K, h / 6 * v)
        w3 = _vjp(y3, beta, K, h / 3 * v + h * w4)
        w2 = _vjp(y2, beta, K, h / 3 * v + 0.5 * h * w3)
        w1 = _vjp(y1, beta, K, h / 6 * v + 0.5 * h * w2)
        v = v + w1 + w2 + w3 + w4
    return y[:, -1], v


def particle_profile(
    n_tokens: int,
    draws: int,
    beta: float,
    lam: float,
    t: float,
    rng: np.random.Generator,
    *,
    mode: int = 1,
    vocabulary: float | None = None,
    modes: int = 12,
    steps: int = 20,
    batch: int = 100,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Per-draw estimates of :math:`N\,\mathbb E[e^{in(\theta_N(t) - \theta_k(0))}]`
    (or of :math:`\mathcal S_t`).

    For iid uniform initial tokens, integrating by parts in :math:`\theta_k(0)` (uniform on
    the circle, the flow map periodic in it) gives the exact identity

    .. math::

        \mathbb E\big[e^{in(\theta_N(t) - \theta_k(0))}\big]
        = \mathbb E\Big[e^{in(\theta_N(t) - \theta_k(0))}\,
          \frac{\partial\theta_N(t)}{\partial\theta_k(0)}\Big],

    whose right side (the response of the last token to a perturbation of token
    :math:`k`, weighted by the phase) has a far smaller variance than the left side. Each
    draw gives the real part of :math:`N` times the right side for every :math:`k`; the
    limit of their mean is :math:`g_{a_n}(t, 1; k/N)` (Duerinckx, Geshkovski and Rossi,
    2026, Theorem ``th:lost``, with :func:`hardy_profile`).

    Parameters
    ----------
    n_tokens : int
        :math:`N \ge 2`.
    draws : int
        Number of independent sequences.
    beta, lam, t : float
        Parameters of :func:`usa_field` and the final time.
    rng : numpy.random.Generator
        Source of the uniform initial tokens.
    mode : int
        Fourier mode :math:`n \ge 1` (used when ``vocabulary`` is None).
    vocabulary : float or None
        If given, the phases of the modes :math:`n = 1, \dots,` ``modes`` are summed with
        the weights :math:`e^{-\pi^2 n^2/(2M^2)}` of :func:`retrieval_correction`, so that
        the column means estimate :math:`\mathcal S_t(k/N)`.
    modes : int
        Number of modes summed when ``vocabulary`` is given.
    steps : int
        Runge–Kutta steps.
    batch : int
        Sequences integrated together.

    Returns
    -------
    estimates : ndarray, shape (draws, N)
        Per-draw values; their column means estimate :math:`N\,\mathbb E[\cdot]`.
    direct : ndarray, shape (draws, N)
        The plain estimator :math:`N\cos(n(\theta_N(t) - \theta_k(0)))`, same mean.

    Raises
    ------
    ValueError
        On bad sizes or parameters.

    Examples
    --------
    >>> est, direct = particle_profile(8, 4, 1.0, 1.0, 0.5, np.random.default_rng(0))
    >>> est.shape
    (4, 8)

    References
    ----------
    duerinckx2026kinetic
    """
    _count(n_tokens, "n_tokens", 2)
    _count(draws, "draws", 1)
    _count(mode, "mode", 1)
    _count(batch, "batch", 1)
    if vocabulary is None:
        orders, weights = np.array([mode]), np.array([1.0])
    else:
        m = _positive(vocabulary, "vocabulary")
        _count(modes, "modes", 1)
        orders = np.arange(1, int(modes) + 1)
        weights = np.exp(-np.pi**2 * orders**2 / (2 * m * m))
    est, direct = [], []
    done = 0
    while done < draws:
        b = min(batch, draws - done)
        th0 = rng.uniform(0.0, 2 * np.pi, size=(b, n_tokens))
        last, resp = last_token_response(th0, beta, lam, t, steps)
        x = last[:, None] - th0
        phase = sum(w * np.cos(o * x) for o, w in zip(orders, weights, strict=True))
        # real part of e^{i n (theta_N - theta_k)} * response (the response is real)
        est.append(n_tokens * phase * resp)
        direct.append(n_tokens * phase)
        done += b
    return np.concatenate(est), np.concatenate(direct)


def renyi_centres(angles: ArrayLike, delta: float) -> tuple[NDArray[np.int_], NDArray[np.int_]]:
    r"""Rényi and strong Rényi centres of a sequence of points on the circle.

    Karagodin, Polyanskiy and Rigollet (2024, Section 5.1): token :math:`s` is a Rényi
    centre if its geodesic distance to every earlier Rényi centre exceeds :math:`\delta`,
    and a strong Rényi centre if its distance to every earlier token exceeds :math:`\delta`.
    The first token is both.

    Parameters
    ----------
    angles : array_like, shape (n,)
        The sequence, in order.
    delta : float
        Separation :math:`\delta > 0`.

    Returns
    -------
    renyi, strong : ndarray of int
        Indices (0-based) of the Rényi and the strong Rényi centres.

    Raises
    ------
    ValueError
        On a non-positive ``delta`` or a non-finite or non-1-D ``angles``.

    Examples
    --------
    >>> renyi_centres([0.0, 0.5, 0.05, 1.2], 0.3)
    (array([0, 1, 3]), array([0, 1, 3]))

    References
    ----------
    karagodin2024clustering
    """
    a = _checks.real_array(angles, "angles")
    if a.ndim != 1 or a.size < 1 or not np.all(np.isfinite(a)):
        raise ValueError("angles must be a finite 1-D array with at least one entry")
    delta = _positive(delta, "delta")
    renyi: list[int] = []
    strong: list[int] = []
    for s in range(a.size):
        dist = np.abs(np.angle(np.exp(1j * (a[s] - a[:s]))))
        if np.all(dist > delta):
            strong.append(s)
        if all(np.abs(np.angle(np.exp(1j * (a[s] - a[r])))) > delta for r in renyi):
            renyi.append(s)
    return np.array(renyi, dtype=int), np.array(strong, dtype=int)


def circle_causal_flow(
    angles: ArrayLike, beta: float, times: ArrayLike, *, rtol: float = 1e-10,
    atol: float = 1e-12
) -> NDArray[np.float64]:
    r"""Causal attention on the circle with :math:`Q = K = V = I` and temperature
    :math:`\beta`.

    :math:`\dot\theta_k = \sum_{j \le k} e^{\beta\cos(\theta_k - \theta_j)}
    \sin(\theta_j - \theta_k) / \sum_{j \le k} e^{\beta\cos(\theta_k - \theta_j)}`: the
    projected dynamics :math:`\dot x_k = P_{x_k}(\sum_{j \le k} P_{kj} x_j)` with
    :math:`A = \beta I` written in angles (Karagodin, Polyanskiy and Rigollet, 2024,
    Section 2, in dimension 2).

    Parameters
    ----------
    angles : array_like, shape (n,)
        Initial angles.
    beta : float
        :math:`\beta > 0`.
    times : array_like
        Increasing output times starting at 0.
    rtol, atol : float
        Tolerances of the DOP853 integrator.

    Returns
    -------
    ndarray, shape (len(times), n)
        The angles (not reduced modulo :math:`2\pi`).

    Raises
    ------
    ValueError
        On bad input.

    Examples
    --------
    >>> traj = circle_causal_flow([0.0, 1.0], 1.0, [0.0, 1.0])
    >>> float(traj[1, 0]), bool(traj[1, 1] < 1.0)
    (0.0, True)

    References
    ----------
    karagodin2024clustering
    """
    a = _checks.real_array(angles, "angles")
    if a.ndim != 1 or a.size < 1 or not np.all(np.isfinite(a)):
        raise ValueError("angles must be a finite 1-D array with at least one entry")
    beta = _positive(beta, "beta")
    rtol, atol = _checks.positive_float(rtol, "rtol"), _checks.nonnegative_float(atol, "atol")
    ts = _checks.real_array(times, "times")
    if ts.ndim != 1 or ts.size < 1 or ts[0] != 0 or np.any(np.diff(ts) <= 0):
        raise ValueError("times must be increasing and start at 0")
    mask = np.tril(np.ones((a.size, a.size)))

    def rhs(_, th):
        d = th[None, :] - th[:, None]  # theta_j - theta_k in row k
        logits = beta * np.cos(d)
        w = mask * np.exp(logits - beta)
        return (w * np.sin(d)).sum(axis=1) / w.sum(axis=1)

    if ts.size == 1:
        return a[None, :].copy()
    sol = solve_ivp(rhs, (0.0, ts[-1]), a, t_eval=ts, method="DOP853", rtol=rtol, atol=atol)
    if not sol.success:
        raise RuntimeError(sol.message)
    return sol.y.T


def _bin_mask(positions, window, name):
    w = _checks.real_array(window, name)
    if w.shape != (2,) or not np.all(np.isfinite(w)):
        raise ValueError(f"{name} must be a pair (low, high) of finite numbers, got {window!r}")
    lo, hi = float(w[0]), float(w[1])
    mask = (positions >= lo) & (positions <= hi)
    if not np.any(mask):
        raise ValueError(f"{name} contains no position")
    return mask


def pooled_ratio(
    estimates: ArrayLike, closed_form: ArrayLike, positions: ArrayLike,
    window: tuple[float, float] = (0.25, 0.9)
) -> tuple[float, float]:
    r"""Pooled ratio of particle estimates to the closed form over a window of positions.

    :math:`r = \overline{\sum_{k \in W} \hat e_k} / \sum_{k \in W} g_k`, with the standard
    error of the mean of the per-draw sums (the draws are independent; the positions of one
    draw are not, which summing per draw accounts for).

    Parameters
    ----------
    estimates : array_like, shape (R, K)
        Per-draw estimates (:func:`particle_profile`), one column per source position.
    closed_form : array_like, shape (K,)
        The closed form at the same positions.
    positions : array_like, shape (K,)
        The positions :math:`k/N`.
    window : (float, float)
        Closed interval of positions pooled.

    Returns
    -------
    (float, float)
        The ratio and its standard error.

    Raises
    ------
    ValueError
        On mismatched shapes, fewer than 2 draws or an empty window.

    Examples
    --------
    >>> est = np.array([[1.0, 2.0], [3.0, 2.0]])
    >>> pooled_ratio(est, [2.0, 2.0], [0.5, 0.75])
    (1.0, 0.25)

    References
    ----------
    duerinckx2026kinetic
    """
    est = _checks.matrix(estimates, "estimates")
    g = _checks.real_array(closed_form, "closed_form")
    pos = _checks.real_array(positions, "positions")
    if g.shape != (est.shape[1],) or pos.shape != g.shape or est.shape[0] < 2:
        raise ValueError("estimates must have shape (R >= 2, K) and closed_form, "
                         "positions shape (K,)")
    mask = _bin_mask(pos, window, "window")
    sums = est[:, mask].sum(axis=1)
    total = g[mask].sum()
    return float(sums.mean() / total), float(sums.std(ddof=1) / np.sqrt(sums.size) / total)


def bin_difference(
    estimates: ArrayLike, positions: ArrayLike, upper: tuple[float, float],
    lower: tuple[float, float]
) -> tuple[float, float]:
    r"""Mean over draws of (average over the ``upper`` bin) minus (average over ``lower``).

    Parameters
    ----------
    estimates : array_like, shape (R, K)
        Per-draw estimates, one column per position.
    positions : array_like, shape (K,)
        The positions.
    upper, lower : (float, float)
        Closed intervals of positions.

    Returns
    -------
    (float, float)
        The mean difference and its standard error over the draws.

    Raises
    ------
    ValueError
        On mismatched shapes, fewer than 2 draws or an empty bin.

    Examples
    --------
    >>> est = np.array([[3.0, 1.0], [5.0, 1.0]])
    >>> bin_difference(est, [0.1, 0.5], (0.0, 0.2), (0.4, 0.6))
    (3.0, 1.0)

    References
    ----------
    duerinckx2026kinetic
    """
    est = _checks.matrix(estimates, "estimates")
    pos = _checks.real_array(positions, "positions")
    if pos.shape != (est.shape[1],) or est.shape[0] < 2:
        raise ValueError("estimates must have shape (R >= 2, K) and positions shape (K,)")
    diff = (est[:, _bin_mask(pos, upper, "upper")].mean(axis=1)
            - est[:, _bin_mask(pos, lower, "lower")].mean(axis=1))
    return float(diff.mean()), float(diff.std(ddof=1) / np.sqrt(diff.size))


def interior_minima(values: ArrayLike) -> int:
    r"""Number of strict interior local minima of a sampled profile.

    Counts indices :math:`i` with :math:`v_{i-1} > v_i < v_{i+1}` (plateaus are counted once,
    at their first sample, when the profile falls into them and rises out of them).

    Parameters
    ----------
    values : array_like, shape (K,)
        Profile on an increasing grid, ``K >= 3``.

    Returns
    -------
    int
        The count.

    Raises
    ------
    ValueError
        If ``values`` is not a finite 1-D array of at least 3 entries.

    Examples
    --------
    >>> interior_minima([3.0, 1.0, 2.0, 0.5, 4.0])
    2

    References
    ----------
    duerinckx2026kinetic
    """
    v = _checks.real_array(values, "values")
    if v.ndim != 1 or v.size < 3 or not np.all(np.isfinite(v)):
        raise ValueError("values must be a finite 1-D array with at least 3 entries")
    d = np.sign(np.diff(v))
    d = d[d != 0]
    return int(np.sum((d[:-1] < 0) & (d[1:] > 0)))
