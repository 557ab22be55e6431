r"""Velocity fields :math:`\Gamma_\mu` of the attention variants.

A sequence of tokens is a weighted empirical measure :math:`\mu = \sum_j w_j \delta_{x_j}`:
an array ``X`` of shape ``(n, d)`` (tokens are rows) and optional ``weights`` of shape
``(n,)`` (default uniform, non-negative, summing to one). Every function returns the
velocity field evaluated at the tokens themselves (row ``i`` is :math:`\Gamma_\mu(x_i)`,
i.e. self-attention :math:`f(X)_i`) or, with ``queries=Y`` of shape ``(m, d)``, at other
points of :math:`\mathbb{R}^d`.

``causal=True`` is masked attention :math:`f^m(X)_i = f(x_1, \dots, x_i)_i`: query ``i``
attends to the tokens ``j <= i`` only, through the restriction of :math:`\mu` to them,
renormalised (for uniform weights, the uniform measure on the first ``i`` tokens).

Numerics: logits go through log-sum-exp (finite and correct at logits of size :math:`10^4`
and beyond), Sinkhorn runs in the log domain, and queries are processed in chunks so that
memory stays :math:`O(\text{chunk} \times n)` instead of :math:`O(n^2)`.
The kernels behind these formulas (the compiled exponential, fused rows, chunks of
queries and their threads) are in :mod:`._kernels`; a call uses as many threads as the CPUs
it may run on, at most NumPy's BLAS limit (see :func:`._kernels.thread_count`).

References: Vaswani et al. (2017) for softmax attention, Kim et al. (2021) for L2 attention,
Sander et al. (2022) for Sinkhorn attention, Ramapuram et al. (2025) for sigmoid attention;
the measure-theoretic formulation follows Castin, Ablin, Carrillo and Peyré (2025).
"""

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit

from . import _checks, _kernels

__all__ = [
    "softmax",
    "softmax_matrix",
    "l2",
    "l2_matrix",
    "sinkhorn",
    "sinkhorn_kernel",
    "sigmoid",
    "multihead",
]



def _setup(X, weights, queries, causal):
    """Validate the measure and the query points; return ``(X, w, Y, logw)``.

    ``logw`` is ``None`` for uniform weights (a constant shift of the logits cancels).
    """
    X = _checks.points(X, "X")
    n, d = X.shape
    w = _checks.weights(weights, n)
    causal = _checks.flag(causal, "causal")
    if queries is None:
        Y = X
    else:
        Y = _checks.points(queries, "queries")
        if Y.shape[1] != d:
            raise ValueError(f"queries must have d = {d} columns like X, got shape {Y.shape}")
        if causal and Y.shape[0] != n:
            raise ValueError("with causal=True, queries must have one row per token "
                             f"(query i attends to tokens j <= i), got {Y.shape[0]} rows "
                             f"for {n} tokens")
    return X, w, Y, _kernels.log_weights(weights, w)


def _inner_logits(AY, X):
    r"""Logits :math:`\langle A y_i, x_j\rangle`, a block of queries at a time, from the
    projected queries ``AY`` (row ``i`` is :math:`A y_i`)."""

    def block(start, stop, ncols, out=None):
        return np.matmul(AY[start:stop], X[:ncols].T, out=out)

    # logits = AY @ X.T, for the fused path (an attribute of the function: mypy cannot
    # declare it)
    block.factors = (AY, X.T)  # type: ignore[attr-defined]
    return block


def _l2_logits(QY, KX):
    r"""Logits :math:`-|Qy_i - Kx_j|^2` up to the row constant :math:`-|Qy_i|^2` (which
    cancels): :math:`2\langle Qy_i, Kx_j\rangle - |Kx_j|^2`."""
    sq = np.einsum("ij,ij->i", KX, KX)

    def block(start, stop, ncols, out=None):
        out = np.matmul(QY[start:stop], KX[:ncols].T, out=out)
        out *= 2.0
        out -= sq[:ncols]
        return out

    # the same logits as one product, for the fused path (a function attribute, see above)
    factors = (np.hstack([2.0 * QY, -np.ones((QY.shape[0], 1))]), np.vstack([KX.T, sq]))
    block.factors = factors  # type: ignore[attr-defined]
    return block


