r"""Local Lipschitz constants of softmax self-attention, and the published bounds.

Self-attention with key-query matrix :math:`A = K^\top Q` and value matrix :math:`V` is

.. math::

    f(X)_i = \sum_{j} P_{ij} V x_j, \qquad
    P_{ij} = \frac{w_j e^{\langle A x_i, x_j\rangle}}{\sum_k w_k e^{\langle A x_i, x_k\rangle}},

on :math:`(\mathbb{R}^d)^n` with the norm :math:`\|X\|^2 = \sum_i |x_i|^2` (uniform weights
:math:`w_j = 1/n` by default; ``causal=True`` restricts query ``i`` to the tokens
:math:`j \le i`). Its local Lipschitz constant is :math:`\mathrm{Lip}_X(f) = \|D_X f\|_2`
(Castin, Ablin and Peyré, *How smooth is attention?*, ICML 2024).

The Jacobian is never formed. With :math:`S_{ij} = \langle A x_i, x_j\rangle`, a direction
:math:`E = (e_1, \dots, e_n)` gives

.. math::

    \dot S_{ij} = \langle A e_i, x_j\rangle + \langle A x_i, e_j\rangle, \qquad
    \dot P = P \odot \dot S - \big((P \odot \dot S)\mathbf 1\big) \odot P, \qquad
    D_X f(E) = (P E + \dot P X) V^\top,

and the transpose :math:`D_X f^\top(G)` is obtained by reverse-mode differentiation of the
same matrix products (see :func:`vjp`). Both cost :math:`O(n^2 d + n d^2)` and
:math:`O(n^2)` memory per head.

**Heads in factored form.** Every function accepts ``A`` either as a ``(d, d)`` array or as
a pair ``(Q, K)`` of ``(k, d)`` arrays with :math:`A = K^\top Q`, and ``V`` either as a
``(p, d)`` array or as a pair ``(V_out, V_in)`` of shapes ``(p, r)`` and ``(r, d)`` with
:math:`V = V_{out} V_{in}`. Multi-head functions take stacks with a leading head axis
``H``. Real Transformers have :math:`k = r = d/H`, and the factored form makes a head
:math:`H` times cheaper; it also lets :func:`local_lipschitz` work exactly in the
:math:`\le 3k`-dimensional input subspace a single head actually sees.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.sparse.linalg import LinearOperator, eigsh

from . import _checks, _lanczos
from ._kernels import softmax_matrix_of_factors

__all__ = [
    "jvp",
    "vjp",
    "jvp_multihead",
    "vjp_multihead",
    "jacobian_matrix",
    "jacobian_matrix_multihead",
    "local_lipschitz",
    "local_lipschitz_multihead",
    "LipschitzResult",
    "released_code_estimator",
    "released_code_estimator_multihead",
    "theorem1_upper_bound",
    "theorem1_lower_bound",
    "lower_bound_gamma",
    "adversarial_configuration",
    "adversarial_lower_bound",
    "geshkovski_upper_bound",
    "hardmax_indices",
    "hardmax_jvp",
    "hardmax_jacobian_norm",
]


# --------------------------------------------------------------------------------------
# Jacobian-vector products
# --------------------------------------------------------------------------------------

def jvp(X: ArrayLike, A: ArrayLike, V: ArrayLike, E: ArrayLike, *, causal: bool = False,
        weights: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""Jacobian-vector product :math:`D_X f(E)` of softmax self-attention.

    .. math::

        D_X f(E)_i = \sum_j P_{ij} V e_j + \sum_j \dot P_{ij} V x_j, \qquad
        \dot P_{ij} = P_{ij}\Big(\dot S_{ij} - \sum_k P_{ik} \dot S_{ik}\Big), \quad
        \dot S_{ij} = \langle A e_i, x_j\rangle + \langle A x_i, e_j\rangle,

    for :math:`f(X)_i = \sum_j P_{ij} V x_j` (Castin, Ablin and Peyré, 2024), evaluated as
    matrix products in :math:`O(n^2 d + n d^2)` time and :math:`O(n^2)` memory.

    Parameters
    ----------
    X : array (n, d)
        Tokens.
    A : array (d, d) or pair (Q, K) of arrays (k, d)
        Key-query matrix, :math:`A = K^\top Q` in factored form.
    V : array (p, d) or pair (V_out, V_in) of arrays (p, r), (r, d)
        Value matrix, :math:`V = V_{out} V_{in}` in factored form.
    E : array (n, d)
        Direction (a perturbation of every token).
    causal : bool
        Masked self-attention :math:`f^m(X)_i = f(x_1, \dots, x_i)_i`.
    weights : array (n,), optional
        Token weights of the attention (a probability vector; uniform by default).

    Returns
    -------
    array (n, p)

    Raises
    ------
    ValueError
        If an array has the wrong shape, complex or non-finite entries, the weights are not a
        probability vector, or ``causal`` is not a bool.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X, A, V, E = (rng.standard_normal(shape) for shape in [(4, 2), (2, 2), (2, 2), (4, 2)])
    >>> from transformer_pde import attention
    >>> h = 1e-6  # central difference of the layer, error O(h^2)
    >>> fd = (attention.softmax(X + h * E, A, V) - attention.softmax(X - h * E, A, V)) / (2 * h)
    >>> bool(np.allclose(jvp(X, A, V, E), fd, atol=1e-6))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    X, lin = _prepare(X, A, V, causal, weights, multi=False)
    return _apply_jvp(lin, _check_direction(E, X.shape, "E"))


def vjp(X: ArrayLike, A: ArrayLike, V: ArrayLike, G: ArrayLike, *, causal: bool = False,
        weights: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""Transposed Jacobian product :math:`(D_X f)^\top G` of softmax self-attention.

    With :math:`\bar g_i = V^\top g_i`, :math:`\bar S_{ij} = P_{ij}\big(\langle \bar g_i,
    x_j\rangle - \sum_k P_{ik}\langle \bar g_i, x_k\rangle\big)`,

    .. math::

        (D_X f)^\top(G)_j = \sum_i P_{ij} \bar g_i + \sum_i \bar S_{ji} A^\top x_i
                           + \sum_i \bar S_{ij} A x_i,

    the reverse-mode derivative of :math:`f(X)_i = \sum_j P_{ij} V x_j` (Castin, Ablin and
    Peyré, 2024). Same arguments as :func:`jvp`, with ``G`` of shape ``(n, p)`` (a
    cotangent on the output); returns an array ``(n, d)``. Satisfies
    :math:`\langle D_X f(E), G\rangle = \langle E, (D_X f)^\top G\rangle`.

    Parameters
    ----------
    X, A, V, causal, weights
        As in :func:`jvp`.
    G : array (n, p)
        Cotangent on the output.

    Returns
    -------
    array (n, d)

    Raises
    ------
    ValueError
        If an array has the wrong shape, complex or non-finite entries, the weights are not a
        probability vector, or ``causal`` is not a bool.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X, A, V, E = (rng.standard_normal(shape) for shape in [(4, 2), (2, 2), (2, 2), (4, 2)])
    >>> G = rng.standard_normal((4, 2))
    >>> bool(np.isclose(np.sum(jvp(X, A, V, E) * G), np.sum(E * vjp(X, A, V, G))))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    X, lin = _prepare(X, A, V, causal, weights, multi=False)
    p = lin.Vcat.shape[1]
    return _apply_vjp(lin, _check_direction(G, (X.shape[0], p), "G"))


def jvp_multihead(X: ArrayLike, As: ArrayLike, Vs: ArrayLike, E: ArrayLike, *, causal: bool = False,
                  weights: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""Jacobian-vector product of multi-head attention :math:`f = \sum_h f^{(h)}`.

    .. math::

        D_X f(E) = \sum_{h=1}^H D_X f^{(h)}(E),

    with head ``h`` the softmax self-attention of :func:`jvp` with ``(As[h], Vs[h])`` and
    the output projection folded into ``Vs[h]`` (Castin, Ablin and Peyré, 2024). ``As`` is
    an array ``(H, d, d)`` or a pair ``(Q, K)`` of arrays ``(H, k, d)``; ``Vs`` an array
    ``(H, p, d)`` or a pair ``(V_out, V_in)`` of arrays ``(H, p, r)``, ``(H, r, d)``.

    Parameters
    ----------
    X : array (n, d)
        Tokens.
    As : array (H, d, d) or pair (Q, K) of arrays (H, k, d)
        Key-query matrices of the heads.
    Vs : array (H, p, d) or pair (V_out, V_in) of arrays (H, p, r), (H, r, d)
        Value matrices of the heads, output projections folded in.
    E : array (n, d)
        Direction.
    causal, weights
        As in :func:`jvp`.

    Returns
    -------
    array (n, p)

    Raises
    ------
    ValueError
        If an array has the wrong shape, complex or non-finite entries, the weights are not a
        probability vector, or ``causal`` is not a bool.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> X, E = rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    >>> As, Vs = rng.standard_normal((2, 2, 2)), rng.standard_normal((2, 2, 2))
    >>> heads = jvp(X, As[0], Vs[0], E) + jvp(X, As[1], Vs[1], E)
    >>> bool(np.allclose(jvp_multihead(X, As, Vs, E), heads))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    X, lin = _prepare(X, As, Vs, causal, weights, multi=True)
    return _apply_jvp(lin, _check_direction(E, X.shape, "E"))


def vjp_multihead(X: ArrayLike, As: ArrayLike, Vs: ArrayLike, G: ArrayLike, *, causal: bool = False,
                  weights: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""Transposed Jacobian product :math:`\sum_h (D_X f^{(h)})^\top G` of multi-head attention.

    Arguments as in :func:`jvp_multihead`; ``G`` has shape ``(n, p)``.

    Parameters
    ----------
    X, As, Vs, causal, weights
        As in :func:`jvp_multihead`.
    G : array (n, p)
        Cotangent on the output.

    Returns
    -------
    array (n, d)

    Raises
    ------
    ValueError
        If an array has the wrong shape, complex or non-finite entries, the weights are not a
        probability vector, or ``causal`` is not a bool.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> X, E = rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    >>> As, Vs = rng.standard_normal((2, 2, 2)), rng.standard_normal((2, 2, 2))
    >>> G = rng.standard_normal((4, 2))
    >>> lhs = np.sum(jvp_multihead(X, As, Vs, E) * G)
    >>> bool(np.isclose(lhs, np.sum(E * vjp_multihead(X, As, Vs, G))))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    X, lin = _prepare(X, As, Vs, causal, weights, multi=True)
    p = lin.Vcat.shape[1]
    return _apply_vjp(lin, _check_direction(G, (X.shape[0], p), "G"))


def jacobian_matrix(X: ArrayLike, A: ArrayLike, V: ArrayLike, *, causal: bool = False,
                    weights: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""The dense Jacobian :math:`D_X f` as an ``(n p, n d)`` matrix (row-major tokens).

    Built column by column from :func:`jvp`; :math:`O(n^3 d^2)` time and :math:`O(n^2 d p)`
    memory, for checks on small cases only.

    Parameters
    ----------
    X, A, V, causal, weights
        As in :func:`jvp`.

    Returns
    -------
    array (n p, n d)
        ``J @ E.ravel() == jvp(X, A, V, E).ravel()``.

    Raises
    ------
    ValueError
        If an array has the wrong shape, complex or non-finite entries, the weights are not a
        probability vector, or ``causal`` is not a bool.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X, A, V, E = (rng.standard_normal(shape) for shape in [(4, 2), (2, 2), (2, 2), (4, 2)])
    >>> J = jacobian_matrix(X, A, V)
    >>> J.shape, bool(np.allclose(J @ E.ravel(), jvp(X, A, V, E).ravel()))
    ((8, 8), True)

    References
    ----------
    :cite:`castin2024smooth`
    """
    X, lin = _prepare(X, A, V, causal, weights, multi=False)
    return _dense(lin, *X.shape)


