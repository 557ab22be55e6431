"""Attention with weights redrawn at every layer and head: the homogenized limit (chapter 10).

The network (the Gaussian setting of Koubbi, Geshkovski and Rigollet, with
:math:`A = Q^\\top K/\\sqrt d`): tokens :math:`x_1, \\dots, x_n \\in \\mathbb S^{d-1}`; layer
:math:`\\ell` draws, independently for each head :math:`h = 1, \\dots, H`, matrices
:math:`Q_h, K_h \\in \\mathbb R^{d\\times d}` with i.i.d. :math:`N(0, 1)` entries and
:math:`V_h` with i.i.d. :math:`N(0, 1/d)` entries, and sets

.. math:: x_i \\leftarrow \\frac{x_i + \\frac{\\eta}{H}\\sum_h V_h m_h(x_i)}
   {\\big|x_i + \\frac{\\eta}{H}\\sum_h V_h m_h(x_i)\\big|},\\qquad
   m_h(x_i) = \\sum_k \\operatorname{softmax}_k\\Big(\\frac{\\beta}{\\sqrt d}
   \\langle Q_h x_i, K_h x_k\\rangle\\Big) x_k .

Since :math:`E V_h = 0` the mean drift vanishes; one layer moves token :math:`i` by
:math:`\\frac{\\eta^2}{H}\\frac{d - 1}{d} E|m(x_i)|^2` in mean square, so after :math:`L` layers
of step :math:`\\eta = T/L` the tokens have moved from where they started by
:math:`\\frac{T^2}{LH}\\frac{d - 1}{d}E|m|^2` (derived in chapter 10). For orthonormal tokens
:math:`E|m(x_i)|^2` is the mean purity :math:`E\\sum_k p_k^2` of a softmax of :math:`n`
scores that are i.i.d. :math:`N(0, \\beta^2 r^2)` given :math:`r^2 \\sim \\chi^2_d/d`, which
:func:`attention_self_overlap` computes by quadrature.
"""

import numpy as np
from numpy.typing import NDArray
from scipy import special

from ._checks import int_at_least, nonnegative_float, points, positive_float

__all__ = ["attention_self_overlap", "squared_distance_rate", "simulate_random_heads"]


def attention_self_overlap(beta: float, n: int, d: int, nodes: int = 64) -> float:
    """Mean purity of the attention of a token among orthonormal tokens under random Q, K.

    .. math:: F(\\beta) = E\\sum_{k=1}^n p_k^2 = n\\,E\\int_0^\\infty t\\,\\psi_2(t)\\,
       \\psi_0(t)^{n-1}\\,dt,\\qquad \\psi_m(t) = E_g\\,e^{m\\beta r g - t e^{\\beta r g}},

    with :math:`p = \\operatorname{softmax}(\\beta r g_1, \\dots, \\beta r g_n)`, :math:`g_k`
    i.i.d. :math:`N(0, 1)` and the outer expectation over :math:`r^2 \\sim \\chi^2_d/d`: the law
    of the scores :math:`\\beta\\langle Q e_i, K e_k\\rangle/\\sqrt d` for Gaussian
    :math:`Q, K` (Koubbi, Geshkovski and Rigollet's Gaussian setting). The identity
    :math:`1/s^2 = \\int_0^\\infty t e^{-ts}dt` gives the formula; Gauss–Hermite nodes in
    :math:`g`, generalised Gauss–Laguerre nodes in :math:`r^2` and a uniform grid in
    :math:`\\log t` evaluate it.

    Parameters
    ----------
    beta : float
        Temperature, :math:`\\beta \\ge 0`.
    n : int
        Number of tokens, at least 1 (orthonormal tokens need :math:`n \\le d`; the formula
        itself is defined for every :math:`n`).
    d : int
        Token dimension, at least 1.
    nodes : int, optional
        Quadrature nodes in each of :math:`g` and :math:`r^2`, at least 8 (64: relative error
        below 1e-8 for :math:`\\beta \\le 2`, the unit tests' range).

    Returns
    -------
    float
        :math:`F(\\beta)`, between :math:`1/n` (at :math:`\\beta = 0`) and 1.

    Raises
    ------
    ValueError
        If an argument is out of range.

    Examples
    --------
    >>> round(attention_self_overlap(0.0, 32, 32), 10)
    0.03125
    >>> round(attention_self_overlap(1.0, 32, 32), 4)
    0.0732

    References
    ----------
    :cite:`koubbi2026homogenized`
    """
    beta = nonnegative_float(beta, "beta")
    n = int_at_least(n, "n", 1)
    d = int_at_least(d, "d", 1)
    nodes = int_at_least(nodes, "nodes", 8)
    if beta == 0.0:
        return 1.0 / n
    xg, wg = special.roots_hermitenorm(nodes)
    wg = wg / np.sqrt(2.0 * np.pi)
    xl, wl = special.roots_genlaguerre(nodes, d / 2.0 - 1.0)
    with np.errstate(invalid="ignore", over="ignore"):
        wl = wl / np.sum(wl)  # the weights sum to Gamma(d/2)
    if not np.all(np.isfinite(wl)):
        raise ValueError(f"d = {d} is too large for the Gauss-Laguerre nodes (at most 300)")
    u = np.linspace(-40.0, 20.0, 6001)
    t, du = np.exp(u), u[1] - u[0]
    total = 0.0
    for r, w in zip(np.sqrt(2.0 * xl / d), wl, strict=True):
        e = np.exp(beta * r * xg)
        E = np.exp(-np.outer(t, e))
        psi0, psi2 = E @ wg, (E * e**2) @ wg
        total += w * n * np.sum(t * t * psi2 * psi0 ** (n - 1)) * du
    return float(total)


