r"""Mean-field masked (causal) attention on :math:`[0,1] \times \mathbb{R}^d`.

Masked self-attention :math:`f^m(X)_i = f(x_1, \dots, x_i)_i` depends on the order of the
tokens, so it is not a function of the empirical measure :math:`\frac1n\sum_i \delta_{x_i}`.
Castin, Ablin, Carrillo and Peyré (2025) attach to each token its position
:math:`s \in [0,1]` and work with measures :math:`\bar\mu` on :math:`[0,1]\times\mathbb{R}^d`:
a sequence becomes :math:`\bar\mu = \frac1n \sum_{i=1}^n \delta_{(i/n,\, x_i)}` and the
velocity field is

.. math::

    \Gamma_{\bar\mu}(s, x) = \Big(0,\;
        \frac{\int V y \, e^{\langle A x, y\rangle} \mathbf 1_{\tau \le s}\, d\bar\mu(\tau, y)}
             {\int e^{\langle A x, y\rangle} \mathbf 1_{\tau \le s}\, d\bar\mu(\tau, y)}\Big).

Positions do not move (the first component is zero); the tokens follow the second one.

**Tie convention.** The indicator is :math:`\mathbf 1_{\tau \le s}`: an atom at position
:math:`s` sees every atom at a position :math:`\tau \le s`, *including the atoms that share
its position* (and itself). On :math:`\bar\mu` built from a sequence (distinct positions
:math:`i/n`) this is exactly masked attention, where token ``i`` attends to ``j <= i``.

Measures are given as ``positions`` (shape ``(n,)``, in :math:`[0,1]`, any order, repeats
allowed), atoms ``X`` (shape ``(n, d)``) and ``weights`` (shape ``(n,)``, non-negative,
summing to one; uniform by default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _checks, dynamics, transport

__all__ = [
    "sequence_measure",
    "masked_velocity",
    "masked_field",
    "masked_product_field",
    "circle_curve",
    "sample_gaussian_sequence",
    "gaussian_sequence_field",
    "gaussian_sequence_field_variance",
    "gaussian_sequence_field_covariance",
    "quadratic_form_mean_band",
    "conditional_distance",
    "masked_flow_map",
    "masked_flow_jacobian",
]

#: Number of float64 entries of one ``(chunk, n)`` block of logits (2 MiB).
_BLOCK_ELEMENTS = 2**18


def sequence_measure(X: ArrayLike
                     ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    r"""The measure :math:`\bar\mu = \frac1n \sum_{i=1}^n \delta_{(i/n,\, x_i)}` of a sequence.

    Castin, Ablin, Carrillo and Peyré (2025). Returns ``(positions, X, weights)`` with
    ``positions[i-1] = i/n`` and uniform ``weights``, ready for :func:`masked_velocity`.

    Parameters
    ----------
    X : array (n, d)
        The tokens, in order.

    Returns
    -------
    positions : array (n,)
    X : array (n, d)
    weights : array (n,)

    Raises
    ------
    ValueError
        If ``X`` is not a finite ``(n, d)`` array.

    Examples
    --------
    >>> positions, X, weights = sequence_measure([[1.0], [2.0], [3.0], [4.0]])
    >>> print(positions.tolist(), weights.tolist())
    [0.25, 0.5, 0.75, 1.0] [0.25, 0.25, 0.25, 0.25]

    References
    ----------
    :cite:`castin2025unified`
    """
    X = _checks.points(X, "X")
    n = X.shape[0]
    return np.arange(1, n + 1) / n, X, np.full(n, 1.0 / n)


def masked_velocity(positions: ArrayLike, X: ArrayLike, A: ArrayLike, V: ArrayLike, *,
                    weights: ArrayLike | None = None, queries: ArrayLike | None = None,
                    query_positions: ArrayLike | None = None,
                    chunk_size: int | None = None) -> NDArray[np.float64]:
    r"""Second component of mean-field masked attention :math:`\Gamma_{\bar\mu}(s, x)`.

    .. math::

        \Gamma_{\bar\mu}(s, x)_x =
        \frac{\sum_j w_j \mathbf 1_{\tau_j \le s}\, e^{\langle A x, x_j\rangle} V x_j}
             {\sum_j w_j \mathbf 1_{\tau_j \le s}\, e^{\langle A x, x_j\rangle}},
        \qquad \bar\mu = \sum_j w_j \delta_{(\tau_j, x_j)},

    Castin, Ablin, Carrillo and Peyré (2025). The first component (the velocity of the
    position) is identically zero. Ties count: ``tau_j == s`` is included.

    Parameters
    ----------
    positions : array (n,)
        Positions :math:`\tau_j \in [0, 1]` of the atoms (any order; repeats allowed).
    X : array (n, d)
        Atoms :math:`x_j`.
    A : array (d, d)
        Key-query matrix :math:`K^\top Q`.
    V : array (p, d)
        Value matrix.
    weights : array (n,), optional
        Weights :math:`w_j` (non-negative, summing to one); uniform by default.
    queries, query_positions : arrays (m, d) and (m,), optional
        Points :math:`(s, x)` where the field is evaluated (both or neither); the atoms
        themselves by default.
    chunk_size : int, optional
        Queries processed at once (memory ``O(chunk_size * n)``); chosen automatically.

    Returns
    -------
    array (m, p)
        Row ``q`` is the second component of :math:`\Gamma_{\bar\mu}(s_q, y_q)`.

    Raises
    ------
    ValueError
        On bad shapes, positions outside [0, 1], invalid weights, or a query whose past
        :math:`\{\tau \le s\}` carries no mass (the field is undefined there).

    Notes
    -----
    Atoms are sorted by position once; the atoms a query at position :math:`s` sees are then
    a prefix of that order, of length ``searchsorted(sorted_positions, s, "right")``. Queries
    are processed in order of increasing prefix, in chunks, each a matrix product against
    its prefix only (about half the work of the unmasked field for a sequence). Logits go
    through a row-wise shift by their maximum (log-sum-exp), so large logits are safe.

    Examples
    --------
    With :math:`A = 0` the velocity of a token is :math:`V` times the mean of its past (itself
    included):

    >>> v = masked_velocity([1 / 3, 2 / 3, 1.0], [[0.0], [2.0], [4.0]], [[0.0]], [[1.0]])
    >>> print(v.tolist())
    [[0.0], [1.0], [2.0]]

    References
    ----------
    :cite:`castin2025unified,vaswani2017attention`
    """
    X = _checks.points(X, "X")
    n, d = X.shape
    tau = _checks.positions(positions, n, "positions")
    w = _checks.weights(weights, n)
    A = _checks.matrix(A, "A", shape=(d, d))
    V = _checks.matrix(V, "V", cols=d)
    if (queries is None) != (query_positions is None):
        raise ValueError("queries and query_positions go together: give both or neither")
    if queries is None:
        Y, s = X, tau
    else:
        Y = _checks.points(queries, "queries")
        if Y.shape[1] != d:
            raise ValueError(f"queries must have d = {d} columns like X, got shape {Y.shape}")
        s = _checks.positions(query_positions, Y.shape[0], "query_positions")
    if chunk_size is None:
        chunk_size = max(1, _BLOCK_ELEMENTS // n)
    else:
        chunk_size = _checks.positive_int(chunk_size, "chunk_size")

    order = np.argsort(tau, kind="stable")
    Xs = X[order]
    logw = None  # uniform weights: a constant shift of the logits, which cancels
    if weights is not None:
        with np.errstate(divide="ignore"):
            logw = np.log(w[order])
    values1 = np.hstack([Xs @ V.T, np.ones((n, 1))])
    p = values1.shape[1] - 1
    prefix = np.searchsorted(tau[order], s, side="right")  # atoms with tau <= s_q
    qorder = np.argsort(prefix, kind="stable")
    AY = Y @ A.T
    out = np.empty((Y.shape[0], p))
    for start in range(0, Y.shape[0], chunk_size):
        rows = qorder[start:start + chunk_size]
        k = prefix[rows]
        kmin, ncols = int(k.min()), int(k.max())
        logits = AY[rows] @ Xs[:ncols].T
        if logw is not None:
            logits += logw[:ncols]
        # rows are sorted by prefix length: only columns kmin..ncols-1 can be masked
        tail = logits[:, kmin:]
        tail[np.arange(kmin, ncols)[None, :] >= k[:, None]] = -np.inf
        row_max = logits.max(axis=1, keepdims=True) if ncols else np.full((rows.size, 1),
                                                                          -np.inf)
        if not np.all(np.isfinite(row_max)):
            bad = int(rows[np.flatnonzero(~np.isfinite(row_max[:, 0]))[0]])
            raise ValueError(f"query {bad} at position {s[bad]:.6g} has no mass at positions "
                             "tau <= s (no atom, or only atoms of zero weight): the masked "
                             "field is undefined there")
        np.subtract(logits, row_max, out=logits)
        num_den = np.exp(logits, out=logits) @ values1[:ncols]
        out[rows] = num_den[:, :p] / num_den[:, p:]
    return out


def masked_field(positions: ArrayLike, A: ArrayLike, V: ArrayLike, *,
                 weights: ArrayLike | None = None,
                 chunk_size: int | None = None) -> Callable[..., Any]:
    r"""The field ``(t, X) -> masked_velocity(positions, X, A, V)`` of the masked dynamics.

    Since positions never move, the masked Transformer PDE
    :math:`\partial_t\bar\mu + \mathrm{div}(\bar\mu\,\Gamma_{\bar\mu}) = 0` started from
    :math:`\bar\mu_0 = \sum_j w_j \delta_{(\tau_j, x_j(0))}` is solved by
    :math:`\bar\mu(t) = \sum_j w_j \delta_{(\tau_j, x_j(t))}` with
    :math:`\dot x_i = \Gamma_{\bar\mu(t)}(\tau_i, x_i)_x` (Castin et al., 2025): only the
    atoms ``X`` are integrated, e.g. with :func:`transformer_pde.dynamics.integrate`.
    ``A`` and ``V`` may be callables of ``t`` (time-dependent parameters).

    Parameters
    ----------
    positions : array (n,)
        Positions of the atoms, in :math:`[0, 1]`.
    A : array (d, d) or callable
        Key-query matrix, or a callable of ``t``.
    V : array (p, d) or callable
        Value matrix, or a callable of ``t``.
    weights : array (n,), optional
        Weights of the atoms (uniform by default).
    chunk_size : int, optional
        Passed to :func:`masked_velocity`.

    Returns
    -------
    callable
        ``field(t, X) -> array (n, p)``.

    Raises
    ------
    ValueError
        If ``positions`` is not a 1-D array in :math:`[0, 1]` or the weights are not valid
        (the other inputs are checked when the field is evaluated).

    Examples
    --------
    >>> field = masked_field([1 / 3, 2 / 3, 1.0], [[0.0]], lambda t: [[t]])
    >>> print(field(2.0, [[0.0], [2.0], [4.0]]).tolist())
    [[0.0], [2.0], [4.0]]

    References
    ----------
    :cite:`castin2025unified`
    """
    tau = _checks.real_array(positions, "positions")
    if tau.ndim != 1 or tau.size < 1:
        raise ValueError(f"positions must be a non-empty 1-D array, got shape {tau.shape}")
    _checks.positions(tau, tau.shape[0], "positions")
    w = _checks.weights(weights, tau.shape[0])

    def field(t, X):
        At = A(t) if callable(A) else A
        Vt = V(t) if callable(V) else V
        return masked_velocity(tau, X, At, Vt, weights=w, chunk_size=chunk_size)

    return field


def masked_product_field(A: ArrayLike, V: ArrayLike, *, weights: ArrayLike | None = None,
                         chunk_size: int | None = None) -> Callable[..., Any]:
    r"""The full field :math:`\Gamma_{\bar\mu}` on states ``Z = [s | X]`` of shape ``(n, 1 + d)``.

    Returns ``(t, Z) -> [0 | masked_velocity(Z[:, 0], Z[:, 1:], A, V)]``: the velocity field
    of the masked Transformer PDE on :math:`[0,1]\times\mathbb{R}^d` (Castin et al., 2025),
    position component included, for integrating the atoms of :math:`\bar\mu` as points of
    the product space. Requires ``V`` square (the tokens keep their dimension).

    Parameters
    ----------
    A : array (d, d) or callable
        Key-query matrix, or a callable of ``t``.
    V : array (d, d) or callable
        Value matrix (square), or a callable of ``t``.
    weights : array (n,), optional
        Weights of the atoms (uniform by default).
    chunk_size : int, optional
        Passed to :func:`masked_velocity`.

    Returns
    -------
    callable
        ``field(t, Z) -> array (n, 1 + d)``.

    Raises
    ------
    ValueError
        When the field is evaluated: if ``Z`` is not ``(n, 1 + d)`` with :math:`d \ge 1`, ``V``
        is not ``(d, d)``, or as in :func:`masked_velocity`.

    Examples
    --------
    >>> import numpy as np
    >>> field = masked_product_field([[0.0]], [[1.0]])
    >>> print(field(0.0, np.array([[1 / 3, 0.0], [2 / 3, 2.0], [1.0, 4.0]])).tolist())
    [[0.0, 0.0], [0.0, 1.0], [0.0, 2.0]]

    References
    ----------
    :cite:`castin2025unified`
    """

    def field(t, Z):
        Z = np.asarray(Z, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] < 2:
            raise ValueError(f"Z must have shape (n, 1 + d) with d >= 1, got {Z.shape}")
        Vt = V(t) if callable(V) else V
        d = Z.shape[1] - 1
        Vt = _checks.matrix(Vt, "V", shape=(d, d))
        At = A(t) if callable(A) else A
        vel = masked_velocity(Z[:, 0], Z[:, 1:], At, Vt, weights=weights,
                              chunk_size=chunk_size)
        return np.hstack([np.zeros((Z.shape[0], 1)), vel])

    return field


def circle_curve(s: ArrayLike) -> NDArray[np.float64]:
    r"""The closed curve :math:`m(s) = (\cos 2\pi s, \sin 2\pi s)`, shape ``(len(s), 2)``.

    A mean curve for :func:`sample_gaussian_sequence` and :func:`gaussian_sequence_field`.

    Parameters
    ----------
    s : array (k,)
        Positions.

    Returns
    -------
    array (k, 2)

    Examples
    --------
    >>> import numpy as np
    >>> print((np.round(circle_curve([0.0, 0.25]), 12) + 0.0).tolist())
    [[1.0, 0.0], [0.0, 1.0]]

    References
    ----------
    :cite:`castin2025unified`
    """
    s = _checks.real_array(s, "s")
    if not np.all(np.isfinite(s)):
        raise ValueError("s contains non-finite values (NaN or inf)")
    return np.stack([np.cos(2 * np.pi * s), np.sin(2 * np.pi * s)], axis=-1)


def _mean_curve_values(mean_curve, s, name="mean_curve"):
    if not callable(mean_curve):
        raise ValueError(f"{name} must be a callable s -> array of shape (len(s), d)")
    M = np.asarray(mean_curve(s), dtype=np.float64)
    if M.ndim != 2 or M.shape[0] != s.shape[0] or not np.all(np.isfinite(M)):
        raise ValueError(f"{name}(s) must return a finite array of shape (len(s), d), got "
                         f"shape {M.shape}")
    return M


def _gaussian_sequence_inputs(query_positions, queries, A, V, mean_curve, sigma, grid):
    """The checked inputs of the Gaussian-sequence fields: ``(Y, s, A, V, sigma, grid, tau,
    M)`` with ``tau`` the ``grid + 1`` nodes of [0, 1] and ``M`` the mean curve on them."""
    Y = _checks.points(queries, "queries")
    q, d = Y.shape
    s = _checks.positions(query_positions, q, "query_positions")
    if np.any(s <= 0):
        raise ValueError("query_positions must be > 0: at s = 0 the past carries no mass")
    A = _checks.matrix(A, "A", shape=(d, d))
    V = _checks.matrix(V, "V", cols=d)
    sigma = _checks.nonnegative_float(sigma, "sigma")
    grid = _checks.positive_int(grid, "grid")
    tau = np.linspace(0.0, 1.0, grid + 1)
    M = _mean_curve_values(mean_curve, tau)
    if M.shape[1] != d:
        raise ValueError(f"mean_curve must return points of dimension d = {d}, got {M.shape[1]}")
    return Y, s, A, V, sigma, grid, tau, M


def sample_gaussian_sequence(n: int, mean_curve: Callable[..., Any], sigma: float,
                             rng: np.random.Generator
                             ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""A sequence of ``n`` tokens :math:`x_i \sim \mathcal N(m(i/n), \sigma^2 I)`, independent.

    Its measure :math:`\bar\mu_n = \frac1n\sum_i \delta_{(i/n,\,x_i)}` is a sample of the law
    :math:`\bar\rho(ds, dy) = ds\,\mathcal N(m(s), \sigma^2 I)(dy)` on :math:`[0,1]\times\mathbb
    R^d` (Castin, Ablin, Carrillo and Peyré, 2025, for the measures on positions and tokens).
    Returns ``(positions, X)`` with ``positions[i-1] = i/n``.

    Parameters
    ----------
    n : int
        Number of tokens.
    mean_curve : callable
        :math:`s \mapsto m(s)`, arrays ``(k,) -> (k, d)``.
    sigma : float
        Standard deviation, non-negative.
    rng : numpy.random.Generator
        Source of the noise.

    Returns
    -------
    positions : array (n,)
    X : array (n, d)

    Raises
    ------
    ValueError
        If ``n`` is not a positive integer, ``sigma`` is negative, ``rng`` is not a Generator or
        ``mean_curve`` does not return a finite ``(k, d)`` array.

    Examples
    --------
    With :math:`\sigma = 0` the tokens are the curve's points:

    >>> import numpy as np
    >>> positions, X = sample_gaussian_sequence(4, circle_curve, 0.0, np.random.default_rng(0))
    >>> print(positions.tolist(), bool(np.array_equal(X, circle_curve(positions))))
    [0.25, 0.5, 0.75, 1.0] True

    References
    ----------
    :cite:`castin2025unified`
    """
    n = _checks.positive_int(n, "n")
    sigma = _checks.nonnegative_float(sigma, "sigma")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator (np.random.default_rng(seed))")
    s = np.arange(1, n + 1) / n
    M = _mean_curve_values(mean_curve, s)
    return s, M + sigma * rng.standard_normal(M.shape)