def jacobian_matrix_multihead(X: ArrayLike, As: ArrayLike, Vs: ArrayLike, *, causal: bool = False,
                              weights: ArrayLike | None = None) -> NDArray[np.float64]:
    """Dense Jacobian of multi-head attention (see :func:`jacobian_matrix`).

    Parameters
    ----------
    X, As, Vs, causal, weights
        As in :func:`jvp_multihead`.

    Returns
    -------
    array (n p, n d)

    Raises
    ------
    ValueError
        If an array has the wrong shape, complex or non-finite entries, the weights are not a
        probability vector, or ``causal`` is not a bool.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> X, E = rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    >>> As, Vs = rng.standard_normal((2, 2, 2)), rng.standard_normal((2, 2, 2))
    >>> J = jacobian_matrix_multihead(X, As, Vs)
    >>> bool(np.allclose(J, jacobian_matrix(X, As[0], Vs[0]) + jacobian_matrix(X, As[1], Vs[1])))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    X, lin = _prepare(X, As, Vs, causal, weights, multi=True)
    return _dense(lin, *X.shape)


# --------------------------------------------------------------------------------------
# local Lipschitz constant
# --------------------------------------------------------------------------------------

class LipschitzResult(NamedTuple):
    r"""Top singular triplet of :math:`D_X f`: ``value`` :math:`= \|D_X f\|_2`.

    ``right`` (n, d) is the unit direction of maximal change, ``left`` (n, p) the unit
    image direction (:math:`D_X f(\text{right}) = \text{value} \cdot \text{left}`),
    ``matvecs`` the number of products with :math:`(D_X f)^\top D_X f`.
    """

    value: float
    right: np.ndarray | None
    left: np.ndarray | None
    matvecs: int


def local_lipschitz(X: ArrayLike, A: ArrayLike, V: ArrayLike, *, causal: bool = False,
                    weights: ArrayLike | None = None, tol: float = 1e-6,
                    return_vectors: bool = False, v0: ArrayLike | None = None,
                    seed: int = 0, ncv: int = 10, maxiter: int | None = None,
                    method: str = "lanczos") -> float | LipschitzResult:
    r"""Local Lipschitz constant :math:`\mathrm{Lip}_X(f) = \|D_X f\|_2` of self-attention.

    .. math::

        \mathrm{Lip}_X(f) = \sup_{\|E\| = 1} \|D_X f(E)\|
                          = \lambda_{\max}\big((D_X f)^\top D_X f\big)^{1/2},

    with :math:`\|E\|^2 = \sum_i |e_i|^2` (Castin, Ablin and Peyré, 2024). The Jacobian is
    never formed: the normal operator :math:`N = (D_X f)^\top D_X f` is applied through the
    analytic products of :func:`jvp` and :func:`vjp`, with every quantity that depends only
    on ``X`` computed once, restricted exactly to the input subspace the heads use (see the
    module docstring). Tiny problems (dimension :math:`\le 64`) use a dense SVD.

    **Default** (``method="lanczos"``): Lanczos with full reorthogonalisation on :math:`N`,
    started from the sum of three unit vectors: the outer product of the top singular
    vectors of the attention matrix :math:`P` (over tokens) and of :math:`V` (over
    dimensions), the tokens :math:`X` themselves (the direction that scales every token and
    sharpens attention; for tokens in tight clusters of large norm, :math:`NX` is already
    close to the top direction), and a seeded random vector. When the tokens have a small rank
    :math:`r` (:math:`r(n + d) \le nd/2`, for instance the adversarial configurations of
    rank one), a dense head works in the exact factorisation :math:`X = UC`, which makes
    six of the eight :math:`n^2 d` products of :math:`N` cost :math:`(n^2 + nd) r`. From
    :math:`n \ge 128` tokens on, the first phase applies :math:`N` in float32 (half the cost
    per product) and a float64 phase restarted from its Ritz vector certifies the result:
    every returned value passes the float64 stopping test below. ``method="arpack"`` runs
    ARPACK (:func:`scipy.sparse.linalg.eigsh`, ``ncv`` vectors, which converges far beyond
    ``tol`` at the price of more products) on the same operator in float64.

    **Tokens that coincide** (at most half of them distinct, no mask, uniform weights, no
    ``v0``, the default method; e.g. the adversarial configurations): the Jacobian splits
    exactly into the Jacobian of the merged measure and the query Jacobians of the repeated
    tokens (see :class:`_MergedNormalOperator`), and Lanczos runs on that direct sum, whose
    products cost :math:`O(m^2 d)` for :math:`m` distinct tokens. Same stopping rule.

    Parameters
    ----------
    X, A, V, causal, weights
        As in :func:`jvp` (``A``, ``V`` dense or factored). With ``weights`` the attention is
        weighted but the norm on :math:`(\mathbb{R}^d)^n` stays :math:`\sum_i |e_i|^2`.
    tol : float
        Relative error of the returned constant: the value is within ``tol`` (relative) of
        :math:`\|D_X f\|_2`, and it is never above it (a Ritz value). Lanczos stops when the
        bound of Kato and Temple on the top eigenvalue, :math:`\min(\|r\|,
        \|r\|^2/(\theta - \theta_2))` with :math:`r` the Ritz residual, :math:`\theta`
        and :math:`\theta_2` the two largest Ritz values, is at most ``tol`` times
        :math:`\theta`; since :math:`\sigma = \lambda^{1/2}`, the constant is then within
        ``tol / 2`` (a factor 2 of margin for the gap, estimated by :math:`\theta_2`); it
        also stops when :math:`\|r\| \le` ``tol`` :math:`\theta` alone. With
        ``method="arpack"``, ``tol`` is ARPACK's: the Ritz residual is below ``tol`` times
        the Ritz value (the eigenvalue error is then typically far smaller). Like every
        Krylov method, a start vector exactly orthogonal to the top singular vector would
        miss it; the random component of the default start excludes that in practice.
        **Limitation:** the gap estimate :math:`\theta - \theta_2` is only an estimate
        (:math:`\theta_2` is a lower bound of :math:`\lambda_2`, not an upper one). When
        the two largest singular values are closer, relatively, than ``tol`` can resolve in
        a few products, the Krylov space may still hold only a mixture of their singular
        vectors when the test passes, and the value can then be low by about their
        distance (more when several are close). Tokens in tight clusters produce such
        near-equal pairs: over 773 random clustered configurations (n = 64 to 256, d = 2
        to 4) and three tolerances, 17 of 2319 calls were off by more than ``tol`` (by up
        to 8.6e-3), all with the two largest singular values within 0.9 % of each other
        (``benchmarks/lanczos_near_equal_pairs.py``); one at ``tol = 1e-10``, where the
        iteration stopped after 4 products on the second singular value, 3.7e-4 below the
        first, with a residual certifying that value as a singular value, not as the
        largest. The Performance appendix of the book shows one such input.
    return_vectors : bool
        Return a :class:`LipschitzResult` (value, top singular vectors, number of products)
        instead of the float (one more product, with :math:`D_X f`, for the left vector).
    v0 : array (n, d), optional
        Starting direction (warm start, e.g. the top direction of a nearby problem); used
        as given, without the structured start.
    seed : int
        Seed of the random part of the starting vector when ``v0`` is not given
        (deterministic): a non-negative integer (``None``, negative values and bools are
        refused with a ``ValueError``).
    ncv : int
        Number of Lanczos vectors of ARPACK (``method="arpack"`` only; the default method
        keeps up to 40 vectors, fewer when they would exceed 256 MiB, and restarts from the
        Ritz vector).
    maxiter : int, optional
        ``"lanczos"``: the most products with :math:`N` (default 2000), ``RuntimeError``
        beyond; ``"arpack"``: ARPACK's restart limit (ARPACK raises if not converged).
    method : {"lanczos", "arpack"}
        See above.

    Returns
    -------
    float or LipschitzResult
        :math:`\|D_X f\|_2`, or with ``return_vectors`` the :class:`LipschitzResult`.

    Raises
    ------
    ValueError
        On malformed input (shapes, complex or non-finite entries, weights, flags, ``tol``,
        ``seed``, ``method``).
    RuntimeError
        If Lanczos has not converged within ``maxiter`` products.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X, A, V, E = (rng.standard_normal(shape) for shape in [(4, 2), (2, 2), (2, 2), (4, 2)])
    >>> exact = np.linalg.norm(jacobian_matrix(X, A, V), 2)  # dense, small cases only
    >>> bool(np.isclose(local_lipschitz(X, A, V, tol=1e-10), exact, rtol=1e-8))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    return _local_lipschitz(X, A, V, causal, weights, False, tol, return_vectors, v0, seed, ncv,
                            maxiter, method)


