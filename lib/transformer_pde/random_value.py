"""Two tokens driven by random value matrices: the diffusion limit of their cosine (chapter 10).

The network: two tokens :math:`x_1, x_2 \\in \\mathbb S^{d-1}`, attention weights
:math:`p = \\sigma(\\beta(1 - \\rho))` on itself and :math:`1 - p` on the other token
(:math:`Q = K = I`, temperature :math:`\\beta`, :math:`\\rho = \\langle x_1, x_2\\rangle`), and
at every layer a fresh value matrix :math:`V` with i.i.d. :math:`N(0, 1/d)` entries, shared by
both tokens:

.. math:: x_i \\leftarrow \\frac{x_i + \\sqrt h\\,V A_i}{|x_i + \\sqrt h\\,V A_i|},\\qquad
   A_1 = p x_1 + (1 - p) x_2,\\ A_2 = p x_2 + (1 - p) x_1 .

As :math:`h \\to 0` with :math:`t = h \\times` (number of layers), :math:`\\rho` becomes a
diffusion on :math:`[-1, 1]` whose drift and variance this module gives in closed form, with
the Lyapunov exponents of its two ends and the probability of ending antipodal (derived in
chapter 10; the model is the book's, in the spirit of Fedorov et al. and of Koubbi,
Geshkovski and Rigollet, not a transcription of theirs).
"""

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from ._checks import finite_float, int_at_least, nonnegative_float, positive_float, real_array

__all__ = ["two_token_coefficients", "boundary_exponents", "antipodal_threshold",
           "antipodal_probability", "simulate_two_tokens"]


def _dim(d):
    return int_at_least(d, "d", 2)


def _rho(rho, name="rho"):
    r = real_array(rho, name)
    if not np.all(np.isfinite(r)) or np.any(np.abs(r) > 1.0):
        raise ValueError(f"{name} must lie in [-1, 1]")
    return r