def gaussian_sequence_field(query_positions: ArrayLike, queries: ArrayLike, A: ArrayLike,
                            V: ArrayLike, *, mean_curve: Callable[..., Any], sigma: float,
                            grid: int = 20000) -> NDArray[np.float64]:
    r"""Mean-field masked attention of :math:`\bar\rho = ds\,\mathcal N(m(s),\sigma^2 I)(dy)`.

    For this law the Gaussian integrals
    :math:`\int e^{\langle b,y\rangle}\mathcal N(m,\sigma^2I)(dy) = e^{\langle b,m\rangle +
    \sigma^2|b|^2/2}` and :math:`\int y\,e^{\langle b,y\rangle}\mathcal N(m,\sigma^2I)(dy) =
    (m+\sigma^2 b)\,e^{\langle b,m\rangle+\sigma^2|b|^2/2}` with :math:`b = Ax` turn the field of
    Castin, Ablin, Carrillo and Peyré (2025) into a one-dimensional integral (the factor
    :math:`e^{\sigma^2|Ax|^2/2}` cancels):

    .. math::

        \Gamma_{\bar\rho}(s, x) = V\Big(\sigma^2 A x +
            \frac{\int_0^s m(\tau)\, e^{\langle A x, m(\tau)\rangle}\, d\tau}
                 {\int_0^s e^{\langle A x, m(\tau)\rangle}\, d\tau}\Big),

    computed by the cumulative trapezoidal rule on ``grid`` equal intervals of :math:`[0,1]`
    (error :math:`O(\text{grid}^{-2})` for a smooth curve) and linear interpolation in
    :math:`s`. Logits are shifted by their maximum (the shift cancels in the ratio).

    Parameters
    ----------
    query_positions : array (q,)
        Positions :math:`s \in (0, 1]` (the field is undefined at :math:`s = 0`).
    queries : array (q, d)
        Token values :math:`x`.
    A : array (d, d)
    V : array (p, d)
    mean_curve : callable
        :math:`s \mapsto m(s)`, arrays ``(k,) -> (k, d)``, e.g. :func:`circle_curve`.
    sigma : float
        Standard deviation :math:`\sigma \ge 0`.
    grid : int
        Number of trapezoidal intervals.

    Returns
    -------
    array (q, p)

    Raises
    ------
    ValueError
        If a position is not in :math:`(0, 1]`, the shapes do not match, ``sigma`` is negative,
        ``grid`` is not a positive integer, or ``mean_curve`` does not return a finite
        ``(k, d)`` array.

    Examples
    --------
    For a constant curve :math:`m = (1, 0)` the field is :math:`V(\sigma^2Ax + m)`:

    >>> import numpy as np
    >>> flat = lambda s: np.tile([1.0, 0.0], (len(s), 1))
    >>> out = gaussian_sequence_field([1.0], [[0.0, 1.0]], np.eye(2), np.eye(2), mean_curve=flat,
    ...                               sigma=0.5, grid=100)
    >>> print((np.round(out, 9) + 0.0).tolist())
    [[1.0, 0.25]]

    References
    ----------
    :cite:`castin2025unified`
    """
    Y, s, A, V, sigma, grid, tau, M = _gaussian_sequence_inputs(
        query_positions, queries, A, V, mean_curve, sigma, grid)
    q, d = Y.shape
    h = 1.0 / grid
    out = np.empty((q, V.shape[0]))
    for k in range(q):
        b = A @ Y[k]
        logits = M @ b
        e = np.exp(logits - logits.max())
        f = np.hstack([M * e[:, None], e[:, None]])  # integrands (numerator | denominator)
        cum = np.vstack([np.zeros((1, d + 1)), np.cumsum(0.5 * h * (f[1:] + f[:-1]), axis=0)])
        num_den = np.array([np.interp(s[k], tau, cum[:, c]) for c in range(d + 1)])
        out[k] = V @ (sigma**2 * b + num_den[:d] / num_den[d])
    return out