def local_lipschitz_multihead(X: ArrayLike, As: ArrayLike, Vs: ArrayLike, *, causal: bool = False,
                              weights: ArrayLike | None = None, tol: float = 1e-6,
                              return_vectors: bool = False, v0: ArrayLike | None = None,
                              seed: int = 0, ncv: int = 10,
                              maxiter: int | None = None,
                              method: str = "lanczos") -> float | LipschitzResult:
    r"""Local Lipschitz constant :math:`\|D_X f\|_2` of multi-head attention :math:`\sum_h f^{(h)}`.

    Heads as in :func:`jvp_multihead`; method and options as in :func:`local_lipschitz`.

    Parameters
    ----------
    X, As, Vs, causal, weights
        As in :func:`jvp_multihead`.
    tol, return_vectors, v0, seed, ncv, maxiter, method
        As in :func:`local_lipschitz`.

    Returns
    -------
    float or LipschitzResult

    Raises
    ------
    ValueError
        On malformed input.
    RuntimeError
        If Lanczos has not converged within ``maxiter`` products.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> X, E = rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    >>> As, Vs = rng.standard_normal((2, 2, 2)), rng.standard_normal((2, 2, 2))
    >>> exact = np.linalg.norm(jacobian_matrix_multihead(X, As, Vs), 2)
    >>> bool(np.isclose(local_lipschitz_multihead(X, As, Vs, tol=1e-10), exact, rtol=1e-8))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    return _local_lipschitz(X, As, Vs, causal, weights, True, tol, return_vectors, v0, seed,
                            ncv, maxiter, method)


# --------------------------------------------------------------------------------------
# the estimator of the public code release
# --------------------------------------------------------------------------------------

def _released(lin, X):
    fX = (lin.P @ lin.vX).transpose(1, 0, 2).reshape(X.shape[0], -1) @ lin.Vcat
    return float(np.sqrt(np.linalg.norm(_apply_vjp(lin, fX))))


def released_code_estimator(X: ArrayLike, A: ArrayLike, V: ArrayLike, *, causal: bool = False,
                            weights: ArrayLike | None = None) -> float:
    r"""What the public code of Castin, Ablin and Peyré (2024) returns.

    .. math::

        \widehat L(X) = \big\| (D_X f)^\top f(X) \big\|^{1/2}.

    The released power iteration (``loc_lipschitz`` in vcastin/how-smooth-is-attention)
    takes ``torch.func.jvp(f, (X,), (u,))[0]``, which is the primal output :math:`f(X)`,
    not the tangent :math:`D_X f(u)`; applying the VJP to it gives
    :math:`(D_X f)^\top f(X)` whatever ``u`` is, so after one step the iteration stops at
    :math:`\mu = \|(D_X f)^\top f(X)\|` and returns :math:`\sqrt{\mu}`. This is **not** the
    local Lipschitz constant :math:`\|D_X f\|_2` (compare :func:`local_lipschitz`); it is
    provided, under this name, to show what the published real-data curves measure. By
    Cauchy-Schwarz it is at most :math:`(\|D_X f\|_2 \, \|f(X)\|)^{1/2}`.

    Parameters
    ----------
    X, A, V, causal, weights
        As in :func:`jvp`.

    Returns
    -------
    float
        :math:`\widehat L(X)`.

    Raises
    ------
    ValueError
        If an array has the wrong shape, complex or non-finite entries, the weights are not a
        probability vector, or ``causal`` is not a bool.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X, A, V = (rng.standard_normal(shape) for shape in [(4, 2), (2, 2), (2, 2)])
    >>> from transformer_pde import attention
    >>> F = attention.softmax(X, A, V)  # f(X)
    >>> est = released_code_estimator(X, A, V)
    >>> bool(np.isclose(est, np.linalg.norm(vjp(X, A, V, F)) ** 0.5))
    True
    >>> bool(est <= (local_lipschitz(X, A, V) * np.linalg.norm(F)) ** 0.5 * (1 + 1e-6))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    X, lin = _prepare(X, A, V, causal, weights, multi=False)
    return _released(lin, X)


