r"""The hardmax phase of the clustering dynamics, and how the softmax dynamics enters it.

For :math:`V = I_d` the rescaled tokens :math:`z_i = e^{-t}x_i` of Geshkovski, Letrouit,
Polyanskiy and Rigollet (*The emergence of clusters in self-attention dynamics*, NeurIPS 2023)
follow :math:`\dot z_i = \sum_j P_{ij}(t)(z_j - z_i)` with logits :math:`e^{2t}\langle A z_i,
z_j\rangle`: as :math:`t` grows, token :math:`i` attends to the maximiser of
:math:`j \mapsto \langle A z_i, z_j\rangle`. This module reads that *hardmax* structure off an
attention matrix (:func:`attention_structure`), finds when a run has entered it for good
(:func:`settling_index`), solves the hardmax flow in closed form (:func:`hardmax_flow`, after
Alcalde, Geshkovski and Ruiz-Balet, *Attention's forward pass and Frank-Wolfe*, 2025),
bounds a posteriori how far the softmax dynamics is from it (:func:`hardmax_deviation`), and
integrates runs until each has spent a given time in its hardmax phase
(:func:`integrate_until_settled`): how long the soft phase lasts is decided by the draw.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _checks
from .clusters import integrate_draws, polytope_vertices, rescaled_attention_matrix

__all__ = [
    "attention_structure",
    "settling_index",
    "hardmax_flow",
    "hardmax_deviation",
    "integrate_until_settled",
]


def _stochastic(P, name="P"):
    P = _checks.real_array(P, name)
    if P.ndim < 2 or P.shape[-1] != P.shape[-2] or 0 in P.shape or not np.all(np.isfinite(P)):
        raise ValueError(f"{name} must be a finite array of square matrices (..., n, n), "
                         f"got shape {P.shape}")
    return P


def attention_structure(P: ArrayLike, tol: float
                        ) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    r"""The targets :math:`\ell(i) = \arg\max_j P_{ij}` and the rows that are settled (depth one).

    Row :math:`i` is *settled* when it is within ``tol`` of its basis row,
    :math:`1 - P_{i\ell(i)} \le tol` (the other entries of a stochastic row then sum to at most
    ``tol``), and its target attends to itself within ``tol``: :math:`\ell(\ell(i)) = \ell(i)`
    and :math:`1 - P_{\ell\ell} \le tol`. The targets of settled rows are *leaders*; a settled
    row never follows a follower. A Boolean matrix can fail this (a chain
    :math:`i \to j \to \ell`), which is why depth one is tested separately.

    Parameters
    ----------
    P : array (..., n, n)
        Row-stochastic matrices (a stack is handled matrix by matrix).
    tol : float
        Tolerance on :math:`1 - P_{i\ell(i)}`, ``>= 0``.

    Returns
    -------
    target : int array (..., n)
        :math:`\ell(i)`.
    settled : bool array (..., n)
        Which rows are settled.

    Raises
    ------
    ValueError
        If ``P`` is not a finite stack of square matrices or ``tol`` is negative.

    Examples
    --------
    >>> import numpy as np
    >>> P = np.array([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.4, 0.6, 0.0]])
    >>> target, settled = attention_structure(P, 1e-3)
    >>> target.tolist(), settled.tolist()  # row 2 still splits its attention
    ([1, 1, 1], [True, True, False])

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    P = _stochastic(P)
    tol = _checks.nonnegative_float(tol, "tol")
    target = np.argmax(P, axis=-1)
    near = 1.0 - np.take_along_axis(P, target[..., None], axis=-1)[..., 0] <= tol
    depth_one = np.take_along_axis(target, target, axis=-1) == target
    leader_ok = np.take_along_axis(near, target, axis=-1)
    return target.astype(int), near & depth_one & leader_ok