def conditional_distance(positions: ArrayLike, X: ArrayLike, Y: ArrayLike, *,
                         weights: ArrayLike | None = None, p: float = 2) -> float:
    r"""Conditional Wasserstein distance of two measures with the same atoms' positions.

    For :math:`\bar\mu = \sum_j w_j\delta_{(\tau_j, x_j)}` and
    :math:`\bar\nu = \sum_j w_j\delta_{(\tau_j, y_j)}` (same positions and weights, hence the
    same first marginal), the distance

    .. math::

        W_p^{\mathrm{cond}}(\bar\mu, \bar\nu) = \Big(\int_0^1 W_p(\mu_s, \nu_s)^p\,
            \sigma(ds)\Big)^{1/p}

    (:math:`\sigma` the common first marginal, :math:`\mu_s, \nu_s` the conditional laws of the
    token given the position) is computed exactly: at a position held by one atom the
    conditional laws are Dirac masses and :math:`W_p = |x_j - y_j|`; at a position shared by
    several atoms, :math:`W_p` between the two conditional laws is computed exactly by
    :func:`transformer_pde.transport.wasserstein`. With distinct positions this is
    :math:`(\sum_j w_j |x_j - y_j|^p)^{1/p}`. This is our reading of the conditional framework
    of Castin, Ablin, Carrillo and Peyré (2025), not checked against the paper's text;
    :func:`transformer_pde.transport.conditional_wasserstein` is the binned estimate for
    measures with different positions.

    Parameters
    ----------
    positions : array (n,)
        Positions of the atoms, in :math:`[0, 1]`.
    X, Y : arrays (n, d)
        Tokens of the two measures.
    weights : array (n,), optional
        Weights of the atoms (uniform by default).
    p : float
        Order, ``p >= 1``.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If the shapes differ, a position is outside :math:`[0, 1]`, the weights are not valid
        or ``p < 1``.

    Examples
    --------
    Two atoms share the position 1/2 and are swapped (distance 0); the third moves by 3:

    >>> d = conditional_distance([0.5, 0.5, 1.0], [[0.0], [1.0], [0.0]], [[1.0], [0.0], [3.0]])
    >>> print(f"{d:.9f}")
    1.732050808

    References
    ----------
    :cite:`castin2025unified,flamary2021pot`
    """
    X = _checks.points(X, "X")
    Y = _checks.points(Y, "Y")
    if X.shape != Y.shape:
        raise ValueError(f"X and Y must have the same shape, got {X.shape} and {Y.shape}")
    n = X.shape[0]
    tau = _checks.positions(positions, n, "positions")
    w = _checks.weights(weights, n)
    p = _checks.float_at_least(p, "p", 1.0)
    if not p >= 1:
        raise ValueError(f"p must be >= 1, got {p}")
    uniq, inverse, counts = np.unique(tau, return_inverse=True, return_counts=True)
    total = 0.0
    single = counts[inverse] == 1
    total += float(np.sum(w[single] * np.linalg.norm(X[single] - Y[single], axis=1) ** p))
    for k in np.flatnonzero(counts > 1):
        idx = np.flatnonzero(inverse == k)
        mass = w[idx].sum()
        if mass == 0:
            continue
        wk = w[idx] / mass
        total += mass * transport.wasserstein(X[idx], Y[idx], weights_x=wk, weights_y=wk,
                                              p=p) ** p
    return total ** (1.0 / p)