def released_code_estimator_multihead(X: ArrayLike, As: ArrayLike, Vs: ArrayLike, *,
                                      causal: bool = False,
                                      weights: ArrayLike | None = None) -> float:
    r""":func:`released_code_estimator` for multi-head attention :math:`\sum_h f^{(h)}`.

    Parameters
    ----------
    X, As, Vs, causal, weights
        As in :func:`jvp_multihead`.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If an array has the wrong shape, complex or non-finite entries, the weights are not a
        probability vector, or ``causal`` is not a bool.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X, A, V = (rng.standard_normal(shape) for shape in [(4, 2), (2, 2), (2, 2)])
    >>> one = released_code_estimator_multihead(X, A[None], V[None])  # a single head
    >>> bool(np.isclose(one, released_code_estimator(X, A, V)))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    X, lin = _prepare(X, As, Vs, causal, weights, multi=True)
    return _released(lin, X)


# --------------------------------------------------------------------------------------
# published bounds and the adversarial configurations
# --------------------------------------------------------------------------------------

def _norm2(M: Any, name: str) -> float:
    M = _checks.matrix(M, name)
    return float(np.linalg.norm(M, 2))


def _nonneg(x: Any, name: str) -> NDArray[np.float64]:
    x = _checks.real_array(x, name)
    if not np.all(np.isfinite(x)) or np.any(x < 0):
        raise ValueError(f"{name} must be finite and non-negative")
    return x


def _token_counts(n: Any, minimum: int = 1) -> NDArray[np.float64]:
    n = np.asarray(n)
    if not np.issubdtype(n.dtype, np.integer) or np.any(n < minimum):
        raise ValueError(f"n must be integer(s) >= {minimum}, got {n!r}")
    return n.astype(np.float64)


def theorem1_upper_bound(A: ArrayLike, V: ArrayLike, R: ArrayLike,
                         n: ArrayLike) -> float | NDArray[np.float64]:
    r"""Theorem 1 of Castin, Ablin and Peyré (2024): for :math:`X \in B_R^n`,

    .. math::

        \mathrm{Lip}(f|_{B_R^n}) \le \sqrt 3 \, \|V\|_2
            \big(\|A\|_2^2 R^4 (4n + 1) + n\big)^{1/2},

    with :math:`B_R` the closed ball of radius ``R`` (every token :math:`|x_i| \le R`).
    ``R`` and ``n`` broadcast (arrays allowed).

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix.
    V : array (p, d)
        Value matrix.
    R : float or array
        Radius of the ball, non-negative.
    n : int or array of int
        Number of tokens, at least 1.

    Returns
    -------
    float or array
        The bound, broadcast over ``R`` and ``n``.

    Raises
    ------
    ValueError
        On a malformed matrix, negative ``R``, ``n < 1``, or a bound beyond float64.

    Examples
    --------
    >>> import numpy as np
    >>> I = np.eye(2)
    >>> bool(np.isclose(theorem1_upper_bound(I, I, 1.0, 2), np.sqrt(33.0)))  # sqrt(3 * 11)
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    a, v = _norm2(A, "A"), _norm2(V, "V")
    R = _nonneg(R, "R")
    n = _token_counts(n)
    with np.errstate(over="ignore"):
        bound = np.sqrt(3.0) * v * np.sqrt(a**2 * R**4 * (4 * n + 1) + n)
    return _finite_bound(bound, "R")


def geshkovski_upper_bound(A: ArrayLike, V: ArrayLike, R: ArrayLike
                           ) -> float | NDArray[np.float64]:
    r"""The :math:`n`-independent bound of Geshkovski et al. (2024), quoted by Castin et al. (2024).

    .. math::

        \mathrm{Lip}(f|_{B_R^n}) \le \|V\|_2 \,(1 + 3 \|A\|_2 R^2)\, e^{2 \|A\|_2 R^2}.

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix.
    V : array (p, d)
        Value matrix.
    R : float or array
        Radius of the ball, non-negative.

    Returns
    -------
    float or array
        The bound, for every ``R``.

    Raises
    ------
    ValueError
        On a malformed matrix, negative ``R``, or a bound beyond float64.

    Examples
    --------
    >>> import numpy as np
    >>> I = np.eye(2)
    >>> bool(np.isclose(geshkovski_upper_bound(I, I, 0.5), 1.75 * np.exp(0.5)))
    True

    References
    ----------
    :cite:`geshkovski2024dynamic,castin2024smooth`
    """
    a, v = _norm2(A, "A"), _norm2(V, "V")
    R = _nonneg(R, "R")
    with np.errstate(over="ignore"):
        bound = v * (1 + 3 * a * R**2) * np.exp(2 * a * R**2)
    return _finite_bound(bound, "R")


def _finite_bound(bound: ArrayLike, name: str) -> float | NDArray[np.float64]:
    """``bound`` (a float for a scalar, else an array) if every value is finite; a
    ``ValueError`` naming ``name`` when the bound exceeds the largest float64 (about 1.8e308)
    instead of an ``inf``."""
    arr = np.asarray(bound, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"the bound overflows float64 at this {name} (it exceeds 1.8e308)")
    return arr if arr.ndim else float(arr)