def squared_distance_rate(beta: float, n: int, d: int) -> float:
    """The limit of :math:`LH\\,E D_L^2/T^2` from orthonormal tokens.

    .. math:: c_0 = \\frac{d - 1}{d}\\,F(\\beta),\\qquad
       D_L^2 = \\frac1n\\sum_i |x_i^L - x_i^0|^2,

    where :math:`F` is :func:`attention_self_overlap`: after :math:`L` layers of step
    :math:`\\eta = T/L` with :math:`H` heads, :math:`E D_L^2 = c_0 T^2/(LH)\\,(1 + O(T^2/(LH)))`
    (derived in chapter 10; :math:`c_0` is also the rate of the quadratic variation of the
    limit SDE with common noise at the starting configuration).

    Parameters
    ----------
    beta : float
        Temperature, :math:`\\beta \\ge 0`.
    n : int
        Number of tokens, at least 1.
    d : int
        Token dimension, at least 1.

    Returns
    -------
    float
        :math:`c_0`.

    Raises
    ------
    ValueError
        If an argument is out of range.

    Examples
    --------
    >>> round(squared_distance_rate(0.0, 4, 4), 10)
    0.1875

    References
    ----------
    :cite:`koubbi2026homogenized`
    """
    d = int_at_least(d, "d", 1)
    return (d - 1) / d * attention_self_overlap(beta, n, d)


def simulate_random_heads(x0: NDArray[np.float64], beta: float, step: float, heads: int,
                          layers: int, networks: int, rng: np.random.Generator
                          ) -> NDArray[np.float64]:
    """Tokens after ``layers`` attention layers whose weights are redrawn at every layer and head.

    Runs the network of the module docstring,
    :math:`x_i \\leftarrow N\\big(x_i + \\frac{\\eta}{H}\\sum_h V_h m_h(x_i)\\big)`, on
    ``networks`` independent copies from the same tokens ``x0``. Each layer draws its
    :math:`Q, K, V` for all copies and heads as one array from ``rng``, so the result does
    not depend on threads.

    Parameters
    ----------
    x0 : ndarray of shape (n, d)
        Starting tokens, unit rows (to 1e-12).
    beta : float
        Temperature, :math:`\\beta \\ge 0`.
    step : float
        Residual step :math:`\\eta > 0`.
    heads : int
        Number of heads :math:`H`, at least 1.
    layers : int
        Number of layers :math:`L`, at least 1.
    networks : int
        Number of independent copies, at least 1.
    rng : numpy.random.Generator
        Source of the weights.

    Returns
    -------
    ndarray of shape (networks, n, d)
        The tokens after the last layer (unit rows).

    Raises
    ------
    ValueError
        If an argument is out of range, ``x0`` has a row off the sphere, or ``rng`` is not a
        Generator.

    Examples
    --------
    >>> x = simulate_random_heads(np.eye(3), 1.0, 0.1, 2, 5, 4, np.random.default_rng(0))
    >>> x.shape, bool(np.allclose(np.linalg.norm(x, axis=-1), 1.0))
    ((4, 3, 3), True)

    References
    ----------
    :cite:`koubbi2026homogenized`
    """
    x0 = points(x0, "x0")
    if np.max(np.abs(np.linalg.norm(x0, axis=1) - 1.0)) > 1e-12:
        raise ValueError("x0 must have unit rows")
    beta = nonnegative_float(beta, "beta")
    step = positive_float(step, "step")
    heads = int_at_least(heads, "heads", 1)
    layers = int_at_least(layers, "layers", 1)
    networks = int_at_least(networks, "networks", 1)
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")
    n, d = x0.shape
    x = np.broadcast_to(x0, (networks, n, d)).copy()
    scale = beta / np.sqrt(d)
    for _ in range(layers):
        w = rng.standard_normal((3, networks, heads, d, d))
        qx = x[:, None] @ np.swapaxes(w[0], -1, -2)   # rows Q_h x_i
        kx = x[:, None] @ np.swapaxes(w[1], -1, -2)   # rows K_h x_k
        s = scale * (qx @ np.swapaxes(kx, -1, -2))
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        p = s / s.sum(axis=-1, keepdims=True)
        m = p @ x[:, None]                             # rows m_h(x_i)
        out = (m @ np.swapaxes(w[2], -1, -2)).sum(axis=1) / np.sqrt(d)
        x = x + (step / heads) * out
        x /= np.linalg.norm(x, axis=-1, keepdims=True)
    return x
