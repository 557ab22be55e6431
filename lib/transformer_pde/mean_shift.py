r"""Mean shift and the modes of Gaussian kernel density estimates (chapter 9).

Self-attention with a large inverse temperature :math:`\beta` moves each token towards a mode
of a kernel density estimate (KDE) of the tokens (Rigollet, 2025, §5.3):

- :func:`gaussian_kde`: the Gaussian KDE with bandwidth :math:`\beta^{-1/2}`,
  :math:`\hat p(x) = \frac1n\sum_j (\beta/2\pi)^{d/2} e^{-\frac\beta2|x - x_j|^2}`;
- :func:`mean_shift_step`: one mean-shift step :math:`x \mapsto \sum_j w_j(x)x_j`,
  :math:`w(x) = \operatorname{softmax}(-\frac\beta2|x - x_j|^2)`, which is
  :math:`x + \frac1\beta\nabla\log\hat p(x)`, and on the sphere one attention layer;
- :func:`count_modes_line`: the exact number of modes of the Gaussian KDE of points on the
  line, certified: every cell of an adaptive grid is proved to hold either no critical point
  or exactly one, from the values of the derivative and bounds on the next derivative;
- :func:`mode_count_draws`: that count for many draws of iid :math:`N(0,1)` samples and
  several :math:`\beta` (the setting of Geshkovski, Rigollet and Sun, 2024);
- :func:`count_modes_circle` and :func:`circle_rice_modes`: the modes of the von Mises KDE of
  angles on a fine grid, and their expected number for uniform angles in the Gaussian limit
  :math:`n \to \infty` (the Rice formula).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ive

from . import _checks

__all__ = [
    "gaussian_kde",
    "mean_shift_step",
    "count_modes_line",
    "mode_count_draws",
    "count_modes_circle",
    "circle_rice_modes",
]

_EPS = float(np.finfo(np.float64).eps)
#: half-width (in bandwidths, beyond the nearest sample) of the window of samples summed
#: exactly; the others are bounded: each contributes at most ``_U e^{-_U^2/2}`` relative
_U = 7.0
#: width of the distance shells used to bound the derivatives on a cell
_SHELL = 0.25
#: width of the first cells (in bandwidths)
_H0 = 0.5
_MAX_DEPTH = 44
#: undecided cells narrower than this (in bandwidths) are resolved in multiple precision
_H_MIN = 1e-7
#: window (in bandwidths) of the multiple-precision sums; beyond it each term is below
#: 40^2 e^{-800}
_MP_U = 40.0
_CHUNK = 4_000_000


def _beta(beta):
    return _checks.positive_float(beta, "beta")


def _as_points(X, name):
    arr = _checks.real_array(X, name)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} must have shape (n,) or (n, d) with n >= 1, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return arr


def _points_and_samples(X, samples, name):
    """Both arrays as (n, d) finite float arrays of the same dimension d."""
    P = _as_points(X, name)
    S = _as_points(samples, "samples")
    if P.shape[1] != S.shape[1]:
        raise ValueError(f"{name} and samples must have the same dimension, got {P.shape[1]} "
                         f"and {S.shape[1]}")
    return P, S


def gaussian_kde(x: ArrayLike, samples: ArrayLike, beta: float) -> NDArray[np.float64]:
    r"""Gaussian kernel density estimate with bandwidth :math:`\beta^{-1/2}`.

    .. math::

        \hat p_n(x) = \frac1n\sum_{j=1}^n \Big(\frac{\beta}{2\pi}\Big)^{d/2}
        e^{-\frac\beta2|x - x_j|^2},

    equation (1.1) of Geshkovski, Rigollet and Sun (arXiv 2412.09080v3) for :math:`d = 1`.

    Parameters
    ----------
    x : array_like, shape (m,) or (m, d)
        Evaluation points (shape (m,) means d = 1).
    samples : array_like, shape (n,) or (n, d)
        The samples :math:`x_j`.
    beta : float
        Inverse bandwidth squared, > 0.

    Returns
    -------
    ndarray, shape (m,)

    Raises
    ------
    ValueError
        If an array is not finite or the dimensions differ, or ``beta <= 0``.

    Examples
    --------
    >>> float(gaussian_kde([0.0], [0.0], 2 * np.pi)[0])
    1.0

    References
    ----------
    :cite:`geshkovski2024modes`
    """
    beta = _beta(beta)
    P, S = _points_and_samples(x, samples, "x")
    d = S.shape[1]
    out = np.empty(P.shape[0])
    step = max(1, _CHUNK // S.shape[0])
    for k in range(0, P.shape[0], step):
        sq = ((P[k:k + step, None, :] - S[None, :, :]) ** 2).sum(-1)
        out[k:k + step] = np.exp(-0.5 * beta * sq).mean(axis=1)
    return out * (beta / (2 * np.pi)) ** (d / 2)


def mean_shift_step(X: ArrayLike, samples: ArrayLike, beta: float) -> NDArray[np.float64]:
    r"""One mean-shift step of the points ``X`` on the Gaussian KDE of ``samples``.

    .. math::

        m(x) = \sum_j w_j(x)\,x_j, \qquad
        w_j(x) = \frac{e^{-\frac\beta2|x - x_j|^2}}{\sum_k e^{-\frac\beta2|x - x_k|^2}},
        \qquad m(x) - x = \frac1\beta\nabla\log\hat p_n(x)

    (Fukunaga and Hostetler, 1975; Cheng, 1995; Rigollet, 2025, §5.3). When ``X`` and
    ``samples`` are unit vectors, :math:`|x - x_j|^2 = 2 - 2\langle x, x_j\rangle` and
    :math:`w(x)` is the softmax of :math:`\beta\langle x, x_j\rangle`: the attention weights
    of one head with :math:`Q = K = V = I`. Softmax through log-sum-exp.

    Parameters
    ----------
    X : array_like, shape (m, d) or (m,)
    samples : array_like, shape (n, d) or (n,)
    beta : float

    Returns
    -------
    ndarray, shape (m, d)

    Raises
    ------
    ValueError
        If an array is not finite or the dimensions differ, or ``beta <= 0``.

    Examples
    --------
    >>> float(mean_shift_step([[0.0]], [[-1.0], [1.0]], 3.0)[0, 0])  # symmetric samples
    0.0

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    beta = _beta(beta)
    P, S = _points_and_samples(X, samples, "X")
    out = np.empty_like(P)
    step = max(1, _CHUNK // S.shape[0])
    for k in range(0, P.shape[0], step):
        logits = -0.5 * beta * ((P[k:k + step, None, :] - S[None, :, :]) ** 2).sum(-1)
        logits -= logits.max(axis=1, keepdims=True)
        w = np.exp(logits)
        w /= w.sum(axis=1, keepdims=True)
        out[k:k + step] = w @ S
    return out


# ---------------------------------------------------------------------------------------
# certified mode count on the line
#
# In units of the bandwidth, y_j = sqrt(beta) X_j and s = sqrt(beta) t, the derivative of the
# KDE is a positive multiple of g(s) = sum_j psi(y_j - s), psi(u) = u e^{-u^2/2}; so
# g' = -sum psi'(y_j - s), g'' = sum psi''(y_j - s), with |psi'(u)| = m1(|u|),
# |psi''(u)| = m2(|u|), m1(r) = |1 - r^2| e^{-r^2/2}, m2(r) = r |r^2 - 3| e^{-r^2/2}.


def _m1(r, r0):
    return np.abs(1.0 - r * r) * np.exp(-0.5 * (r * r - r0 * r0))


def _m2(r, r0):
    return r * np.abs(r * r - 3.0) * np.exp(-0.5 * (r * r - r0 * r0))


_CRIT1 = (math.sqrt(3.0),)  # interior maxima of m1 on r > 0 (r = 0 is an end point)
_CRIT2 = (math.sqrt(3.0 - math.sqrt(6.0)), math.sqrt(3.0 + math.sqrt(6.0)))


def _sup_envelope(m, crit, lo, hi, r0):
    """sup of m(r) e^{r0^2/2} over r in [lo, hi] (arrays): end points and interior maxima."""
    out = np.maximum(m(lo, r0), m(hi, r0))
    r0 = np.broadcast_to(r0, out.shape)
    for c in crit:
        inside = (lo < c) & (c < hi)  # then r0 <= lo < c: no overflow
        if np.any(inside):
            out[inside] = np.maximum(out[inside], m(np.full(int(inside.sum()), c),
                                                   r0[inside]))
    return out


def _nearest_distance(y, lo, hi):
    """Distance from each interval [lo, hi] to the nearest sample of sorted y (0 if inside)."""
    n = y.size
    i = np.searchsorted(y, lo, side="left")
    j = np.searchsorted(y, hi, side="right")
    inside = j > i
    left = np.where(i > 0, lo - y[np.maximum(i - 1, 0)], np.inf)
    right = np.where(j < n, y[np.minimum(j, n - 1)] - hi, np.inf)
    return np.where(inside, 0.0, np.minimum(left, right))


def _point_values(y, s):
    """g(s), g'(s) scaled by e^{r^2/2} (r = distance to the nearest sample), their rounding
    and truncation error bounds, and r."""
    n = y.size
    r = _nearest_distance(y, s, s)
    lo = np.searchsorted(y, s - r - _U, side="left")
    hi = np.searchsorted(y, s + r + _U, side="right")
    g = np.empty(s.size)
    dg = np.empty(s.size)
    err_g = np.empty(s.size)
    err_dg = np.empty(s.size)
    width = hi - lo
    order = np.argsort(width, kind="stable")
    wsorted = width[order]
    # padded with far-away sentinels: windows may run past the end of y without a mask (the
    # extra samples are summed exactly, which only makes the tail bound below conservative)
    y_pad = np.concatenate([y, np.full(int(wsorted[-1]) + 1, 1e150)])
    start = 0
    while start < s.size:
        # points with similar windows together (sorted by width), in chunks of bounded memory
        cap = max(1, _CHUNK // max(1, int(wsorted[start])))
        stop = min(s.size, start + cap)
        while stop - start > 1 and (stop - start) * int(wsorted[stop - 1]) > _CHUNK:
            stop = start + (stop - start) // 2
        pts = order[start:stop]
        W = max(1, int(wsorted[stop - 1]))
        u = y_pad[lo[pts, None] + np.arange(W)[None, :]] - s[pts, None]
        rr = r[pts, None]
        e = np.exp(-0.5 * (u * u - rr * rr))
        t1 = u * e
        t2 = e - u * t1
        g[pts] = t1.sum(axis=1)
        dg[pts] = -t2.sum(axis=1)
        # relative error of each term: the exponent (u^2 - r^2)/2 is computed with absolute
        # error about 3 eps u^2, plus a few roundings; then a sum of W terms
        rel = 2.0 * (W + 5.0 * (r[pts] + _U + 1.0) ** 2 + 10.0) * _EPS
        err_g[pts] = rel * np.abs(t1).sum(axis=1)
        err_dg[pts] = rel * np.abs(t2).sum(axis=1)
        start = stop
    # samples outside the window are at distance >= r + U, where m0(r) = r e^{-r^2/2}, m1 and
    # m2 decrease; scaled by e^{r^2/2}
    out = n - width
    R = r + _U
    tail = np.exp(-0.5 * (R * R - r * r))
    err_g += out * R * tail
    err_dg += out * (R * R - 1.0) * tail
    return g, dg, err_g, err_dg, r


def _cell_bounds(y, a, b, rc):
    """Bounds, scaled by e^{rc^2/2}, on sup |g'| and sup |g''| over the cells [a, b], from the
    numbers of samples in distance shells around each cell."""
    n = y.size
    h = b - a
    edges = rc[:, None] + _SHELL * np.arange(int(_U / _SHELL) + 1)[None, :]
    # counts of samples at distance in [edge_k, edge_{k+1}) from the cell, both sides
    left = np.searchsorted(y, (a[:, None] - edges).ravel(), side="right").reshape(edges.shape)
    right = np.searchsorted(y, (b[:, None] + edges).ravel(), side="left").reshape(edges.shape)
    inner = np.searchsorted(y, b, side="right") - np.searchsorted(y, a, side="left")
    # samples within distance < edge_k: right_k - left_k (+ the ones inside the cell)
    within = right - left
    shell = np.diff(within, axis=1)  # samples at distance in [edge_k, edge_{k+1})
    first = within[:, 0]  # samples at distance < rc (only those inside the cell: rc = 0)
    del inner
    lo = edges[:, :-1]
    hi = edges[:, 1:] + h[:, None]
    r0 = rc[:, None]
    L1 = (shell * _sup_envelope(_m1, _CRIT1, lo, hi, r0)).sum(axis=1)
    L2 = (shell * _sup_envelope(_m2, _CRIT2, lo, hi, r0)).sum(axis=1)
    # samples inside the cell (rc = 0): distance in [0, h]
    z = np.zeros_like(h)
    has = first > 0  # then rc = 0
    L1[has] += first[has] * _sup_envelope(_m1, _CRIT1, z[has], h[has], z[has])
    L2[has] += first[has] * _sup_envelope(_m2, _CRIT2, z[has], h[has], z[has])
    # the rest, at distance >= rc + U
    out = n - within[:, -1]
    R = rc + _U
    L1 += out * _m1(R, rc)
    L2 += out * _m2(R, rc)
    return L1 * (1 + 1e-9), L2 * (1 + 1e-9)


def _certify(y, a, b, pa, pb):
    """Classify cells [a, b]: 0 = no critical point, 1 = one mode, -1 = one antimode,
    2 = undecided (to be split)."""
    ga, dga, ega, edga, ra = pa
    gb, dgb, egb, edgb, rb = pb
    rc = _nearest_distance(y, a, b)
    # bring the values at the two ends to the common scale e^{rc^2/2} of the cell
    fa = np.exp(-0.5 * (ra * ra - rc * rc))
    fb = np.exp(-0.5 * (rb * rb - rc * rc))
    ga, dga, ega, edga = ga * fa, dga * fa, ega * fa * (1 + 1e-9), edga * fa * (1 + 1e-9)
    gb, dgb, egb, edgb = gb * fb, dgb * fb, egb * fb * (1 + 1e-9), edgb * fb * (1 + 1e-9)
    L1, L2 = _cell_bounds(y, a, b, rc)
    h = b - a
    sa = np.where(ga > ega, 1, np.where(ga < -ega, -1, 0))
    sb = np.where(gb > egb, 1, np.where(gb < -egb, -1, 0))
    # no zero if the first-order bound (|g'| <= L1) or the second-order one (Taylor at each
    # end with |g''| <= L2; a concave lower bound is smallest at an end of [a, m] or [m, b])
    # keeps sign(g) * g > 0 on the cell
    sg = sa
    first = (np.abs(ga) - ega) + (np.abs(gb) - egb) > h * L1 * (1 + 1e-9)
    half = 0.5 * h
    low_a = sg * ga - ega - half * (np.abs(dga) + edga) - 0.5 * L2 * half * half
    low_b = sg * gb - egb - half * (np.abs(dgb) + edgb) - 0.5 * L2 * half * half
    second = (low_a > 0) & (low_b > 0)
    none = (sa * sb == 1) & (first | second)
    dsa = np.where(dga > edga, 1, np.where(dga < -edga, -1, 0))
    dsb = np.where(dgb > edgb, 1, np.where(dgb < -edgb, -1, 0))
    mono = (dsa * dsb == 1) & ((np.abs(dga) - edga) + (np.abs(dgb) - edgb)
                               > h * L2 * (1 + 1e-9))
    one = (sa * sb == -1) & mono
    out = np.full(a.size, 2)
    out[none] = 0
    out[one & (sa == 1)] = 1
    out[one & (sa == -1)] = -1
    return out


def _clusters(cells):
    """Unions of touching cells [a, b] (rows of ``cells``) as a list of (lo, hi)."""
    if cells.shape[0] == 0:
        return []
    cells = cells[np.argsort(cells[:, 0])]
    out = [[cells[0, 0], cells[0, 1]]]
    for a, b in cells[1:]:
        if a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(float(a), float(b)) for a, b in out]


def _mp_values(y, s):
    """g(s), g'(s) and the second derivative (unscaled) in 40-digit arithmetic, with one
    error bound for the three: the samples within _MP_U bandwidths are summed, the rest
    bounded (each term is at most u^3 e^{-u^2/2} there, decreasing in u)."""
    import mpmath

    near = y[(y > s - _MP_U) & (y < s + _MP_U)]
    with mpmath.workdps(40):
        sm = mpmath.mpf(s)
        u = [mpmath.mpf(float(v)) - sm for v in near]
        e = [mpmath.exp(-v * v / 2) for v in u]
        t1 = [v * w for v, w in zip(u, e, strict=True)]
        t2 = [w - v * t for v, w, t in zip(u, e, t1, strict=True)]
        t3 = [v * (v * v - 3) * w for v, w in zip(u, e, strict=True)]
        vals = [mpmath.fsum(t1), -mpmath.fsum(t2), mpmath.fsum(t3)]
        tail = (y.size - near.size) * _MP_U ** 3 * mpmath.exp(-_MP_U ** 2 / 2)
        # each term has relative error below 1e-37 (40 digits, a few operations)
        size = mpmath.fsum(abs(t) for t in t1 + t2 + t3)
        err = mpmath.mpf("1e-35") * size + tail
    return vals, err


def _resolve_mp(y, lo, hi, budget=None):
    """Modes of g in [lo, hi] (float ends), certified by third-order Taylor bounds from the
    values of g and its first two derivatives at both ends in 40-digit arithmetic and a
    bound on the third derivative (|psi^(3)| <= 3 everywhere, and <= 3 e^{-9/2} beyond
    distance 3), halving up to 1e-13 bandwidths and at most 2000 cells. Returns the list of
    mode brackets and the number of cells left undecided."""
    import mpmath

    if budget is None:
        budget = [2000]
    budget[0] -= 1
    (ga, dga, d2a), ea = _mp_values(y, lo)
    (gb, dgb, d2b), eb = _mp_values(y, hi)
    with mpmath.workdps(40):
        t = (mpmath.mpf(hi) - mpmath.mpf(lo)) / 2
        close = int(np.sum((y > lo - 3.0) & (y < hi + 3.0)))
        L3 = 3 * close + (y.size - close) * 3 * mpmath.exp(mpmath.mpf(-4.5))
        L3 *= 1 + mpmath.mpf("1e-20")

        def sign(v, e):
            return 1 if v > e else (-1 if v < -e else 0)

        sa, sb = sign(ga, ea), sign(gb, eb)
        # no zero: |g| stays positive on each half, by Taylor from its end
        low_a = (abs(ga) - ea - (abs(dga) + ea) * t - (abs(d2a) + ea) * t * t / 2
                 - L3 * t ** 3 / 6)
        low_b = (abs(gb) - eb - (abs(dgb) + eb) * t - (abs(d2b) + eb) * t * t / 2
                 - L3 * t ** 3 / 6)
        if sa * sb == 1 and low_a > 0 and low_b > 0:
            return [], 0
        # exactly one: g changes sign and g' keeps one sign on each half
        dsa, dsb = sign(dga, ea), sign(dgb, eb)
        mono_a = abs(dga) - ea - (abs(d2a) + ea) * t - L3 * t * t / 2
        mono_b = abs(dgb) - eb - (abs(d2b) + eb) * t - L3 * t * t / 2
        if sa * sb == -1 and dsa * dsb == 1 and mono_a > 0 and mono_b > 0:
            return ([(lo, hi)] if sa == 1 else []), 0
    mid = 0.5 * (lo + hi)
    if budget[0] <= 0 or not lo < mid < hi or hi - lo < 1e-13 * max(1.0, abs(lo)):
        return [], 1
    left, u_left = _resolve_mp(y, lo, mid, budget)
    right, u_right = _resolve_mp(y, mid, hi, budget)
    return left + right, u_left + u_right


def count_modes_line(samples: ArrayLike, beta: float, *, return_brackets: bool = False
                     ) -> int | tuple[int, NDArray[np.float64]]:
    r"""Exact number of modes (local maxima) on :math:`\mathbb R` of the Gaussian KDE.

    Counts the modes of :math:`\hat p_n(t) = \frac{\sqrt\beta}{n\sqrt{2\pi}}\sum_j
    e^{-\frac\beta2(t - X_j)^2}` (Geshkovski, Rigollet and Sun, arXiv 2412.09080v3, eq. 1.1),
    a certified count: in bandwidth units the derivative is a positive multiple of
    :math:`g(s) = \sum_j \psi(y_j - s)`, :math:`\psi(u) = ue^{-u^2/2}`,
    :math:`y_j = \sqrt\beta X_j`. The modes lie in :math:`[\min y, \max y]` (outside, every
    term has one sign). That interval is cut into cells of width 1/4 and every cell is
    classified by a proof:

    - no critical point, if :math:`g` has one certified sign at both ends and
      :math:`|g(a)| + |g(b)| > h\sup_{[a,b]}|g'|`;
    - exactly one, a mode if :math:`g(a) > 0 > g(b)`, if :math:`g` changes certified sign
      and :math:`g'` has one certified sign at both ends with
      :math:`|g'(a)| + |g'(b)| > h\sup_{[a,b]}|g''|`;

    otherwise the cell is halved. The sups are bounded by counting the samples in shells of
    distance around the cell times the largest value of :math:`|\psi'|` or :math:`|\psi''|`
    on the shell; the values of :math:`g, g'` at the ends are sums over the samples within
    7 bandwidths (beyond the nearest one), with bounds on the rest and on rounding. All
    quantities near a cell are scaled by :math:`e^{r^2/2}`, :math:`r` the distance to the
    nearest sample, so that nothing underflows. The count is that of the KDE of the samples
    as stored in floating point (``sqrt(beta) * samples``).

    Cells still undecided at width :math:`10^{-7}` are not halved again (the bound on the
    far samples, up to a few :math:`10^{-6}` relative, can leave the sign of :math:`g` at
    a grid point undecided at every depth, and halving would then double the undecided
    cells without end). Touching ones are joined, and each union is decided in 40-digit
    arithmetic: :math:`g, g', g''` at its ends with error bounds, and third-order Taylor
    bounds (with :math:`|\psi'''| \le 3`) for "no zero" and "exactly one zero", halving
    down to :math:`10^{-13}` bandwidths (at most 2000 cells). What remains undecided
    raises RuntimeError: the count is never guessed.

    Parameters
    ----------
    samples : array_like, shape (n,)
        Finite real samples, n >= 1.
    beta : float
        > 0; the bandwidth is :math:`\beta^{-1/2}`.
    return_brackets : bool
        Also return, for each mode, an interval (in the units of ``samples``) that contains
        it and no other critical point.

    Returns
    -------
    int, or (int, ndarray of shape (modes, 2))

    Raises
    ------
    ValueError
        On bad input.
    RuntimeError
        If critical points cannot be separated in 40-digit arithmetic (two or more within
        about :math:`10^{-13}` bandwidths, or a critical point of :math:`g` of multiplicity
        >= 2, as for two samples exactly two bandwidths apart); the count is then not
        decided.

    Examples
    --------
    >>> count_modes_line([-1.0, 1.0], 0.81)  # separation 1.8 bandwidths < 2: one mode
    1
    >>> count_modes_line([-1.0, 1.0], 1.21)  # 2.2 bandwidths > 2: two modes
    2

    References
    ----------
    :cite:`geshkovski2024modes`
    """
    beta = _beta(beta)
    x = _checks.real_array(samples, "samples")
    if x.ndim != 1 or x.size < 1 or not np.all(np.isfinite(x)):
        raise ValueError(f"samples must be a finite 1-d array with at least one value, got "
                         f"shape {x.shape}")
    return_brackets = _checks.flag(return_brackets, "return_brackets")
    y = np.sort(x) * math.sqrt(beta)
    # the end points are offset by an irrational fraction of a cell, so that symmetric
    # samples do not put a critical point exactly on a grid point
    lo, hi = y[0] - 1.0, y[-1] + 1.0 + (math.sqrt(5.0) - 2.0) * _H0
    m = int(math.ceil((hi - lo) / _H0))
    grid = np.linspace(lo, hi, m + 1)
    a, b = grid[:-1], grid[1:]
    pts = _point_values(y, grid)
    pa = tuple(p[:-1] for p in pts)
    pb = tuple(p[1:] for p in pts)
    modes = []
    stuck = []  # undecided cells too narrow to split in double precision
    for _depth in range(_MAX_DEPTH + 1):
        cls = _certify(y, a, b, pa, pb)
        sel = cls == 1
        modes.append(np.column_stack([a[sel], b[sel]]))
        und = cls == 2
        # a cell narrower than _H_MIN is not split again: near a zero of g closer to a grid
        # point than the error bound of g allows, halving would double the undecided cells
        # at every depth without end; such cells are resolved in multiple precision below
        narrow = und & ((b - a) < 2.0 * _H_MIN)
        stuck.append(np.column_stack([a[narrow], b[narrow]]))
        und &= ~narrow
        if not np.any(und):
            break
        a, b = a[und], b[und]
        pa = tuple(p[und] for p in pa)
        pb = tuple(p[und] for p in pb)
        mid = 0.5 * (a + b)
        pm = _point_values(y, mid)
        a = np.concatenate([a, mid])
        b = np.concatenate([mid, b])
        pa = tuple(np.concatenate([p, q]) for p, q in zip(pa, pm, strict=True))
        pb = tuple(np.concatenate([q, p]) for p, q in zip(pb, pm, strict=True))
    else:
        stuck.append(np.column_stack([a[und], b[und]]))
    for lo_c, hi_c in _clusters(np.concatenate(stuck, axis=0)):
        found, undecided = _resolve_mp(y, lo_c, hi_c)
        if undecided:
            raise RuntimeError(
                "count_modes_line: critical points of the KDE in "
                f"[{lo_c / math.sqrt(beta)!r}, {hi_c / math.sqrt(beta)!r}] could not be "
                "separated in 40-digit arithmetic (a critical point of multiplicity >= 2 up "
                "to 1e-13 bandwidths); the count is not decided")
        modes.append(np.array(found, dtype=float).reshape(-1, 2))
    brackets = np.concatenate(modes, axis=0) / math.sqrt(beta)
    brackets = brackets[np.argsort(brackets[:, 0])]
    count = int(brackets.shape[0])
    return (count, brackets) if return_brackets else count


def mode_count_draws(n: int, betas: ArrayLike, draws: int,
                     rng: np.random.Generator) -> NDArray[np.int64]:
    r"""Mode counts of the Gaussian KDE of ``draws`` independent samples of n iid N(0, 1).

    Entry ``[k, r]`` is :func:`count_modes_line` of draw ``r`` at ``betas[k]``: each draw
    is used at every :math:`\beta` (common random numbers), the setting of Geshkovski,
    Rigollet and Sun (arXiv 2412.09080v3, §1.1), whose expected value is
    :math:`\Theta(\sqrt{\beta\log\beta})` for :math:`n^c \lesssim \beta \lesssim n^{2-c}`.

    Parameters
    ----------
    n : int
        Samples per draw.
    betas : array_like of float
    draws : int
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of int, shape (len(betas), draws)

    Raises
    ------
    ValueError
        On bad input.

    Examples
    --------
    >>> mode_count_draws(50, [1.0], 2, np.random.default_rng(0)).shape
    (1, 2)

    References
    ----------
    :cite:`geshkovski2024modes`
    """
    n = _checks.positive_int(n, "n")
    draws = _checks.positive_int(draws, "draws")
    b = _checks.real_array(betas, "betas").ravel()
    if b.size < 1 or not np.all(np.isfinite(b)) or np.any(b <= 0):
        raise ValueError("betas must be finite numbers > 0")
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    out = np.empty((b.size, draws), dtype=np.int64)
    for r in range(draws):
        x = rng.standard_normal(n)
        for k, beta in enumerate(b):
            out[k, r] = count_modes_line(x, float(beta))
    return out


# ---------------------------------------------------------------------------------------
# the circle


def _bessel_cutoff(beta):
    """Largest degree whose Bessel coefficient I_l(beta)/I_0(beta) exceeds 1e-18."""
    ell = int(math.ceil(math.sqrt(2.0 * beta * 45.0) + 45.0))
    return ell


def count_modes_circle(angles: ArrayLike, beta: float, *, per_bandwidth: int = 16) -> int:
    r"""Number of modes of the von Mises KDE of angles, on a fine grid.

    The KDE :math:`\hat p(\theta) \propto \sum_j e^{\beta\cos(\theta - \theta_j)}` is the
    Gaussian KDE :math:`\sum_j e^{-\frac\beta2|x - x_j|^2}` restricted to the unit circle
    (:math:`|x - x_j|^2 = 2 - 2\cos(\theta - \theta_j)`). Its Fourier series
    :math:`\sum_\ell I_\ell(\beta)\hat c_\ell e^{i\ell\theta}`,
    :math:`\hat c_\ell = \sum_j e^{-i\ell\theta_j}`, truncated where
    :math:`I_\ell(\beta)/I_0(\beta) < 10^{-18}`, gives the derivative on a grid of
    ``per_bandwidth`` points per bandwidth :math:`\beta^{-1/2}` by one FFT; the modes are
    its sign changes from + to -. Not certified: two critical points closer than the grid
    step can be missed (the count is then low by one).

    Parameters
    ----------
    angles : array_like, shape (n,)
    beta : float
    per_bandwidth : int

    Returns
    -------
    int

    Raises
    ------
    ValueError
        On bad input.

    Examples
    --------
    >>> count_modes_circle([0.0, np.pi], 4.0)
    2

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    beta = _beta(beta)
    th = _checks.real_array(angles, "angles")
    if th.ndim != 1 or th.size < 1 or not np.all(np.isfinite(th)):
        raise ValueError("angles must be a finite 1-d array with at least one value")
    per_bandwidth = _checks.positive_int(per_bandwidth, "per_bandwidth")
    L = _bessel_cutoff(beta)
    ell = np.arange(L + 1)
    coef = np.zeros(L + 1, dtype=np.complex128)
    step = max(1, _CHUNK // (L + 1))
    for k in range(0, th.size, step):
        coef += np.exp(-1j * np.outer(th[k:k + step], ell)).sum(axis=0)
    spec = ive(ell, beta) * coef * (1j * ell)  # Fourier coefficients of the derivative
    m = max(2 * L + 2, int(math.ceil(2 * math.pi * math.sqrt(beta) * per_bandwidth)))
    full = np.zeros(m, dtype=np.complex128)
    full[: L + 1] = spec
    full[m - L:] = np.conj(spec[1:][::-1])
    deriv = np.real(np.fft.ifft(full)) * m
    s = np.sign(deriv)
    return int(np.sum((s > 0) & (np.roll(s, -1) < 0)))


def circle_rice_modes(beta: float) -> float:
    r"""Expected number of modes of the von Mises KDE of n uniform angles as :math:`n \to \infty`.

    The centred KDE, times :math:`\sqrt n`, tends to a stationary Gaussian process on the
    circle with covariance :math:`\sum_{\ell\ne0}I_\ell(\beta)^2e^{i\ell u}`; by the Rice
    formula its expected number of local maxima is

    .. math::

        \sqrt{\lambda_4/\lambda_2}, \qquad \lambda_k = \sum_{\ell\ge1}\ell^kI_\ell(\beta)^2,

    about :math:`\sqrt{3\beta/2}` for large :math:`\beta` (derived in chapter 9; the step from
    the process to the KDE's count at finite n is not proved there).

    Parameters
    ----------
    beta : float

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``beta <= 0``.

    Examples
    --------
    >>> round(circle_rice_modes(400.0) / math.sqrt(1.5 * 400.0), 2)
    1.0

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    beta = _beta(beta)
    ell = np.arange(1, _bessel_cutoff(beta) + 1, dtype=float)
    w = ive(ell, beta) ** 2
    return float(math.sqrt((ell ** 4 * w).sum() / (ell ** 2 * w).sum()))
