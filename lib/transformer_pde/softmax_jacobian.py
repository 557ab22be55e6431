r"""The softmax Jacobian in attention: closed forms at equiangular tokens, map-dependent bounds.

Two tools for chapter 5.

**Equiangular tokens under the long-context scaling.** Self-attention with :math:`A = \beta I`,
:math:`V = I` on unit tokens with :math:`\langle\theta_i, \theta_j\rangle = \rho` for
:math:`i \ne j` (Chen, Lin, Polyanskiy and Rigollet, 2025) has the attention matrix
:math:`P = (a - b) I + b\,\mathbf 1\mathbf 1^\top`, :math:`a = k/(k + n - 1)`,
:math:`b = 1/(k + n - 1)`, :math:`k = e^{\beta(1-\rho)}`. Its Jacobian commutes with the
permutations of the tokens, so it splits into blocks along the isotypic components of the
symmetric group (derived in chapter 5): a :math:`3 \times 3` block (the trivial
representation), a :math:`4 \times 4` block (the standard one, multiplicity :math:`n - 1`) and
two scalars, :math:`a - b + 2\beta(1-\rho) b` and :math:`a - b`. :func:`equiangular_blocks`
returns them, :func:`equiangular_lipschitz` the spectral norm and
:func:`equiangular_gradient_eta` the normalised squared Frobenius norm
:math:`\eta = \|D(\mathrm{ATT}\circ N)\|_F^2/(nd)` of the Pre-LN layer, for any :math:`n`
(no :math:`n \times n` array).

**Bounds that depend on the attention map.** :func:`softmax_jacobian_norm` is the spectral
norm of :math:`J(p) = \operatorname{diag}(p) - pp^\top` (Yudin, Gaponov, Kudriashov and
Rakhuba, 2025, give it in closed form), and :func:`map_dependent_bound` a bound on the local
Lipschitz constant of multi-head attention that uses, for every query, the covariances of the
keys and values under its attention row and :math:`\|J(p_i)\|_2` (derived in chapter 5).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _checks, lipschitz
from .pretrained import MiniLM

__all__ = [
    "EquiangularBlocks",
    "equiangular_tokens",
    "equiangular_blocks",
    "equiangular_lipschitz",
    "equiangular_gradient_eta",
    "long_context_tokens",
    "pre_ln_eta",
    "softmax_jacobian_norm",
    "map_dependent_bound",
    "pretrained_map_bound",
]


class EquiangularBlocks(NamedTuple):
    r"""The blocks of :math:`D_\Theta f` at an equiangular configuration, in orthonormal
    coordinates: ``trivial`` (3, 3), ``standard`` (4, 4) (multiplicity :math:`n - 1`),
    ``symmetric`` and ``antisymmetric`` (scalars, multiplicities :math:`n(n-3)/2` and
    :math:`(n-1)(n-2)/2`), and the attention weights ``a`` (self) and ``b`` (other).

    Examples
    --------
    >>> b = equiangular_blocks(4, 1.0, 0.2)
    >>> print(b.trivial.shape, b.standard.shape, type(b.symmetric).__name__)
    (3, 3) (4, 4) float
    """

    trivial: np.ndarray
    standard: np.ndarray
    symmetric: float
    antisymmetric: float
    a: float
    b: float


def _args(n, beta, rho):
    n = _checks.positive_int(n, "n")
    if n < 4:
        raise ValueError(f"n must be at least 4, got {n}")
    return n, _checks.nonnegative_float(beta, "beta"), _rho(rho)


def _rho(rho):
    try:
        val = float(rho)
    except (TypeError, ValueError):
        raise ValueError(f"rho must be a number, got {rho!r}") from None
    if not 0.0 <= val < 1.0:
        raise ValueError(f"rho must lie in [0, 1), got {rho!r}")
    return val


def _weights(n, beta, rho):
    # a = k/(k + n - 1), b = 1/(k + n - 1), k = e^L, without overflow
    L = beta * (1.0 - rho)
    e = math.exp(-L)
    a = 1.0 / (1.0 + (n - 1) * e)
    b = e * a
    return a, b


def equiangular_tokens(n: int, rho: float, d: int | None = None) -> NDArray[np.float64]:
    r"""The equiangular configuration :math:`\theta_i = \sqrt\rho\, e_0 + \sqrt{1-\rho}\, e_i`.

    .. math::

        \langle\theta_i, \theta_j\rangle = \rho\ (i \ne j), \qquad |\theta_i| = 1,

    in :math:`\mathbb{R}^d`, :math:`d \ge n + 1` (default :math:`n + 1`), with
    :math:`e_0, \dots, e_n` the first canonical vectors: the inputs of
    :func:`equiangular_blocks` (Chen, Lin, Polyanskiy and Rigollet, 2025).

    Parameters
    ----------
    n : int
        Number of tokens.
    rho : float
        Common inner product, in :math:`[0, 1)`.
    d : int, optional
        Dimension, at least :math:`n + 1`.

    Returns
    -------
    array (n, d)

    Raises
    ------
    ValueError
        If an argument is out of range.

    Examples
    --------
    >>> X = equiangular_tokens(3, 0.25)
    >>> bool(np.allclose(X @ X.T, 0.75 * np.eye(3) + 0.25))
    True

    References
    ----------
    :cite:`chen2025critical`
    """
    n = _checks.positive_int(n, "n")
    d = n + 1 if d is None else _checks.positive_int(d, "d")
    if d < n + 1:
        raise ValueError(f"d must be at least n + 1 = {n + 1}, got {d}")
    rho = _rho(rho)
    X = np.zeros((n, d))
    X[:, 0] = math.sqrt(rho)
    X[:, 1:n + 1] = math.sqrt(1.0 - rho) * np.eye(n)
    return X


def equiangular_blocks(n: int, beta: float, rho: float) -> EquiangularBlocks:
    r"""Blocks of the Jacobian of self-attention at :math:`n` equiangular unit tokens.

    For :math:`f(X)_i = \sum_j P_{ij} x_j`, :math:`P_{ij} \propto e^{\beta\langle x_i,
    x_j\rangle}` (:math:`A = \beta I`, :math:`V = I`) at :math:`\theta_i = \sqrt\rho\, e_0 +
    \sqrt{1-\rho}\, u_i` (:math:`e_0, u_1, \dots, u_n` orthonormal, :math:`d = n + 1`), with
    :math:`c = a - b`, :math:`\kappa = 2\beta(1-\rho)`:

    .. math::

        M_{\rm triv} = \begin{pmatrix} 1 & 0 & 0\\ 0 & A_1 & (1 - A_1)/\sqrt{n-1}\\
        0 & \sqrt{n-1}\,B_1 & 1 - B_1\end{pmatrix},\quad
        A_1 = a + \kappa a(1-a),\ B_1 = b(1 - \kappa a),

        \lambda_{\rm sym} = c + \kappa b, \qquad \lambda_{\rm anti} = c,

    and the standard block of chapter 5 (Chen, Lin, Polyanskiy and Rigollet, 2025, for the
    configuration; the decomposition is derived in the book).

    Parameters
    ----------
    n : int
        Number of tokens, at least 4.
    beta : float
        Inverse temperature :math:`\beta \ge 0` (e.g. :math:`\gamma\log n`).
    rho : float
        Common inner product, in :math:`[0, 1)`.

    Returns
    -------
    EquiangularBlocks

    Raises
    ------
    ValueError
        If an argument is out of range.

    Examples
    --------
    >>> blocks = equiangular_blocks(10, 0.0, 0.5)
    >>> round(blocks.antisymmetric, 12)   # beta = 0: P = J/n, a = b
    0.0

    References
    ----------
    :cite:`chen2025critical,castin2024smooth`
    """
    n, beta, rho = _args(n, beta, rho)
    a, b = _weights(n, beta, rho)
    c = a - b
    one_minus_a = (n - 1) * b
    kap = 2.0 * beta * (1.0 - rho)
    r, s = math.sqrt(rho), math.sqrt(1.0 - rho)
    A1 = a + kap * a * one_minus_a
    B1 = b * (1.0 - kap * a)
    m = math.sqrt(n - 1.0)
    triv = np.array([[1.0, 0.0, 0.0], [0.0, A1, (1.0 - A1) / m], [0.0, m * B1, 1.0 - B1]])
    # standard block in the coordinates (x0, x1, x2, x3): alpha = x0 v, C = x1 diag(v)
    # + x2 (v 1^T - diag v) + x3 (1 v^T - diag v), v a unit vector orthogonal to 1
    M = np.zeros((4, 4))
    for j in range(4):
        x = np.zeros(4)
        x[j] = 1.0
        x0, x1, x2, x3 = x
        mu = beta * (r * x0 + s * (x2 + x3))
        nu = 2.0 * beta * s * (x1 - x2 - x3)
        col = x1 - x2 + (n - 1) * x3
        M[:, j] = [c * x0,
                   c * x1 + b * col + s * a * (mu * (1.0 - c) + nu * one_minus_a),
                   c * x2 - s * b * (mu * c + nu * a),
                   c * x3 + b * col + s * b * mu]
    G = np.eye(4)
    G[2:, 2:] = [[n - 1.0, -1.0], [-1.0, n - 1.0]]
    w, U = np.linalg.eigh(G)
    half = U @ np.diag(np.sqrt(w)) @ U.T
    inv_half = U @ np.diag(1.0 / np.sqrt(w)) @ U.T
    std = half @ M @ inv_half
    return EquiangularBlocks(triv, std, c + kap * b, c, a, b)


def equiangular_lipschitz(n: int, beta: float, rho: float) -> float:
    r"""Local Lipschitz constant :math:`\|D_\Theta f\|_2` at :math:`n` equiangular unit tokens.

    .. math::

        \|D_\Theta f\|_2 = \max\big(\|M_{\rm triv}\|_2, \|M_{\rm std}\|_2,
        |\lambda_{\rm sym}|, |\lambda_{\rm anti}|\big)

    for :math:`f` with :math:`A = \beta I`, :math:`V = I` in any dimension
    :math:`d \ge n + 1` (the blocks of :func:`equiangular_blocks`; directions orthogonal to
    every token only meet :math:`P`, of norm 1). :math:`O(1)` cost for any :math:`n`
    (Chen, Lin, Polyanskiy and Rigollet, 2025, for the scaling :math:`\beta = \gamma\log n`).

    Parameters
    ----------
    n, beta, rho
        As in :func:`equiangular_blocks`.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If an argument is out of range.

    Examples
    --------
    >>> round(equiangular_lipschitz(100, 0.0, 0.5), 12)  # uniform attention
    1.0

    References
    ----------
    :cite:`chen2025critical,castin2024smooth`
    """
    B = equiangular_blocks(n, beta, rho)
    return max(float(np.linalg.norm(B.trivial, 2)), float(np.linalg.norm(B.standard, 2)),
               float(abs(B.symmetric)), float(abs(B.antisymmetric)))


def equiangular_gradient_eta(n: int, beta: float, rho: float, d: int | None = None) -> float:
    r"""Normalised squared Frobenius norm of the Jacobian of the Pre-LN attention layer.

    .. math::

        \eta = \frac{1}{nd}\,\big\|D_X\big(\mathrm{ATT}\circ N\big)\big\|_F^2, \qquad
        N(x) = x/|x|,

    at :math:`n` equiangular tokens of norm one in dimension :math:`d \ge n + 1` (default
    :math:`n + 1`), the quantity of Chen, Lin, Polyanskiy and Rigollet (2025) for their
    layer with :math:`\alpha = 0`, :math:`q = 1`. The derivative of :math:`N` at a unit
    token is the projection on its tangent space, so
    :math:`\eta = \frac{1}{nd}\sum_b m_b \|M_b\Pi_b\|_F^2 + \frac{d-n-1}{nd}
    (1 + (n-1)(a-b)^2)`, a sum over the blocks of :func:`equiangular_blocks` with their
    multiplicities :math:`m_b`.

    Parameters
    ----------
    n, beta, rho
        As in :func:`equiangular_blocks`.
    d : int, optional
        Token dimension, at least :math:`n + 1`.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If an argument is out of range.

    Examples
    --------
    >>> eta = equiangular_gradient_eta(50, 1e3, 0.5)   # attention = identity
    >>> round(eta, 10) == round(50 * 50 / (50 * 51), 10)
    True

    References
    ----------
    :cite:`chen2025critical`
    """
    n, beta, rho = _args(n, beta, rho)
    d = n + 1 if d is None else _checks.positive_int(d, "d")
    if d < n + 1:
        raise ValueError(f"d must be at least n + 1 = {n + 1}, got {d}")
    B = equiangular_blocks(n, beta, rho)
    normal = np.zeros(3)
    normal[:2] = [math.sqrt(rho), math.sqrt(1.0 - rho)]  # <e_i, theta_i> in (x0, x1)

    def tangent_sq(M):
        w = np.zeros(M.shape[1])
        w[:2] = normal[:2]
        return float(np.sum(M**2) - np.sum((M @ w) ** 2))

    total = (tangent_sq(B.trivial) + (n - 1) * tangent_sq(B.standard)
             + n * (n - 3) / 2 * B.symmetric**2 + (n - 1) * (n - 2) / 2 * B.antisymmetric**2
             + (d - n - 1) * (1.0 + (n - 1) * (B.a - B.b) ** 2))
    return total / (n * d)


def softmax_jacobian_norm(p: ArrayLike) -> NDArray[np.float64]:
    r"""Spectral norm of the softmax Jacobian :math:`J(p) = \operatorname{diag}(p) - pp^\top`.

    .. math::

        \|J(p)\|_2 = \lambda_{\max}\big(\operatorname{diag}(p) - pp^\top\big)
        \in [p_{(2)}, p_{(1)}],

    the bracket by Cauchy interlacing (:math:`p_{(1)} \ge p_{(2)}` the two largest weights);
    Yudin, Gaponov, Kudriashov and Rakhuba (2025) give a closed form. Computed as the root of
    the secular equation :math:`\sum_j p_j^2/(p_j - \lambda) = 1` in that bracket, by
    bisection on every row of ``p`` (the last axis) at once.

    Parameters
    ----------
    p : array (..., m)
        Probability vectors (non-negative, summing to one along the last axis).

    Returns
    -------
    array (...)

    Raises
    ------
    ValueError
        If ``p`` is not an array of probability vectors.

    Examples
    --------
    >>> float(softmax_jacobian_norm([0.5, 0.5]))
    0.5

    References
    ----------
    :cite:`yudin2025attention`
    """
    p = _checks.real_array(p, "p")
    if p.ndim < 1 or p.shape[-1] < 1:
        raise ValueError("p must have at least one entry along its last axis")
    if not np.all(np.isfinite(p)) or np.any(p < 0) or \
            np.any(np.abs(p.sum(axis=-1) - 1.0) > _checks.WEIGHT_SUM_TOL):
        raise ValueError("p must hold probability vectors along its last axis")
    # the top eigenvalue solves sum_j p_j^2/(p_j - lam) = 1 in [p_(2), p_(1)] (the secular
    # equation of a rank-one update); bisection, vectorised over the rows
    rows = p.reshape(-1, p.shape[-1])
    top = np.sort(rows, axis=1)[:, ::-1]
    hi = top[:, 0].copy()
    lo = top[:, 1].copy() if rows.shape[1] > 1 else np.zeros(rows.shape[0])
    live = hi - lo > 0
    for _ in range(200):
        if not np.any(live):
            break
        mid = 0.5 * (lo + hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.sum(rows[live] ** 2 / (rows[live] - mid[live, None]), axis=1)
        up = g >= 1.0  # g increases on (p_(2), p_(1)): the root lies below mid
        hi[live] = np.where(up, mid[live], hi[live])
        lo[live] = np.where(up, lo[live], mid[live])
        live &= hi - lo > 4 * np.finfo(float).eps * np.maximum(hi, 1e-300)
    return (0.5 * (lo + hi)).reshape(p.shape[:-1])


def _cov_norm(P, Z):
    """Spectral norms of the covariances of the rows of Z (H, n, r) under each row of P."""
    H, n, r = Z.shape
    m = P @ Z                                              # (H, n, r) means
    outer = (Z[..., :, None] * Z[..., None, :]).reshape(H, n, r * r)
    second = (P @ outer).reshape(H, n, r, r)
    cov = second - m[..., :, None] * m[..., None, :]
    return np.maximum(np.linalg.eigvalsh(cov)[..., -1], 0.0)


def map_dependent_bound(X: ArrayLike, Q: ArrayLike, K: ArrayLike, V_out: ArrayLike,
                        V_in: ArrayLike, query_bias: ArrayLike | None = None
                        ) -> float:
    r"""An upper bound on :math:`\|D_X g\|_2` that depends on the attention map.

    For :math:`g(X)_i = \sum_h V_{out,h} \sum_j P^h_{ij} V_{in,h} x_j`, logits
    :math:`\langle Q_h x_i + c_h, K_h x_j\rangle`, with :math:`J_i = J(p^h_i)`,
    :math:`\sigma^V_i`, :math:`\sigma^K_i` the square roots of the spectral norms of the
    covariances of :math:`V_{in,h}x_j` and :math:`K_h x_j` under :math:`p^h_i`, and
    :math:`q_i = Q_h x_i + c_h`:

    .. math::

        \|D_X g\|_2 \le \sum_h \|V_{out,h}\|_2\Big(\|V_{in,h}\|_2\|P^h\|_2
        + \|Q_h\|_2\max_i \sigma^V_i\sigma^K_i
        + \|K_h\|_2\Big(\sum_i (\sigma^V_i)^2\,\|J_i\|_2\,|q_i|^2\Big)^{1/2}\Big)

    (derived in chapter 5; :math:`\|J_i\|_2` is the softmax Jacobian norm of Yudin, Gaponov,
    Kudriashov and Rakhuba, 2025). The last term is the only one that can grow like
    :math:`\sqrt n`, and it is weighted by the attention rows.

    Parameters
    ----------
    X : array (n, d)
        Tokens.
    Q, K : arrays (H, k, d)
        Query and key factors.
    V_out : array (H, p, r)
    V_in : array (H, r, d)
    query_bias : array (H, k), optional
        The :math:`c_h` added to every query (zero by default).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If shapes do not match or values are not finite.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(6, 3))
    >>> I = np.eye(3)[None]
    >>> map_dependent_bound(X, I, I, I, I) > 1.0
    True

    References
    ----------
    :cite:`yudin2025attention,castin2024smooth`
    """
    X = _checks.points(X, "X")
    n, d = X.shape
    Q = _checks.real_array(Q, "Q")
    K = _checks.real_array(K, "K")
    V_out = _checks.real_array(V_out, "V_out")
    V_in = _checks.real_array(V_in, "V_in")
    if Q.ndim != 3 or Q.shape[2] != d or K.shape != Q.shape:
        raise ValueError(f"Q and K must both have shape (H, k, {d}), got {Q.shape}, {K.shape}")
    H = Q.shape[0]
    if V_in.ndim != 3 or V_in.shape[0] != H or V_in.shape[2] != d:
        raise ValueError(f"V_in must have shape ({H}, r, {d}), got {V_in.shape}")
    if V_out.ndim != 3 or V_out.shape[0] != H or V_out.shape[2] != V_in.shape[1]:
        raise ValueError(f"V_out must have shape ({H}, p, {V_in.shape[1]}), got {V_out.shape}")
    b = np.zeros(Q.shape[:2]) if query_bias is None else _checks.real_array(query_bias,
                                                                          "query_bias")
    if b.shape != Q.shape[:2]:
        raise ValueError(f"query_bias must have shape {Q.shape[:2]}, got {b.shape}")
    for name, M in (("Q", Q), ("K", K), ("V_out", V_out), ("V_in", V_in), ("query_bias", b)):
        if not np.all(np.isfinite(M)):
            raise ValueError(f"{name} contains non-finite values")
    q = np.einsum("hkd,nd->hnk", Q, X) + b[:, None, :]
    k = np.einsum("hkd,nd->hnk", K, X)
    v = np.einsum("hrd,nd->hnr", V_in, X)
    S = q @ k.transpose(0, 2, 1)
    S -= S.max(axis=2, keepdims=True)
    P = np.exp(S)
    P /= P.sum(axis=2, keepdims=True)
    sv, sk = np.sqrt(_cov_norm(P, v)), np.sqrt(_cov_norm(P, k))
    jn = softmax_jacobian_norm(P)
    norm2 = np.linalg.norm
    total = 0.0
    for h in range(H):
        lead = norm2(V_in[h], 2) * norm2(P[h], 2)
        keys = norm2(Q[h], 2) * float(np.max(sv[h] * sk[h]))
        rows = norm2(K[h], 2) * math.sqrt(float(np.sum(sv[h] ** 2 * jn[h]
                                                      * np.sum(q[h] ** 2, axis=1))))
        total += norm2(V_out[h], 2) * (lead + keys + rows)
    return float(total)


def long_context_tokens(n: int, d: int, rho: float,
                        rng: np.random.Generator) -> NDArray[np.float64]:
    r"""Random unit tokens with pairwise inner products close to :math:`\rho`.

    .. math::

        \theta_i = \frac{\sqrt\rho\, z_0 + \sqrt{1-\rho}\, z_i}
                         {|\sqrt\rho\, z_0 + \sqrt{1-\rho}\, z_i|},
        \qquad z_0, z_1, \dots, z_n \sim N(0, I_d) \text{ independent},

    the almost-simplex inputs of the experiments of Chen, Lin, Polyanskiy and Rigollet (2025):
    :math:`\langle\theta_i, \theta_j\rangle \to \rho` as :math:`d \to \infty`.

    Parameters
    ----------
    n, d : int
        Number of tokens and dimension.
    rho : float
        Target inner product, in :math:`[0, 1)`.
    rng : numpy.random.Generator

    Returns
    -------
    array (n, d)

    Raises
    ------
    ValueError
        If an argument is out of range.

    Examples
    --------
    >>> X = long_context_tokens(5, 3, 0.5, np.random.default_rng(0))
    >>> bool(np.allclose(np.linalg.norm(X, axis=1), 1.0))
    True

    References
    ----------
    :cite:`chen2025critical`
    """
    n = _checks.positive_int(n, "n")
    d = _checks.positive_int(d, "d")
    rho = _rho(rho)
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")
    Z = rng.standard_normal((n + 1, d))
    X = math.sqrt(rho) * Z[0] + math.sqrt(1.0 - rho) * Z[1:]
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def pre_ln_eta(X: ArrayLike, beta: float, probes: int,
               rng: np.random.Generator) -> tuple[float, float]:
    r"""Hutchinson estimate of :math:`\eta = \|D_X(\mathrm{ATT}\circ N)\|_F^2/(nd)` at unit tokens.

    .. math::

        \eta = \frac{1}{nd}\,\mathbb{E}\,\big|D_\Theta f(\Pi Z)\big|^2, \qquad
        (\Pi Z)_i = z_i - \langle z_i, \theta_i\rangle\theta_i,\ Z \sim N(0, I),

    for :math:`f` with :math:`A = \beta I`, :math:`V = I` (the quantity of Chen, Lin,
    Polyanskiy and Rigollet, 2025, with :math:`q = 1`), averaged over ``probes`` Gaussian
    directions with :func:`transformer_pde.lipschitz.jvp`.

    Parameters
    ----------
    X : array (n, d)
        Unit tokens.
    beta : float
        Inverse temperature, :math:`\ge 0`.
    probes : int
        Number of Gaussian directions, at least 2.
    rng : numpy.random.Generator

    Returns
    -------
    (float, float)
        The estimate and its standard error (sample standard deviation over the probes
        divided by :math:`\sqrt{\text{probes}}`).

    Raises
    ------
    ValueError
        If the tokens are not of unit norm or an argument is out of range.

    Examples
    --------
    >>> X = np.eye(4)[:3]
    >>> eta, se = pre_ln_eta(X, 50.0, 4, np.random.default_rng(0))
    >>> 0.5 < eta < 1.0
    True

    References
    ----------
    :cite:`chen2025critical`
    """
    X = _checks.points(X, "X")
    if not np.allclose(np.linalg.norm(X, axis=1), 1.0, rtol=0, atol=1e-12):
        raise ValueError("X must hold unit tokens (rows of norm 1)")
    beta = _checks.nonnegative_float(beta, "beta")
    probes = _checks.positive_int(probes, "probes")
    if probes < 2:
        raise ValueError(f"probes must be at least 2, got {probes}")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")
    n, d = X.shape
    A, V = beta * np.eye(d), np.eye(d)
    vals = np.empty(probes)
    for t in range(probes):
        Z = rng.standard_normal((n, d))
        Z -= np.sum(Z * X, axis=1, keepdims=True) * X
        vals[t] = np.sum(lipschitz.jvp(X, A, V, Z) ** 2) / (n * d)
    return float(vals.mean()), float(vals.std(ddof=1) / math.sqrt(probes))


def pretrained_map_bound(model: MiniLM, layer: int, X: ArrayLike, *,
                         query_bias: bool = True) -> float:
    r"""The bound of :func:`map_dependent_bound` for an attention layer of the MiniLM model.

    .. math::

        \mathrm{Lip}_X(g) \le \sum_h \|V_{out,h}\|_2\Big(\|V_{in,h}\|_2 \|P^h\|_2
        + \|Q_h\|_2 \max_i \sigma^V_i \sigma^K_i
        + \|K_h\|_2 \Big(\sum_i (\sigma^V_i)^2 \|J(p^h_i)\|_2 |q_i|^2\Big)^{1/2}\Big)

    with the factors of :func:`transformer_pde.pretrained.attention_head_factors` and, when
    ``query_bias`` is true, the query bias :math:`b_Q^h / d_k^{1/4}` added to every query
    (the map :math:`g` of :func:`transformer_pde.pretrained.attention_lipschitz`; without it,
    the theory's map :math:`f`). Castin, Ablin and Peyré (2024) for the map, Yudin, Gaponov,
    Kudriashov and Rakhuba (2025) for the role of :math:`\|J(p)\|_2`.

    Parameters
    ----------
    model : transformer_pde.pretrained.MiniLM
    layer : int
    X : array (n, d)
        Hidden states entering the layer.
    query_bias : bool

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``X`` or ``layer`` is invalid.

    Examples
    --------
    >>> from transformer_pde import pretrained
    >>> model = pretrained.load_minilm()
    >>> X = pretrained.embed(model, [101, 2023, 2003, 102])
    >>> pretrained_map_bound(model, 0, X) > 1.0
    True

    References
    ----------
    :cite:`castin2024smooth,yudin2025attention`
    """
    from . import pretrained
    query_bias = _checks.flag(query_bias, "query_bias")
    (Q, K), (V_out, V_in) = pretrained.attention_head_factors(model, layer)
    H, k, _ = Q.shape
    bias = None
    if query_bias:
        bias = np.asarray(model.layers[int(layer)]["bq"], dtype=np.float64).reshape(H, k)
        bias = bias * k ** -0.25
    return map_dependent_bound(X, Q, K, V_out, V_in, bias)