def masked_flow_map(positions: ArrayLike, A: ArrayLike, V: ArrayLike, T: float, *, steps: int = 10,
                    weights: ArrayLike | None = None) -> Callable[..., Any]:
    r"""The time-``T`` map :math:`X_0 \mapsto X(T)` of the masked particle flow, by RK4.

    :math:`\dot x_i = \Gamma_{\bar\mu(t)}(\tau_i, x_i)` (:func:`masked_field`), integrated with
    ``steps`` classical Runge-Kutta steps by :func:`transformer_pde.dynamics.integrate`.
    Returns a function ``X0 -> X(T)``.

    Parameters
    ----------
    positions : array (n,)
        Positions of the atoms, in :math:`[0, 1]`.
    A : array (d, d) or callable
        Key-query matrix.
    V : array (p, d) or callable
        Value matrix.
    T : float
        Final time, positive.
    steps : int
        Number of RK4 steps.
    weights : array (n,), optional
        Weights of the atoms.

    Returns
    -------
    callable
        ``X0 -> X(T)``.

    Raises
    ------
    ValueError
        If ``steps`` or ``T`` is not positive, or as in :func:`masked_field`.

    Examples
    --------
    The first token sees only itself: with :math:`V = 1` it grows like :math:`e^t`:

    >>> import numpy as np
    >>> flow = masked_flow_map([0.5, 1.0], [[0.0]], [[1.0]], 1.0)
    >>> print(f"{flow(np.array([[1.0], [0.0]]))[0, 0]:.4f}")
    2.7183

    References
    ----------
    :cite:`castin2025unified`
    """
    steps = _checks.positive_int(steps, "steps")
    T = _checks.positive_float(T, "T")
    field = masked_field(positions, A, V, weights=weights)
    times = np.linspace(0.0, T, steps + 1)

    def flow(X0):
        return dynamics.integrate(field, X0, times, method="rk4")[-1]

    return flow