def two_token_coefficients(rho: ArrayLike, beta: float,
                           d: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Drift and variance of the cosine of two tokens under random value matrices.

    With :math:`p = \\sigma(\\beta(1 - \\rho))`, :math:`a = p^2 + (1 - p)^2 + 2p(1 - p)\\rho`
    and :math:`b = 2p(1 - p) + (p^2 + (1 - p)^2)\\rho`,

    .. math:: \\mu(\\rho) = \\frac{b\\,(d - 2 + \\rho^2) - (d - 1)\\,a\\,\\rho}{d},\\qquad
       \\sigma^2(\\rho) = \\frac{2(1 - \\rho^2)^2\\,(p^2 + (1 - p)^2)}{d},

    the limit of :math:`E[\\Delta\\rho]/h` and :math:`\\mathrm{Var}[\\Delta\\rho]/h` for one
    layer of the network in the module docstring (derived in chapter 10).

    Parameters
    ----------
    rho : array_like
        Cosines in :math:`[-1, 1]`.
    beta : float
        Temperature, :math:`\\beta \\ge 0`.
    d : int
        Token dimension, :math:`d \\ge 2`.

    Returns
    -------
    drift, variance : ndarray
        :math:`\\mu(\\rho)` and :math:`\\sigma^2(\\rho)`, of the shape of ``rho``.

    Raises
    ------
    ValueError
        If ``rho`` leaves :math:`[-1, 1]`, ``beta < 0`` or ``d < 2``.

    Examples
    --------
    >>> mu, var = two_token_coefficients([1.0, -1.0], 2.0, 6)
    >>> bool(abs(mu).max() < 1e-15 and abs(var).max() < 1e-15)
    True

    References
    ----------
    :cite:`fedorov2026clustering`, :cite:`koubbi2026homogenized`
    """
    r = _rho(rho)
    beta = nonnegative_float(beta, "beta")
    d = _dim(d)
    p = 1.0 / (1.0 + np.exp(-beta * (1.0 - r)))
    s = p**2 + (1.0 - p) ** 2
    a = s + 2.0 * p * (1.0 - p) * r
    b = 2.0 * p * (1.0 - p) + s * r
    drift = (b * (d - 2 + r**2) - (d - 1) * a * r) / d
    variance = 2.0 * (1.0 - r**2) ** 2 * s / d
    return drift, variance


def boundary_exponents(beta: float, d: int) -> tuple[float, float]:
    """Lyapunov exponents of the clustered and the antipodal ends.

    Near an end :math:`e = \\pm 1`, :math:`y = |\\rho - e|` obeys
    :math:`dy \\approx \\mu'(e)\\,y\\,dt + \\sqrt{k_e}\\,y\\,dB` with
    :math:`\\sigma^2 \\approx k_e y^2`, so :math:`\\log y` drifts at
    :math:`\\lambda_e = \\mu'(e) - k_e/2`:

    .. math:: \\lambda_{+1} = -\\frac{d - 1}{d},\\qquad
       \\lambda_{-1} = \\frac{2}{d}\\,\\frac{d - 2 - \\cosh 2\\beta}{1 + \\cosh 2\\beta}.

    Parameters
    ----------
    beta : float
        Temperature, :math:`\\beta \\ge 0`.
    d : int
        Token dimension, :math:`d \\ge 2`.

    Returns
    -------
    lam_cluster, lam_antipodal : float
        :math:`\\lambda_{+1}` and :math:`\\lambda_{-1}` (an end attracts where its exponent is
        negative).

    Raises
    ------
    ValueError
        If ``beta < 0`` or ``d < 2``.

    Examples
    --------
    >>> lam_c, lam_a = boundary_exponents(2.0, 6)
    >>> bool(lam_c < 0 and lam_a < 0)
    True

    References
    ----------
    :cite:`fedorov2026clustering`
    """
    beta = nonnegative_float(beta, "beta")
    d = _dim(d)
    c = np.cosh(2.0 * beta)
    return -(d - 1) / d, 2.0 / d * (d - 2 - c) / (1.0 + c)


def antipodal_threshold(d: int) -> float:
    """The temperature above which the antipodal end attracts.

    .. math:: \\beta_{\\mathrm{anti}}(d) = \\tfrac12\\operatorname{arccosh}(d - 2)
       \\quad (d \\ge 3),

    zero for :math:`d \\le 3` (every :math:`\\beta > 0` then gives :math:`\\lambda_{-1} < 0`).

    Parameters
    ----------
    d : int
        Token dimension, :math:`d \\ge 2`.

    Returns
    -------
    float
        :math:`\\beta_{\\mathrm{anti}}(d)`.

    Raises
    ------
    ValueError
        If ``d < 2``.

    Examples
    --------
    >>> round(antipodal_threshold(6), 6)
    1.031719

    References
    ----------
    :cite:`fedorov2026clustering`
    """
    d = _dim(d)
    return 0.0 if d <= 3 else 0.5 * float(np.arccosh(d - 2))


def _g_regular(t, beta, d, alpha_minus, alpha_plus):
    # 2 mu / sigma^2 minus its two pole parts (smooth on [-1, 1])
    mu, var = two_token_coefficients(t, beta, d)
    return 2.0 * mu / var - alpha_minus / (1.0 + t) + alpha_plus / (1.0 - t)


def _scale(beta, d):
    """Pole exponents and a Chebyshev interpolant of R = int_0^t (2 mu / sigma^2 - poles)."""
    lam_c, lam_a = boundary_exponents(beta, d)
    c = np.cosh(2.0 * beta)
    k_minus = 8.0 * c / (d * (1.0 + c))          # sigma^2 ~ k (1 + rho)^2 at -1
    k_plus = 4.0 / d                             # sigma^2 ~ k (1 - rho)^2 at +1
    alpha_minus = 1.0 + 2.0 * lam_a / k_minus
    alpha_plus = 1.0 + 2.0 * lam_c / k_plus
    # R' = g_reg on Chebyshev points of the second kind, kept 1e-3 away from the ends
    deriv = np.polynomial.Chebyshev.interpolate(
        lambda t: _g_regular(0.999 * t, beta, d, alpha_minus, alpha_plus), 80)
    R = deriv.integ(lbnd=0.0)
    return alpha_minus, alpha_plus, lambda t: R(t / 0.999) * 0.999


_NODES = 64


def _total(R, alpha_minus, alpha_plus):
    # int_{-1}^{1} e^{-R} (1 + t)^{-a_-} (1 - t)^{-a_+} dt by Gauss-Jacobi
    u, w = special.roots_jacobi(2 * _NODES, -alpha_plus, -alpha_minus)
    return np.exp(-R(u)) @ w


def antipodal_probability(rho0: ArrayLike, beta: float, d: int) -> NDArray[np.float64]:
    """Probability that the limit diffusion started at ``rho0`` ends antipodal.

    With the scale density :math:`s'(\\rho) = \\exp(-\\int_0^\\rho 2\\mu/\\sigma^2)`,

    .. math:: S(\\rho_0) = P(\\rho_t \\to -1) = \\frac{\\int_{\\rho_0}^1 s'}{\\int_{-1}^1 s'}

    when :math:`\\lambda_{-1} < 0` (both ends attract), and 0 otherwise. :math:`S` solves
    :math:`\\mu S' + \\tfrac12\\sigma^2S'' = 0`, so :math:`S(\\rho_t)` is a bounded
    martingale: :math:`E\\,S(\\rho_t) = S(\\rho_0)` at every :math:`t`. The poles
    :math:`s' \\sim (1 + \\rho)^{-\\alpha_-}(1 - \\rho)^{-\\alpha_+}`,
    :math:`\\alpha_\\pm = 1 + 2\\lambda_{\\pm1}/k_{\\pm1}`, are integrated exactly
    (QUADPACK's algebraic weight); the smooth rest through a Chebyshev interpolant.

    Parameters
    ----------
    rho0 : array_like
        Starting cosines, in :math:`[-1, 1]` (the ends give 1 and 0).
    beta : float
        Temperature, :math:`\\beta \\ge 0`.
    d : int
        Token dimension, :math:`d \\ge 2`.

    Returns
    -------
    ndarray
        :math:`S(\\rho_0)`, of the shape of ``rho0``.

    Raises
    ------
    ValueError
        If ``rho0`` leaves :math:`[-1, 1]`, ``beta < 0`` or ``d < 2``.

    Examples
    --------
    >>> float(antipodal_probability(0.0, 0.5, 6))
    0.0
    >>> bool(0.0 < antipodal_probability(0.0, 2.0, 6) < 0.5)
    True

    References
    ----------
    :cite:`fedorov2026clustering`
    """
    r = _rho(rho0, "rho0")
    beta = nonnegative_float(beta, "beta")
    d = _dim(d)
    if boundary_exponents(beta, d)[1] >= 0.0:
        return np.where(r == -1.0, 1.0, 0.0)
    alpha_minus, alpha_plus, R = _scale(beta, d)

    # int_{-1}^x e^{-R} (1 + t)^{-a_-} (1 - t)^{-a_+} dt (x <= 0) and the same over [x, 1]
    # (x >= 0): t mapped to u in [-1, 1], the pole by Gauss-Jacobi nodes, the rest smooth
    u, w = special.roots_jacobi(_NODES, 0.0, -alpha_minus)
    flat = r.ravel()
    xl = np.minimum(flat, 0.0)[:, None]
    t = -1.0 + (xl + 1.0) * (1.0 + u) / 2.0
    left = ((xl[:, 0] + 1.0) / 2.0) ** (1.0 - alpha_minus) * ((
        np.exp(-R(t)) * (1.0 - t) ** (-alpha_plus)) @ w)
    u, w = special.roots_jacobi(_NODES, -alpha_plus, 0.0)
    xr = np.maximum(flat, 0.0)[:, None]
    t = xr + (1.0 - xr) * (1.0 + u) / 2.0
    right = ((1.0 - xr[:, 0]) / 2.0) ** (1.0 - alpha_plus) * ((
        np.exp(-R(t)) * (1.0 + t) ** (-alpha_minus)) @ w)
    total = float(_total(R, alpha_minus, alpha_plus))
    out = np.where(flat >= 0.0, right / total, 1.0 - left / total)
    return out.reshape(r.shape)


def simulate_two_tokens(rho0: float, beta: float, d: int, h: float, steps: int,
                        n_paths: int, rng: np.random.Generator
                        ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Two tokens through ``steps`` layers with fresh Gaussian value matrices.

    Runs the network of the module docstring on ``n_paths`` independent copies, each layer
    drawing its own :math:`V` (entries :math:`N(0, 1/d)`) from ``rng`` in one array, so the
    result does not depend on threads. Tokens start at :math:`x_1 = e_1`,
    :math:`x_2 = \\rho_0 e_1 + \\sqrt{1 - \\rho_0^2}\\,e_2` (the law of :math:`\\rho` depends
    on :math:`\\rho_0` only).

    Parameters
    ----------
    rho0 : float
        Starting cosine, in :math:`[-1, 1]`.
    beta : float
        Temperature, :math:`\\beta \\ge 0`.
    d : int
        Token dimension, :math:`d \\ge 2`.
    h : float
        Step (layer weight :math:`\\sqrt h`), :math:`h > 0`.
    steps : int
        Number of layers, at least 1.
    n_paths : int
        Number of independent networks, at least 1.
    rng : numpy.random.Generator
        Source of the value matrices.

    Returns
    -------
    rho, gap : ndarray
        Final cosines and the final :math:`1 + \\rho = |x_1 + x_2|^2/2`, computed from the
        sum so that it keeps its relative accuracy near the antipodal end.

    Raises
    ------
    ValueError
        If an argument is out of range or ``rng`` is not a Generator.

    Examples
    --------
    >>> rho, gap = simulate_two_tokens(0.0, 1.0, 4, 0.01, 10, 5, np.random.default_rng(0))
    >>> rho.shape, bool(np.all(np.abs(rho) <= 1.0))
    ((5,), True)

    References
    ----------
    :cite:`fedorov2026clustering`, :cite:`koubbi2026homogenized`
    """
    rho0 = finite_float(rho0, "rho0")
    if not -1.0 <= rho0 <= 1.0:
        raise ValueError("rho0 must lie in [-1, 1]")
    beta = nonnegative_float(beta, "beta")
    d = _dim(d)
    h = positive_float(h, "h")
    steps = int_at_least(steps, "steps", 1)
    n_paths = int_at_least(n_paths, "n_paths", 1)
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")
    x1 = np.zeros((n_paths, d))
    x1[:, 0] = 1.0
    x2 = np.zeros((n_paths, d))
    x2[:, 0] = rho0
    x2[:, 1] = np.sqrt(1.0 - rho0**2)
    root = np.sqrt(h / d)
    for _ in range(steps):
        rho = np.einsum("ij,ij->i", x1, x2)[:, None]
        p = 1.0 / (1.0 + np.exp(-beta * (1.0 - rho)))
        a1 = p * x1 + (1.0 - p) * x2
        a2 = p * x2 + (1.0 - p) * x1
        V = rng.standard_normal((n_paths, d, d))
        y1 = x1 + root * np.einsum("nij,nj->ni", V, a1)
        y2 = x2 + root * np.einsum("nij,nj->ni", V, a2)
        x1 = y1 / np.linalg.norm(y1, axis=1, keepdims=True)
        x2 = y2 / np.linalg.norm(y2, axis=1, keepdims=True)
    rho = np.clip(np.einsum("ij,ij->i", x1, x2), -1.0, 1.0)
    gap = 0.5 * np.einsum("ij,ij->i", x1 + x2, x1 + x2)
    return rho, gap
