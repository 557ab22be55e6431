r"""Critical attention scaling :math:`\beta_n = \gamma\log n` for long contexts.

One attention layer with :math:`Q = K = V = I` on unit tokens (Pre-LN: the layer sees the
normalised tokens), logits :math:`\beta_n\langle\theta_i, \theta_j\rangle`, output
:math:`y_i = \sum_j \mathrm{softmax}_j(\beta_n\langle\theta_i, \theta_j\rangle)\,\theta_j`
(Chen, Lin, Polyanskiy and Rigollet, 2025). For equiangular inputs
(:math:`\langle\theta_i, \theta_j\rangle = \rho` for :math:`i \ne j`) the self weight is
:math:`k = e^{\beta_n(1-\rho)} = n^{\gamma(1-\rho)}` times the weight of any other token, and
the cosine of two outputs is an explicit function of :math:`k`, :math:`n` and :math:`\rho`
(:func:`output_cosine`); its limit as :math:`n \to \infty` (:func:`critical_limit`) jumps at
:math:`\gamma = 1/(1-\rho)`, and near the jump it is a function of :math:`x = k/n` only
(:func:`transition_profile`).

:func:`probe_configuration` builds ``n`` unit tokens of which the first two see *exactly* the
equiangular logits, whatever ``n``, in a dimension that does not grow with ``n``, so that the
engine's kernels (:func:`transformer_pde.attention.softmax` with ``queries``) compute their
outputs for :math:`n = 10^5` and beyond without an :math:`n \times n` array.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _checks, attention

__all__ = [
    "critical_gamma",
    "output_cosine",
    "critical_limit",
    "midpoint_gamma",
    "transition_profile",
    "profile_width",
    "transition_width",
    "probe_configuration",
    "probe_cosine",
    "probe_sweep_task",
]


def _rho(rho, allow_zero=False):
    try:
        val = float(rho)
    except (TypeError, ValueError):
        raise ValueError(f"rho must be a number, got {rho!r}") from None
    ok = (0.0 <= val < 1.0) if allow_zero else (0.0 < val < 1.0)
    if not ok:
        raise ValueError(f"rho must lie in {'[0, 1)' if allow_zero else '(0, 1)'}, got {rho!r}")
    return val


def _gamma(gamma, name="gamma"):
    g = _checks.real_array(gamma, name)
    if not np.all(np.isfinite(g)) or np.any(g < 0):
        raise ValueError(f"{name} must be finite and >= 0")
    return g


def _residual(residual):
    try:
        c = float(residual)
    except (TypeError, ValueError):
        raise ValueError(f"residual must be a number, got {residual!r}") from None
    if not (np.isfinite(c) and c >= 0):
        raise ValueError(f"residual must be a finite number >= 0, got {residual!r}")
    return c


def critical_gamma(rho: float) -> float:
    r"""The critical :math:`\gamma_c = 1/(1-\rho)` (Chen, Lin, Polyanskiy and Rigollet, 2025).

    Defined for :math:`0 < \rho < 1`, the hypothesis of the theorem; at :math:`\rho = 0` the
    transition sits at :math:`\gamma = 1/2` instead (:func:`midpoint_gamma`, chapter 8).

    Parameters
    ----------
    rho : float
        The common inner product, in :math:`(0, 1)`.

    Returns
    -------
    float
        :math:`\gamma_c = 1/(1-\rho)`.

    Examples
    --------
    >>> critical_gamma(0.5)
    2.0

    References
    ----------
    :cite:`chen2025critical,rigollet2025meanfield`
    """
    return 1.0 / (1.0 - _rho(rho))


def _log_self_excess(n, g, rho, c):
    # log of K_eff = (k - 1) + c (k + n - 1), k = n^{gamma (1 - rho)}, without overflow
    logn = math.log(n)
    L = g * (1.0 - rho) * logn
    with np.errstate(divide="ignore"):
        # log(k - 1) = L + log(1 - e^{-L}); -inf at L = 0
        log_km1 = np.where(L > 30.0, L + np.log1p(-np.exp(-np.minimum(L, 700.0))),
                           np.log(np.expm1(np.minimum(L, 30.0))))
    if c == 0.0:
        return log_km1
    # K_eff = (1 + c)(k - 1) + c n
    return np.logaddexp(np.log1p(c) + log_km1, math.log(c) + logn)


def output_cosine(n: int, gamma: ArrayLike, rho: float, *, sum_sq: float | None = None,
                  residual: float = 0.0) -> float | NDArray[np.float64]:
    r"""Cosine of the outputs of two tokens that see the equiangular logits.

    .. math::

        \cos(y_i, y_j) = \frac{K^2\rho + 2K\sigma + |S|^2}{K^2 + 2K\sigma + |S|^2},
        \qquad K = (k - 1) + c\,(k + n - 1),\quad k = n^{\gamma(1-\rho)},\quad
        \sigma = 1 + (n-1)\rho,

    where :math:`S = \sum_j\theta_j`, for two tokens :math:`i \ne j` with
    :math:`\langle\theta_i, \theta_l\rangle = \rho` for every :math:`l \ne i` (and the same
    for :math:`j`), and :math:`c` = ``residual``: the output is
    :math:`y_i = \mathrm{ATT}(\theta_i) + c\,\theta_i`, i.e. the layer
    :math:`x' = \mathrm{ATT}(x/|x|) + \alpha x` of Chen, Lin, Polyanskiy and Rigollet (2025)
    on tokens of norm :math:`\sqrt q`, with :math:`c = \alpha\sqrt q` (derived in
    chapter 8: :math:`y_i \propto K\theta_i + S` and :math:`\langle\theta_i, S\rangle =
    \sigma`). ``sum_sq`` is :math:`|S|^2`, by default :math:`n\sigma`, its value for an
    equiangular configuration. ``gamma`` may be an array. Computed from :math:`\log K`,
    divided through by :math:`\max(K, n)^2`: finite for every :math:`n` up to
    :math:`10^{18}` and beyond and every :math:`\gamma \ge 0`.

    Parameters
    ----------
    n : int
        Number of tokens, at least 2.
    gamma : float or array
        :math:`\gamma \ge 0`, the logits being :math:`\gamma\log n\,\langle\theta_i,
        \theta_j\rangle`.
    rho : float
        The common inner product, in :math:`[0, 1)`.
    sum_sq : float, optional
        :math:`|S|^2 > 0`.
    residual : float, optional
        :math:`c \ge 0`, the weight of the residual connection (0: attention alone).

    Returns
    -------
    float or ndarray
        The cosine, shaped like ``gamma``.

    Raises
    ------
    ValueError
        If an argument is out of range.

    Examples
    --------
    >>> round(output_cosine(10**9, 100.0, 0.5), 12)
    0.5
    >>> round(output_cosine(10**32, 1.0, 0.5, residual=1.0), 12)
    0.8

    References
    ----------
    :cite:`chen2025critical,rigollet2025meanfield`
    """
    n = _checks.int_at_least(n, "n", 2)
    rho = _rho(rho, allow_zero=True)
    g = _gamma(gamma)
    c = _residual(residual)
    sigma = 1.0 + float(n - 1) * rho
    S2 = float(n) * sigma if sum_sq is None else float(sum_sq)
    if not S2 > 0:
        raise ValueError(f"sum_sq must be > 0, got {sum_sq!r}")
    logK = _log_self_excess(n, g, rho, c)
    logM = np.maximum(logK, math.log(n))  # divide through by M^2, M = max(K, n)
    q = np.exp(logK - logM)
    inv = np.exp(-logM)
    rest = (2.0 * (sigma * inv) * q + (S2 * inv) * inv)
    out = (q * q * rho + rest) / (q * q + rest)
    return out if out.ndim else float(out)


def critical_limit(gamma: ArrayLike, rho: float, *, residual: float = 0.0
                   ) -> float | NDArray[np.float64]:
    r"""The limit of :func:`output_cosine` as :math:`n \to \infty`.

    .. math::

        \lim_{n\to\infty}\cos(y_i, y_j) =
        \begin{cases} \Phi_\rho(c), & \gamma < 1/(1-\rho),\\ \Phi_\rho(1 + 2c),
        & \gamma = 1/(1-\rho),\\ \rho, & \gamma > 1/(1-\rho)\end{cases}

    with :math:`\Phi_\rho` = :func:`transition_profile` and :math:`c` = ``residual``;
    :math:`c = 0` gives :math:`1`, :math:`4\rho/(1+3\rho)`, :math:`\rho` (Chen, Lin,
    Polyanskiy and Rigollet, 2025, as stated in Rigollet's survey; the residual case derived
    in chapter 8: :math:`K/n \to c`, :math:`1 + 2c`, :math:`\infty`). ``gamma`` may be an
    array; :math:`\gamma` within :math:`10^{-12}` relative of :math:`1/(1-\rho)` counts as
    critical.

    Parameters
    ----------
    gamma : float or array
        :math:`\gamma \ge 0`.
    rho : float
        The common inner product, in :math:`(0, 1)`.
    residual : float
        :math:`c \ge 0`, the weight of the residual connection.

    Returns
    -------
    float or ndarray
        The limit, shaped like ``gamma``.

    Examples
    --------
    Below, at and above :math:`\gamma_c = 2` for :math:`\rho = 1/2`: 1, :math:`4\rho/(1+3\rho)`
    and :math:`\rho`:

    >>> print([round(float(v), 12) for v in critical_limit(np.array([1.0, 2.0, 3.0]), 0.5)])
    [1.0, 0.8, 0.5]

    References
    ----------
    :cite:`chen2025critical,rigollet2025meanfield`
    """
    rho = _rho(rho)
    g = _gamma(gamma)
    c = _residual(residual)
    x = g * (1.0 - rho)
    out = np.where(x < 1.0, transition_profile(c, rho), rho)
    out = np.where(np.abs(x - 1.0) <= 1e-12, transition_profile(1.0 + 2.0 * c, rho), out)
    return out if out.ndim else float(out)


def midpoint_gamma(n: int, rho: float) -> float:
    r"""The :math:`\gamma` at which the equiangular cosine is halfway, :math:`(1+\rho)/2`.

    .. math::

        \gamma_{1/2}(n, \rho) = \frac{\log\bigl(1 + \sigma + \sqrt{\sigma^2 + n\sigma}
        \bigr)}{(1-\rho)\log n}, \qquad \sigma = 1 + (n-1)\rho

    (derived in chapter 8: :func:`output_cosine` equals :math:`(1+\rho)/2` exactly when
    :math:`K^2 - 2\sigma K - n\sigma = 0`). As :math:`n \to \infty` it tends to
    :math:`1/(1-\rho)` for :math:`\rho > 0`, with a lag
    :math:`\log(\rho + \sqrt{\rho^2 + \rho})/((1-\rho)\log n)`, and to :math:`1/2` for
    :math:`\rho = 0`. ``rho`` in :math:`[0, 1)`.

    Parameters
    ----------
    n : int
        Number of tokens, at least 2.
    rho : float
        The common inner product, in :math:`[0, 1)`.

    Returns
    -------
    float
        :math:`\gamma_{1/2}(n, \rho)`.

    Raises
    ------
    ValueError
        If ``n < 2`` or ``rho`` is outside :math:`[0, 1)`.

    Examples
    --------
    >>> round(midpoint_gamma(1000, 0.0), 4)
    0.5089

    References
    ----------
    :cite:`chen2025critical`
    """
    n = _checks.int_at_least(n, "n", 2)
    rho = _rho(rho, allow_zero=True)
    sigma = 1.0 + float(n - 1) * rho
    K = sigma + math.sqrt(sigma * sigma + float(n) * sigma)
    return float(np.log1p(K) / ((1.0 - rho) * math.log(n)))


def transition_profile(x: ArrayLike, rho: float) -> float | NDArray[np.float64]:
    r"""The shape of the transition, :math:`\Phi_\rho(x) = \rho(1+x)^2/(x^2 + 2\rho x + \rho)`.

    For :math:`n \to \infty` with :math:`x = k/n = n^{\gamma(1-\rho) - 1}` fixed,
    :func:`output_cosine` tends to :math:`\Phi_\rho(x)` (derived in chapter 8);
    :math:`\Phi_\rho(0) = 1`, :math:`\Phi_\rho(1) = 4\rho/(1+3\rho)`,
    :math:`\Phi_\rho(\infty) = \rho`, and :math:`\Phi_\rho` decreases on :math:`[0, \infty)`.

    Parameters
    ----------
    x : float or array
        :math:`x \ge 0` (``inf`` allowed).
    rho : float
        The common inner product, in :math:`(0, 1)`.

    Returns
    -------
    float or ndarray
        :math:`\Phi_\rho(x)`, shaped like ``x``.

    Examples
    --------
    >>> ends = transition_profile(np.array([0.0, np.inf]), 0.5)
    >>> print(round(transition_profile(1.0, 0.5), 12), ends.tolist())
    0.8 [1.0, 0.5]

    References
    ----------
    :cite:`chen2025critical`
    """
    rho = _rho(rho)
    x = _checks.real_array(x, "x")
    if not np.all(x >= 0):
        raise ValueError("x must be >= 0")
    with np.errstate(over="ignore", invalid="ignore"):
        out = rho * (1 + x) ** 2 / (x * x + 2 * rho * x + rho)
    out = np.where(np.isinf(x), rho, out)
    return out if out.ndim else float(out)


def profile_width(rho: float, level: float = 0.1) -> float:
    r"""Width in :math:`\log x` of the transition: :math:`\log(x_+/x_-)`.

    :math:`x_\mp` are the points where :math:`\Phi_\rho` has covered the fractions ``level``
    and ``1 - level`` of its drop from 1 to :math:`\rho`. Since :math:`\log x = (\gamma(1-\rho)
    - 1)\log n`, the transition in :math:`\gamma` has the width
    ``profile_width(rho, level) / ((1 - rho) log n)`` as :math:`n \to \infty` (derived in
    chapter 8): it sharpens like :math:`1/\log n`. :math:`\Phi_\rho(x) = T` is the quadratic
    :math:`(\rho - T)x^2 + 2\rho(1 - T)x + \rho(1 - T) = 0`, whose roots have a negative
    product for :math:`\rho < T < 1`: one positive root.

    Parameters
    ----------
    rho : float
        The common inner product, in :math:`(0, 1)`.
    level : float
        The fraction of the drop, in :math:`(0, 1/2)`.

    Returns
    -------
    float
        :math:`\log(x_+/x_-)`.

    Examples
    --------
    >>> round(profile_width(0.5), 6)
    3.460263

    References
    ----------
    :cite:`chen2025critical`
    """
    rho = _rho(rho)
    level = _checks.finite_float(level, "level")
    if not 0.0 < level < 0.5:
        raise ValueError(f"level must lie in (0, 0.5), got {level!r}")

    def solve(p):  # Phi(x) = rho + (1 - rho) p, p in (0, 1): a quadratic in x
        target = rho + (1 - rho) * p
        # rho (1 + x)^2 = target (x^2 + 2 rho x + rho)
        a2 = rho - target
        a1 = 2 * rho - 2 * rho * target
        a0 = rho - target * rho
        disc = a1 * a1 - 4 * a2 * a0
        roots = np.roots([a2, a1, a0]) if disc >= 0 else np.array([])
        pos = [float(np.real(z)) for z in roots if np.isreal(z) and np.real(z) > 0]
        if len(pos) != 1:
            raise RuntimeError(f"expected one positive root, got {roots}")
        return pos[0]

    return float(np.log(solve(level) / solve(1.0 - level)))


def transition_width(n: int, rho: float, level: float = 0.1) -> float:
    r"""Width in :math:`\gamma` of the transition of :func:`output_cosine` at size ``n``.

    The distance between the :math:`\gamma` at which the equiangular cosine has covered the
    fractions ``level`` and ``1 - level`` of its drop from 1 to :math:`\rho` (Brent's
    method; the cosine decreases in :math:`\gamma`). Tends to
    ``profile_width(rho, level) / ((1 - rho) log n)`` (chapter 8).

    Parameters
    ----------
    n : int
        Number of tokens, at least 2.
    rho : float
        The common inner product, in :math:`(0, 1)`.
    level : float
        The fraction of the drop, in :math:`(0, 1/2)`.

    Returns
    -------
    float
        The width in :math:`\gamma`.

    Examples
    --------
    At :math:`n = 10^6` the width is already that of the limit profile:

    >>> w = transition_width(10**6, 0.5)
    >>> print(bool(abs(w * 0.5 * np.log(10**6) / profile_width(0.5) - 1) < 1e-4))
    True

    References
    ----------
    :cite:`chen2025critical`
    """
    from scipy.optimize import brentq

    n = _checks.int_at_least(n, "n", 2)
    rho = _rho(rho)
    profile_width(rho, level)  # validates level

    def crossing(p):
        target = rho + (1 - rho) * p
        return brentq(lambda g: output_cosine(n, g, rho) - target, 0.0, 4.0 / (1 - rho),
                      xtol=1e-14)

    return float(crossing(level) - crossing(1.0 - level))


def probe_configuration(n: int, rho: float, d_bulk: int,
                        rng: np.random.Generator) -> tuple[NDArray[np.float64], float]:
    r"""``n`` unit tokens of :math:`\mathbb R^{3 + d_b}`; tokens 0, 1 see equiangular logits.

    :math:`\theta_l = \sqrt\rho\,e_0 + \sqrt{1-\rho}\,g_l`, with :math:`g_0 = e_1`,
    :math:`g_1 = e_2`, and the :math:`n - 2` other :math:`g_l` independent and uniform on the
    unit sphere of the last ``d_bulk`` coordinates. Then :math:`\langle\theta_0,
    \theta_l\rangle = \rho` for every :math:`l \ne 0` (same for token 1), exactly, while two
    other tokens have inner product :math:`\rho + (1-\rho)\langle g_l, g_m\rangle`: the rows
    0 and 1 of attention are those of an equiangular configuration, in dimension
    :math:`3 + d_b` instead of :math:`n`. Returns ``(X, sum_sq)`` with
    :math:`|S|^2 = |\sum_l\theta_l|^2` for :func:`output_cosine`.

    Parameters
    ----------
    n : int
        Number of tokens, at least 2.
    rho : float
        The common inner product, in :math:`(0, 1)`.
    d_bulk : int
        Dimension :math:`d_b \ge 1` of the bulk's sphere.
    rng : numpy.random.Generator
        Draws the bulk.

    Returns
    -------
    (array (n, 3 + d_bulk), float)
        The tokens and :math:`|S|^2`.

    Examples
    --------
    >>> X, S2 = probe_configuration(6, 0.5, 4, np.random.default_rng(0))
    >>> print(X.shape, bool(np.allclose(X[0] @ X[1:].T, 0.5)))
    (6, 7) True

    References
    ----------
    :cite:`chen2025critical`
    """
    n = _checks.int_at_least(n, "n", 2)
    rho = _rho(rho)
    d_bulk = _checks.positive_int(d_bulk, "d_bulk")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator, e.g. np.random.default_rng(0)")
    X = np.zeros((n, 3 + d_bulk))
    X[:, 0] = np.sqrt(rho)
    G = rng.standard_normal((n - 2, d_bulk))
    G /= np.linalg.norm(G, axis=1, keepdims=True)
    X[0, 1] = X[1, 2] = np.sqrt(1.0 - rho)
    X[2:, 3:] = np.sqrt(1.0 - rho) * G
    S = X.sum(axis=0)
    return X, float(S @ S)


def probe_cosine(X: ArrayLike, gamma: float, *, chunk_size: int | None = None,
                 residual: float = 0.0) -> float:
    r"""Cosine of the outputs of tokens 0 and 1 at :math:`\beta_n = \gamma\log n`.

    Calls :func:`transformer_pde.attention.softmax` with :math:`A = \beta_n I`,
    :math:`V = I` and ``queries = X[:2]``: memory :math:`O(nd)`, no :math:`n \times n`
    array; adds ``residual`` times the token (:func:`output_cosine`). ``X`` from
    :func:`probe_configuration` (or any unit tokens).

    Parameters
    ----------
    X : array (n, d)
        Unit tokens, ``n >= 2``.
    gamma : float
        :math:`\gamma \ge 0`, :math:`\beta_n = \gamma\log n`.
    chunk_size : int, optional
        Rows per block of the attention kernel.
    residual : float
        :math:`c \ge 0`, the weight of the residual connection.

    Returns
    -------
    float
        The cosine of the outputs of tokens 0 and 1.

    Examples
    --------
    On a :func:`probe_configuration` it is the exact :func:`output_cosine`:

    >>> X, S2 = probe_configuration(50, 0.5, 8, np.random.default_rng(0))
    >>> exact = output_cosine(50, 1.0, 0.5, sum_sq=S2)
    >>> print(bool(np.isclose(probe_cosine(X, 1.0), exact, rtol=1e-10)))
    True

    References
    ----------
    :cite:`chen2025critical`
    """
    X = _checks.points(X, "X")
    n, d = X.shape
    _checks.int_at_least(n, "n", 2)
    g = float(_gamma(gamma))
    c = _residual(residual)
    beta = g * np.log(n)
    Y = attention.softmax(X, beta * np.eye(d), np.eye(d), queries=X[:2], chunk_size=chunk_size)
    Y = Y + c * X[:2]
    return float(Y[0] @ Y[1] / (np.linalg.norm(Y[0]) * np.linalg.norm(Y[1])))


def probe_sweep_task(key: Sequence[int], rho: float, d_bulk: int, gammas: ArrayLike, *,
                     residual: float = 0.0) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""One size of a sweep: :func:`probe_configuration` of ``n = key[-1]`` tokens drawn by
    ``default_rng(key)``, then :func:`probe_cosine` and the exact :func:`output_cosine` at
    each of ``gammas``.

    Returns ``(measured, exact)``, two arrays of ``len(gammas)`` cosines; a task of
    :func:`transformer_pde.draws.map_keys`.

    Parameters
    ----------
    key : sequence of int
        Seed of the generator; its last entry is ``n``.
    rho : float
        The common inner product, in :math:`(0, 1)`.
    d_bulk : int
        Dimension of the bulk's sphere.
    gammas : float or array (m,)
        :math:`\gamma \ge 0` values.
    residual : float
        :math:`c \ge 0`, the weight of the residual connection.

    Returns
    -------
    (array (m,), array (m,))
        Measured and exact cosines.

    Examples
    --------
    >>> measured, exact = probe_sweep_task([0, 50], 0.5, 8, [0.5, 2.0])
    >>> print(bool(np.allclose(measured, exact, rtol=1e-10)))
    True

    References
    ----------
    :cite:`chen2025critical`
    """
    key = _checks.seed_key(key, "key")
    n = key[-1]
    X, S2 = probe_configuration(n, rho, d_bulk, np.random.default_rng(key))
    g = np.atleast_1d(_gamma(gammas, "gammas"))
    if g.ndim != 1:
        raise ValueError(f"gammas must be a number or a 1-D array, got shape {g.shape}")
    measured = np.array([probe_cosine(X, gg, residual=residual) for gg in g])
    return measured, np.atleast_1d(output_cosine(n, g, rho, sum_sq=S2, residual=residual))