def masked_flow_jacobian(positions: ArrayLike, X0: ArrayLike, A: ArrayLike, V: ArrayLike, T: float,
                         *, steps: int = 10, weights: ArrayLike | None = None,
                         h: float = 1e-6) -> NDArray[np.float64]:
    r"""Jacobian :math:`J = \partial X(T)/\partial X_0` of :func:`masked_flow_map`, shape (nd, nd).

    Central differences :math:`J e_k \approx (\Phi(X_0 + h e_k) - \Phi(X_0 - h e_k))/(2h)`
    (error :math:`O(h^2)` plus rounding :math:`O(\epsilon/h)`), rows and columns in the order of
    ``X0.ravel()``. Token :math:`i` sees tokens :math:`j` with :math:`\tau_j \le \tau_i` only, so
    for a sequence :math:`J` is block lower triangular. With uniform weights on distinct
    positions, :math:`\|J\|_2` is the supremum over infinitesimal perturbations of the tokens
    of :math:`W_2^{\mathrm{cond}}(\bar\mu(T), \bar\nu(T)) / W_2^{\mathrm{cond}}(\bar\mu_0,
    \bar\nu_0)` (:func:`conditional_distance`): a local stability constant of the masked
    Transformer PDE of Castin, Ablin, Carrillo and Peyré (2025) at :math:`\bar\mu_0`.

    Parameters
    ----------
    positions : array (n,)
        Positions of the atoms, in :math:`[0, 1]`.
    X0 : array (n, d)
        Initial tokens.
    A : array (d, d) or callable
        Key-query matrix.
    V : array (d, d) or callable
        Value matrix.
    T : float
        Final time, positive.
    steps : int
        Number of RK4 steps.
    weights : array (n,), optional
        Weights of the atoms.
    h : float
        Difference step, positive.

    Returns
    -------
    array (n d, n d)

    Raises
    ------
    ValueError
        If ``h``, ``steps`` or ``T`` is not positive, or as in :func:`masked_field`.

    Examples
    --------
    The first token does not see the second, so the Jacobian is lower triangular:

    >>> J = masked_flow_jacobian([0.5, 1.0], [[0.1], [0.3]], [[1.0]], [[1.0]], 0.5)
    >>> print(J.shape, J[0, 1] == 0)
    (2, 2) True

    References
    ----------
    :cite:`castin2025unified`
    """
    X0 = _checks.points(X0, "X0")
    h = _checks.positive_float(h, "h")
    n, d = X0.shape
    if not callable(V):
        V = _checks.matrix(V, "V", shape=(d, d))
    flow = masked_flow_map(positions, A, V, T, steps=steps, weights=weights)
    J = np.empty((n * d, n * d))
    for k in range(n * d):
        E = np.zeros(n * d)
        E[k] = h
        E = E.reshape(n, d)
        J[:, k] = ((flow(X0 + E) - flow(X0 - E)) / (2 * h)).ravel()
    return J