def theorem1_lower_bound(n: ArrayLike, R: ArrayLike, gamma: ArrayLike
                         ) -> float | NDArray[np.float64]:
    r"""Theorem 1's lower bound for :math:`V = I_d` (Castin, Ablin and Peyré, 2024):

    .. math::

        \mathrm{Lip}(f|_{B_R^n}) \ge \frac{\sqrt{n - 1}}{1 + (n - 1) e^{-2 R^2 \gamma}},

    with :math:`\gamma` from :func:`lower_bound_gamma`; attained as a lower bound of the
    local constant at :func:`adversarial_configuration`.

    Parameters
    ----------
    n : int or array of int
        Number of tokens, at least 2.
    R : float or array
        Radius of the ball, non-negative.
    gamma : float or array
        The constant :math:`\gamma \ge 0` of :func:`lower_bound_gamma`.

    Returns
    -------
    float or array
        The bound, broadcast over the arguments.

    Raises
    ------
    ValueError
        If ``n < 2`` or ``R`` or ``gamma`` is negative or not finite.

    Examples
    --------
    >>> import numpy as np
    >>> bool(np.isclose(theorem1_lower_bound(5, 1.0, 0.25), 2 / (1 + 4 * np.exp(-0.5))))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    n = _token_counts(n, minimum=2)
    R = _nonneg(R, "R")
    gamma = _nonneg(gamma, "gamma")
    return _finite_bound(np.sqrt(n - 1) / (1 + (n - 1) * np.exp(-2 * R**2 * gamma)), "R")


def _real_eigenpairs(A):
    vals, vecs = np.linalg.eig(A)
    real = np.abs(vals.imag) <= 1e-12 * max(1.0, np.abs(vals).max())
    return vals.real[real], vecs.real[:, real]


def lower_bound_gamma(A: ArrayLike) -> tuple[float, str, NDArray[np.float64]]:
    r"""The exponent :math:`\gamma = \max(\lambda_{\max}/8, -\lambda_{\min})` and its configuration.

    Over the real eigenvalues of ``A`` (``ValueError`` if there are none or ``d < 2``).
    Returns ``(gamma, kind, u)``: ``kind = "half"`` when :math:`\lambda_{\max}/8` wins (the
    configuration :math:`(Ru, Ru/2, \dots, Ru/2)`, :math:`Au = \lambda_{\max} u`), ``"opposite"``
    when :math:`-\lambda_{\min}` wins (:math:`(-Ru, Ru, \dots, Ru)`, :math:`Au = \lambda_{\min}u`);
    ``u`` is the unit eigenvector. This choice is the one of the public code of Castin,
    Ablin and Peyré (2024); that it yields Theorem 1's lower bound is derived in the chapter
    "How smooth is attention?" and checked numerically there.

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix, ``d >= 2``, with at least one real eigenvalue.

    Returns
    -------
    tuple (float, str, array (d,))
        ``(gamma, kind, u)``.

    Raises
    ------
    ValueError
        If ``A`` is malformed, ``d < 2``, or ``A`` has no real eigenvalue.

    Examples
    --------
    >>> import numpy as np
    >>> g, kind, u = lower_bound_gamma(np.diag([8.0, -0.5]))  # 8 / 8 = 1 > 0.5
    >>> round(g, 12), kind, bool(np.isclose(abs(u[0]), 1.0))
    (1.0, 'half', True)

    References
    ----------
    :cite:`castin2024smooth`
    """
    A = _checks.matrix(A, "A", square=True)
    if A.shape[0] < 2:
        raise ValueError("A: the adversarial configurations need d >= 2 (a direction "
                         "orthogonal to the eigenvector)")
    vals, vecs = _real_eigenpairs(A)
    if vals.size == 0:
        raise ValueError("A has no real eigenvalue: the adversarial configurations do not apply")
    i_max, i_min = int(np.argmax(vals)), int(np.argmin(vals))
    g_half, g_opp = vals[i_max] / 8, -vals[i_min]
    if g_half >= g_opp:
        gamma, kind, u = g_half, "half", vecs[:, i_max]
    else:
        gamma, kind, u = g_opp, "opposite", vecs[:, i_min]
    if gamma <= 0:
        raise ValueError("A has gamma <= 0 (only the zero eigenvalue is real): no adversarial "
                         "configuration")
    return float(gamma), kind, u / np.linalg.norm(u)


def adversarial_configuration(A: ArrayLike, n: int,
                              R: float) -> tuple[NDArray[np.float64], float]:
    r"""The lower-bound configuration of Theorem 1 in :math:`B_R^n` and its :math:`\gamma`.

    :math:`X = (Ru, Ru/2, \dots, Ru/2)` with :math:`Au = \lambda_{\max}u` when
    :math:`\lambda_{\max}/8 \ge -\lambda_{\min}`, else :math:`X = (-Ru, Ru, \dots, Ru)` with
    :math:`Au = \lambda_{\min}u` (Castin, Ablin and Peyré, 2024, and their public code).
    Returns ``(X (n, d), gamma)``.

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix, as in :func:`lower_bound_gamma`.
    n : int
        Number of tokens, at least 2.
    R : float
        Radius of the ball, non-negative.

    Returns
    -------
    tuple (array (n, d), float)
        The configuration and :math:`\gamma`.

    Raises
    ------
    ValueError
        As :func:`lower_bound_gamma`, or on ``n < 2`` or a negative ``R``.

    Examples
    --------
    >>> import numpy as np
    >>> A = np.diag([8.0, -0.5])
    >>> X, g = adversarial_configuration(A, 4, 1.0)
    >>> bool(np.isclose(np.linalg.norm(X, axis=1).max(), 1.0))  # inside B_R
    True
    >>> bool(local_lipschitz(X, A, np.eye(2)) >= theorem1_lower_bound(4, 1.0, g))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    gamma, kind, u = lower_bound_gamma(A)
    n = _checks.positive_int(n, "n")
    R = float(_nonneg(R, "R"))
    X = np.tile(R * u, (n, 1))
    if kind == "half":
        X[1:] *= 0.5
    else:
        X[0] *= -1.0
    return X, gamma


def adversarial_lower_bound(n: ArrayLike, R: ArrayLike, gamma: ArrayLike
                            ) -> float | NDArray[np.float64]:
    r"""A sharper lower bound at :func:`adversarial_configuration`, for :math:`V = I` (derived).

    .. math::

        \mathrm{Lip}_X(f) \ge \sqrt{n-1}\; q\,\big(1 + 2\gamma R^2 (1 - q)\big), \qquad
        q = \frac{1}{1 + (n-1) e^{-2\gamma R^2}},

    obtained by moving the first token along :math:`u` (Theorem 1's bound
    :math:`\sqrt{n-1}\,q` moves it orthogonally to :math:`u`). :math:`q` is the attention
    every other token pays to the first one. At :math:`n - 1 = e^{2\gamma R^2}` it is
    :math:`\tfrac12 e^{\gamma R^2}(1 + \gamma R^2)`, the mean-field rate of Proposition 2.

    Parameters
    ----------
    n, R, gamma
        As in :func:`theorem1_lower_bound`.

    Returns
    -------
    float or array
        The bound, broadcast over the arguments; at least :func:`theorem1_lower_bound`.

    Raises
    ------
    ValueError
        If ``n < 2``, ``R`` or ``gamma`` is negative or not finite, or the bound exceeds
        float64.

    Examples
    --------
    >>> import numpy as np
    >>> g = np.log(2.0) / 2  # n - 1 = 2 = e^{2 gamma R^2} with R = 1
    >>> bool(np.isclose(adversarial_lower_bound(3, 1.0, g), 0.5 * np.sqrt(2.0) * (1 + g)))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    n = _token_counts(n, minimum=2)
    R = _nonneg(R, "R")
    gamma = _nonneg(gamma, "gamma")
    q = 1.0 / (1 + (n - 1) * np.exp(-2 * R**2 * gamma))
    return _finite_bound(np.sqrt(n - 1) * q * (1 + 2 * gamma * R**2 * (1 - q)), "R")


# --------------------------------------------------------------------------------------
# the large-radius (hardmax) limit
# --------------------------------------------------------------------------------------

def hardmax_indices(X: ArrayLike, A: ArrayLike, *, causal: bool = False) -> NDArray[np.int64]:
    r"""Hardmax indices :math:`m_i = \operatorname{argmax}_j \langle A x_i, x_j\rangle`.

    Over :math:`j \le i` when ``causal``.

    Parameters
    ----------
    X : array (n, d)
        Tokens.
    A : array (d, d)
        Key-query matrix.
    causal : bool
        Restrict row ``i`` to the tokens ``j <= i``.

    Returns
    -------
    array (n,) of int
        :math:`m_i` (the first index among ties).

    Raises
    ------
    ValueError
        On a malformed array or a non-bool ``causal``.

    Examples
    --------
    >>> import numpy as np
    >>> X, I = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]]), np.eye(2)
    >>> hardmax_indices(X, I).tolist(), hardmax_indices(X, I, causal=True).tolist()
    ([1, 1, 2], [0, 1, 2])

    References
    ----------
    :cite:`castin2024smooth`
    """
    X = _checks.points(X, "X")
    A = _checks.matrix(A, "A", shape=(X.shape[1], X.shape[1]))
    S = (X @ A.T) @ X.T
    if _checks.flag(causal, "causal"):
        S[np.triu_indices(X.shape[0], 1)] = -np.inf
    return np.argmax(S, axis=1)


def hardmax_jvp(X: ArrayLike, A: ArrayLike, V: ArrayLike, E: ArrayLike, *,
                causal: bool = False) -> NDArray[np.float64]:
    r"""The large-radius limit of the Jacobian (Castin, Ablin and Peyré, 2024):

    .. math::

        (D_{RX} f)(E) \xrightarrow[R \to \infty]{} (V e_{m_1}, \dots, V e_{m_n}),
        \qquad m_i = \operatorname{argmax}_j \langle A x_i, x_j\rangle .

    Parameters
    ----------
    X, A, V
        Tokens (n, d), key-query matrix (d, d), value matrix (p, d).
    E : array (n, d)
        Direction.
    causal : bool
        Masked attention.

    Returns
    -------
    array (n, p)
        Row ``i`` is :math:`V e_{m_i}`.

    Raises
    ------
    ValueError
        On a malformed array or a non-bool ``causal``.

    Examples
    --------
    >>> import numpy as np
    >>> X, I = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]]), np.eye(2)
    >>> E = np.arange(6.0).reshape(3, 2)
    >>> hardmax_jvp(X, I, I, E).tolist()  # m = (1, 1, 2): rows e_1, e_1, e_2
    [[2.0, 3.0], [2.0, 3.0], [4.0, 5.0]]
    >>> bool(np.allclose(jvp(30 * X, I, I, E), hardmax_jvp(X, I, I, E)))  # R = 30
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    X = _checks.points(X, "X")
    V = _checks.matrix(V, "V", cols=X.shape[1])
    E = _check_direction(E, X.shape, "E")
    return E[hardmax_indices(X, A, causal=causal)] @ V.T


