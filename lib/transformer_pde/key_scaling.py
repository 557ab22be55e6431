r"""One query, :math:`n` i.i.d. uniform keys on :math:`\mathbb S^{d-1}`: the scale
:math:`\beta_n \asymp n^{2/(d-1)}`.

A fixed unit query :math:`q` attends to keys :math:`k_1, \dots, k_n` drawn independently and
uniformly on :math:`\mathbb S^{d-1}`, with weights
:math:`w_j = e^{\beta\langle q, k_j\rangle}/\sum_l e^{\beta\langle q, k_l\rangle}`. Write
:math:`\delta_j = 1 - \langle q, k_j\rangle \in [0, 2]`; its law has the density
:math:`c_d\,\delta^a(2-\delta)^a` with :math:`a = (d-3)/2` and
:math:`c_d = \Gamma(d/2)/(\sqrt\pi\,\Gamma((d-1)/2))`, so that near the query
:math:`P(\delta \le s) \sim c_d 2^a s^{(d-1)/2}/((d-1)/2)` and the nearest keys sit at
:math:`\delta \asymp n^{-2/(d-1)}`. Bruno, Chen, Lin, Polyanskiy and Rigollet (2026) show that
the attention row turns from averaging to selecting one key at :math:`\beta_n \asymp
n^{2/(d-1)}`.

The statistic computed here is the *collision probability* :math:`\sum_j w_j^2` (the chance
that two independent draws from the row pick the same key; :math:`1/n` for uniform weights,
:math:`1` for a single key). Its expectation has an exact one-dimensional integral form
(:func:`collision_probability`), from :math:`Z^{-2} = \int_0^\infty u e^{-uZ}\,du` and the
independence of the keys:

.. math::

    \mathbb E\sum_j w_j^2 = n\int_0^\infty u\,\chi(u)\,\varphi(u)^{n-1}\,du,\qquad
    \chi(u) = \mathbb E\bigl[e^{-2\beta\delta}e^{-ue^{-\beta\delta}}\bigr],\quad
    \varphi(u) = \mathbb E\bigl[e^{-ue^{-\beta\delta}}\bigr].

With :math:`\beta = \lambda n^{2/(d-1)}` the points :math:`\beta\delta_j` converge to a
Poisson process of intensity :math:`\nu(dx) = c_d 2^a\lambda^{-(d-1)/2}x^a\,dx` on
:math:`[0, \infty)`, and the same computation (Mecke's formula) gives the limit
(:func:`collision_limit`)
:math:`\int_0^\infty u\,\chi_\infty(u)\,e^{-\psi_\infty(u)}\,du` with
:math:`\chi_\infty(u) = \int e^{-2x}e^{-ue^{-x}}\nu(dx)` and
:math:`\psi_\infty(u) = \int(1 - e^{-ue^{-x}})\nu(dx)`, strictly between 0 and 1.
:func:`sample_rows` draws the rows themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from scipy import special

from . import _checks

__all__ = [
    "critical_beta",
    "distance_density",
    "collision_probability",
    "collision_limit",
    "sample_rows",
]


_V_LO = -40.0  # u = e^v below e^-40: the integrand is below e^-80 of its scale
_CUT = 60.0  # x = beta delta beyond log(u) + 60 contributes below e^-60
_NX = 640  # quadrature nodes in x (8 Gauss-Legendre panels of 80)


def _dim(d):
    d = _checks.positive_int(d, "d")
    if d < 3:
        raise ValueError(f"d must be at least 3 (keys on the sphere S^(d-1), d - 1 >= 2), got {d}")
    return d


def _constants(d):
    a = (d - 3) / 2.0
    c = float(np.exp(special.gammaln(d / 2.0) - special.gammaln((d - 1) / 2.0)) / np.sqrt(np.pi))
    return a, c


def critical_beta(n: int, d: int, lam: float = 1.0) -> float:
    r"""The scale :math:`\beta = \lambda\,n^{2/(d-1)}` (Bruno, Chen, Lin, Polyanskiy and
    Rigollet, 2026).

    Parameters
    ----------
    n : int
        Number of keys, at least 2.
    d : int
        Dimension of the ambient space, at least 3 (keys on :math:`\mathbb S^{d-1}`).
    lam : float
        The factor :math:`\lambda > 0`.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``n < 2``, ``d < 3`` or ``lam`` is not a positive finite number.

    Examples
    --------
    >>> critical_beta(10**4, 3)
    10000.0
    >>> round(critical_beta(10**4, 5), 6)
    100.0

    References
    ----------
    :cite:`bruno2026scaling`
    """
    n = _checks.int_at_least(n, "n", 2)
    d = _dim(d)
    lam = _checks.positive_float(lam, "lam")
    return lam * float(n) ** (2.0 / (d - 1))


def distance_density(delta: NDArray[np.float64] | float, d: int) -> NDArray[np.float64]:
    r"""Density :math:`c_d\,\delta^a(2-\delta)^a`, :math:`a = (d-3)/2`, of
    :math:`\delta = 1 - \langle q, k\rangle` for :math:`k` uniform on :math:`\mathbb S^{d-1}`.

    Parameters
    ----------
    delta : float or array
        Points of :math:`[0, 2]`.
    d : int
        Dimension, at least 3.

    Returns
    -------
    ndarray
        The density at ``delta``.

    Raises
    ------
    ValueError
        If ``delta`` leaves :math:`[0, 2]` or is not finite, or ``d < 3``.

    Examples
    --------
    >>> float(distance_density(0.7, 3))  # d = 3: uniform on [0, 2] (Archimedes)
    0.5

    References
    ----------
    :cite:`bruno2026scaling`
    """
    d = _dim(d)
    x = _checks.real_array(delta, "delta")
    if not np.all(np.isfinite(x)) or np.any(x < 0) or np.any(x > 2):
        raise ValueError("delta must lie in [0, 2]")
    a, c = _constants(d)
    return c * (x * (2.0 - x)) ** a


@functools.cache
def _legendre(per):
    return np.polynomial.legendre.leggauss(per)


@functools.cache
def _jacobi(a):
    return special.roots_jacobi(800, a, a)


def _gl(lo, hi, panels, per):
    """Composite Gauss-Legendre nodes and weights on [lo, hi] (arrays broadcast on lo, hi)."""
    t, w = _legendre(per)
    edges = np.linspace(0.0, 1.0, panels + 1)
    s = (edges[:-1, None] + (edges[1:] - edges[:-1])[:, None] * (t + 1) / 2).ravel()
    ws = ((edges[1:] - edges[:-1])[:, None] * w / 2).ravel()
    lo = np.asarray(lo, dtype=np.float64)[..., None]
    hi = np.asarray(hi, dtype=np.float64)[..., None]
    return lo + (hi - lo) * s, (hi - lo) * ws


def _x_moments(v, beta, d, limit_lam=None):
    """psi(u) = E[1 - exp(-w)], phi(u) = E[exp(-w)] and u^2 chi(u) = E[w^2 exp(-w)],
    w = u e^-x, x = beta delta, at u = e^v.

    For ``limit_lam`` the expectations are integrals against the Poisson intensity instead.
    Where w > e^30 (x < log u - 30) the integrands are 1 and 0 to double precision: that part
    of psi is the mass of [0, log u - 30], in closed form. The rest, x up to log u + _CUT
    (capped at 2 beta), is integrated in the variable y = sqrt(x), which makes the x^a
    endpoint behaviour at 0 smooth.
    """
    a, c = _constants(d)
    X0 = np.maximum(v - 30.0, 0.0)
    X = np.maximum(v, 0.0) + _CUT
    if limit_lam is None:
        X = np.minimum(X, 2.0 * beta)
        X0 = np.minimum(X0, X)
        head = special.betainc((d - 1) / 2.0, (d - 1) / 2.0, X0 / beta / 2.0)
        tail = special.betaincc((d - 1) / 2.0, (d - 1) / 2.0, X / beta / 2.0)
        dens_scale = None
    else:
        dens_scale = c * 2.0**a * limit_lam ** (-(a + 1.0))
        head = dens_scale * X0 ** (a + 1.0) / (a + 1.0)
        tail = np.full_like(X, np.nan)  # infinite mass: phi is not used in the limit
    y, wy = _gl(np.sqrt(X0), np.sqrt(X), 8, _NX // 8)
    x = y * y
    if limit_lam is None:
        delta = np.minimum(x / beta, 2.0)
        dens = c * (delta * (2.0 - delta)) ** a / beta  # density in x
    else:
        dens = dens_scale * x**a
    jac = 2.0 * y * dens * wy
    w = np.exp(v[:, None] - x)
    psi = head + np.sum(-np.expm1(-w) * jac, axis=1)
    phi = tail + np.sum(np.exp(-w) * jac, axis=1)
    u2chi = np.sum(w * w * np.exp(-w) * jac, axis=1)
    return psi, phi, u2chi


def _small_beta_moments(v, beta, d):
    """psi, u^2 chi by Gauss-Jacobi quadrature in t = <q, k> (the weight (1 - t^2)^a
    exactly); for beta <= 30, where the integrands vary on scales >= 1/30 in t."""
    a, c = _constants(d)
    t, wt = _jacobi(a)
    x = beta * (1.0 - t)
    lw = np.minimum(v[:, None] - x, 700.0)  # log w; beyond 700, e^-w is 0 anyway
    w = np.exp(lw)
    psi = np.sum(-np.expm1(-w) * wt, axis=1) * c
    phi = np.sum(np.exp(-w) * wt, axis=1) * c
    u2chi = np.sum(np.exp(2.0 * lw - w) * wt, axis=1) * c
    return psi, phi, u2chi


def _v_nodes(v_hi):
    """Gauss-Legendre panels on [_V_LO, v_hi]: width 2 on [-10, 50] (where psi and u^2 chi
    turn over), growing by 1.25 per panel beyond, 3 panels below -10; 24 nodes each."""
    edges = [_V_LO, -30.0, -20.0]
    e, width = -10.0, 2.0
    while e < v_hi:
        edges.append(e)
        e += width
        if e > 50.0:
            width *= 1.25
    edges.append(v_hi)
    edges = np.array([x for x in edges if x < v_hi] + [v_hi])
    t, w = _legendre(24)
    lo, hi = edges[:-1, None], edges[1:, None]
    return (lo + (hi - lo) * (t + 1) / 2).ravel(), ((hi - lo) * w / 2).ravel()


def _integrate(log_factor, moments):
    """int_{-inf}^{inf} u^2 chi(u) exp(log_factor(psi(u))) dv, u = e^v, on [_V_LO, v_hi]."""
    lo, hi = _V_LO, 1.0
    while log_factor(*moments(np.array([hi]))[:2])[0] > -80.0:
        lo, hi = hi, 2.0 * hi + 1.0
        if hi > 1e8:  # pragma: no cover - beyond any double-precision weight
            raise ValueError("the integral does not converge (beta too large for n)")
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if log_factor(*moments(np.array([mid]))[:2])[0] > -80.0:
            lo = mid
        else:
            hi = mid
    v, wv = _v_nodes(hi)
    psi, phi, u2chi = moments(v)
    return float(np.sum(u2chi * np.exp(log_factor(psi, phi)) * wv))


def collision_probability(n: int, d: int, beta: float) -> float:
    r"""Exact :math:`\mathbb E\sum_j w_j^2` for one query and :math:`n` uniform keys on
    :math:`\mathbb S^{d-1}` (module notes; the setting of Bruno et al., 2026).

    .. math::

        \mathbb E\sum_j w_j^2 = n\int_0^\infty u\,\chi(u)\,\varphi(u)^{n-1}\,du

    computed by quadrature (absolute accuracy about :math:`10^{-7}` or better, checked in the tests
    against closed forms and simulation).

    Parameters
    ----------
    n : int
        Number of keys, at least 2.
    d : int
        Dimension, at least 3.
    beta : float
        Inverse temperature, :math:`\ge 0`.

    Returns
    -------
    float
        In :math:`[1/n, 1]`.

    Raises
    ------
    ValueError
        If ``n < 2``, ``d < 3`` or ``beta`` is negative or not finite.

    Examples
    --------
    >>> round(collision_probability(100, 3, 0.0), 12)  # uniform weights: 1/n
    0.01

    References
    ----------
    :cite:`bruno2026scaling`
    """
    n = _checks.int_at_least(n, "n", 2)
    d = _dim(d)
    beta = _checks.nonnegative_float(beta, "beta")
    if beta == 0.0:
        return 1.0 / n
    if beta <= 30.0:
        def moments(v):
            return _small_beta_moments(v, beta, d)
    else:
        def moments(v):
            return _x_moments(v, beta, d)
    m = n - 1

    def log_factor(psi, phi):
        # log phi^m, from phi = E e^-w itself once it is small (1 - psi loses its digits)
        with np.errstate(divide="ignore"):
            return m * np.where(phi < 0.5, np.log(phi), np.log1p(-np.minimum(psi, 0.5)))

    return n * _integrate(log_factor, moments)


def collision_limit(d: int, lam: float) -> float:
    r"""Limit of :math:`\mathbb E\sum_j w_j^2` as :math:`n \to \infty` with
    :math:`\beta = \lambda n^{2/(d-1)}` (derived in chapter 8: Poisson limit and Mecke's
    formula, module notes).

    .. math::

        \int_0^\infty u\,\chi_\infty(u)\,e^{-\psi_\infty(u)}\,du,\qquad
        \nu(dx) = c_d 2^a\lambda^{-(d-1)/2}x^a\,dx

    Parameters
    ----------
    d : int
        Dimension, at least 3.
    lam : float
        :math:`\lambda > 0`.

    Returns
    -------
    float
        In :math:`(0, 1)`.

    Raises
    ------
    ValueError
        If ``d < 3`` or ``lam`` is not a positive finite number.

    Examples
    --------
    >>> 0.0 < collision_limit(3, 1.0) < 1.0
    True

    References
    ----------
    :cite:`bruno2026scaling`
    """
    d = _dim(d)
    lam = _checks.positive_float(lam, "lam")

    def moments(v):
        return _x_moments(v, np.inf, d, limit_lam=lam)

    def log_factor(psi, phi):
        return -psi

    return _integrate(log_factor, moments)


def sample_rows(key: Sequence[int], n: int, d: int, beta: float,
                draws: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Simulated attention rows: ``draws`` independent sets of :math:`n` uniform keys.

    Only the law of :math:`\delta = 1 - \langle q, k\rangle` enters the weights:
    :math:`\delta = 2B` with :math:`B \sim \mathrm{Beta}((d-1)/2, (d-1)/2)` (the first
    coordinate of a uniform point of :math:`\mathbb S^{d-1}` is :math:`2B - 1`), drawn by
    ``numpy.random.default_rng(key)``.

    Parameters
    ----------
    key : sequence of int
        Seed of the generator.
    n, d : int
        Keys (at least 2) and dimension (at least 3).
    beta : float
        Inverse temperature, :math:`\ge 0`.
    draws : int
        Number of independent rows.

    Returns
    -------
    (sum_sq, max_w) : tuple of ndarray
        :math:`\sum_j w_j^2` and :math:`\max_j w_j` of each row.

    Raises
    ------
    ValueError
        On bad ``n``, ``d``, ``beta`` or ``draws``.

    Examples
    --------
    >>> s, m = sample_rows([0], 50, 3, 0.0, 4)
    >>> bool(np.allclose(s, 1 / 50))
    True

    References
    ----------
    :cite:`bruno2026scaling`
    """
    key = _checks.seed_key(key, "key")
    n = _checks.int_at_least(n, "n", 2)
    d = _dim(d)
    beta = _checks.nonnegative_float(beta, "beta")
    draws = _checks.positive_int(draws, "draws")
    rng = np.random.default_rng(key)
    chunk = max(1, 2_000_000 // n)
    sum_sq, max_w = np.empty(draws), np.empty(draws)
    for start in range(0, draws, chunk):
        m = min(chunk, draws - start)
        delta = 2.0 * rng.beta((d - 1) / 2.0, (d - 1) / 2.0, size=(m, n))
        z = np.exp(-beta * (delta - delta.min(axis=1, keepdims=True)))
        w = z / z.sum(axis=1, keepdims=True)
        sum_sq[start:start + m] = np.einsum("ij,ij->i", w, w)
        max_w[start:start + m] = w.max(axis=1)
    return sum_sq, max_w