def gaussian_sequence_field_variance(query_positions: ArrayLike, queries: ArrayLike, A: ArrayLike,
                                     V: ArrayLike, *, mean_curve: Callable[..., Any], sigma: float,
                                     grid: int = 20000,
                                     independent_positions: bool = False) -> NDArray[np.float64]:
    r"""The limit :math:`c = \lim_n n\,\mathbb E|\Gamma_{\bar\mu_n} - \Gamma_{\bar\rho}|^2(s, x)`.

    For the sequences of :func:`sample_gaussian_sequence` (:math:`x_i \sim \mathcal N(m(i/n),
    \sigma^2 I)` independent, at positions :math:`i/n`) and the law :math:`\bar\rho = ds\,
    \mathcal N(m(s), \sigma^2 I)(dy)` of :func:`gaussian_sequence_field`, with :math:`b = Ax`,
    :math:`e(\tau) = e^{\langle b, m(\tau)\rangle}` and :math:`g = \sigma^2 b + \int_0^s m e\,
    d\tau / \int_0^s e\, d\tau` (so that :math:`\Gamma_{\bar\rho}(s, x) = V g`),

    .. math::

        c(s, x) = \frac{\int_0^s v(\tau)\, d\tau}{\big(\int_0^s e(\tau)\, d\tau\big)^2},
        \quad
        v = e^2\Big(e^{\sigma^2|b|^2}\big(|V(m + 2\sigma^2 b - g)|^2 + \sigma^2\|V\|_F^2\big)
            - |V(m + \sigma^2 b - g)|^2\Big).

    Derivation (the chapter on masked attention): :math:`\Gamma_{\bar\mu_n} - \Gamma_{\bar\rho}
    = V\sum_{i \le ns} w_i (x_i - g) / \sum_{i \le ns} w_i` with :math:`w_i = e^{\langle b,
    x_i\rangle}`; the numerator has mean :math:`O(1)` and variance :math:`n\int_0^s
    \mathrm{Var}_\tau[w V(y - g)]\,d\tau + O(1)` (independent, *not* identically distributed
    terms: the variance is taken at each position), the denominator is :math:`n\int_0^s
    \mathbb E_\tau[w]\,d\tau\,(1 + O_P(n^{-1/2}))`, and the Gaussian moments
    :math:`\mathbb E[w] = e^{\langle b, m\rangle + \sigma^2|b|^2/2}`, :math:`\mathbb E[w^2|V(y -
    g)|^2] = e^{2\langle b, m\rangle + 2\sigma^2|b|^2}(|V(m + 2\sigma^2 b - g)|^2 + \sigma^2
    \|V\|_F^2)` give :math:`v` (the factor :math:`e^{\sigma^2|b|^2}` of the denominator is
    divided out). The corrections are :math:`O(1/n)` relative, from queries that see few
    tokens (:math:`ns` small). For the measures on positions and tokens of Castin, Ablin,
    Carrillo and Peyré (2025).

    With ``independent_positions=True``: the constant of :math:`n` independent draws from
    :math:`\bar\rho`, positions uniform on :math:`[0, 1]` included, for which the variance is
    not taken position by position: :math:`v + e^2|V(m + \sigma^2 b - g)|^2` replaces
    :math:`v` (the alternative that the sequences' own constant rules out).

    Integrals by the cumulative trapezoidal rule on ``grid`` intervals, as in
    :func:`gaussian_sequence_field`. Returns an array of shape ``(q,)``.

    Parameters
    ----------
    query_positions, queries, A, V, mean_curve, sigma, grid
        As in :func:`gaussian_sequence_field`.
    independent_positions : bool
        Use the constant of independent draws from :math:`\bar\rho`.

    Returns
    -------
    array (q,)

    Raises
    ------
    ValueError
        As in :func:`gaussian_sequence_field`.

    Examples
    --------
    With :math:`A = 0` and a constant curve the field is the mean of the :math:`ns` tokens of
    the past, whose error has :math:`n\,\mathbb E|\cdot|^2 = \sigma^2\|V\|_F^2/s`:

    >>> import numpy as np
    >>> flat = lambda s: np.tile([1.0, 0.0], (len(s), 1))
    >>> c = gaussian_sequence_field_variance([1.0, 0.5], [[0.0, 1.0], [0.0, 1.0]], np.zeros((2, 2)),
    ...                                      np.eye(2), mean_curve=flat, sigma=0.5, grid=100)
    >>> print([f"{v:.9f}" for v in c])
    ['0.500000000', '1.000000000']

    References
    ----------
    :cite:`castin2025unified`
    """
    Y, s, A, V, sigma, grid, tau, M = _gaussian_sequence_inputs(
        query_positions, queries, A, V, mean_curve, sigma, grid)
    q, d = Y.shape
    h = 1.0 / grid
    frob2 = float(np.sum(V**2))

    def cumulative(f, at):
        cum = np.concatenate([[0.0], np.cumsum(0.5 * h * (f[1:] + f[:-1]))])
        return np.interp(at, tau, cum)

    out = np.empty(q)
    for k in range(q):
        b = A @ Y[k]
        logits = M @ b
        e = np.exp(logits - logits.max())  # e(tau) up to a constant factor, which cancels
        Z = cumulative(e, s[k])
        g = sigma**2 * b + np.array([cumulative(M[:, c] * e, s[k]) for c in range(d)]) / Z
        tilted2 = (M + 2 * sigma**2 * b - g) @ V.T
        tilted1 = (M + sigma**2 * b - g) @ V.T
        v = e**2 * (np.exp(sigma**2 * (b @ b)) * (np.sum(tilted2**2, axis=1) + sigma**2 * frob2)
                    - (0.0 if independent_positions else np.sum(tilted1**2, axis=1)))
        out[k] = cumulative(v, s[k]) / Z**2
    return out