def hardmax_jacobian_norm(X: ArrayLike, A: ArrayLike, V: ArrayLike, *,
                          causal: bool = False) -> float:
    r"""Norm of the hardmax map: :math:`\|V\|_2 \sqrt{\max_j \#\{i : m_i = j\}}`.

    The map is :math:`M \otimes V` with :math:`M_{ij} = 1_{j = m_i}`, and
    :math:`M^\top M = \operatorname{diag}(\#\{i: m_i = j\})`; it equals
    :math:`\|V\|_2 \sqrt n` when every token attends to the same one (Castin et al., 2024).

    Parameters
    ----------
    X, A, V
        Tokens (n, d), key-query matrix (d, d), value matrix (p, d).
    causal : bool
        Masked attention.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        On a malformed array or a non-bool ``causal``.

    Examples
    --------
    >>> import numpy as np
    >>> X, I = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]]), np.eye(2)
    >>> bool(np.isclose(hardmax_jacobian_norm(X, I, I), np.sqrt(2.0)))  # token 1 chosen twice
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    X = _checks.points(X, "X")
    V = _checks.matrix(V, "V", cols=X.shape[1])
    counts = np.bincount(hardmax_indices(X, A, causal=causal), minlength=X.shape[0])
    return float(np.linalg.norm(V, 2) * np.sqrt(counts.max()))


# --------------------------------------------------------------------------------------
# machinery: heads, the linearisation at X, the solvers' drivers (used above)
# --------------------------------------------------------------------------------------

class _Heads(NamedTuple):
    """Stacked factored heads; ``None`` stands for the identity (no product)."""

    Q: np.ndarray | None      # (H, k, d) : query side of A = K^T Q
    K: np.ndarray | None      # (H, k, d) or None (A = Q)
    V_in: np.ndarray | None   # (H, r, d) or None (V = V_out)
    V_out: np.ndarray         # (H, p, r)


def _heads(As, Vs, d, *, multi):
    """Validate ``A``/``V`` (dense or factored, single or stacked) into :class:`_Heads`."""
    ndim = 3 if multi else 2
    nameA, nameV = ("As", "Vs") if multi else ("A", "V")

    def arr(M, name):
        M = _checks.real_array(M, name)
        if M.ndim != ndim:
            raise ValueError(f"{name} must have {ndim} dimensions"
                             f"{' (H, ., .)' if multi else ''}, got shape {M.shape}")
        if M.size == 0:
            raise ValueError(f"{name} must not be empty, got shape {M.shape}")
        if not np.all(np.isfinite(M)):
            raise ValueError(f"{name} contains non-finite values (NaN or inf)")
        return M if multi else M[None]

    if isinstance(As, tuple):
        if len(As) != 2:
            raise ValueError(f"{nameA} given as a tuple must be the pair (Q, K)")
        Q, K = arr(As[0], f"{nameA}[0] (Q)"), arr(As[1], f"{nameA}[1] (K)")
        if Q.shape != K.shape or Q.shape[2] != d:
            raise ValueError(f"{nameA}: Q and K must have the same shape (., k, {d}), got "
                             f"{Q.shape[1:]} and {K.shape[1:]}")
    else:
        Q, K = arr(As, nameA), None
        if Q.shape[1:] != (d, d):
            raise ValueError(f"{nameA} must have shape {'(H, ' if multi else '('}{d}, {d}), "
                             f"got {np.shape(As)}")
    if isinstance(Vs, tuple):
        if len(Vs) != 2:
            raise ValueError(f"{nameV} given as a tuple must be the pair (V_out, V_in)")
        V_out, V_in = arr(Vs[0], f"{nameV}[0] (V_out)"), arr(Vs[1], f"{nameV}[1] (V_in)")
        if V_in.shape[2] != d or V_out.shape[2] != V_in.shape[1]:
            raise ValueError(f"{nameV}: V_out (., p, r) and V_in (., r, {d}) do not chain, got "
                             f"{V_out.shape[1:]} and {V_in.shape[1:]}")
    else:
        V_out, V_in = arr(Vs, nameV), None
        if V_out.shape[2] != d:
            raise ValueError(f"{nameV} must have {d} columns (the token dimension d), got "
                             f"shape {np.shape(Vs)}")
    if V_out.shape[0] != Q.shape[0] or (V_in is not None and V_in.shape[0] != Q.shape[0]):
        raise ValueError(f"{nameA} and {nameV} must have the same number of heads, got "
                         f"{Q.shape[0]} and {V_out.shape[0]}")
    return _Heads(Q, K, V_in, V_out)


def _project(Z, M):
    """``Z @ M_h^T`` for every head: (n, d) -> (H, n, k); identity when ``M`` is None."""
    if M is None:
        return Z[None]
    H, k, d = M.shape
    return (Z @ M.reshape(H * k, d).T).reshape(Z.shape[0], H, k).transpose(1, 0, 2)


def _unproject(Z, M):
    """``sum_h Z_h @ M_h``: (H, n, k) -> (n, d); the transpose of :func:`_project`."""
    if M is None:
        return Z.sum(axis=0)
    H, k, d = M.shape
    return Z.transpose(1, 0, 2).reshape(Z.shape[1], H * k) @ M.reshape(H * k, d)


class _Linearisation(NamedTuple):
    heads: _Heads
    qX: np.ndarray   # (H, n, k)
    kX: np.ndarray   # (H, n, k)
    vX: np.ndarray   # (H, n, r)
    P: np.ndarray    # (H, n, n)
    PvX: np.ndarray  # (H, n, r)
    Vcat: np.ndarray  # (H r, p): output = out_r (n, H r) @ Vcat


def _output_matrix(V_out):
    H, p, r = V_out.shape
    return V_out.transpose(0, 2, 1).reshape(H * r, p)


def _linearise(X, heads, causal, weights):
    H = heads.V_out.shape[0]
    qX = _project(X, heads.Q)
    kX = _project(X, heads.K)
    vX = _project(X, heads.V_in)
    if kX.shape[0] == 1 and H > 1:
        kX = np.broadcast_to(kX, (H,) + kX.shape[1:])
    if vX.shape[0] == 1 and H > 1:
        vX = np.broadcast_to(vX, (H,) + vX.shape[1:])
    # logits <Q x_i, K x_j> = <A x_i, x_j>, through softmax_matrix's log-sum-exp, weights
    # and causal mask
    Ps = [softmax_matrix_of_factors(qX[h], kX[h], weights, causal) for h in range(H)]
    P = Ps[0][None] if H == 1 else np.stack(Ps)  # one head: a view, not a copy
    return _Linearisation(heads, qX, kX, vX, P, P @ vX, _output_matrix(heads.V_out))


def _apply_jvp(lin, E, query_only=False):
    """:math:`D_X f(E)`; with ``query_only``, only the change through the queries
    (:math:`e_i` moves the query of row ``i``, the tokens attended to stay fixed)."""
    h = lin.heads
    dS = _project(E, h.Q) @ lin.kX.transpose(0, 2, 1)
    if not query_only:
        dS += lin.qX @ _project(E, h.K).transpose(0, 2, 1)
    W = lin.P * dS
    dP = W - W.sum(axis=2, keepdims=True) * lin.P
    out_r = dP @ lin.vX                                   # (H, n, r)
    if not query_only:
        out_r += lin.P @ _project(E, h.V_in)
    H, n, r = out_r.shape
    return out_r.transpose(1, 0, 2).reshape(n, H * r) @ lin.Vcat


def _apply_vjp(lin, G, query_only=False):
    """The transpose of :func:`_apply_jvp` (same ``query_only``)."""
    h = lin.heads
    H, n, r = lin.vX.shape
    g = (G @ lin.Vcat.T).reshape(n, H, r).transpose(1, 0, 2)        # (H, n, r)
    gP = g @ lin.vX.transpose(0, 2, 1)                             # (H, n, n)
    gS = lin.P * (gP - np.einsum("hnr,hnr->hn", g, lin.PvX)[:, :, None])
    grad = _unproject(gS @ lin.kX, h.Q)
    if not query_only:
        grad = grad + _unproject(lin.P.transpose(0, 2, 1) @ g, h.V_in)
        grad = grad + _unproject(gS.transpose(0, 2, 1) @ lin.qX, h.K)
    return grad


def _check_direction(E, shape, name):
    E = _checks.real_array(E, name)
    if E.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {E.shape}")
    if not np.all(np.isfinite(E)):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return E


def _prepare(X, As, Vs, causal, weights, multi):
    X = _checks.points(X, "X")
    heads = _heads(As, Vs, X.shape[1], multi=multi)
    return X, _linearise(X, heads, _checks.flag(causal, "causal"), weights)


def _dense(lin, n, d):
    """Dense Jacobian ``(n p, n d)`` from JVPs on the canonical basis (small sizes only)."""
    basis = np.eye(n * d)
    cols = [_apply_jvp(lin, basis[c].reshape(n, d)).ravel() for c in range(n * d)]
    return np.stack(cols, axis=1)


def _orth_rows(M):
    """Orthonormal basis (columns) of the row space of M, shape (d, rank)."""
    _, s, Vt = np.linalg.svd(M, full_matrices=False)
    rank = int(np.sum(s > s[0] * max(M.shape) * np.finfo(float).eps)) if s.size else 0
    return Vt[:rank].T


def _compressed(lin, d):
    r"""The same Jacobian on the subspaces it actually uses, and the input basis U.

    ``f`` depends on a direction ``E`` only through ``E Q_h^T``, ``E K_h^T``, ``E V_{in,h}^T``,
    so :math:`D_X f = D_X f \circ (I \otimes U U^\top)` with ``U`` an orthonormal basis of
    the row space of the stacked ``Q, K, V_in``; its image lies in the span of the output
    matrix, replaced by its triangular factor (same norms). Exact, not an approximation.
    """
    h = lin.heads
    U = None
    if h.Q is not None and h.K is not None and h.V_in is not None:
        stacked = np.concatenate([M.reshape(-1, d) for M in (h.Q, h.K, h.V_in)])
        if stacked.shape[0] < d:
            U = _orth_rows(stacked)
    Vcat = lin.Vcat
    if Vcat.shape[0] < Vcat.shape[1]:
        # (H r, H r): same row norms of products; numpy's stub gives qr(mode="r") the type
        # of the full factorisation (QRResult), but it returns the array R
        Vcat = np.linalg.qr(Vcat.T, mode="r").T  # type: ignore[attr-defined]
    if U is None:
        return lin._replace(Vcat=Vcat), None
    heads = h._replace(Q=h.Q @ U, K=h.K @ U, V_in=h.V_in @ U)
    return lin._replace(heads=heads, Vcat=Vcat), U


#: Coinciding tokens are merged when at most this fraction of the tokens are distinct.
_MERGE_MAX_DISTINCT = 0.5


def _coinciding_tokens(X):
    r"""``(Y, group, counts)``: the distinct rows ``Y`` (m, d) of ``X``, the row of ``Y`` each
    token equals, and how many tokens equal each; ``None`` unless
    :math:`m \le` ``_MERGE_MAX_DISTINCT`` :math:`n`. Tokens are grouped by their projection on
    a fixed random direction, in :math:`O(nd + n \log n)`; the grouping is kept only if every
    token then equals its group's first token exactly (else ``None``)."""
    n = X.shape[0]
    key = X @ np.random.default_rng(12345).standard_normal(X.shape[1])
    _, first, group, counts = np.unique(key, return_index=True, return_inverse=True,
                                        return_counts=True)
    if first.size > _MERGE_MAX_DISTINCT * n:
        return None
    Y = X[first]
    group = group.ravel()
    if not np.array_equal(X, Y[group]):
        return None
    return Y, group, counts


