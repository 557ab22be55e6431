r"""Token sample complexity: the attention map of :math:`n` tokens against its infinite-token limit.

Bohbot, Letrouit, Peyré and Vialard (2026) bound the distance between softmax attention on
:math:`n` i.i.d. tokens of a sub-Gaussian law :math:`\mu` and its limit
:math:`\Gamma_\mu(x) = \int V y\, e^{\langle Ax, y\rangle} d\mu(y) / \int e^{\langle Ax,
y\rangle} d\mu(y)`, uniformly on a ball :math:`|x| \le R`, by :math:`C(R)/\sqrt n`. For
Gaussian tokens :math:`\mathcal N(\alpha, \Sigma)` the limit is affine,
:math:`\Gamma_\mu(x) = V(\alpha + \Sigma A x)`, and the fluctuation
:math:`\sqrt n\,(\Gamma_{\hat\mu_n} - \Gamma_\mu)` tends to a centred Gaussian field whose
covariance is closed-form (:func:`fluctuation_covariance`, derived here). This module
measures the sup of the error over a grid of the ball (:func:`uniform_field_errors`), the
limit of :math:`n` times its mean square (:func:`sup_limit`, Monte Carlo of the limiting
field), and the moment exponent :math:`b(\rho) = 1/(2(1 + \rho^2))` that the authors' code
plots against the interaction strength :math:`\rho = \|\Sigma^{1/2} A \Sigma^{1/2}\|_2`
(:func:`moment_exponent`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _checks, _progress

__all__ = ["disk_grid", "fluctuation_covariance", "uniform_field_errors", "sup_limit",
           "sup_limit_samples",
           "moment_exponent", "SupLimit", "UniformRateTest", "uniform_rate_test",
           "gaussian_max_mean", "HardmaxLaw", "hardmax_law"]


def disk_grid(radius: float, rings: int, center: ArrayLike = (0.0, 0.0)) -> NDArray[np.float64]:
    r"""Query points of the closed disk :math:`|x - c| \le R` in the plane.

    .. math::

        x_{kj} = c + \frac{k R}{K}\,(\cos\tfrac{2\pi j}{6k}, \sin\tfrac{2\pi j}{6k}),
        \quad 0 \le k \le K,\ 0 \le j < \max(1, 6k),

    :math:`1 + 3K(K + 1)` points, about equally spaced (spacing :math:`R/K`), the boundary
    circle included. Used for the uniform bound of Bohbot et al. (2026).

    Parameters
    ----------
    radius : float
        :math:`R > 0`.
    rings : int
        :math:`K \ge 1`.
    center : array (2,)

    Returns
    -------
    array (1 + 3 K (K + 1), 2)

    Raises
    ------
    ValueError
        If ``radius`` is not positive, ``rings`` not a positive int, ``center`` not 2 finite
        numbers.

    Examples
    --------
    >>> disk_grid(1.0, 2).shape
    (19, 2)

    References
    ----------
    :cite:`bohbot2026token`
    """
    R = _checks.positive_float(radius, "radius")
    K = _checks.positive_int(rings, "rings")
    c = _checks.real_array(center, "center")
    if c.shape != (2,) or not np.all(np.isfinite(c)):
        raise ValueError(f"center must be 2 finite numbers, got {center!r}")
    pts = [np.zeros((1, 2))]
    for k in range(1, K + 1):
        th = 2 * np.pi * np.arange(6 * k) / (6 * k)
        pts.append(k * R / K * np.stack([np.cos(th), np.sin(th)], axis=1))
    return c + np.concatenate(pts)


def _gaussian_problem(A, V, alpha, Sigma):
    alpha, Sigma = _checks.gaussian(alpha, Sigma)
    d = alpha.shape[0]
    V = _checks.matrix(V, "V", cols=d)
    if V.shape[0] < 1:
        raise ValueError(f"V must have at least one row, got shape {V.shape}")
    return _checks.matrix(A, "A", (d, d)), V, alpha, Sigma


def fluctuation_covariance(A: ArrayLike, V: ArrayLike, alpha: ArrayLike, Sigma: ArrayLike,
                           queries: ArrayLike) -> NDArray[np.float64]:
    r"""Covariance of the limiting fluctuation of softmax attention on Gaussian tokens.

    For :math:`y_1, \dots, y_n \sim \mathcal N(\alpha, \Sigma)` i.i.d. and the weight
    :math:`w(x, y) = e^{\langle Ax, y - \alpha\rangle - q(x)/2}`,
    :math:`q(x) = x^\top A^\top \Sigma A x`, the delta method gives
    :math:`\sqrt n(\Gamma_{\hat\mu_n}(x) - \Gamma_\mu(x)) \to G(x)`, a centred Gaussian field
    with

    .. math::

        \operatorname{Cov}(G(x), G(x')) = \mathbb E_y\big[w(x,y) w(x',y)\, V(y - b(x))
        (y - b(x'))^\top V^\top\big]
        = e^{x^\top A^\top\Sigma A x'}\; V\big(\Sigma + \Sigma A x' x^\top A^\top \Sigma\big)
        V^\top,

    :math:`b(x) = \alpha + \Sigma A x`: under :math:`w(x,\cdot)w(x',\cdot)` the key is
    :math:`\mathcal N(\alpha + \Sigma A(x + x'), \Sigma)` times
    :math:`e^{x^\top A^\top\Sigma A x'}`. Derived here, for the Gaussian case of the uniform
    bound of Bohbot et al. (2026); the limit field :math:`\Gamma_\mu(x) = V b(x)` is that of
    Castin et al. (2025).

    Parameters
    ----------
    A : array (d, d)
    V : array (p, d)
    alpha : array (d,)
    Sigma : array (d, d), symmetric positive definite
    queries : array (m, d)

    Returns
    -------
    array (m * p, m * p)
        Rows and columns ordered query by query (``G.reshape(m, p)``).

    Raises
    ------
    ValueError
        On shapes that do not match or non-finite entries.

    Examples
    --------
    >>> K = fluctuation_covariance(np.eye(2), np.eye(2), np.zeros(2), np.eye(2),
    ...                            np.zeros((1, 2)))
    >>> bool(np.allclose(K, np.eye(2)))
    True

    References
    ----------
    :cite:`bohbot2026token,castin2025unified`
    """
    A, V, alpha, Sigma = _gaussian_problem(A, V, alpha, Sigma)
    Y = _checks.points(queries, "queries")
    if Y.shape[1] != alpha.shape[0]:
        raise ValueError(f"queries must have d = {alpha.shape[0]} columns, got {Y.shape}")
    m, p = Y.shape[0], V.shape[0]
    SAY = Y @ (Sigma @ A).T                     # rows Sigma A x
    E = np.exp(Y @ A.T @ Sigma @ A @ Y.T)       # e^{x^T A^T Sigma A x'}
    VS = V @ Sigma @ V.T
    VSAY = SAY @ V.T                            # rows V Sigma A x
    # block (i, j): E_ij (V Sigma V^T + (V Sigma A x_j)(V Sigma A x_i)^T)
    outer = np.einsum("ja,ib->iajb", VSAY, VSAY)
    K = E[:, None, :, None] * (VS[None, :, None, :] + outer)
    return K.reshape(m * p, m * p)


def _sup_errors(key, A, V, alpha, chol, queries, limit, n):
    from . import attention

    X = alpha + np.random.default_rng(key).standard_normal((n, alpha.shape[0])) @ chol.T
    G = attention.softmax(X, A, V, queries=queries)
    return float(np.max(np.sum((G - limit) ** 2, axis=1)))


#: Query-token pairs that one joblib task of :func:`uniform_field_errors` handles at least.
_PAIRS_PER_TASK = 2**22


def uniform_field_errors(A: ArrayLike, V: ArrayLike, alpha: ArrayLike, Sigma: ArrayLike,
                         queries: ArrayLike, sizes: ArrayLike, draws: int | Sequence[int],
                         seed: int | Sequence[int], *, n_jobs: int | None = None
                         ) -> list[NDArray[np.float64]]:
    r"""Squared sup errors of softmax attention on :math:`n` Gaussian tokens over the queries.

    .. math::

        e_n = \max_{x \in \text{queries}} \big|\Gamma_{\hat\mu_n}(x) - V(\alpha + \Sigma A x)
        \big|^2, \qquad \hat\mu_n = \frac1n\sum_{j} \delta_{y_j},\
        y_j \sim \mathcal N(\alpha, \Sigma) \text{ i.i.d.},

    the quantity that the uniform bound of Bohbot et al. (2026) controls by
    :math:`C(R)^2/n` when the queries fill the ball :math:`|x| \le R` (the max over a grid is
    at most the sup over the ball). Each draw has its own generator,
    ``numpy.random.default_rng([*seed, k, r])`` for draw ``r`` at size index ``k``, and the
    draws run through :class:`joblib.Parallel` (``n_jobs``), so the values do not depend on
    the jobs.

    Parameters
    ----------
    A : array (d, d)
    V : array (p, d)
    alpha : array (d,)
    Sigma : array (d, d), symmetric positive definite
    queries : array (m, d)
    sizes : sequence of int
        Numbers of tokens :math:`n`.
    draws : int or sequence of int
        Independent draws per size (one number, or one per size).
    seed : int or sequence of int
    n_jobs : int or None

    Returns
    -------
    list of arrays
        Element ``k`` has shape ``(draws[k],)``.

    Raises
    ------
    ValueError
        On bad shapes, sizes, draws or seed.

    Examples
    --------
    >>> e = uniform_field_errors(np.eye(2), np.eye(2), np.zeros(2), np.eye(2),
    ...                          disk_grid(0.5, 2), [50, 100], 3, 0, n_jobs=1)
    >>> [x.shape for x in e]
    [(3,), (3,)]

    References
    ----------
    :cite:`bohbot2026token`
    """
    A, V, alpha, Sigma = _gaussian_problem(A, V, alpha, Sigma)
    Y = _checks.points(queries, "queries")
    if Y.shape[1] != alpha.shape[0]:
        raise ValueError(f"queries must have d = {alpha.shape[0]} columns, got {Y.shape}")
    sizes = [_checks.positive_int(n, "sizes") for n in np.atleast_1d(sizes)]
    draws = [_checks.positive_int(r, "draws")
             for r in np.broadcast_to(np.asarray(draws), (len(sizes),))]
    seed = _checks.seed_key(seed)
    chol = np.linalg.cholesky(Sigma)
    limit = (alpha + Y @ (Sigma @ A).T) @ V.T
    out = []
    for k, (n, R) in enumerate(zip(sizes, draws, strict=True)):
        out.append(np.array(_progress.map_blocks(
            _sup_errors, [[*seed, k, r] for r in range(R)], (A, V, alpha, chol, Y, limit, n),
            {}, block=max(1, _PAIRS_PER_TASK // (n * Y.shape[0])), n_jobs=n_jobs)))
    return out


def _cholesky_root(K):
    """A lower Cholesky factor of the positive semi-definite ``K`` plus the smallest jitter
    ``10^{-12}, 10^{-10}, ...`` times its largest diagonal entry that makes it definite."""
    scale = float(np.max(np.diag(K)))
    for exponent in (-12, -10, -8, -6):
        try:
            return np.linalg.cholesky(K + 10.0**exponent * scale * np.eye(K.shape[0]))
        except np.linalg.LinAlgError:
            continue
    raise ValueError("the covariance of the fluctuation is not positive semi-definite")


class SupLimit(NamedTuple):
    """Limits of :math:`n e_n` from the Gaussian field (see :func:`sup_limit`)."""

    mean: float
    stderr: float
    log_mean: float
    log_stderr: float


def sup_limit(A: ArrayLike, V: ArrayLike, alpha: ArrayLike, Sigma: ArrayLike,
              queries: ArrayLike, *, samples: int = 20000,
              seed: int | Sequence[int] = 0) -> SupLimit:
    r"""Limits of :math:`n\,\mathbb E\,e_n` and :math:`\mathbb E\log(n e_n)` (uniform_field_errors).

    .. math::

        n\, \mathbb E \max_x |\Gamma_{\hat\mu_n}(x) - \Gamma_\mu(x)|^2 \to
        \mathbb E \max_x |G(x)|^2, \qquad
        \mathbb E \log\big(n \max_x |\Gamma_{\hat\mu_n}(x) - \Gamma_\mu(x)|^2\big) \to
        \mathbb E \log \max_x |G(x)|^2,

    :math:`G` the Gaussian field of :func:`fluctuation_covariance` on the queries (its law
    sampled ``samples`` times through a Cholesky factor of the covariance plus
    :math:`10^{-12}` times its largest diagonal entry, a factor that, unlike eigenvectors of
    nearly equal eigenvalues, rounding cannot rotate: the same samples on every BLAS). The
    limit law of :math:`n e_n` is derived here (Gaussian case of Bohbot et al. (2026)); the
    convergence of the two means to these values also needs uniform integrability of
    :math:`n e_n` and of :math:`\log(n e_n)`, which is assumed, not proved here.

    Parameters
    ----------
    A, V, alpha, Sigma, queries
        As in :func:`fluctuation_covariance`.
    samples : int
        Monte Carlo samples of :math:`G`.
    seed : int or sequence of int

    Returns
    -------
    SupLimit
        ``(mean, stderr, log_mean, log_stderr)``: the Monte Carlo means of
        :math:`\max_x |G(x)|^2` and of its logarithm, with their standard errors.

    Raises
    ------
    ValueError
        On bad shapes, ``samples < 2`` or a bad seed.

    Examples
    --------
    >>> lim = sup_limit(np.zeros((2, 2)), np.eye(2), np.zeros(2), np.eye(2),
    ...                 np.zeros((1, 2)), samples=4000)
    >>> abs(lim.mean - 2) < 5 * lim.stderr   # |G|^2 is chi-square with 2 degrees of freedom
    True

    References
    ----------
    :cite:`bohbot2026token`
    """
    vals = sup_limit_samples(A, V, alpha, Sigma, queries, samples=samples, seed=seed)
    S = vals.size
    logs = np.log(vals)
    return SupLimit(float(vals.mean()), float(vals.std(ddof=1) / np.sqrt(S)),
                    float(logs.mean()), float(logs.std(ddof=1) / np.sqrt(S)))


def sup_limit_samples(A: ArrayLike, V: ArrayLike, alpha: ArrayLike, Sigma: ArrayLike,
                      queries: ArrayLike, *, samples: int = 20000,
                      seed: int | Sequence[int] = 0) -> NDArray[np.float64]:
    r"""Independent samples of :math:`\max_x |G(x)|^2`, the limit law of :math:`n e_n`.

    .. math::

        n \max_x |\Gamma_{\hat\mu_n}(x) - \Gamma_\mu(x)|^2 \to \max_x |G(x)|^2
        \quad\text{in law},

    :math:`G` the Gaussian field of :func:`fluctuation_covariance` on the queries, sampled
    through a Cholesky factor of its covariance (plus :math:`10^{-12}` times its largest
    diagonal entry); the samples :func:`sup_limit` averages (Gaussian case of Bohbot et al.,
    2026, derived here). Split into batches, they give independent estimates of the limit.

    Parameters
    ----------
    A, V, alpha, Sigma, queries
        As in :func:`fluctuation_covariance`.
    samples : int
        Number of samples, at least 2.
    seed : int or sequence of int

    Returns
    -------
    array (samples,)
        Positive samples, in the order of the generator's draws (batch ``b`` of ``B`` can
        take ``samples[b::B]``).

    Raises
    ------
    ValueError
        If a matrix, the moments or the queries have the wrong shape, ``samples`` is below 2,
        or ``seed`` is not a valid seed.

    Examples
    --------
    Two queries; each sample is the larger of two squared norms:

    >>> g = sup_limit_samples(np.eye(2), np.eye(2), np.zeros(2), np.eye(2),
    ...                       np.array([[0.0, 0.0], [0.2, 0.0]]), samples=100, seed=1)
    >>> print(g.shape, bool(np.all(g > 0)))
    (100,) True

    References
    ----------
    :cite:`bohbot2026token`
    """
    K = fluctuation_covariance(A, V, alpha, Sigma, queries)
    S = _checks.positive_int(samples, "samples")
    if S < 2:
        raise ValueError(f"samples must be at least 2, got {samples!r}")
    seed = _checks.seed_key(seed)
    root = _cholesky_root((K + K.T) / 2)
    p = np.asarray(V).shape[0]
    rng = np.random.default_rng(seed)
    vals = np.empty(S)
    for start in range(0, S, 2000):
        stop = min(S, start + 2000)
        G = (rng.standard_normal((stop - start, K.shape[0])) @ root.T)
        vals[start:stop] = np.max(np.sum(G.reshape(stop - start, -1, p) ** 2, axis=2), axis=1)
    return vals


def moment_exponent(rho: ArrayLike) -> float | NDArray[np.float64]:
    r"""The moment exponent :math:`b(\rho) = \dfrac{1}{2(1 + \rho^2)}` for Gaussian tokens.

    The reference curve that the code of Bohbot et al. (2026) plots against the horizon
    :math:`H = \|\Sigma^{1/2} A \Sigma^{1/2}\|_2` (the interaction strength :math:`\rho` of
    chapter 2) for the exponents of the mean and covariance errors of the attention output.
    It is what balancing the uniform bound on a ball of whitened radius :math:`r`,
    :math:`e^{\rho^2 r^2/2}/\sqrt n`, against the Gaussian mass outside it, :math:`e^{-r^2/2}`,
    gives (derived here, a heuristic): :math:`r^2 = \log n/(1 + \rho^2)`. Like an upper-bound
    proof, it gives every token inside the ball the worst error on it: the error is bounded by
    about :math:`n^{-b(\rho)}`, not predicted to decay at that rate.

    Parameters
    ----------
    rho : float or array, non-negative

    Returns
    -------
    float or array

    Raises
    ------
    ValueError
        If ``rho`` is negative or not finite.

    Examples
    --------
    >>> moment_exponent(1.0)
    0.25

    References
    ----------
    :cite:`bohbot2026token`
    """
    r = _checks.real_array(rho, "rho")
    if not np.all(np.isfinite(r)) or np.any(r < 0):
        raise ValueError(f"rho must be non-negative and finite, got {rho!r}")
    b = 0.5 / (1.0 + r**2)
    return float(b) if b.ndim == 0 else b


class UniformRateTest(NamedTuple):
    """Statistics of :func:`uniform_rate_test`."""

    exponent: float
    exponent_stderr: float
    z_rate: float
    scaled_mean: NDArray[np.float64]
    scaled_stderr: NDArray[np.float64]
    z_limit: float


def uniform_rate_test(sizes: ArrayLike, squared_errors: Sequence[ArrayLike],
                      limit: SupLimit) -> UniformRateTest:
    r"""Is the sup error :math:`\sqrt n`-small, with the constant of the Gaussian limit?

    Two statistics of the squared sup errors :math:`e_{kr}` (:func:`uniform_field_errors`),
    draw :math:`r` at size :math:`n_k`:

    - ``z_rate``: the exponent of the typical error fitted through every draw
      (:func:`transformer_pde.fitting.log_error_rate`), minus :math:`-1/2`, in standard
      errors;
    - ``z_limit``: the mean of :math:`\log(n_k e_{kr})` over all :math:`N` draws minus its
      limit ``limit.log_mean`` (:func:`sup_limit`), divided by
      :math:`(s^2/N + \text{limit.log\_stderr}^2)^{1/2}`, :math:`s` the sample standard
      deviation of the logarithms. The logarithm removes the right tail of :math:`n e_n`
      (heavy at finite :math:`n`), which would otherwise make a run without its rare large
      draws show both a low mean and a low spread.

    Both are nearly standard normal when :math:`n e_n` has reached its limit law over the sizes
    (the rate of Bohbot et al., 2026, with the constant derived here).

    Parameters
    ----------
    sizes : sequence of int
    squared_errors : list of arrays, one per size
    limit : SupLimit
        From :func:`sup_limit` on the same queries.

    Returns
    -------
    UniformRateTest
        ``(exponent, exponent_stderr, z_rate, scaled_mean, scaled_stderr, z_limit)``, the
        means of :math:`n_k e_{kr}` and their standard errors per size.

    Raises
    ------
    ValueError
        On bad sizes or errors, or a limit whose log statistics are not finite.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> e = [rng.exponential(1.0, 400) / n for n in (100, 200, 400)]
    >>> lim = SupLimit(1.0, 0.0, -np.euler_gamma, 0.0)  # E log of an Exp(1) variable
    >>> t = uniform_rate_test([100, 200, 400], e, lim)
    >>> abs(t.z_limit) < 4 and abs(t.z_rate) < 4
    True

    References
    ----------
    :cite:`bohbot2026token`
    """
    from .fitting import log_error_rate

    fit = log_error_rate(sizes, squared_errors)
    if not isinstance(limit, SupLimit):
        raise ValueError(f"limit must be a SupLimit (from sup_limit), got {limit!r}")
    log_lim = _checks.finite_float(limit.log_mean, "limit.log_mean")
    lse = _checks.nonnegative_float(limit.log_stderr, "limit.log_stderr")
    n = np.asarray(sizes, dtype=np.float64)
    scaled = [nk * np.asarray(e, dtype=np.float64) for nk, e in zip(n, squared_errors,
                                                                       strict=True)]
    means = np.array([s.mean() for s in scaled])
    ses = np.array([s.std(ddof=1) / np.sqrt(s.size) if s.size > 1 else np.nan
                    for s in scaled])
    logs = np.log(np.concatenate(scaled))
    z_limit = (logs.mean() - log_lim) / np.sqrt(logs.var(ddof=1) / logs.size + lse**2)
    return UniformRateTest(fit.exponent, fit.stderr, float(fit.z(-0.5)), means, ses,
                           float(z_limit))


def gaussian_max_mean(n: int) -> float:
    r"""Mean of the maximum of :math:`n` independent standard Gaussians.

    .. math::

        \mathbb E \max_{j \le n} s_j = \int_0^\infty \big(1 - \Phi(s)^n\big)\, ds
        - \int_{-\infty}^0 \Phi(s)^n\, ds,

    by the trapezoidal rule on :math:`[0, 12]` with step :math:`10^{-3}` for both integrals
    (the integrands are smooth, and below :math:`10^{-27}` beyond 12 for :math:`n \le 10^6`;
    the closed forms :math:`1/\sqrt\pi` and :math:`3/(2\sqrt\pi)` for :math:`n = 2, 3` are
    met to :math:`10^{-12}`). Asymptotically (classical extreme-value theory)
    :math:`\sqrt{2\log n} - (\log\log n + \log 4\pi - 2\gamma)/(2\sqrt{2\log n})
    + o(1/\sqrt{\log n})`.
    The standardised projection of hardmax attention on :math:`n` Gaussian keys has this law
    (:func:`hardmax_law`, derived here for the hardmax item of Bohbot et al., 2026).

    Parameters
    ----------
    n : int
        Number of Gaussians, :math:`1 \le n \le 10^6`.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``n`` is not an integer in :math:`[1, 10^6]`.

    Examples
    --------
    >>> round(float(gaussian_max_mean(2) * np.sqrt(np.pi)), 8)   # E max of two: 1/sqrt(pi)
    1.0

    References
    ----------
    :cite:`bohbot2026token`
    """
    from scipy.special import log_ndtr

    n = _checks.positive_int(n, "n")
    if n > 10**6:
        raise ValueError(f"n must be at most 10^6, got {n}")
    s = np.linspace(0.0, 12.0, 12001)
    upper = 1.0 - np.exp(n * log_ndtr(s))      # 1 - Phi(s)^n on [0, 12]
    lower = np.exp(n * log_ndtr(-s))           # Phi(-s)^n on [0, 12]
    h = s[1] - s[0]
    return float(np.sum((upper[1:] + upper[:-1]) - (lower[1:] + lower[:-1])) * h / 2)


class HardmaxLaw(NamedTuple):
    """Output of :func:`hardmax_law`."""

    maxima: NDArray[np.float64]
    softmax: NDArray[np.float64]
    ks: NDArray[np.float64]
    threshold: NDArray[np.float64]
    expected: NDArray[np.float64]


#: Strength of the softmax that :func:`hardmax_law` uses as hardmax.
HARD_STRENGTH = 1e9


def _uniform_ks(u):
    """Kolmogorov-Smirnov distance of the sample ``u`` from the uniform law on [0, 1]."""
    u = np.sort(u)
    i = np.arange(1, u.size + 1)
    return float(max(np.max(i / u.size - u), np.max(u - (i - 1) / u.size)))


def _max_density(n):
    """Largest density of the maximum of ``n`` standard Gaussians, n phi Phi^(n-1)."""
    from scipy.special import log_ndtr

    s = np.linspace(-12.0, 12.0, 24001)
    return float(np.max(n * np.exp(-s**2 / 2 - 0.5 * np.log(2 * np.pi)
                                   + (n - 1) * log_ndtr(s))))


def _max_law_ks(sizes, maxima, level, strength=np.inf):
    """KS distances of Phi(S)^n from uniform, and the DKW-Massart thresholds (Bonferroni over
    the sizes at total ``level``) plus the largest move a softmax of finite ``strength``
    instead of hardmax can cause, sup f_n * (n - 1)/(e * strength)."""
    from scipy.special import log_ndtr

    ks, thr = [], []
    for n, s in zip(sizes, maxima, strict=True):
        s = np.asarray(s, dtype=np.float64)
        ks.append(_uniform_ks(np.exp(n * log_ndtr(s))))
        slack = _max_density(n) * (n - 1) / (np.e * strength) if np.isfinite(strength) else 0.0
        thr.append(np.sqrt(np.log(2 * len(sizes) / level) / (2 * s.size)) + slack)
    return np.array(ks), np.array(thr)


def _hardmax_draw(key, A, alpha, chol, x, a, sig, n, strengths):
    from . import attention

    Y = alpha + np.random.default_rng(key).standard_normal((n, alpha.shape[0])) @ chol.T
    out = []
    for t in (HARD_STRENGTH, *strengths):
        b = attention.softmax(Y, (t / sig) * A, np.eye(alpha.shape[0]), queries=x[None])[0]
        out.append(float((b - alpha) @ a / sig))
    return out


def hardmax_law(A: ArrayLike, alpha: ArrayLike, Sigma: ArrayLike, sizes: ArrayLike,
                draws: int, seed: int | Sequence[int], *, query: ArrayLike | None = None,
                strengths: ArrayLike = (1.0,), level: float = 1e-6,
                n_jobs: int | None = None) -> HardmaxLaw:
    r"""Hardmax attention on :math:`n` Gaussian keys: the law of its projection, and softmax.

    For keys :math:`y_1, \dots, y_n \sim \mathcal N(\alpha, \Sigma)` i.i.d., a query
    :math:`x` with :math:`a = Ax \ne 0` and :math:`\sigma_a^2 = a^\top\Sigma a`, the
    standardised scores :math:`s_j = \langle a, y_j - \alpha\rangle/\sigma_a` are i.i.d.
    standard Gaussians; hardmax attention outputs the key of largest score, whose standardised
    projection :math:`S_n = \max_j s_j` has the law :math:`P(S_n \le s) = \Phi(s)^n`
    (derived here). So :math:`U = \Phi(S_n)^n` is uniform on :math:`[0, 1]`, and the
    Kolmogorov-Smirnov distance of :math:`R` draws of :math:`U` from the uniform law exceeds
    :math:`\sqrt{\log(2K/\text{level})/(2R)}` with probability at most ``level``/K (the
    Dvoretzky-Kiefer-Wolfowitz inequality with Massart's constant), K the number of sizes.

    Hardmax is computed as the library's softmax attention
    (:func:`transformer_pde.attention.softmax`, value matrix :math:`I`) with :math:`A` scaled
    to the strength :math:`t = 10^9` (:math:`t = \beta\sigma_a`): it differs from the key of
    largest score by at most :math:`(n - 1)/(e t)` in standardised projection, which moves the
    KS distance by at most :math:`\sup f_n \cdot (n-1)/(et)`, :math:`f_n` the density of
    :math:`S_n`; that amount is added to each threshold. The softmax at the finite
    ``strengths`` :math:`t` is returned as well: its standardised projection is a convex
    combination of the :math:`s_j`, at most :math:`S_n`, whereas the infinite-token limit
    :math:`\Gamma_\mu(x) = \alpha + \Sigma(t/\sigma_a)Ax` has projection :math:`t`. Draw
    ``r`` at size index ``k`` uses ``numpy.random.default_rng([*seed, k, r])``.

    Parameters
    ----------
    A : array (d, d)
    alpha : array (d,)
    Sigma : array (d, d), symmetric positive definite
    sizes : sequence of int
        Numbers of keys :math:`n`, at most :math:`10^6`.
    draws : int
        Draws per size (at least 2).
    seed : int or sequence of int
    query : array (d,), optional
        The query :math:`x` (the first coordinate vector by default).
    strengths : sequence of float
        Finite positive strengths :math:`t` of the softmax (default one, :math:`t = 1`).
    level : float
        Total false-alarm level of the KS thresholds, in :math:`(0, 1)`.
    n_jobs : int or None

    Returns
    -------
    HardmaxLaw
        ``maxima`` (sizes, draws): :math:`S_n` per draw; ``softmax`` (sizes, draws,
        strengths): the standardised projections of softmax attention; ``ks`` and
        ``threshold`` per size; ``expected``: :math:`\mathbb E S_n` (:func:`gaussian_max_mean`).

    Raises
    ------
    ValueError
        On bad shapes, sizes, draws, strengths, level or seed, or if :math:`Ax = 0`.

    Examples
    --------
    >>> h = hardmax_law(np.eye(2), np.zeros(2), np.eye(2), [10, 100], 50, 0, n_jobs=1)
    >>> bool(np.all(h.ks < h.threshold))
    True

    References
    ----------
    :cite:`bohbot2026token`
    """
    alpha, Sigma = _checks.gaussian(alpha, Sigma)
    d = alpha.shape[0]
    A = _checks.matrix(A, "A", (d, d))
    sizes = [_checks.positive_int(n, "sizes") for n in np.atleast_1d(sizes)]
    if not sizes or max(sizes) > 10**6:
        raise ValueError(f"sizes must be a non-empty sequence of sizes up to 10^6, got {sizes}")
    R = _checks.int_at_least(draws, "draws", 2)
    try:
        seed = _checks.seed_key(seed)
    except TypeError:
        raise ValueError(f"seed must be a non-negative int or a 1-D sequence of them, "
                         f"got {seed!r}") from None
    if query is None:
        x = np.eye(d)[0]
    else:
        x = _checks.real_array(query, "query")
        if x.shape != (d,) or not np.all(np.isfinite(x)):
            raise ValueError(f"query must be a finite array of shape ({d},), got {query!r}")
    t = _checks.real_array(strengths, "strengths")
    if t.ndim != 1 or not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError(f"strengths must be a 1-D sequence of positive finite numbers, "
                         f"got {strengths!r}")
    level = _checks.positive_float(level, "level")
    if level >= 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    a = A @ x
    sig = float(np.sqrt(a @ Sigma @ a))
    if not sig > 0:
        raise ValueError("A @ query must be non-zero")
    chol = np.linalg.cholesky(Sigma)
    proj = np.empty((len(sizes), R, 1 + t.size))
    for k, n in enumerate(sizes):
        proj[k] = np.array(_progress.map_blocks(
            _hardmax_draw, [[*seed, k, r] for r in range(R)],
            (A, alpha, chol, x, a, sig, n, tuple(t)), {},
            block=max(1, 2**20 // n), n_jobs=n_jobs))
    ks, thr = _max_law_ks(sizes, proj[:, :, 0], level, HARD_STRENGTH)
    return HardmaxLaw(proj[:, :, 0], proj[:, :, 1:], ks, thr,
                      np.array([gaussian_max_mean(n) for n in sizes]))