def gaussian_sequence_field_covariance(query_positions: ArrayLike, queries: ArrayLike, A: ArrayLike,
                                       V: ArrayLike, *, mean_curve: Callable[..., Any],
                                       sigma: float, grid: int = 20000) -> NDArray[np.float64]:
    r"""Limit covariance of :math:`\sqrt n\,(\Gamma_{\bar\mu_n} - \Gamma_{\bar\rho})` at queries.

    For the sequences of :func:`sample_gaussian_sequence` and the law :math:`\bar\rho` of
    :func:`gaussian_sequence_field`, the errors at the query points :math:`(s_k, x_k)` are
    jointly asymptotically Gaussian: :math:`\sqrt n\,(\Gamma_{\bar\mu_n} -
    \Gamma_{\bar\rho})(s_k, x_k) \to G_k` with :math:`\mathbb E\,G_k G_l^\top = C_{kl}`,

    .. math::

        C_{kl} = \frac{V\Big(\int_0^{s_k \wedge s_l} e_k e_l \big(\kappa_{kl}\,
            [(a - g_k)(a - g_l)^\top + \sigma^2 I] - (m + \sigma^2 b_k - g_k)
            (m + \sigma^2 b_l - g_l)^\top\big)\, d\tau\Big) V^\top}
            {\int_0^{s_k} e_k\, d\tau \int_0^{s_l} e_l\, d\tau},

    with :math:`b_k = A x_k`, :math:`e_k(\tau) = e^{\langle b_k, m(\tau)\rangle}`,
    :math:`g_k` as in :func:`gaussian_sequence_field_variance`, :math:`a = m + \sigma^2(b_k +
    b_l)` and :math:`\kappa_{kl} = e^{\sigma^2\langle b_k, b_l\rangle}`. Derivation: the
    error at :math:`(s, x)` is :math:`V\sum_{i \le ns} w_i(x_i - g)/\sum_{i \le ns} w_i`,
    :math:`w_i = e^{\langle b, x_i\rangle}`; two query points share the tokens
    :math:`i \le n(s_k \wedge s_l)`, which are independent, and the Gaussian moment
    :math:`\mathbb E[e^{\langle \beta, y\rangle}(y - g)(y - g')^\top] =
    e^{\langle \beta, m\rangle + \sigma^2|\beta|^2/2}[(m + \sigma^2\beta - g)(m + \sigma^2\beta -
    g')^\top + \sigma^2 I]` for :math:`y \sim \mathcal N(m, \sigma^2 I)` gives each term (the
    measures on positions and tokens of Castin, Ablin, Carrillo and Peyré, 2025). The trace of
    the block :math:`C_{kk}` is :func:`gaussian_sequence_field_variance`.

    Consequently :math:`n` times the mean squared error over the ``q`` points tends in law to
    :math:`\sum_k \lambda_k \xi_k^2` with :math:`\xi_k` independent standard normal and
    :math:`\lambda_k` the eigenvalues of :math:`C/q` (see :func:`quadratic_form_mean_band`).

    Integrals by the cumulative trapezoidal rule on ``grid`` intervals, as in
    :func:`gaussian_sequence_field`, once for each pair of distinct query tokens
    (:math:`O(u^2\,\text{grid}\,d^2)` work for :math:`u` distinct rows of ``queries``).

    Parameters
    ----------
    query_positions, queries, A, V, mean_curve, sigma, grid
        As in :func:`gaussian_sequence_field`.

    Returns
    -------
    array (q p, q p)
        Row and column ``k p + c``: component ``c`` of the error at query point ``k``.

    Raises
    ------
    ValueError
        As in :func:`gaussian_sequence_field`.

    Examples
    --------
    >>> import numpy as np
    >>> flat = lambda s: np.tile([1.0, 0.0], (len(s), 1))
    >>> C = gaussian_sequence_field_covariance([1.0], [[0.0, 1.0]], np.zeros((2, 2)), np.eye(2),
    ...                                        mean_curve=flat, sigma=0.5, grid=100)
    >>> print((np.round(C, 9) + 0.0).tolist())
    [[0.25, 0.0], [0.0, 0.25]]

    References
    ----------
    :cite:`castin2025unified`
    """
    Y, s, A, V, sigma, grid, tau, M = _gaussian_sequence_inputs(
        query_positions, queries, A, V, mean_curve, sigma, grid)
    q, d = Y.shape
    h = 1.0 / grid
    s2 = sigma**2

    def cumulative(f):  # cumulative trapezoid along axis 0
        steps = 0.5 * h * (f[1:] + f[:-1])
        return np.concatenate([np.zeros((1,) + f.shape[1:]), np.cumsum(steps, axis=0)])

    def outer(x, y):
        return x[..., :, None] * y[..., None, :]

    def at(cum, t):  # cumulative integrals at the positions t, linear in between
        flat = cum.reshape(grid + 1, -1)
        return np.stack([np.interp(t, tau, flat[:, c]) for c in range(flat.shape[1])],
                        axis=-1).reshape(t.shape + cum.shape[1:])

    tokens, which = np.unique(Y, axis=0, return_inverse=True)
    which = which.ravel()
    B = tokens @ A.T  # b for each distinct token
    logits = M @ B.T
    E = np.exp(logits - logits.max(axis=0))  # e(tau) per distinct token, up to a factor
    Z = np.empty(q)
    G = np.empty((q, d))
    for u in range(tokens.shape[0]):
        rows = which == u
        cz = cumulative(np.hstack([E[:, u:u + 1], M * E[:, u:u + 1]]))
        zs = at(cz, s[rows])
        Z[rows] = zs[:, 0]
        G[rows] = s2 * B[u] + zs[:, 1:] / zs[:, :1]
    p = V.shape[0]
    C = np.empty((q, q, p, p))
    eye = np.eye(d)
    for u in range(tokens.shape[0]):
        for v in range(tokens.shape[0]):
            ee = E[:, u] * E[:, v]
            kappa = np.exp(s2 * (B[u] @ B[v]))
            a = M + s2 * (B[u] + B[v])
            a1, a2 = M + s2 * B[u], M + s2 * B[v]
            parts = [ee[:, None], ee[:, None] * a, ee[:, None] * a1, ee[:, None] * a2,
                     (ee[:, None, None] * (kappa * (a[:, :, None] * a[:, None, :] + s2 * eye)
                                           - a1[:, :, None] * a2[:, None, :])).reshape(-1, d * d)]
            cum = cumulative(np.hstack(parts))
            ku, kv = np.flatnonzero(which == u), np.flatnonzero(which == v)
            t = np.minimum(s[ku][:, None], s[kv][None, :])
            vals = at(cum, t)  # (|ku|, |kv|, 1 + 3d + d^2)
            i0 = vals[..., 0][..., None, None]
            ia, ia1, ia2 = (vals[..., 1 + j * d:1 + (j + 1) * d] for j in range(3))
            iaa = vals[..., 1 + 3 * d:].reshape(vals.shape[:2] + (d, d))
            g, g2 = G[ku][:, None, :], G[kv][None, :, :]
            inner = (iaa - kappa * (outer(ia, g2) + outer(g, ia)) + kappa * i0 * outer(g, g2)
                     + outer(ia1, g2) + outer(g, ia2) - i0 * outer(g, g2))
            C[np.ix_(ku, kv)] = V @ inner @ V.T / (Z[ku][:, None] * Z[kv][None, :])[..., None, None]
    C = C.transpose(0, 2, 1, 3).reshape(q * p, q * p)
    return 0.5 * (C + C.T)  # symmetric up to rounding: make it exactly so