class _MergedNormalOperator:
    r"""The normal operator of :math:`D_X f` when tokens coincide, as a direct sum (derived).

    Let the ``n`` tokens take ``m`` distinct values :math:`y_g`, :math:`n_g` times each (uniform
    weights, no mask). A direction constant on every group (:math:`e_i = \bar e_g`) moves the
    atoms of the merged measure :math:`\mu = \sum_g \frac{n_g}{n}\delta_{y_g}`, so it acts
    through the Jacobian :math:`J_\mu` of the ``m``-token map with weights :math:`n_g / n`, and
    its image is constant on groups; with the norms :math:`\sum_g n_g |\bar e_g|^2` this is
    :math:`D^{1/2} J_\mu D^{-1/2}`, :math:`D = \mathrm{diag}(n_g)`. A direction summing to zero
    on every group leaves :math:`\mu` unchanged to first order (the attention weights are
    equal within a group), so only the queries move: :math:`D_X f(E)_i = C_{g(i)} e_i` with
    :math:`C_g = \nabla_y \Gamma_\mu(y_g)` (for one head, :math:`V\,\mathrm{Cov}_{P_g}\,A`),
    and the image sums to zero on every group. The two subspaces and their images are
    orthogonal, hence :math:`\|D_X f\|_2 = \max\big(\|D^{1/2} J_\mu D^{-1/2}\|_2,
    \max_{n_g \ge 2} \|C_g\|_2\big)`. This operator acts on ``[z (m, d_in), c (groups with
    n_g >= 2, d_in)]``: the first block by the scaled normal operator of :math:`J_\mu`, each
    row of the second by :math:`C_g^\top C_g`. A product costs :math:`O(m^2 d + m d^2)`
    instead of :math:`O(n^2 d + n d^2)`.
    """

    def __init__(self, lin, counts, d_in):
        self.lin = lin
        self.scale = np.sqrt(counts.astype(np.float64))[:, None]
        self.repeated = np.flatnonzero(counts >= 2)
        self.m = counts.size
        self.d_in = d_in
        self.count = 0

    def split(self, v):
        """``(Z (m, d_in), C (m, d_in))``: the merged direction and the query directions
        (zero for groups of a single token)."""
        m, d_in = self.m, self.d_in
        Z = v[:m * d_in].reshape(m, d_in)
        C = np.zeros((m, d_in))
        C[self.repeated] = v[m * d_in:].reshape(-1, d_in)
        return Z, C

    def __call__(self, v):
        self.count += 1
        Z, C = self.split(v)
        s = self.scale
        merged = _apply_vjp(self.lin, _apply_jvp(self.lin, Z / s) * s**2) / s
        query = _apply_vjp(self.lin, _apply_jvp(self.lin, C, query_only=True),
                           query_only=True)
        return np.concatenate([merged.ravel(), query[self.repeated].ravel()])