def softmax(X: ArrayLike, A: ArrayLike, V: ArrayLike, *, weights: ArrayLike | None = None,
            causal: bool = False, queries: ArrayLike | None = None,
            chunk_size: int | None = None) -> NDArray[np.float64]:
    r"""Softmax (traditional) attention :math:`\Gamma_\mu(x)`.

    .. math::

        \Gamma_\mu(x) = \frac{\int V y \, e^{\langle A x, y\rangle} \, d\mu(y)}
                             {\int e^{\langle A x, y\rangle} \, d\mu(y)},
        \qquad A = K^\top Q,

    Vaswani et al. (2017); measure form of Castin et al. (2025).

    Parameters
    ----------
    X : array (n, d)
        Tokens, the atoms of :math:`\mu`.
    A : array (d, d)
        Key-query matrix :math:`K^\top Q`.
    V : array (p, d)
        Value matrix.
    weights : array (n,), optional
        Weights of the atoms (non-negative, summing to one); uniform by default.
    causal : bool
        Masked attention: query ``i`` attends to tokens ``j <= i`` only.
    queries : array (m, d), optional
        Points where :math:`\Gamma_\mu` is evaluated; the tokens themselves by default.
    chunk_size : int, optional
        Queries processed at once (memory ``O(chunk_size * n)``); chosen automatically.

    Returns
    -------
    array (m, p)
        Row ``i`` is :math:`\Gamma_\mu(y_i)`.

    Raises
    ------
    ValueError
        If an array has the wrong shape or non-finite entries, the weights are not a
        probability vector, ``causal`` is not a bool, or ``causal=True`` with ``m != n``
        queries.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    >>> Y = softmax(X, np.zeros((2, 2)), np.eye(2))  # A = 0: every token sees the mean
    >>> bool(np.allclose(Y, X.mean(axis=0)))
    True
    >>> Y = softmax(X, np.eye(2), np.eye(2), causal=True)  # token 0 sees itself only
    >>> bool(np.allclose(Y[0], X[0]))
    True

    References
    ----------
    :cite:`vaswani2017attention,castin2025unified`
    """
    X, _, Y, logw = _setup(X, weights, queries, causal)
    d = X.shape[1]
    A = _checks.matrix(A, "A", shape=(d, d))
    V = _checks.matrix(V, "V", cols=d)
    plan = _kernels.Plan(Y.shape[0], X.shape[0], d, V.shape[0], chunk_size)
    AY = Y @ A.T  # row i: A y_i
    VX = X @ V.T  # row j: V x_j
    return plan.average(_inner_logits(AY, X), VX, logw, causal)