def quadratic_form_mean_band(weights: ArrayLike, count: int,
                             false_alarm: float) -> tuple[float, float]:
    r"""Band for the mean of ``count`` independent copies of :math:`Q = \sum_k \lambda_k \xi_k^2`.

    With :math:`\xi_k` independent standard normal, :math:`\lambda_k \ge 0` (``weights``),
    :math:`K` = ``count`` and :math:`x = \log(2/\alpha)`, :math:`\alpha` = ``false_alarm``,
    the mean :math:`\bar Q_K` of :math:`K` copies satisfies

    .. math::

        \mathbb P\Big(\bar Q_K < \sum_k \lambda_k - 2|\lambda|_2\sqrt{x/K}\Big) \le e^{-x},
        \qquad
        \mathbb P\Big(\bar Q_K > \sum_k \lambda_k + 2|\lambda|_2\sqrt{x/K}
            + 2\lambda_{\max}\, x/K\Big) \le e^{-x},

    so it leaves the band with probability at most :math:`\alpha`: Lemma 1 of Laurent and
    Massart (2000, *Annals of Statistics* 28, 1302-1338), applied to :math:`K\bar Q_K`, a
    weighted sum of :math:`\chi^2_1` variables with each weight :math:`\lambda_k` repeated
    :math:`K` times. It needs no estimate of the variance from the sample, whose skewness makes
    a Student band too narrow in the lower tail.

    Parameters
    ----------
    weights : array (r,)
        The :math:`\lambda_k \ge 0`, e.g. the eigenvalues of
        :func:`gaussian_sequence_field_covariance` divided by the number of query points.
    count : int
        Number :math:`K \ge 1` of independent copies averaged.
    false_alarm : float
        :math:`\alpha \in (0, 1)`.

    Returns
    -------
    (float, float)
        The band's lower and upper ends.

    Raises
    ------
    ValueError
        If ``weights`` is not a non-empty 1-D array of finite non-negative numbers, ``count`` is
        not a positive integer or ``false_alarm`` is not in :math:`(0, 1)`.

    Examples
    --------
    One :math:`\chi^2_1` variable and :math:`x = \log(2/\alpha) = 1`: the band
    :math:`(1 - 2, 1 + 2 + 2)`:

    >>> import numpy as np
    >>> low, high = quadratic_form_mean_band([1.0], 1, 2 / np.e)
    >>> print(f"{low:.6f} {high:.6f}")
    -1.000000 5.000000

    References
    ----------
    :cite:`laurent2000adaptive`
    """
    lam = _checks.real_array(weights, "weights")
    if lam.ndim != 1 or lam.size == 0 or not np.all(np.isfinite(lam)) or np.any(lam < 0):
        raise ValueError("weights must be a non-empty 1-d array of finite numbers >= 0")
    count = _checks.positive_int(count, "count")
    false_alarm = _checks.finite_float(false_alarm, "false_alarm")
    if not 0 < false_alarm < 1:
        raise ValueError(f"false_alarm must lie in (0, 1), got {false_alarm}")
    x = np.log(2.0 / false_alarm)
    total, l2 = float(lam.sum()), float(np.sqrt(np.sum(lam**2)))
    half = 2.0 * l2 * np.sqrt(x / count)
    return total - half, total + half + 2.0 * float(lam.max()) * x / count
