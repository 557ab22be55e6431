r"""The limiting-rank experiment of the chapter "Gaussian initial data": many clustering runs
of the covariance ODE through :class:`joblib.Parallel`, and the rank of each limit read from
decay rates on :math:`\ker P`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from joblib import delayed
from numpy.typing import ArrayLike

from .. import _checks, _progress
from .formulas import softmax_rhs
from .moments import MomentTrajectory, integrate_moments


@dataclass(frozen=True)
class ClusteringDraw:
    """One random draw of :func:`clustering_rank_draws`: the run, ``P = Q^T Q`` and ``V``.

    Attributes
    ----------
    run : MomentTrajectory
        The integration of the draw.
    P : array (d, d)
        ``Q.T @ Q``, with ``A = -P``.
    V : array (d, d)
        The value matrix.

    Examples
    --------
    >>> import numpy as np
    >>> draw = clustering_rank_draws(2, 1, np.random.default_rng(0))[0]
    >>> print(type(draw).__name__, draw.P.shape, draw.run.status)
    ClusteringDraw (2, 2) converged
    """

    run: MomentTrajectory
    P: np.ndarray
    V: np.ndarray


def _clustering_run(P, V, Sigma0, times, conv_tol, rank_tol, rtol, atol):
    """One run of :func:`clustering_rank_draws` (module level, so that joblib can send it to
    other processes or machines)."""
    return integrate_moments(softmax_rhs, np.zeros(P.shape[0]), Sigma0, times, args=(-P, V),
                             method="LSODA", rtol=rtol, atol=atol, conv_tol=conv_tol,
                             rank_tol=rank_tol)


def clustering_rank_draws(d: int, n_draws: int, rng: np.random.Generator, *, V: str = "identity",
                          times: ArrayLike | None = None, conv_tol: float = 1e-6,
                          rank_tol: float = 1e-6, rtol: float = 1e-7, atol: float = 1e-12,
                          n_jobs: int | None = None,
                          progress: bool | None = None) -> list[ClusteringDraw]:
    r"""The limiting-rank experiment of Castin et al. (2025) for softmax attention, K = -Q.

    Each draw: :math:`Q \in \mathbb R^{\lfloor d/2\rfloor\times d}` and :math:`W` with standard
    Gaussian entries, :math:`A = -Q^\top Q` (so :math:`A_s = -P`, :math:`P = Q^\top Q` of rank
    :math:`\lfloor d/2\rfloor` almost surely), :math:`\Sigma_0 = WW^\top`, :math:`\alpha_0 = 0`
    and :math:`V = I` (``V="identity"``) or :math:`V = W'^\top W'` with :math:`W'` Gaussian
    (``V="random"``, symmetric positive definite almost surely). Integrates
    :math:`\dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top\Sigma V` with :func:`integrate_moments`
    (LSODA) up to ``times[-1]`` (default :math:`10^8`, 25 geometric output times).

    ``rank_tol`` (default equal to ``conv_tol``): when the stopping rule
    :math:`(1 + t)\|\dot\Sigma\|_F \le \text{conv\_tol}\,\|\Sigma\|_F` fires, an eigenvalue
    decaying like :math:`1/t` contributes about its own size to the left-hand side, so the
    collapsing eigenvalues are then at most about ``conv_tol`` times :math:`\|\Sigma\|_F`;
    they are not counted even when two of them are so close that their decay over the last
    decade (``MomentTrajectory.log_rates``) cannot be read off the sorted eigenvalues.

    The runs are independent tasks of :class:`joblib.Parallel`; the matrices are drawn first,
    in order, from ``rng``, and each run is deterministic, so the result does not depend on
    the number of jobs or on the backend. The library fixes neither: they come from the
    caller's :func:`joblib.parallel_config` (one job in the calling process by default),
    e.g. ``with joblib.parallel_config(backend="loky", n_jobs=2):`` for two processes, or
    ``backend="dask"`` for a Dask cluster; ``n_jobs``, when given, is passed to
    :class:`joblib.Parallel`. Some draws with :math:`V` random run to :math:`t = 10^8` in
    thousands of steps: two jobs halve the wall-clock time on two free cores.
    ``progress``: a progress bar over the draws, shown by default (``None``) only when the
    output is interactive (a terminal, a notebook open in Jupyter; never under nbval or
    ``nbconvert --execute``); ``True`` always, ``False`` never.
    Returns a list of :class:`ClusteringDraw`.

    Parameters
    ----------
    d : int
        Dimension, at least 2.
    n_draws : int
        Number of independent draws.
    rng : numpy.random.Generator
        Source of the matrices.
    V : {"identity", "random"}
        The value matrix.
    times : array, optional
        Output times (default :math:`0` and 25 geometric times from :math:`10^{-2}` to
        :math:`10^8`).
    conv_tol, rank_tol, rtol, atol : float
        Passed to :func:`~transformer_pde.gaussian.integrate_moments`.
    n_jobs : int, optional
        Passed to :class:`joblib.Parallel`.
    progress : bool, optional
        Progress bar (see above).

    Returns
    -------
    list of ClusteringDraw

    Raises
    ------
    ValueError
        If ``d < 2``, ``n_draws`` is not a positive integer, ``V`` is unknown, ``rng`` is not a
        Generator, ``times`` is not increasing or a tolerance is not positive.

    Examples
    --------
    In :math:`d = 4`, :math:`P` has rank 2, and the limits have rank :math:`d - 2 = 2`:

    >>> import numpy as np
    >>> draws = clustering_rank_draws(4, 2, np.random.default_rng(0))
    >>> print([(draw.run.status, draw.run.rank) for draw in draws])
    [('converged', 2), ('converged', 2)]

    References
    ----------
    :cite:`castin2025unified`
    """
    d = _checks.positive_int(d, "d")
    if d < 2:
        raise ValueError("d must be at least 2 (Q has floor(d/2) >= 1 rows)")
    n_draws = _checks.positive_int(n_draws, "n_draws")
    if V not in ("identity", "random"):
        raise ValueError(f"V must be 'identity' or 'random', got {V!r}")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")
    if times is None:
        times = np.concatenate([[0.0], np.geomspace(1e-2, 1e8, 25)])
    times = _checks.increasing_times(times)
    rtol = _checks.positive_float(rtol, "rtol")  # a NaN tolerance crashes LSODA
    atol = _checks.nonnegative_float(atol, "atol")
    problems = []
    for _ in range(n_draws):
        Q = rng.normal(size=(d // 2, d))
        W = rng.normal(size=(d, d))
        Wv = rng.normal(size=(d, d))
        problems.append((Q.T @ Q, np.eye(d) if V == "identity" else Wv.T @ Wv, W @ W.T))
    settings = (times, conv_tol, rank_tol, rtol, atol)
    calls = (delayed(_clustering_run)(*p, *settings) for p in problems)
    with _progress.bar(len(problems), progress, "clustering_rank_draws") as shown:
        runs = _progress.run(calls, n_jobs=n_jobs, bar=shown)
    return [ClusteringDraw(run, P, Vd) for run, (P, Vd, _) in zip(runs, problems, strict=True)]


class RankReading(NamedTuple):
    r"""The rank of the limit of a clustering run, read on :math:`\ker P` (see
    :func:`read_limit_rank`).

    Attributes
    ----------
    rank : int or None
        Number of settled eigenvalues; ``None`` when one is still moving.
    ratios : array (m,)
        Eigenvalues of :math:`U^\top\Sigma U` at the end, over the largest.
    rates : array (m,)
        Their :math:`d\log/d\log(1 + t)` over the last decade of output times.
    margin : float
        Smallest distance of a rate to a threshold.

    Examples
    --------
    >>> import numpy as np
    >>> draw = clustering_rank_draws(2, 1, np.random.default_rng(0))[0]
    >>> print(read_limit_rank(draw.run, draw.P).rank)
    1
    """

    rank: int | None  # number of settled eigenvalues; None when one is still moving
    ratios: np.ndarray  # eigenvalues of U^T Sigma U at the end, over the largest
    rates: np.ndarray  # their d log / d log(1 + t) over the last decade of output times
    margin: float  # smallest distance of a rate to a threshold


def read_limit_rank(run: MomentTrajectory, P: ArrayLike, *, settled: float = 0.04,
                    collapsing: float = 0.9) -> RankReading:
    r"""Read the rank of the limit of :math:`\Sigma(t)` from its compression to :math:`\ker P`.

    For softmax attention with :math:`A_s = -P \preceq 0` and :math:`V` symmetric positive
    definite (or :math:`V = I`), every limit point of :math:`\Sigma(t)` has its range in
    :math:`\ker P` (the Lyapunov argument of the chapter on Gaussian initial data, for the
    ODE of Castin et al., 2025), so its rank is that of its compression
    :math:`C = U^\top\Sigma U`, :math:`U` an orthonormal basis of :math:`\ker P`
    (:math:`d - \operatorname{rank}P` columns). With :math:`c_1 \le \dots \le c_m` the
    eigenvalues of :math:`C` at the end of ``run`` (``t_stop``) and at the last output time
    :math:`t_k` with :math:`1 + t_k \le (1 + t_{\text{stop}})/10`, the rate of
    :math:`c_j` is :math:`\log(c_j(t_{\text{stop}})/c_j(t_k)) / \log\frac{1 + t_{\text{stop}}}
    {1 + t_k}`. An eigenvalue converging to a positive limit has a rate near 0, one collapsing
    like :math:`1/t` a rate near :math:`-1`. Each eigenvalue is *settled* (rate
    :math:`\ge -\text{settled}`), *collapsing* (rate :math:`\le -\text{collapsing}`) or
    *moving*; the reading is the number of settled eigenvalues, or ``None`` (unsettled) when
    one is moving. ``margin`` is the smallest distance of a rate to the two thresholds: a
    perturbation of the run that moves no rate by more than it (another CPU's rounding,
    another step sequence) gives the same reading.

    Parameters
    ----------
    run : MomentTrajectory
        A run of :func:`integrate_moments` (any status), e.g. ``ClusteringDraw.run``.
    P : array (d, d)
        Symmetric positive semi-definite, with ``A_s = -P``; its numerical kernel (eigenvalues
        below ``1e-10`` times the largest) is used.
    settled, collapsing : float
        The thresholds, ``0 < settled < collapsing``.

    Returns
    -------
    RankReading

    Raises
    ------
    ValueError
        If ``run`` is not a :class:`MomentTrajectory`, ``P`` is not symmetric positive
        semi-definite of the run's dimension, or the thresholds are not
        ``0 < settled < collapsing``.

    Examples
    --------
    >>> import numpy as np
    >>> draws = clustering_rank_draws(4, 2, np.random.default_rng(0))
    >>> print([read_limit_rank(draw.run, draw.P).rank for draw in draws])
    [2, 2]

    References
    ----------
    :cite:`castin2025unified`
    """
    if not isinstance(run, MomentTrajectory):
        raise ValueError("run must be a MomentTrajectory from integrate_moments")
    d = run.Sigma.shape[-1]
    P = _checks.matrix(P, "P", shape=(d, d))
    if np.linalg.norm(P - P.T) > _checks.SYMMETRY_TOL * max(float(np.linalg.norm(P)), 1e-300):
        raise ValueError("P must be symmetric")
    settled = _checks.positive_float(settled, "settled")
    collapsing = _checks.positive_float(collapsing, "collapsing")
    if settled >= collapsing:
        raise ValueError(f"need settled < collapsing, got {settled} and {collapsing}")
    lam, U = np.linalg.eigh(0.5 * (P + P.T))
    if lam[-1] < 0 or lam[0] < -1e-10 * max(lam[-1], 1e-300):
        raise ValueError("P must be positive semi-definite")
    kernel = U[:, lam <= 1e-10 * max(lam[-1], 1e-300)]
    if kernel.shape[1] == 0:
        return RankReading(0, np.zeros(0), np.zeros(0), np.inf)
    t = run.times
    k = int(np.searchsorted(1.0 + t, (1.0 + t[-1]) / 10.0, side="right")) - 1
    k = max(k, 0)
    tiny = np.finfo(float).tiny
    c_end = np.clip(np.linalg.eigvalsh(kernel.T @ run.Sigma[-1] @ kernel), tiny, None)
    c_ref = np.clip(np.linalg.eigvalsh(kernel.T @ run.Sigma[k] @ kernel), tiny, None)
    span = np.log((1.0 + t[-1]) / (1.0 + t[k]))
    rates = np.log(c_end / c_ref) / span if span > 0 else np.zeros_like(c_end)
    is_settled = rates >= -settled
    moving = ~is_settled & (rates > -collapsing)
    margin = float(np.min(np.minimum(np.abs(rates + settled), np.abs(rates + collapsing))))
    rank = None if np.any(moving) else int(np.sum(is_settled))
    return RankReading(rank, c_end / c_end[-1], rates, margin)