def softmax_matrix(X: ArrayLike, A: ArrayLike, *, weights: ArrayLike | None = None,
                   causal: bool = False,
                   queries: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""The softmax attention matrix, row-stochastic, shape ``(m, n)``.

    .. math::

        P_{ij} = \frac{w_j e^{\langle A y_i, x_j\rangle}}{\sum_k w_k e^{\langle A y_i, x_k\rangle}}

    Dense (use for moderate sizes); with it, ``softmax(X, A, V) == P @ X @ V.T``.

    Parameters
    ----------
    X : array (n, d)
        Tokens, the atoms of :math:`\mu`.
    A : array (d, d)
        Key-query matrix :math:`K^\top Q`.
    weights : array (n,), optional
        Weights of the atoms (non-negative, summing to one); uniform by default.
    causal : bool
        Masked attention: query ``i`` attends to tokens ``j <= i`` only.
    queries : array (m, d), optional
        Points where :math:`\Gamma_\mu` is evaluated; the tokens themselves by default.

    Returns
    -------
    array (m, n)
        Non-negative, each row summing to one; zero above the diagonal when ``causal``.

    Raises
    ------
    ValueError
        If an array has the wrong shape or non-finite entries, the weights are not a
        probability vector, ``causal`` is not a bool, or ``causal=True`` with ``m != n``
        queries.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    >>> P = softmax_matrix(X, np.eye(2), causal=True)
    >>> bool(np.allclose(P.sum(axis=1), 1.0) and np.all(np.triu(P, 1) == 0.0))
    True
    >>> bool(np.allclose(P @ X, softmax(X, np.eye(2), np.eye(2), causal=True)))
    True

    References
    ----------
    :cite:`vaswani2017attention,castin2025unified`
    """
    X, _, Y, logw = _setup(X, weights, queries, causal)
    d = X.shape[1]
    A = _checks.matrix(A, "A", shape=(d, d))
    return _kernels.dense_matrix(_inner_logits(Y @ A.T, X), logw, Y.shape[0], X.shape[0],
                                 causal)


# --------------------------------------------------------------------------------------
# L2 attention
# --------------------------------------------------------------------------------------

def l2(X: ArrayLike, Q: ArrayLike, K: ArrayLike, V: ArrayLike, *,
       weights: ArrayLike | None = None, causal: bool = False,
       queries: ArrayLike | None = None, chunk_size: int | None = None) -> NDArray[np.float64]:
    r"""L2 attention (Kim, Papamakarios and Mnih, 2021).

    .. math::

        \Gamma_\mu(x) = \frac{\int V y \, e^{-|Q x - K y|^2} \, d\mu(y)}
                             {\int e^{-|Q x - K y|^2} \, d\mu(y)}.

    ``Q`` and ``K`` have shape ``(k, d)``, ``V`` shape ``(p, d)``; the other arguments are
    those of :func:`softmax`.

    Parameters
    ----------
    X : array (n, d)
        Tokens, the atoms of :math:`\mu`.
    Q, K : array (k, d)
        Query and key matrices.
    V : array (p, d)
        Value matrix.
    weights : array (n,), optional
        Weights of the atoms (non-negative, summing to one); uniform by default.
    causal : bool
        Masked attention: query ``i`` attends to tokens ``j <= i`` only.
    queries : array (m, d), optional
        Points where :math:`\Gamma_\mu` is evaluated; the tokens themselves by default.
    chunk_size : int, optional
        Queries processed at once (memory ``O(chunk_size * n)``); chosen automatically.

    Returns
    -------
    array (m, p)
        Row ``i`` is :math:`\Gamma_\mu(y_i)`.

    Raises
    ------
    ValueError
        If an array has the wrong shape or non-finite entries, the weights are not a
        probability vector, ``causal`` is not a bool, or ``causal=True`` with ``m != n``
        queries.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    >>> Z = np.zeros((1, 2))  # Q = K = 0: constant logits, every token sees the mean
    >>> bool(np.allclose(l2(X, Z, Z, np.eye(2)), X.mean(axis=0)))
    True

    References
    ----------
    :cite:`kim2021lipschitz,castin2025unified`
    """
    X, _, Y, logw = _setup(X, weights, queries, causal)
    d = X.shape[1]
    Q, K = _checks.query_key(Q, K, d)
    V = _checks.matrix(V, "V", cols=d)
    # the fused logits have inner dimension k + 1 (see _l2_logits)
    plan = _kernels.Plan(Y.shape[0], X.shape[0], Q.shape[0] + 1, V.shape[0], chunk_size)
    return plan.average(_l2_logits(Y @ Q.T, X @ K.T), X @ V.T, logw, causal)


def l2_matrix(X: ArrayLike, Q: ArrayLike, K: ArrayLike, *, weights: ArrayLike | None = None,
              causal: bool = False,
              queries: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""The L2 attention matrix :math:`P_{ij} \propto w_j e^{-|Q y_i - K x_j|^2}`, row-stochastic.

    Dense ``(m, n)``; with it, ``l2(X, Q, K, V) == P @ X @ V.T``.

    Parameters
    ----------
    X : array (n, d)
        Tokens, the atoms of :math:`\mu`.
    Q, K : array (k, d)
        Query and key matrices.
    weights : array (n,), optional
        Weights of the atoms (non-negative, summing to one); uniform by default.
    causal : bool
        Masked attention: query ``i`` attends to tokens ``j <= i`` only.
    queries : array (m, d), optional
        Points where :math:`\Gamma_\mu` is evaluated; the tokens themselves by default.

    Returns
    -------
    array (m, n)
        Non-negative, each row summing to one; zero above the diagonal when ``causal``.

    Raises
    ------
    ValueError
        If an array has the wrong shape or non-finite entries, the weights are not a
        probability vector, ``causal`` is not a bool, or ``causal=True`` with ``m != n``
        queries.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    >>> P = l2_matrix(X, np.eye(2), np.eye(2))
    >>> bool(np.allclose(P.sum(axis=1), 1.0))
    True
    >>> P.argmax(axis=1).tolist()  # Q = K = I: the largest weight on the nearest token
    [0, 1, 2]
    >>> bool(np.allclose(P @ X, l2(X, np.eye(2), np.eye(2), np.eye(2))))
    True

    References
    ----------
    :cite:`kim2021lipschitz`
    """
    X, _, Y, logw = _setup(X, weights, queries, causal)
    Q, K = _checks.query_key(Q, K, X.shape[1])
    return _kernels.dense_matrix(_l2_logits(Y @ Q.T, X @ K.T), logw, Y.shape[0], X.shape[0],
                                 causal)


# --------------------------------------------------------------------------------------
# Sinkhorn attention
# --------------------------------------------------------------------------------------

def _sq_cost(QX, KX):
    """Cost matrix :math:`|Q x_i - K x_j|^2`, shape (n, n)."""
    a = np.einsum("ij,ij->i", QX, QX)
    b = np.einsum("ij,ij->i", KX, KX)
    return np.maximum(a[:, None] + b[None, :] - 2.0 * (QX @ KX.T), 0.0)


def _logsumexp(M, axis):
    mx = M.max(axis=axis, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(mx, axis=axis) + np.log(np.exp(M - mx).sum(axis=axis))


def _sinkhorn_potentials(X, w, Q, K, n_steps, tol, max_steps):
    r"""Log-domain Sinkhorn-Knopp on :math:`k^0 = e^{-|Qx - Ky|^2}` against :math:`\mu`.

    Returns ``(f, g, g_row, steps, err)`` with :math:`k = e^{f_i + g_j - |Qx_i - Kx_j|^2}`
    and ``g_row`` the column potential the last row normalisation used (``f`` is
    :math:`-\log \int e^{g_{row}(y) - |Qx - Ky|^2} d\mu(y)`; ``g_row == g`` unless the last
    step normalised columns). Steps
    alternate: even steps normalise in :math:`y` (rows, updating ``f``), odd steps in
    :math:`x` (columns, updating ``g``). With ``n_steps=None`` the iteration runs until the
    column marginal error after a row step is below ``tol``, and always ends on a row step.
    """
    n = X.shape[0]
    with np.errstate(divide="ignore"):
        logw = np.log(w)
    logk0 = -_sq_cost(X @ Q.T, X @ K.T)
    f = np.zeros(n)
    g = np.zeros(n)
    g_row = g
    err = np.inf
    limit = max_steps if n_steps is None else n_steps
    step = 0
    while step < limit:
        if step % 2 == 0:  # normalise in y: sum_j w_j k_ij = 1
            f = -_logsumexp(logk0 + g[None, :] + logw[None, :], axis=1)
            g_row = g
            cols = np.exp(_logsumexp(logk0 + f[:, None] + logw[:, None], axis=0) + g)
            err = np.max(np.abs(cols - 1.0)[w > 0])
            step += 1
            if n_steps is None and err <= tol:
                break
        else:  # normalise in x: sum_i w_i k_ij = 1
            g = -_logsumexp(logk0 + f[:, None] + logw[:, None], axis=0)
            step += 1
    if n_steps is None and err > tol:
        raise RuntimeError(f"Sinkhorn did not converge in max_steps={max_steps} steps: "
                           f"marginal error {err:.3g} > tol={tol:.3g}")
    return f, g, g_row, step, err


def _sinkhorn_setup(X, Q, K, weights, n_steps, tol, max_steps):
    X = _checks.points(X, "X")
    w = _checks.weights(weights, X.shape[0])
    Q, K = _checks.query_key(Q, K, X.shape[1])
    if n_steps is not None:
        n_steps = _checks.positive_int(n_steps, "n_steps")
    tol = _checks.positive_float(tol, "tol")
    max_steps = _checks.positive_int(max_steps, "max_steps")
    return X, w, Q, K, _sinkhorn_potentials(X, w, Q, K, n_steps, tol, max_steps)


def sinkhorn_kernel(X: ArrayLike, Q: ArrayLike, K: ArrayLike, *,
                    weights: ArrayLike | None = None, n_steps: int | None = None,
                    tol: float = 1e-10, max_steps: int = 10_000) -> NDArray[np.float64]:
    r"""The Sinkhorn kernel :math:`k^\infty(x_i, x_j)` of Sinkhorn attention, shape ``(n, n)``.

    :math:`k^0(x, y) = e^{-|Qx - Ky|^2}` is normalised alternately in :math:`y` (even steps,
    :math:`k^{j+1}(x,y) = k^j(x,y) / \int k^j(x,y') d\mu(y')`) and in :math:`x` (odd steps)
    (Sander et al., 2022; Castin et al., 2025). The limit is doubly stochastic against
    :math:`\mu`: :math:`\sum_j w_j k_{ij} = 1` and :math:`\sum_i w_i k_{ij} = 1`, and
    :math:`w_i w_j k_{ij}` is the entropic optimal transport plan (:math:`\varepsilon = 1`,
    cost :math:`|Qx - Ky|^2`) from :math:`\mu` to itself.

    ``n_steps=None`` iterates to convergence (column marginal error <= ``tol`` after a row
    normalisation; ``RuntimeError`` after ``max_steps``); an integer performs exactly that
    many normalisation steps (``n_steps=1``: L2 attention's kernel, normalised in y).
    Computed in the log domain on the dense ``(n, n)`` cost.

    Parameters
    ----------
    X : array (n, d)
        Tokens, the atoms of :math:`\mu`.
    Q, K : array (k, d)
        Query and key matrices.
    weights : array (n,), optional
        Weights of the atoms (non-negative, summing to one); uniform by default.
    n_steps : int, optional
        Number of normalisation steps; ``None`` iterates to convergence.
    tol : float
        Column marginal error at which the iteration stops (``n_steps=None``).
    max_steps : int
        Most steps before ``RuntimeError`` (``n_steps=None``).

    Returns
    -------
    array (n, n)
        :math:`k_{ij}`; ``w[:, None] * k * w[None, :]`` is the transport plan.

    Raises
    ------
    ValueError
        If an array has the wrong shape or non-finite entries, the weights are not a
        probability vector, or ``n_steps``, ``tol``, ``max_steps`` are not positive.
    RuntimeError
        If the iteration has not converged after ``max_steps`` steps.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    >>> k = sinkhorn_kernel(X, np.eye(2), np.eye(2))
    >>> w = np.full(3, 1 / 3)
    >>> bool(np.allclose(k @ w, 1.0) and np.allclose(w @ k, 1.0))  # doubly stochastic
    True
    >>> k1 = sinkhorn_kernel(X, np.eye(2), np.eye(2), n_steps=1)
    >>> bool(np.allclose(k1 * w, l2_matrix(X, np.eye(2), np.eye(2))))  # one step: L2's
    True

    References
    ----------
    :cite:`sander2022sinkformers,cuturi2013sinkhorn,castin2025unified`
    """
    X, w, Q, K, (f, g, _, _, _) = _sinkhorn_setup(X, Q, K, weights, n_steps, tol, max_steps)
    logk0 = -_sq_cost(X @ Q.T, X @ K.T)
    return np.exp(logk0 + f[:, None] + g[None, :])


def sinkhorn(X: ArrayLike, Q: ArrayLike, K: ArrayLike, V: ArrayLike, *,
             weights: ArrayLike | None = None, queries: ArrayLike | None = None,
             n_steps: int | None = None, tol: float = 1e-10, max_steps: int = 10_000,
             chunk_size: int | None = None) -> NDArray[np.float64]:
    r"""Sinkhorn attention (Sander, Ablin, Blondel and Peyré, 2022).

    .. math::

        \Gamma_\mu(x) = \int V y \, k^\infty(x, y) \, d\mu(y),

    with :math:`k^\infty` the Sinkhorn limit of :math:`e^{-|Qx-Ky|^2}` against :math:`\mu`
    (see :func:`sinkhorn_kernel`). At a query point :math:`x` outside the support,
    :math:`k^\infty(x, \cdot)` is the kernel normalised in :math:`y` with the converged
    column potential :math:`g`: :math:`k^\infty(x,y) \propto e^{g(y) - |Qx - Ky|^2}`, which on
    the tokens coincides with the limit. With an integer ``n_steps``, the field uses exactly
    the kernel of :func:`sinkhorn_kernel` after that many steps (for an even number, its rows
    do not sum to one). The potentials need the dense ``(n, n)`` cost.
    There is no causal variant: the column normalisation couples all tokens.

    Parameters
    ----------
    X : array (n, d)
        Tokens, the atoms of :math:`\mu`.
    Q, K : array (k, d)
        Query and key matrices.
    V : array (p, d)
        Value matrix.
    weights : array (n,), optional
        Weights of the atoms (non-negative, summing to one); uniform by default.
    queries : array (m, d), optional
        Points where :math:`\Gamma_\mu` is evaluated; the tokens themselves by default.
    n_steps, tol, max_steps
        As in :func:`sinkhorn_kernel`.
    chunk_size : int, optional
        Queries processed at once; chosen automatically.

    Returns
    -------
    array (m, p)
        Row ``i`` is :math:`\Gamma_\mu(y_i)`.

    Raises
    ------
    ValueError
        As :func:`sinkhorn_kernel`, or ``queries``/``V`` of the wrong shape.
    RuntimeError
        If the iteration has not converged after ``max_steps`` steps.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    >>> I = np.eye(2)
    >>> k = sinkhorn_kernel(X, I, I)
    >>> bool(np.allclose(sinkhorn(X, I, I, I), (k / 3) @ X))  # the kernel's average
    True

    References
    ----------
    :cite:`sander2022sinkformers,castin2025unified`
    """
    X, w, Q, K, (_, g, g_row, _, _) = _sinkhorn_setup(X, Q, K, weights, n_steps, tol,
                                                       max_steps)
    d = X.shape[1]
    V = _checks.matrix(V, "V", cols=d)
    Y = X if queries is None else _checks.points(queries, "queries")
    if Y.shape[1] != d:
        raise ValueError(f"queries must have d = {d} columns like X, got shape {Y.shape}")
    with np.errstate(divide="ignore"):
        logw = np.log(w)
    if g_row is g:  # the last step normalised rows: a plain normalised average
        plan = _kernels.Plan(Y.shape[0], X.shape[0], Q.shape[0] + 1, V.shape[0], chunk_size)
        return plan.average(_l2_logits(Y @ Q.T, X @ K.T), X @ V.T, logw + g, False)
    block = _l2_logits(Y @ Q.T, X @ K.T)
    values = X @ V.T
    # an even number of steps ends on a column normalisation: the rows of the kernel do not
    # sum to one. k(x, y) = e^{f(x) + g(y) - c(x, y)} with f from the previous row step.
    out = np.empty((Y.shape[0], values.shape[1]))
    for start, stop in _kernels.chunk_bounds(Y.shape[0], X.shape[0], chunk_size,
                                             Q.shape[0] + 1, V.shape[0]):
        logits = block(start, stop, X.shape[0]) + logw
        num = logits + g
        den = logits + g_row
        m_num = num.max(axis=1, keepdims=True)
        m_den = den.max(axis=1, keepdims=True)
        log_den = m_den[:, 0] + np.log(np.exp(den - m_den).sum(axis=1))
        scale = np.exp(m_num[:, 0] - log_den)
        out[start:stop] = (np.exp(num - m_num) @ values) * scale[:, None]
    return out


# --------------------------------------------------------------------------------------
# sigmoid attention
# --------------------------------------------------------------------------------------

def sigmoid(X: ArrayLike, A: ArrayLike, V: ArrayLike, *, weights: ArrayLike | None = None,
            causal: bool = False, queries: ArrayLike | None = None, bias: float = 0.0,
            chunk_size: int | None = None) -> NDArray[np.float64]:
    r"""Sigmoid attention (Ramapuram et al., 2025), with no normalisation over tokens.

    .. math::

        \Gamma_\mu(x) = \int \sigma(\langle A x, y\rangle + b) \, V y \, d\mu(y),
        \qquad \sigma(z) = \frac{1}{1 + e^{-z}}.

    Convention: the sum is against the probability measure :math:`\mu` (so for uniform
    weights it carries a factor :math:`1/n`) and ``bias`` is :math:`b`. Ramapuram et al.
    sum without :math:`1/n` and recommend :math:`b = -\log n`; since
    :math:`\sigma(z - \log n) \approx e^{z}/n` for :math:`e^z \ll n`, their layer is close to
    this one with ``bias=0`` only in that regime; pass ``bias`` and rescale ``V`` by ``n`` to
    reproduce theirs exactly. With ``causal=True``, query ``i`` uses the restriction of
    :math:`\mu` to tokens ``j <= i`` renormalised to a probability measure (the masked
    convention :math:`f^m(X)_i = f(x_1, \dots, x_i)_i`).

    Parameters
    ----------
    X : array (n, d)
        Tokens, the atoms of :math:`\mu`.
    A : array (d, d)
        Key-query matrix.
    V : array (p, d)
        Value matrix.
    weights : array (n,), optional
        Weights of the atoms (non-negative, summing to one); uniform by default.
    causal : bool
        Masked attention: query ``i`` attends to tokens ``j <= i`` only.
    queries : array (m, d), optional
        Points where :math:`\Gamma_\mu` is evaluated; the tokens themselves by default.
    bias : float
        The bias :math:`b` inside the sigmoid.
    chunk_size : int, optional
        Queries processed at once; chosen automatically.

    Returns
    -------
    array (m, p)
        Row ``i`` is :math:`\Gamma_\mu(y_i)`.

    Raises
    ------
    ValueError
        If an array has the wrong shape or non-finite entries, the weights are not a
        probability vector, ``causal`` is not a bool, or ``causal=True`` with ``m != n``
        queries.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    >>> Y = sigmoid(X, np.zeros((2, 2)), np.eye(2))  # sigma(0) = 1/2 on every pair
    >>> bool(np.allclose(Y, X.mean(axis=0) / 2))
    True

    References
    ----------
    :cite:`ramapuram2025sigmoid`
    """
    X, w, Y, _ = _setup(X, weights, queries, causal)
    n, d = X.shape
    A = _checks.matrix(A, "A", shape=(d, d))
    V = _checks.matrix(V, "V", cols=d)
    b = _checks.finite_float(bias, "bias")
    values = X @ V.T
    block = _inner_logits(Y @ A.T, X)
    m = Y.shape[0]
    out = np.empty((m, values.shape[1]))
    cumw = np.cumsum(w)
    for start, stop in _kernels.chunk_bounds(m, n, chunk_size, d, V.shape[0]):
        ncols = min(stop, n) if causal else n
        S = expit(block(start, stop, ncols) + b) * w[:ncols]
        if causal:
            rows = np.arange(start, stop)[:, None]
            S[np.arange(ncols)[None, :] > rows] = 0.0
            mass = cumw[start:stop]
            if np.any(mass <= 0):
                bad = start + int(np.flatnonzero(mass <= 0)[0])
                raise ValueError(f"weights: query {bad} attends only to tokens of zero weight, "
                                 "so its masked attention is undefined")
            S /= mass[:, None]
        out[start:stop] = S @ values[:ncols]
    return out


# --------------------------------------------------------------------------------------
# multi-head attention
# --------------------------------------------------------------------------------------

def multihead(X: ArrayLike, As: ArrayLike, Vs: ArrayLike, *, weights: ArrayLike | None = None,
              causal: bool = False, queries: ArrayLike | None = None,
              chunk_size: int | None = None) -> NDArray[np.float64]:
    r"""Multi-head softmax attention :math:`\Gamma_\mu(x) = \sum_{h=1}^H \Gamma^{(h)}_\mu(x)`.

    Head ``h`` is :func:`softmax` attention with key-query matrix ``As[h]`` and value matrix
    ``Vs[h]``, the output projection :math:`W_h` folded in (:math:`V_h \leftarrow W_h V_h`),
    as in Castin et al. (2024, 2025). ``As`` has shape ``(H, d, d)``, ``Vs`` shape
    ``(H, p, d)``.

    Parameters
    ----------
    X : array (n, d)
        Tokens, the atoms of :math:`\mu`.
    As : array (H, d, d)
        Key-query matrices of the heads, :math:`H \ge 1`.
    Vs : array (H, p, d)
        Value matrices of the heads (output projections folded in).
    weights : array (n,), optional
        Weights of the atoms (non-negative, summing to one); uniform by default.
    causal : bool
        Masked attention: query ``i`` attends to tokens ``j <= i`` only.
    queries : array (m, d), optional
        Points where :math:`\Gamma_\mu` is evaluated; the tokens themselves by default.
    chunk_size : int, optional
        Queries processed at once; chosen automatically.

    Returns
    -------
    array (m, p)
        Row ``i`` is :math:`\Gamma_\mu(y_i)`, the sum of the heads.

    Raises
    ------
    ValueError
        If an array has the wrong shape or non-finite entries, the weights are not a
        probability vector, ``causal`` is not a bool, or ``causal=True`` with ``m != n``
        queries.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    >>> As, Vs = np.stack([np.eye(2), -np.eye(2)]), np.stack([np.eye(2), 2 * np.eye(2)])
    >>> heads = softmax(X, As[0], Vs[0]) + softmax(X, As[1], Vs[1])
    >>> bool(np.allclose(multihead(X, As, Vs), heads))
    True

    References
    ----------
    :cite:`castin2024smooth,castin2025unified`
    """
    X = _checks.points(X, "X")
    d = X.shape[1]
    causal = _checks.flag(causal, "causal")
    As = _checks.stack(As, "As", cols=d)
    Vs = _checks.stack(Vs, "Vs", cols=d)
    if As.shape[1] != d:
        raise ValueError(f"As must have shape (H, {d}, {d}), got {As.shape}")
    if Vs.shape[0] != As.shape[0]:
        raise ValueError(f"As and Vs must have the same number of heads, got {As.shape[0]} "
                         f"and {Vs.shape[0]}")
    heads = (softmax(X, A, V, weights=weights, causal=causal, queries=queries,
                     chunk_size=chunk_size) for A, V in zip(As, Vs, strict=True))
    out = next(heads)  # H >= 1 (checked above), so the sum is an array, never 0.0
    for head in heads:
        out = out + head
    return out