def settling_index(P: ArrayLike, tol: float, rows: ArrayLike | None = None) -> int:
    r"""The first index from which the given rows stay settled, with one leader map, to the end.

    For a stack ``P`` of attention matrices along a run (shape ``(m, n, n)``), returns the
    smallest :math:`k` such that at every index :math:`k' \ge k` the rows ``rows`` (default:
    all) are settled (:func:`attention_structure`) with the targets they have at the last
    index; ``m`` if they are not settled at the last index. On the run's grid the soft phase of
    these rows ends at ``times[k]``.

    Parameters
    ----------
    P : array (m, n, n)
        Row-stochastic attention matrices along a run.
    tol : float
        Tolerance of :func:`attention_structure`, ``>= 0``.
    rows : int array, optional
        The rows that must settle; all by default.

    Returns
    -------
    int
        The index :math:`k`, in ``0..m``.

    Raises
    ------
    ValueError
        If ``P`` is not a finite stack of square matrices, ``tol`` is negative or ``rows``
        holds an index outside ``0..n-1``.

    Examples
    --------
    >>> import numpy as np
    >>> soft = np.full((3, 3), 1 / 3)
    >>> hard = np.tile([0.0, 1.0, 0.0], (3, 1))  # every token attends to token 1
    >>> settling_index(np.stack([soft, hard, hard]), 1e-3)
    1

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    P = _stochastic(P)
    if P.ndim != 3:
        raise ValueError(f"P must be a stack of matrices (m, n, n), got shape {P.shape}")
    target, settled = attention_structure(P, tol)
    rows = np.arange(P.shape[1]) if rows is None else np.asarray(rows, dtype=int)
    if rows.ndim != 1 or np.any((rows < 0) | (rows >= P.shape[1])):
        raise ValueError(f"rows must be a 1-D array of indices in 0..{P.shape[1] - 1}, "
                         f"got {rows!r}")
    good = np.all(settled[:, rows] & (target[:, rows] == target[-1, rows]), axis=1)
    bad = np.flatnonzero(~good)
    return int(bad[-1] + 1) if bad.size else 0


def hardmax_flow(Z0: ArrayLike, A: ArrayLike, times: ArrayLike, *, margin: float = 1e-9
                 ) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    r"""The hardmax flow of Alcalde, Geshkovski and Ruiz-Balet in closed form.

    The flow :math:`\dot z_i = v_{\sigma(i)} - z_i`, where :math:`v_{\sigma(i)}` maximises
    :math:`y \mapsto \langle A z_i, y\rangle` over the hull :math:`\mathcal K` of the tokens,
    has for :math:`A` positive definite and a *generic* start (every vertex of
    :math:`\mathcal K = \operatorname{conv}\{z_i(0)\}` strictly in its own hardmax cell, every
    token strictly in one cell) the solution

    .. math::

        z_i(t) = e^{-t} z_i(0) + (1 - e^{-t})\, v_{\sigma(i)},

    :math:`\sigma(i)` the cell of :math:`z_i(0)`: vertices do not move and each token runs
    straight to the vertex of its cell (Alcalde, Geshkovski and Ruiz-Balet 2025, their
    hardmax ODE). The maximum of a linear form over :math:`\mathcal K` is attained at a vertex,
    which is a token: this is the hardmax limit of the rescaled dynamics for :math:`V = I_d`.

    Parameters
    ----------
    Z0 : array (n, d)
    A : array (d, d)
        Symmetric positive definite.
    times : array (m,)
        Times from 0.
    margin : float
        Relative margin (times the largest :math:`|z_i(0)|^2`) by which each token must win
        its cell; a start closer to a tie raises ``ValueError``.

    Returns
    -------
    trajectory : array (m, n, d)
    cell : int array (n,)
        Index (into ``Z0``) of the vertex each token runs to.

    Raises
    ------
    ValueError
        On malformed input, ``A`` not symmetric positive definite, or a start within
        ``margin`` of a tie.

    Examples
    --------
    >>> import numpy as np
    >>> Z0 = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.0], [0.5, 0.2]])  # token 3 inside
    >>> traj, cell = hardmax_flow(Z0, np.eye(2), [0.0, 1.0])
    >>> cell.tolist()
    [0, 1, 2, 0]
    >>> z = np.exp(-1.0) * Z0[3] + (1 - np.exp(-1.0)) * Z0[0]
    >>> bool(np.allclose(traj[1, 3], z) and np.allclose(traj[1, :3], Z0[:3]))
    True

    References
    ----------
    :cite:`alcalde2025attention,geshkovski2023emergence`
    """
    Z0 = _checks.points(Z0, "Z0")
    n, d = Z0.shape
    A = _checks.matrix(A, "A", shape=(d, d))
    if np.max(np.abs(A - A.T)) > 1e-12 * max(np.max(np.abs(A)), 1e-300):
        raise ValueError("A must be symmetric")
    if np.linalg.eigvalsh(A)[0] <= 0:
        raise ValueError("A must be positive definite")
    t = _checks.real_array(times, "times")
    if t.ndim != 1 or not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ValueError("times must be a finite 1-D array of times >= 0")
    margin = _checks.nonnegative_float(margin, "margin")
    vert = polytope_vertices(Z0)
    scores = Z0 @ A @ Z0[vert].T  # <A z_i, v_k>
    order = np.sort(scores, axis=1)
    scale = float(np.max(np.sum(Z0 * Z0, axis=1)))
    if len(vert) > 1 and np.min(order[:, -1] - order[:, -2]) <= margin * scale:
        raise ValueError("Z0 is not generic: a token is within the margin of two hardmax cells")
    cell = vert[np.argmax(scores, axis=1)]
    if not np.array_equal(cell[vert], vert):
        raise ValueError("Z0 is not generic: a vertex of the hull does not lie in its own cell")
    decay = np.exp(-t)[:, None, None]
    return decay * Z0[None] + (1.0 - decay) * Z0[cell][None], cell.astype(int)


def hardmax_deviation(W: ArrayLike, times: ArrayLike, P: ArrayLike, target: ArrayLike,
                      lam: float, start: int, rows: ArrayLike | None = None, *,
                      accuracy: float = 0.0
                      ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""How far a run is from the hardmax flow after ``times[start]``: measured and bounded.

    Let :math:`w_i` be linear coordinates of the tokens along which the dynamics reads
    :math:`\dot w_i = \lambda \sum_j P_{ij}(w_j - w_i)` (for :math:`V = I_d`, the tokens
    themselves with :math:`\lambda = 1`; for a left eigenvector :math:`\varphi` of :math:`V`
    with real eigenvalue :math:`\lambda`, :math:`w_i = \langle\varphi, z_i\rangle`). If from
    :math:`t_0` every follower :math:`i` attends to a leader :math:`\ell = \ell(i)` that attends to
    itself, :math:`\Delta_i = w_i - w_\ell` obeys
    :math:`\dot\Delta_i = -\lambda\Delta_i + r_i` with
    :math:`|r_i| \le |\lambda|\,(2 - P_{i\ell} - P_{\ell\ell})\,D`, :math:`D` the diameter of the
    :math:`w_j`, so that

    .. math::

        \big|e^{\lambda(t - t_0)}\Delta_i(t) - \Delta_i(t_0)\big|
        \le |\lambda| \int_{t_0}^{t} e^{\lambda(s - t_0)}\,(2 - P_{i\ell} - P_{\ell\ell})(s)\,
        D(s)\, ds .

    On the grid the integral is bounded step by step with the weights at the left end (they
    decrease in the hardmax phase), :math:`e^{\lambda(s - t_0)}` at its larger end, and
    :math:`D(s) \le D(t_k)e^{2|\lambda|(s - t_k)}` (every :math:`|\dot w_j| \le |\lambda| D`).

    Parameters
    ----------
    W : array (m, n) or (m, n, k)
        The coordinates along the run at ``times``.
    times : array (m,)
    P : array (m, n, n)
        The attention matrices at ``times``.
    target : int array (n,)
        The leader map :math:`\ell` on ``times[start:]`` (:func:`attention_structure`).
    lam : float
        :math:`\lambda`.
    start : int
        Index of :math:`t_0`.
    rows : int array, optional
        The tokens to measure (default: all); each must follow a leader, or be one.
    accuracy : float
        Relative accuracy of the computed coordinates (e.g. of the solver). The measured side
        is then off by at most :math:`2\,accuracy\,(e^{\lambda(t - t_0)} S(t) + S(t_0))`,
        :math:`S(s) = \max(1, \max_j |w_j(s)|)`, which is added to the bound.

    Returns
    -------
    measured, bound : arrays (m - start, n)
        The left and right sides at ``times[start:]``: zero for leaders, NaN for the tokens not
        in ``rows``.

    Raises
    ------
    ValueError
        If the arrays do not agree, ``target`` is not a leader map of integer indices, or
        ``lam``, ``start`` or ``accuracy`` are not valid.

    Examples
    --------
    A follower attending only to a leader that attends to itself moves at exactly the hardmax
    rate: the measured side is rounding, the bound is zero.

    >>> import numpy as np
    >>> t = np.linspace(0.0, 2.0, 21)
    >>> W = np.zeros((t.size, 2)); W[:, 1] = np.exp(-t)
    >>> P = np.zeros((t.size, 2, 2)); P[:, :, 0] = 1.0
    >>> measured, bound = hardmax_deviation(W, t, P, [0, 0], 1.0, 0)
    >>> print(measured.shape, bool(np.max(measured) < 1e-12), bool(np.max(bound) == 0.0))
    (21, 2) True True

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    W = _checks.real_array(W, "W")
    if W.ndim == 2:
        W = W[..., None]
    t = _checks.real_array(times, "times")
    P = _stochastic(P)
    m, n = W.shape[:2]
    if W.ndim != 3 or t.shape != (m,) or P.shape != (m, n, n) or not np.all(np.isfinite(W)):
        raise ValueError(f"W (m, n[, k]), times (m,) and P (m, n, n) must agree, got "
                         f"{W.shape}, {t.shape}, {P.shape}")
    target = np.asarray(target)
    if target.dtype.kind not in "iu" or target.shape != (n,) \
            or not np.all((target >= 0) & (target < n)):
        raise ValueError(f"target must be n = {n} indices, got {target!r}")
    rows = np.arange(n) if rows is None else np.asarray(rows, dtype=int)
    if rows.ndim != 1 or not np.all((rows >= 0) & (rows < n)):
        raise ValueError(f"rows must be indices of tokens, got {rows!r}")
    if not np.array_equal(target[target[rows]], target[rows]):
        raise ValueError("target must map every token of rows to a leader that attends to itself")
    lam = _checks.finite_float(lam, "lam")
    accuracy = _checks.nonnegative_float(accuracy, "accuracy")
    start = _checks.seed(start, "start")  # a non-negative integer
    if not 0 <= start < m:
        raise ValueError(f"start must be an index of times, got {start}")
    W, t, P = W[start:], t[start:] - t[start], P[start:]
    delta = W - W[:, target]  # (m', n, k)
    scaled = np.exp(lam * t)[:, None, None] * delta
    measured = np.linalg.norm(scaled - delta[0], axis=2)
    every = np.arange(n)
    weight = 2.0 - P[:, every, target] - P[:, target, target]  # (m', n)
    diam = np.array([np.max(np.linalg.norm(w[:, None] - w[None], axis=2)) for w in W])
    h = np.diff(t)
    growth = np.maximum(np.exp(lam * t[:-1]), np.exp(lam * t[1:]))
    steps = abs(lam) * h[:, None] * growth[:, None] * weight[:-1] * \
        (diam[:-1] * np.exp(2 * abs(lam) * h))[:, None]
    bound = np.vstack([np.zeros((1, n)), np.cumsum(steps, axis=0)])
    size = np.maximum(1.0, np.linalg.norm(W, axis=2).max(axis=1))  # S(s)
    bound += (2 * accuracy * (np.exp(lam * t) * size + size[0]))[:, None]
    leaders = target == np.arange(n)
    measured[:, leaders] = 0.0
    bound[:, leaders] = 0.0
    other = np.setdiff1d(np.arange(n), rows)
    measured[:, other] = np.nan
    bound[:, other] = np.nan
    return measured, bound


def _attention_stack(z, times, A, V):
    return np.stack([rescaled_attention_matrix(zk, tk, A, V)
                     for zk, tk in zip(z, times, strict=True)])


def _window_start(run, modes, window_steps, tol, rel):
    """The first grid index from which the run is settled and its deviation bound is small."""
    P, t, z = run["P"], run["t"], run["z"]
    k = settling_index(P, tol)
    target = attention_structure(P[-1], tol)[0]
    followers = np.flatnonzero(target != np.arange(len(target)))
    while k + window_steps < len(t):
        stop = k + window_steps + 1
        small = True
        for Phi, lam in modes:
            W = z[k:stop] @ Phi.T
            _, bound = hardmax_deviation(W, t[k:stop], P[k:stop], target, lam, 0)
            size = np.linalg.norm(W[0] - W[0][target], axis=1)
            small &= bool(np.all(bound[-1, followers] <= rel * size[followers]))
        if small:
            return k, target
        k += 1
    return None, target


def integrate_until_settled(Z0: ArrayLike, times: ArrayLike, A: ArrayLike,
                            V: ArrayLike | None = None, *,
                            modes: list[tuple[ArrayLike, float]] | None = None,
                            window: float = 4.0, cap: float = 20.0, tol: float = 1e-6,
                            rel: float = 1e-2, rtol: float = 1e-12, atol: float = 1e-14
                            ) -> list[dict]:
    r"""Runs of the rescaled dynamics, each integrated until ``window`` into its hardmax phase.

    Every run is integrated on the uniform grid ``times`` (from 0, step :math:`h`) with
    :func:`transformer_pde.clusters.integrate_draws`; then each run whose hardmax phase has
    not yet lasted ``window`` time units is integrated further, in blocks of ``window``, until
    it has or its grid reaches ``cap``. A run is in its hardmax phase from the first grid time
    :math:`t_0` after which every row is settled with one leader map
    (:func:`settling_index`) and the deviation bound of :func:`hardmax_deviation` over
    :math:`[t_0, t_0 + window]` is at most ``rel`` times the initial distance of every
    follower to its leader, along every mode. The time this takes depends on the run (on how
    close the initial tokens are to a tie of the hardmax), so no fixed horizon serves every
    draw.

    Parameters
    ----------
    Z0 : array (k, n, d)
    times : array (m,)
        Uniform grid from 0.
    A, V : arrays (d, d)
        ``V`` defaults to the identity.
    modes : list of (Phi, lam)
        Linear coordinates :math:`w = \Phi z` (rows of ``Phi`` left eigenvectors of :math:`V`
        for the real eigenvalue ``lam``) in which the deviation is measured; default the
        tokens themselves with :math:`\lambda = 1`, valid for :math:`V = I_d`.
    window, cap : float
        Length of the hardmax window, and the last time a run may reach.
    tol, rel : float
        Tolerances of :func:`attention_structure` and of the deviation bound.
    rtol, atol : float
        Tolerances of the adaptive solver.

    Returns
    -------
    list of dict
        Per run: ``t``, ``z`` (its grid and tokens), ``P`` (attention matrices on the grid),
        ``start`` (index of :math:`t_0`, ``None`` if the run did not settle by ``cap``),
        ``stop`` (index of :math:`t_0 + window`), ``target`` (the leader map).

    Raises
    ------
    ValueError
        On bad shapes, a non-uniform ``times``, or bad tolerances.

    Examples
    --------
    Three tokens: the second follows the first, the third leads itself.

    >>> import numpy as np
    >>> Z0 = np.array([[[1.0, 0.0], [0.8, 0.5], [-1.0, 0.1]]])
    >>> run = integrate_until_settled(Z0, np.linspace(0.0, 2.0, 21), np.eye(2))[0]
    >>> print(run["start"] is not None, run["target"].tolist())
    True [0, 0, 2]

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    Z0 = _checks.real_array(Z0, "Z0")
    if Z0.ndim != 3:
        raise ValueError(f"Z0 must have shape (k, n, d), got {Z0.shape}")
    d = Z0.shape[2]
    V = np.eye(d) if V is None else _checks.matrix(V, "V", shape=(d, d))
    A = _checks.matrix(A, "A", shape=(d, d))
    modes = [(np.eye(d), 1.0)] if modes is None else [
        (_checks.matrix(Phi, "Phi", cols=d), float(lam)) for Phi, lam in modes]
    t = _checks.real_array(times, "times")
    h = t[1] - t[0] if t.size > 1 else 0.0
    if t.ndim != 1 or t.size < 2 or t[0] != 0 or not np.allclose(np.diff(t), h):
        raise ValueError("times must be a uniform grid from 0")
    window = _checks.positive_float(window, "window")
    cap = _checks.positive_float(cap, "cap")
    steps = int(round(window / h))
    paths = integrate_draws(Z0, t, A, V, rtol=rtol, atol=atol)
    runs: list[dict[str, Any]] = [{"t": t, "z": paths[:, r], "start": None}
                                  for r in range(Z0.shape[0])]
    pending = list(range(len(runs)))
    while pending:
        for r in pending:
            run = runs[r]
            run["P"] = _attention_stack(run["z"], run["t"], A, V)
            run["start"], run["target"] = _window_start(run, modes, steps, tol, rel)
        pending = [r for r in pending if runs[r]["start"] is None]
        last = runs[pending[0]]["t"][-1] if pending else cap
        if not pending or last + window > cap + 1e-9:
            break
        more = last + h * np.arange(steps + 1)
        ext = integrate_draws(np.stack([runs[r]["z"][-1] for r in pending]), more, A, V,
                              rtol=rtol, atol=atol)
        for j, r in enumerate(pending):
            runs[r]["t"] = np.concatenate([runs[r]["t"], more[1:]])
            runs[r]["z"] = np.concatenate([runs[r]["z"], ext[1:, j]])
    for run in runs:
        run["stop"] = None if run["start"] is None else run["start"] + steps
    return runs