def _merged_top_singular(heads, merge, tol, seed, maxiter, vectors):
    """:func:`_top_singular` through :class:`_MergedNormalOperator` (tokens that coincide)."""
    Y, group, counts = merge
    n, d = group.size, Y.shape[1]
    lin = _linearise(Y, heads, False, counts / n)
    clin, U = _compressed(lin, d)
    d_in = d if U is None else U.shape[1]
    op = _MergedNormalOperator(clin, counts, d_in)
    dim = (op.m + op.repeated.size) * d_in
    if dim <= 64:
        N = np.column_stack([op(e) for e in np.eye(dim)])
        vals, vecs = np.linalg.eigh((N + N.T) / 2)
        lam, z = vals[-1], vecs[:, -1]  # op.count is dim: one product per column
    else:
        rnd = np.random.default_rng(seed).standard_normal(dim)
        start = rnd / np.linalg.norm(rnd)
        Y_in = (Y if U is None else Y @ U) * op.scale  # the tokens' scaling direction
        if np.any(Y_in):
            start[:Y_in.size] += Y_in.ravel() / np.linalg.norm(Y_in)
        max_products = _lanczos.product_budget(maxiter)
        lam, z, _, ok = _lanczos.lanczos(op, start, target=tol, max_basis=min(40, dim),
                                         max_products=max_products,
                                         min_steps=min(_lanczos.LANCZOS_MIN_STEPS, dim))
        if not ok:
            raise _lanczos.not_converged(tol, max_products)
    value = float(np.sqrt(max(lam, 0.0)))
    if not vectors:
        return LipschitzResult(value, None, None, op.count)
    Z, C = op.split(z)
    # the zero-sum pattern of a group: its first token against the others, unit norm
    first = np.zeros(n, dtype=bool)
    first[np.unique(group, return_index=True)[1]] = True
    size = counts[group].astype(np.float64)
    a = np.where(first, 1.0 - 1.0 / size, -1.0 / size)
    a /= np.sqrt(np.maximum(1.0 - 1.0 / size, 1e-300))
    a[size < 2] = 0.0
    right = Z[group] / op.scale[group] + a[:, None] * C[group]
    image = (_apply_jvp(clin, Z / op.scale)[group]
             + a[:, None] * _apply_jvp(clin, C, query_only=True)[group])
    if U is not None:
        right = right @ U.T
    norm = np.linalg.norm(right)
    right, image = right / norm, image / norm
    inorm = np.linalg.norm(image)
    return LipschitzResult(value, right, image / inorm if inorm > 0 else image, op.count)


def _top_singular(lin, X, *, tol, v0, seed, ncv, maxiter, method="lanczos", vectors=True):
    n, d = X.shape
    d_in = d
    clin, U = _compressed(lin, d)
    if U is not None:
        d_in = U.shape[1]
    dim = n * d_in
    count = [0]

    def normal(v):
        count[0] += 1
        Z = v.reshape(n, d_in)
        return _apply_vjp(clin, _apply_jvp(clin, Z)).ravel()

    if v0 is not None:
        v0 = _check_direction(v0, (n, d), "v0")
        v0 = (v0 @ U if U is not None else v0).ravel()
        if not np.any(v0):
            raise ValueError("v0 must be non-zero on the subspace the Jacobian uses")
    if dim <= 64:
        J = _dense(clin, n, d_in)
        _, s, Wt = np.linalg.svd(J)
        lam, z = s[0] ** 2, Wt[0]
        count[0] = dim
    elif method == "lanczos":
        X_in = X if U is None else X @ U
        lam, z, count[0] = _lanczos.lanczos_top(clin, n, d_in, tol=tol, v0=v0, seed=seed,
                                                X_in=X_in, maxiter=maxiter)
    else:
        if v0 is None:
            v0 = np.random.default_rng(seed).standard_normal(dim)
        op = LinearOperator((dim, dim), matvec=normal, dtype=np.float64)
        ncv_eff = min(dim - 1, max(ncv, 3))
        vals, vecs = eigsh(op, k=1, which="LA", tol=tol, v0=v0, ncv=ncv_eff, maxiter=maxiter)
        lam, z = float(vals[0]), vecs[:, 0]
    value = float(np.sqrt(max(lam, 0.0)))
    if not vectors:  # the value alone: no image product
        return LipschitzResult(value, None, None, count[0])
    right = z.reshape(n, d_in)
    if U is not None:
        right = right @ U.T
    right = right / np.linalg.norm(right)
    image = _apply_jvp(lin, right)
    norm = np.linalg.norm(image)
    left = image / norm if norm > 0 else image
    return LipschitzResult(value, right, left, count[0])


def _lipschitz_options(tol, seed, ncv, maxiter, method):
    tol = _checks.positive_float(tol, "tol")
    ncv = _checks.positive_int(ncv, "ncv")
    if maxiter is not None:
        maxiter = _checks.positive_int(maxiter, "maxiter")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if method not in ("lanczos", "arpack"):
        raise ValueError(f"method must be 'lanczos' or 'arpack', got {method!r}")
    return tol, seed, ncv, maxiter


def _local_lipschitz(X, As, Vs, causal, weights, multi, tol, return_vectors, v0, seed, ncv,
                     maxiter, method):
    tol, seed, ncv, maxiter = _lipschitz_options(tol, seed, ncv, maxiter, method)
    X = _checks.points(X, "X")
    heads = _heads(As, Vs, X.shape[1], multi=multi)
    causal = _checks.flag(causal, "causal")
    return_vectors = _checks.flag(return_vectors, "return_vectors")
    merge = None
    if not causal and weights is None and v0 is None and method == "lanczos":
        merge = _coinciding_tokens(X)
    if merge is not None:
        res = _merged_top_singular(heads, merge, tol, seed, maxiter, return_vectors)
    else:
        res = _top_singular(_linearise(X, heads, causal, weights), X, tol=tol, v0=v0,
                            seed=seed, ncv=ncv, maxiter=maxiter, method=method,
                            vectors=return_vectors)
    return res if return_vectors else res.value
