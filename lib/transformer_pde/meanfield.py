r"""How fast does the softmax particle system approach its Gaussian mean-field limit?

For Gaussian tokens :math:`x, y \sim \mathcal N(\alpha, \Sigma)` (independent) and the
interaction strength :math:`\rho = \|\Sigma^{1/2} A \Sigma^{1/2}\|_2`, three second moments
of the attention weights are finite on three different ranges of :math:`\rho` (derived for
the Transformer PDE of Castin, Ablin, Carrillo and Peyré, 2025; proposition
``prop-ch2-meanfield-rate`` of chapter 2):

1. the unnormalised weight, :math:`\mathbb E\, e^{2\langle Ax, y\rangle} < \infty` iff
   :math:`\rho < 1/2` (:func:`softmax_weight_second_moment`). This is the threshold of the
   Monte Carlo average of an *unnormalised* exponential kernel, the large-:math:`n` limit of
   sigmoid attention with bias :math:`-\log n`; it plays no role for self-normalised softmax;
2. the normalised weight :math:`w(x, y) = e^{\langle Ax, y\rangle} / \mathbb E_y
   e^{\langle Ax, y\rangle}`, :math:`\mathbb E\, w^2 < \infty` iff :math:`\rho < 1/\sqrt2`
   (:func:`normalised_weight_second_moment`): the mean-square error of the field at a
   particle is :math:`O(1/n)` on this range (:func:`field_error_variance`);
3. the mean weight of a key :math:`\bar w(y) = \mathbb E_x w(x, y)`,
   :math:`\mathbb E\, \bar w^2 < \infty` iff :math:`\rho < 1`
   (:func:`key_projection_second_moment`): by linearisation (the delta method, not proved),
   moments of the particle system such as the rate of the empirical covariance have an
   :math:`O(1/n)` mean-square error on this range, with the constant
   :func:`covariance_rate_variance`, which grows without bound as :math:`\rho \to 1`.

:func:`meanfield_errors` measures these errors on independent draws (through
:class:`joblib.Parallel`, every draw seeded by its own key), :func:`local_rms_slopes` and
:func:`error_summary` read exponents, means and medians off them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _checks, _progress
from ._linalg import psd_sqrt

__all__ = ["interaction_strength", "softmax_weight_second_moment",
           "normalised_weight_second_moment", "key_projection_second_moment",
           "weight_tail_exponents", "meanfield_errors", "local_rms_slopes",
           "ErrorSummary", "error_summary", "ScaledErrorTest", "scaled_error_test",
           "covariance_rate_influence", "covariance_rate_variance", "field_error_variance"]


def interaction_strength(A: ArrayLike, Sigma: ArrayLike) -> float:
    r"""The interaction strength :math:`\rho = \|\Sigma^{1/2} A \Sigma^{1/2}\|_2`.

    :math:`\langle Ax, y\rangle` for independent :math:`x, y \sim \mathcal N(\alpha, \Sigma)`
    has the quadratic part :math:`w^\top B u`, :math:`B = \Sigma^{1/2} A \Sigma^{1/2}`,
    :math:`u, w` standard Gaussian; :math:`\rho = \sigma_{\max}(B)` sets the tail of the
    softmax weights: :math:`P(e^{\langle Ax, y\rangle} > s)` decays like :math:`s^{-1/\rho}`
    up to slower factors (Castin, Ablin, Carrillo and Peyré, 2025, for the model).

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix.
    Sigma : array (d, d)
        Covariance, symmetric positive definite.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``Sigma`` is not a symmetric positive definite matrix or ``A`` has another shape.

    Examples
    --------
    >>> import numpy as np
    >>> print(f"{interaction_strength(np.diag([0.5, -2.0]), np.diag([4.0, 1.0])):.9f}")
    2.000000000

    References
    ----------
    :cite:`castin2025unified`
    """
    Sigma = _checks.matrix(Sigma, "Sigma", square=True)
    _, Sigma = _checks.gaussian(np.zeros(Sigma.shape[0]), Sigma)
    A = _checks.matrix(A, "A", Sigma.shape)
    S = psd_sqrt(Sigma)
    return float(np.linalg.norm(S @ A @ S, 2))


def softmax_weight_second_moment(A: ArrayLike, alpha: ArrayLike, Sigma: ArrayLike) -> float:
    r"""Second moment :math:`\mathbb E[e^{2\langle Ax, y\rangle}]`, :math:`x, y` i.i.d. Gaussian.

    With :math:`S = \Sigma^{1/2}`, :math:`B = SAS`, :math:`z = (u, w) \sim \mathcal N(0, I_{2d})`,
    :math:`x = \alpha + Su`, :math:`y = \alpha + Sw`:

    .. math::

        2\langle Ax, y\rangle = 2c + 2 b^\top z + z^\top H z, \quad
        H = \begin{pmatrix} 0 & B^\top \\ B & 0 \end{pmatrix}, \quad
        b = \begin{pmatrix} S A^\top \alpha \\ S A \alpha \end{pmatrix}, \quad
        c = \alpha^\top A \alpha,

    and the eigenvalues of :math:`H` are :math:`\pm\sigma_i(B)`. The Gaussian integral is
    finite if and only if :math:`I - 2H \succ 0`, that is :math:`\rho = \sigma_{\max}(B) < 1/2`,
    and then

    .. math::

        \mathbb E[e^{2\langle Ax, y\rangle}] = \det(I - 2H)^{-1/2}
        \exp\big(2c + 2 b^\top (I - 2H)^{-1} b\big),
        \qquad \det(I - 2H) = \prod_i \big(1 - 4\sigma_i(B)^2\big).

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix.
    alpha : array (d,)
        Mean.
    Sigma : array (d, d)
        Covariance, symmetric positive definite.

    Returns
    -------
    float
        The second moment, or ``numpy.inf`` when :math:`\rho \ge 1/2` (the integrand does
        not decay along the top singular direction of :math:`B`) or when the finite value
        overflows float64.

    Raises
    ------
    ValueError
        If ``alpha``, ``Sigma`` are not the moments of a non-degenerate Gaussian or ``A`` has
        another shape.

    Examples
    --------
    In :math:`d = 1`, :math:`\alpha = 0`, :math:`\rho = 1/4`: :math:`(1 - 4\rho^2)^{-1/2}`;
    at :math:`\rho = 1/2` the moment is infinite:

    >>> print(f"{softmax_weight_second_moment([[0.25]], [0.0], [[1.0]]):.9f}")
    1.154700538
    >>> print(softmax_weight_second_moment([[0.5]], [0.0], [[1.0]]))
    inf

    References
    ----------
    :cite:`castin2025unified`
    """
    alpha, Sigma = _checks.gaussian(alpha, Sigma)
    d = alpha.shape[0]
    A = _checks.matrix(A, "A", (d, d))
    S = psd_sqrt(Sigma)
    B = S @ A @ S
    if np.linalg.norm(B, 2) >= 0.5:
        return np.inf
    H = np.block([[np.zeros((d, d)), B.T], [B, np.zeros((d, d))]])
    M = np.eye(2 * d) - 2 * H
    b = np.concatenate([S @ A.T @ alpha, S @ A @ alpha])
    _, logdet = np.linalg.slogdet(M)
    log_moment = -0.5 * logdet + 2 * alpha @ A @ alpha + 2 * b @ np.linalg.solve(M, b)
    with np.errstate(over="ignore"):
        return float(np.exp(log_moment))



def normalised_weight_second_moment(A: ArrayLike, alpha: ArrayLike, Sigma: ArrayLike) -> float:
    r"""Second moment of the normalised softmax weight, :math:`\mathbb E_{x,y}[w(x,y)^2]`.

    For :math:`x, y \sim \mathcal N(\alpha, \Sigma)` independent, the weight that softmax
    attention gives a key :math:`y` at a query :math:`x`, normalised by its mean over keys, is

    .. math::

        w(x, y) = \frac{e^{\langle Ax, y\rangle}}{\mathbb E_y e^{\langle Ax, y\rangle}}
        = \exp\big(\langle Ax, y - \alpha\rangle - \tfrac12 q(x)\big), \qquad
        q(x) = x^\top A^\top \Sigma A x,

    so :math:`\mathbb E_y w^2 = e^{q(x)}`, and with :math:`x = \alpha + Su`,
    :math:`S = \Sigma^{1/2}`, :math:`K = SA^\top\Sigma AS = B^\top B`, :math:`B = SAS`,

    .. math::

        \mathbb E_x e^{q(x)} = \det(I - 2K)^{-1/2}
        \exp\big(\alpha^\top M\alpha + 2\alpha^\top M S (I - 2K)^{-1} S M \alpha\big),
        \qquad M = A^\top\Sigma A,

    finite if and only if :math:`\lambda_{\max}(K) = \rho^2 < 1/2`, i.e.
    :math:`\rho = \|\Sigma^{1/2}A\Sigma^{1/2}\|_2 < 1/\sqrt2`. Derived here for the mean-field
    limit of the Transformer PDE (Castin, Ablin, Carrillo and Peyré, 2025).

    Returns
    -------
    float
        The second moment, ``numpy.inf`` when :math:`\rho \ge 1/\sqrt 2` or on overflow.

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix.
    alpha : array (d,)
        Mean.
    Sigma : array (d, d)
        Covariance, symmetric positive definite.

    Raises
    ------
    ValueError
        If ``alpha``, ``Sigma`` are not the moments of a non-degenerate Gaussian or ``A`` has
        another shape.

    Examples
    --------
    In :math:`d = 1`, :math:`\alpha = 0`: :math:`(1 - 2\rho^2)^{-1/2}`, here
    :math:`\sqrt 2` at :math:`\rho = 1/2`:

    >>> print(f"{normalised_weight_second_moment([[0.5]], [0.0], [[1.0]]):.9f}")
    1.414213562
    >>> print(normalised_weight_second_moment([[0.75]], [0.0], [[1.0]]))
    inf

    References
    ----------
    :cite:`castin2025unified`
    """
    alpha, Sigma = _checks.gaussian(alpha, Sigma)
    d = alpha.shape[0]
    A = _checks.matrix(A, "A", (d, d))
    S = psd_sqrt(Sigma)
    M = A.T @ Sigma @ A
    K = S @ M @ S
    K = (K + K.T) / 2
    if np.linalg.eigvalsh(K)[-1] >= 0.5 - 1e-12:  # rounding of rho^2 = 1/2
        return np.inf
    I_2K = np.eye(d) - 2 * K
    _, logdet = np.linalg.slogdet(I_2K)
    c = S @ M @ alpha
    log_moment = -0.5 * logdet + alpha @ M @ alpha + 2 * c @ np.linalg.solve(I_2K, c)
    with np.errstate(over="ignore"):
        return float(np.exp(log_moment))


def key_projection_second_moment(A: ArrayLike, alpha: ArrayLike, Sigma: ArrayLike) -> float:
    r"""Second moment of the mean normalised weight of a key, :math:`\mathbb E_y[\bar w(y)^2]`.

    .. math::

        \mathbb E_y\, \bar w(y)^2 = \det\big(I - M^2\big)^{-1/2}
        \exp\big(c^\top (I - M)^{-1} c\big), \qquad
        M = BB^\top,\quad B = \Sigma^{1/2} A \Sigma^{1/2},\quad c = \Sigma^{1/2} A\alpha,

    finite if and only if :math:`\rho = \|B\|_2 < 1`. With :math:`w` as in
    :func:`normalised_weight_second_moment`, :math:`\bar w(y) = \mathbb E_x w(x, y)` is the
    total (normalised) attention that the queries of :math:`\mathcal N(\alpha, \Sigma)` pay
    to the key :math:`y`; it drives the leading :math:`O(1/n)` term of the mean-square error
    of the particle system (the projection of the error on the keys). Derived here, for the
    mean-field limit of the Transformer PDE (Castin, Ablin, Carrillo and Peyré, 2025).

    *Derivation.* Write :math:`x = \alpha + Su`, :math:`y = \alpha + Sv`,
    :math:`S = \Sigma^{1/2}`, :math:`u, v` independent standard Gaussians. Then
    :math:`\langle Ax, y - \alpha\rangle = v^\top(c + Bu)` and
    :math:`x^\top A^\top\Sigma A x = |c + Bu|^2`, so
    :math:`w = \exp\big(v^\top(c + Bu) - \tfrac12|c + Bu|^2\big)`. The exponent is
    :math:`v^\top c - \tfrac12|c|^2 + g^\top u - \tfrac12 u^\top B^\top B u` with
    :math:`g = B^\top(v - c)`, and the Gaussian integral over :math:`u` gives

    .. math::

        \bar w(y) = \det(I + B^\top B)^{-1/2}
        \exp\big(v^\top c - \tfrac12|c|^2 + \tfrac12 (v - c)^\top G (v - c)\big),
        \qquad G = B(I + B^\top B)^{-1}B^\top = M(I + M)^{-1}.

    Squaring and integrating over :math:`v`: the exponent is
    :math:`v^\top G v + h^\top v + c^\top G c - |c|^2` with :math:`h = 2(I - G)c`, so

    .. math::

        \mathbb E_y \bar w^2 = \det(I + M)^{-1} \det(I - 2G)^{-1/2}
        \exp\big(c^\top G c - |c|^2 + \tfrac12 h^\top (I - 2G)^{-1} h\big),

    finite iff :math:`I - 2G \succ 0`, i.e. :math:`\sigma_i^2/(1 + \sigma_i^2) < 1/2` for every
    singular value :math:`\sigma_i` of :math:`B`, i.e. :math:`\rho < 1`. Since
    :math:`I - G = (I + M)^{-1}` and :math:`I - 2G = (I + M)^{-1}(I - M)` commute, the
    determinants give :math:`\det(I + M)^{-1/2}\det(I - M)^{-1/2} = \det(I - M^2)^{-1/2}` and
    the exponent :math:`c^\top\big(2(I - M^2)^{-1} - (I + M)^{-1}\big)c
    = c^\top (I - M)^{-1} c`. The mean enters through :math:`c`; at :math:`\alpha = 0` the
    value is :math:`\prod_i (1 - \sigma_i^4)^{-1/2}`.

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix.
    alpha : array (d,)
        Mean.
    Sigma : array (d, d)
        Covariance, symmetric positive definite.

    Returns
    -------
    float
        The second moment, ``numpy.inf`` when :math:`\rho \ge 1` or on overflow.

    Raises
    ------
    ValueError
        If ``alpha``, ``Sigma`` are not the moments of a non-degenerate Gaussian or ``A`` has
        another shape.

    Examples
    --------
    At :math:`\alpha = 0` the value is :math:`\prod_i (1 - \sigma_i^4)^{-1/2}`:

    >>> import numpy as np
    >>> value = key_projection_second_moment(np.diag([0.5, 0.0]), [0.0, 0.0], np.eye(2))
    >>> print(bool(abs(value - (1 - 0.5**4) ** -0.5) < 1e-12))
    True
    >>> print(key_projection_second_moment([[1.0]], [0.0], [[1.0]]))
    inf

    References
    ----------
    :cite:`castin2025unified`
    """
    alpha, Sigma = _checks.gaussian(alpha, Sigma)
    d = alpha.shape[0]
    A = _checks.matrix(A, "A", (d, d))
    S = psd_sqrt(Sigma)
    B = S @ A @ S
    M = B @ B.T
    M = (M + M.T) / 2
    m = np.linalg.eigvalsh(M)
    if m[-1] >= 1 - 1e-12:  # rounding of a singular value equal to 1
        return np.inf
    c = S @ A @ alpha
    log_moment = -0.5 * np.sum(np.log1p(-m**2)) + c @ np.linalg.solve(np.eye(d) - M, c)
    with np.errstate(over="ignore"):
        return float(np.exp(log_moment))


def weight_tail_exponents(rho: ArrayLike) -> tuple[float | NDArray[np.float64],
                                                  float | NDArray[np.float64],
                                                  float | NDArray[np.float64]]:
    r"""Tail exponents of the softmax weights of Gaussian tokens at interaction strength ``rho``.

    For :math:`B = \rho I` (isotropic interaction, any :math:`d`), up to slower factors:

    - pair weight :math:`w(x,y)` (:func:`normalised_weight_second_moment`):
      :math:`P(w > \tau) \approx \tau^{-\gamma_w}`,
      :math:`\gamma_w = \tfrac12 + \sqrt{\rho^{-2} + \tfrac14}` (Laplace's method on
      :math:`\log w = \rho r Z - \tfrac12\rho^2 r^2`, :math:`r = |u|`, :math:`Z` standard
      Gaussian); :math:`\gamma_w > 2` iff :math:`\rho < 1/\sqrt2`;
    - key weight :math:`\bar w(y)` (:func:`key_projection_second_moment`):
      :math:`\gamma_k = 1 + \rho^{-2}`; :math:`\gamma_k > 2` iff :math:`\rho < 1`;
    - unnormalised pair weight :math:`e^{\langle Ax,y\rangle}`: :math:`\gamma_e = 1/\rho`
      in :math:`d = 2` (Laplace-distributed exponent); :math:`\gamma_e > 2` iff
      :math:`\rho < 1/2`.

    Derived here. Returns ``(gamma_w, gamma_k, gamma_e)`` (arrays if ``rho`` is).

    Parameters
    ----------
    rho : float or array
        Interaction strengths, positive and finite.

    Returns
    -------
    gamma_w, gamma_k, gamma_e : float or array
        The three tail exponents.

    Raises
    ------
    ValueError
        If a ``rho`` is not positive and finite.

    Examples
    --------
    At :math:`\rho = 1/2`, :math:`\gamma_w = \tfrac12 + \sqrt{17}/2`, :math:`\gamma_k = 5`,
    :math:`\gamma_e = 2`:

    >>> gw, gk, ge = weight_tail_exponents(0.5)
    >>> print(f"{gw:.9f} {gk} {ge}")
    2.561552813 5.0 2.0

    References
    ----------
    :cite:`castin2025unified`
    """
    rho = _checks.real_array(rho, "rho")
    if not np.all(np.isfinite(rho)) or np.any(rho <= 0):
        raise ValueError("rho must be positive and finite")
    gamma_w, gamma_k, gamma_e = 0.5 + np.sqrt(rho**-2 + 0.25), 1 + rho**-2, 1 / rho
    if rho.ndim == 0:
        return float(gamma_w), float(gamma_k), float(gamma_e)
    return gamma_w, gamma_k, gamma_e


def _draw_errors(key, A, V, alpha, chol, SA, target, n):
    """Squared errors (covariance rate, field) of one draw of ``n`` particles."""
    from . import attention, gaussian

    X = alpha + np.random.default_rng(key).standard_normal((n, alpha.shape[0])) @ chol.T
    G = attention.softmax(X, A, V)
    _, dSigma = gaussian.particle_moment_rates(X, G)
    field = np.mean(np.sum((G - (alpha + X @ SA.T) @ V.T) ** 2, axis=1))
    return float(np.sum((dSigma - target) ** 2)), float(field)


#: Pairs of particles (``n**2`` per draw) that one joblib task of :func:`meanfield_errors`
#: handles at least: a few tens of milliseconds, so that scheduling costs little.
_PAIRS_PER_TASK = 2**24


def meanfield_errors(A: ArrayLike, V: ArrayLike, alpha: ArrayLike, Sigma: ArrayLike,
                     sizes: ArrayLike, draws: int | Sequence[int], seed: int | Sequence[int], *,
                     n_jobs: int | None = None, progress: bool | None = None
                     ) -> tuple[list[NDArray[np.float64]], list[NDArray[np.float64]]]:
    r"""Errors of the softmax particle system against the Gaussian mean field at :math:`t = 0`.

    For each size :math:`n` and each draw, :math:`x_1, \dots, x_n \sim \mathcal N(\alpha,
    \Sigma)` i.i.d., :math:`\Gamma_i = \Gamma_{\hat\mu_n}(x_i)` (softmax attention on the
    empirical measure) and :math:`\Gamma(x) = V(\alpha + \Sigma A x)` (the field of the
    Gaussian solution of the Transformer PDE; Castin, Ablin, Carrillo and Peyré, 2025). Two
    squared errors:

    - of the rate of the empirical covariance, an average over the particles:

      .. math::

          \Big\|\dot{\hat\Sigma}_n - \dot\Sigma\Big\|_F^2, \quad
          \dot{\hat\Sigma}_n = \frac1n\sum_i \big((x_i - \hat\alpha)\Gamma_i^\top
          + \Gamma_i (x_i - \hat\alpha)^\top\big), \quad
          \dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top;

    - of the field at the particles, averaged over them:
      :math:`\frac1n\sum_i |\Gamma_i - \Gamma(x_i)|^2`.

    The draws run like :func:`transformer_pde.draws.map_keys` (:class:`joblib.Parallel`,
    ``n_jobs`` and backend from :func:`joblib.parallel_config` unless ``n_jobs`` is given);
    each draws its particles from its own key, so the values do not depend on the jobs.

    Parameters
    ----------
    A, V : arrays (d, d)
    alpha : array (d,)
    Sigma : array (d, d), symmetric positive definite
    sizes : sequence of int
        The numbers of particles :math:`n`.
    draws : int or sequence of int
        Independent draws per size (one number for all sizes, or one per size).
    seed : int or sequence of int
        Draw ``r`` of size index ``k`` uses ``numpy.random.default_rng([*seed, k, r])``.
    n_jobs : int or None
        Passed to :class:`joblib.Parallel`.
    progress : bool or None
        A progress bar over the draws: ``None`` (default) only when the output is
        interactive (a terminal, a notebook open in Jupyter; never under nbval or
        ``nbconvert --execute``), ``True`` always, ``False`` never.

    Returns
    -------
    covariance, field : lists of arrays
        Element ``k`` of each has shape ``(draws[k],)``.

    Raises
    ------
    ValueError
        If the moments or matrices are not valid, a size or a draw count is not a positive
        integer, or ``seed`` is not a non-negative integer or a sequence of them.

    Examples
    --------
    >>> import numpy as np
    >>> cov, field = meanfield_errors(0.3 * np.eye(2), np.eye(2), [0.0, 0.0], np.eye(2),
    ...                               [8, 16], 3, seed=0)
    >>> print([e.shape for e in cov], all(bool(np.all(e > 0)) for e in cov + field))
    [(3,), (3,)] True

    References
    ----------
    :cite:`castin2025unified`
    """
    from . import gaussian

    alpha, Sigma = _checks.gaussian(alpha, Sigma)
    d = alpha.shape[0]
    A = _checks.matrix(A, "A", (d, d))
    V = _checks.matrix(V, "V", (d, d))
    sizes = [_checks.positive_int(n, "sizes") for n in np.atleast_1d(sizes)]
    draws = np.broadcast_to(np.asarray(draws), (len(sizes),))
    draws = [_checks.positive_int(r, "draws") for r in draws]
    seed = _checks.seed_key(seed)
    chol = np.linalg.cholesky(Sigma)
    _, target = gaussian.softmax_rhs(alpha, Sigma, A, V)
    cov_err, field_err = [], []
    with _progress.bar(sum(draws), progress, "meanfield_errors") as shown:
        for k, (n, R) in enumerate(zip(sizes, draws, strict=True)):
            out = np.array(_progress.map_blocks(
                _draw_errors, [[*seed, k, r] for r in range(R)],
                (A, V, alpha, chol, Sigma @ A, target, n), {},
                block=max(1, _PAIRS_PER_TASK // n**2), n_jobs=n_jobs, bar=shown))
            cov_err.append(out[:, 0])
            field_err.append(out[:, 1])
    return cov_err, field_err


def _squared_errors(sizes, squared_errors):
    n = _checks.real_array(sizes, "sizes")
    if not isinstance(squared_errors, (Sequence, np.ndarray)) or isinstance(squared_errors, str):
        raise ValueError(f"squared_errors must be a sequence of arrays, got {squared_errors!r}")
    if n.ndim != 1 or n.size < 2 or np.any(n <= 0) or np.any(np.diff(n) <= 0):
        raise ValueError("sizes must be an increasing 1-D array of at least 2 positive sizes")
    if len(squared_errors) != n.size:
        raise ValueError("squared_errors must have one array of draws per size")
    errs = [_checks.real_array(e, "squared_errors") for e in squared_errors]
    if any(e.ndim != 1 or e.size < 2 or not np.all(np.isfinite(e)) or np.any(e < 0)
           for e in errs):
        raise ValueError("squared_errors must hold finite, non-negative arrays of >= 2 draws")
    return n, errs


def _local_slopes(log_n, errs, center):
    return 0.5 * np.diff(np.log([center(e) for e in errs])) / np.diff(log_n)


def local_rms_slopes(sizes: ArrayLike, squared_errors: ArrayLike, *, n_boot: int = 400,
                     seed: int | Sequence[int] = 0, center: str = "mean",
                     n_jobs: int | None = None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Local exponents of a root-mean-square error between consecutive sample sizes.

    .. math::

        p_k = \frac{\tfrac12\log(\overline{e}_{k+1}/\overline{e}_k)}{\log(n_{k+1}/n_k)},
        \qquad \overline{e}_k = \frac1{R_k}\sum_r e_{kr},

    with a bootstrap standard deviation (resampling the draws of each size independently,
    :func:`transformer_pde.draws.bootstrap`, replicate ``b`` seeded by ``[*seed, b]``).
    Heavy-tailed squared errors make the bootstrap optimistic; use it as a lower bound on
    the uncertainty. With ``center="median"``, :math:`\overline{e}_k` is the median of the
    draws instead (the exponent of a typical draw's error rather than of the mean-square
    error). Returns ``(slopes, sds)``, arrays of length ``len(sizes) - 1``.

    Parameters
    ----------
    sizes : array (K,)
        Increasing positive sample sizes, at least two.
    squared_errors : sequence of K arrays
        The squared errors of the draws of each size (at least two each, finite, non-negative).
    n_boot : int
        Bootstrap replicates.
    seed : int or sequence of int
        Key of the bootstrap.
    center : {"mean", "median"}
        The centre of the draws.
    n_jobs : int, optional
        Passed to :class:`joblib.Parallel`.

    Returns
    -------
    slopes, sds : arrays (K - 1,)

    Raises
    ------
    ValueError
        If ``sizes`` is not increasing, ``squared_errors`` does not hold one valid array per
        size, ``center`` is unknown or ``n_boot`` is not a positive integer.

    Examples
    --------
    Squared errors proportional to :math:`1/n` have the local exponent :math:`-1/2`:

    >>> slopes, sds = local_rms_slopes([10, 100], [[1.0, 3.0], [0.1, 0.3]], n_boot=20)
    >>> print(f"{slopes[0]:.6f}", bool(sds[0] >= 0))
    -0.500000 True

    References
    ----------
    :cite:`castin2025unified`
    """
    from . import draws as _draws

    n, errs = _squared_errors(sizes, squared_errors)
    centers = {"mean": np.mean, "median": np.median}
    if center not in centers:
        raise ValueError(f"center must be 'mean' or 'median', got {center!r}")
    n_boot = _checks.positive_int(n_boot, "n_boot")
    log_n = np.log(n)
    f = centers[center]
    point = _local_slopes(log_n, errs, f)
    boot = _draws.bootstrap(lambda s: _local_slopes(log_n, s, f), errs, n_boot, seed,
                            n_jobs=n_jobs)
    return point, boot.std(axis=0)


class ErrorSummary(NamedTuple):
    r"""Per-size summary of independent squared errors :math:`e_{kr}` (arrays over sizes).

    Attributes
    ----------
    scaled_mean : array (K,)
        :math:`n_k` times the mean over the draws.
    scaled_stderr : array (K,)
        :math:`n_k` times the standard error of that mean.
    scaled_median : array (K,)
        :math:`n_k` times the median of the draws.
    top_share : array (K,)
        Share of the sum carried by the largest 1 % of the draws.
    max_over_median : array (K,)
        Largest draw divided by the median.

    Examples
    --------
    >>> s = error_summary([10, 100], [[0.1, 0.3], [0.01, 0.03]])
    >>> print(type(s).__name__, [f"{v:.6f}" for v in s.scaled_mean])
    ErrorSummary ['2.000000', '2.000000']
    """

    scaled_mean: np.ndarray  # n_k times the mean over the draws
    scaled_stderr: np.ndarray  # n_k times the standard error of that mean
    scaled_median: np.ndarray  # n_k times the median of the draws
    top_share: np.ndarray  # share of the sum carried by the largest 1 % of the draws
    max_over_median: np.ndarray  # largest draw divided by the median


def error_summary(sizes: ArrayLike, squared_errors: ArrayLike) -> ErrorSummary:
    r"""Means, standard errors, medians and tail weight of squared errors, scaled by :math:`n`.

    For each size :math:`n_k` with draws :math:`e_{k1}, \dots, e_{kR_k}`:
    :math:`n_k\bar e_k`, :math:`n_k\, s_k/\sqrt{R_k}` (:math:`s_k` the sample standard
    deviation), :math:`n_k\operatorname{median}_r e_{kr}`, the share of
    :math:`\sum_r e_{kr}` carried by its :math:`\lceil R_k/100\rceil` largest terms, and
    :math:`\max_r e_{kr} / \operatorname{median}_r e_{kr}`. A flat :math:`n\bar e` is the
    :math:`n^{-1/2}` rate of the root-mean-square error (the Monte Carlo rate of the mean
    field limit of Castin, Ablin, Carrillo and Peyré, 2025); a large top share means that
    the mean, and its standard error, rest on a few draws. Returns an :class:`ErrorSummary`.

    Parameters
    ----------
    sizes : array (K,)
        Increasing positive sample sizes, at least two.
    squared_errors : sequence of K arrays
        The squared errors of the draws of each size (at least two each, finite, non-negative).

    Returns
    -------
    ErrorSummary

    Raises
    ------
    ValueError
        If ``sizes`` is not increasing or ``squared_errors`` does not hold one valid array per
        size.

    Examples
    --------
    >>> s = error_summary([10, 100], [[0.1, 0.3], [0.01, 0.03]])
    >>> print([f"{v:.6f}" for v in s.scaled_stderr], [f"{v:.6f}" for v in s.top_share])
    ['1.000000', '1.000000'] ['0.750000', '0.750000']

    References
    ----------
    :cite:`castin2025unified`
    """
    n, errs = _squared_errors(sizes, squared_errors)
    top = [np.sort(e)[::-1][: -(-e.size // 100)].sum() / e.sum() if e.sum() > 0 else 0.0
           for e in errs]
    med = np.array([np.median(e) for e in errs])
    return ErrorSummary(
        n * np.array([e.mean() for e in errs]),
        n * np.array([e.std(ddof=1) / np.sqrt(e.size) for e in errs]),
        n * med,
        np.array(top),
        np.array([e.max() for e in errs]) / np.where(med > 0, med, np.nan))


class ScaledErrorTest(NamedTuple):
    r"""The two statistics of :func:`scaled_error_test`.

    Attributes
    ----------
    scaled_mean : float
        Mean over the sizes of :math:`n` times the mean-square error.
    stderr : float
        Its standard error, from the spread of the draws.
    z_limit : float
        ``(scaled_mean - limit) / stderr``; ``nan`` for an infinite limit.
    exponent : float
        Fitted exponent of the root-mean-square error.
    exponent_stderr : float
        Its standard error (:func:`transformer_pde.gaussian.rms_error_rate`).
    z_rate : float
        ``(exponent + 1/2) / exponent_stderr``.

    Examples
    --------
    >>> t = scaled_error_test([10, 100, 1000], [[0.1, 0.3], [0.01, 0.03], [0.001, 0.003]], 2.0)
    >>> print(type(t).__name__, f"{t.scaled_mean:.6f}")
    ScaledErrorTest 2.000000
    """

    scaled_mean: float  # mean over the sizes of n times the mean-square error
    stderr: float  # its standard error, from the spread of the draws
    z_limit: float  # (scaled_mean - limit) / stderr; nan for an infinite limit
    exponent: float  # fitted exponent of the root-mean-square error
    exponent_stderr: float  # its standard error (rms_error_rate)
    z_rate: float  # (exponent + 1/2) / exponent_stderr


def scaled_error_test(sizes: ArrayLike, squared_errors: ArrayLike, limit: float) -> ScaledErrorTest:
    r"""Is :math:`n\,\mathbb E\,e_n` flat at its linearised limit? Two distances in standard
    errors.

    For draws :math:`e_{k1}, \dots, e_{kR_k}` of a squared error at sizes :math:`n_k`:

    - the mean over the :math:`K` sizes of :math:`n_k\bar e_k` against ``limit``,
      :math:`z_{\text{limit}} = (\frac1K\sum_k n_k\bar e_k - \text{limit}) / s`,
      :math:`s = \frac1K(\sum_k s_k^2)^{1/2}` with :math:`s_k` the standard error of
      :math:`n_k\bar e_k` from the draws (:func:`error_summary`): a wrong constant (the limit
      of the delta method, :func:`covariance_rate_variance` or :func:`field_error_variance`,
      off by a factor) moves :math:`z_{\text{limit}}`;
    - the exponent :math:`p` of the root-mean-square error fitted on the first
      :math:`\min_k R_k` draws of every size (:func:`transformer_pde.gaussian.rms_error_rate`,
      standard error from the spread of the draws) against :math:`-1/2`,
      :math:`z_{\text{rate}} = (p + 1/2)/\operatorname{se}(p)`: a rate
      :math:`n^{-0.3}` instead of the Monte Carlo rate :math:`n^{-1/2}` of the mean-field
      limit of Castin, Ablin, Carrillo and Peyré (2025) moves it.

    Both statistics are nearly Gaussian when the squared errors have light enough tails; with
    heavy tails their left tails are longer (a run without its rare large draws has a low
    mean and a small standard error), which a wider band accounts for. Returns a
    :class:`ScaledErrorTest`.

    Parameters
    ----------
    sizes : array (K,)
        Increasing positive sample sizes, at least two.
    squared_errors : sequence of K arrays
        The squared errors of the draws of each size (at least two each, finite, non-negative).
    limit : float
        The predicted limit of :math:`n\,\mathbb E e_n`, positive or ``inf``.

    Returns
    -------
    ScaledErrorTest

    Raises
    ------
    ValueError
        If ``sizes`` or ``squared_errors`` is not valid or ``limit`` is not positive.

    Examples
    --------
    Draws exactly proportional to :math:`1/n` with the predicted constant: both statistics
    vanish (up to rounding):

    >>> t = scaled_error_test([10, 100, 1000], [[0.1, 0.3], [0.01, 0.03], [0.001, 0.003]], 2.0)
    >>> print(bool(abs(t.z_limit) < 1e-9), bool(abs(t.z_rate) < 1e-9))
    True True
    >>> t = scaled_error_test([10, 100, 1000], [[0.1, 0.3], [0.01, 0.03], [0.001, 0.003]], 1.0)
    >>> print(f"{t.z_limit:.6f}")
    1.732051

    References
    ----------
    :cite:`castin2025unified`
    """
    from .gaussian import rms_error_rate

    n, errs = _squared_errors(sizes, squared_errors)
    summary = error_summary(n, errs)
    mean = float(summary.scaled_mean.mean())
    se = float(np.sqrt(np.sum(summary.scaled_stderr**2)) / n.size)
    if not (isinstance(limit, (float, np.floating)) and limit == np.inf):
        limit = _checks.positive_float(limit, "limit")  # or inf
    z_limit = (mean - limit) / se if np.isfinite(limit) else float("nan")
    R = min(e.size for e in errs)
    fit = rms_error_rate(n, np.array([e[:R] for e in errs]))
    return ScaledErrorTest(mean, se, float(z_limit), fit.exponent, fit.stderr,
                           float((fit.exponent + 0.5) / fit.stderr))


def covariance_rate_influence(A: ArrayLike, V: ArrayLike, alpha: ArrayLike, Sigma: ArrayLike,
                              Y: ArrayLike
                              ) -> tuple[NDArray[np.float64], NDArray[np.float64],
                                         NDArray[np.float64]]:
    r"""Influence function of :math:`\mu \mapsto \dot\Sigma[\mu]` (softmax) at a Gaussian.

    The rate of the covariance of a measure under softmax attention is
    :math:`F(\mu) = C(\mu) + C(\mu)^\top`,
    :math:`C(\mu) = \int (x - m_\mu)\,\Gamma_\mu(x)^\top d\mu(x)` (Castin, Ablin, Carrillo and
    Peyré, 2025). Its derivative along :math:`\mu_\varepsilon = (1-\varepsilon)\mu +
    \varepsilon\delta_y` at :math:`\mu = \mathcal N(\alpha, \Sigma)` is
    :math:`\mathrm{IF}(y) = \mathrm{IF}_C(y) + \mathrm{IF}_C(y)^\top` with

    .. math::

        \mathrm{IF}_C(y) = (y - \alpha)\big(\Gamma(y) - \bar\Gamma\big)^\top - C
        + \int (x - \alpha)\, w(x, y)\, \big(y - b(x)\big)^\top d\mu(x)\; V^\top,

    :math:`b(x) = \alpha + \Sigma A x`, :math:`\Gamma = Vb`, :math:`\bar\Gamma = \int\Gamma
    d\mu`, :math:`C = \Sigma A^\top\Sigma V^\top`, and the normalised weight
    :math:`w(x, y) = \exp(\langle Ax, y - \alpha\rangle - \frac12 x^\top A^\top\Sigma A x)`
    (:func:`normalised_weight_second_moment`). The last integral is a Gaussian integral:
    :math:`w(x,y)\,d\mu(x) = Z(y)\,\mathcal N(m_y, P^{-1})`, :math:`P = \Sigma^{-1} +
    A^\top\Sigma A`, :math:`P m_y = \Sigma^{-1}\alpha + A^\top(y - \alpha)`. By the delta
    method, :math:`n\,\mathbb E\|\dot{\hat\Sigma}_n - \dot\Sigma\|_F^2 \to
    \mathbb E_y\|\mathrm{IF}(y)\|_F^2` when this is finite (:func:`covariance_rate_variance`).
    Derived here.

    Parameters
    ----------
    A, V : arrays (d, d)
    alpha : array (d,)
    Sigma : array (d, d)
    Y : array (m, d)
        Points :math:`y`.

    Returns
    -------
    base, tilt, log_Z : arrays (m, d, d), (m, d, d), (m,)
        :math:`\mathrm{IF}(y) = \text{base} + e^{\log Z}\,\text{tilt}` (kept apart so that
        callers can avoid overflow far in the tails).

    Raises
    ------
    ValueError
        If the moments or matrices are not valid or ``Y`` is not ``(m, d)``.

    Examples
    --------
    The influence is a symmetric matrix at every point:

    >>> import numpy as np
    >>> A, V = np.array([[0.3, 0.1], [0.0, -0.2]]), np.eye(2)
    >>> base, tilt, log_Z = covariance_rate_influence(A, V, [0.5, 0.0], np.eye(2),
    ...                                               [[1.0, 2.0], [0.0, -1.0]])
    >>> IF = base + np.exp(log_Z)[:, None, None] * tilt
    >>> print(IF.shape, bool(np.allclose(IF, np.swapaxes(IF, 1, 2), atol=1e-12)))
    (2, 2, 2) True

    References
    ----------
    :cite:`castin2025unified`
    """
    alpha, Sigma = _checks.gaussian(alpha, Sigma)
    d = alpha.shape[0]
    A = _checks.matrix(A, "A", (d, d))
    V = _checks.matrix(V, "V", (d, d))
    Y = _checks.points(Y, "Y")
    if Y.shape[1] != d:
        raise ValueError(f"Y must have shape (m, {d}), got {Y.shape}")
    Sinv = np.linalg.inv(Sigma)
    SA = Sigma @ A
    Pm = Sinv + A.T @ Sigma @ A
    Pinv = np.linalg.inv(Pm)
    C = Sigma @ A.T @ Sigma @ V.T
    Gbar = V @ (alpha + SA @ alpha)
    D = Y - alpha
    G = (alpha + Y @ SA.T) @ V.T
    base = np.einsum("mi,mj->mij", D, G - Gbar) - C
    h = Sinv @ alpha + D @ A
    my = h @ Pinv.T
    _, logdet_S = np.linalg.slogdet(Sigma)
    _, logdet_P = np.linalg.slogdet(Pm)
    log_Z = (-0.5 * logdet_S - 0.5 * logdet_P + 0.5 * np.einsum("mi,mi->m", h, my)
             - 0.5 * alpha @ Sinv @ alpha)
    tilt = (np.einsum("mi,mj->mij", my - alpha, Y - alpha - my @ SA.T)
            - Pinv @ A.T @ Sigma) @ V.T
    base = base + np.swapaxes(base, 1, 2)
    tilt = tilt + np.swapaxes(tilt, 1, 2)
    return base, tilt, log_Z


def covariance_rate_variance(A: ArrayLike, V: ArrayLike, alpha: ArrayLike, Sigma: ArrayLike, *,
                             radial: int = 2000, angles: int = 128, tail: float = 60.0) -> float:
    r"""Limit :math:`\mathbb E_y\|\mathrm{IF}(y)\|_F^2` of :math:`n` times the mean-square error.

    :math:`y \sim \mathcal N(\alpha, \Sigma)` in :math:`d = 2`, by quadrature in whitened
    polar coordinates :math:`y = \alpha + \Sigma^{1/2} r(\cos\theta, \sin\theta)`
    (trapezoid rule: ``radial`` radii, ``angles`` angles), up to the radius where the
    integrand has decayed by :math:`e^{-\text{tail}}`: it behaves like
    :math:`e^{-(1/2 - \rho^2/(1+\rho^2)) r^2}` times a polynomial
    (:func:`key_projection_second_moment`), so the value is finite if and only if
    :math:`\rho < 1`, and ``inf`` is returned for :math:`\rho \ge 1`. Uses
    :func:`covariance_rate_influence`. Derived here.

    Parameters
    ----------
    A, V : arrays (2, 2)
        Key-query and value matrices.
    alpha : array (2,)
        Mean.
    Sigma : array (2, 2)
        Covariance, symmetric positive definite.
    radial, angles : int
        Nodes of the trapezoid rule.
    tail : float
        Decay :math:`e^{-\text{tail}}` of the integrand at the largest radius.

    Returns
    -------
    float
        The limit, ``inf`` when :math:`\rho \ge 1`.

    Raises
    ------
    ValueError
        If :math:`d \ne 2`, the moments or matrices are not valid, or a node count is not a
        positive integer.

    Examples
    --------
    Without interaction (:math:`A = 0`) the covariance does not move, whatever the measure, so
    the influence and the limit vanish; at :math:`\rho = 1` the limit is infinite:

    >>> import numpy as np
    >>> print(covariance_rate_variance(np.zeros((2, 2)), np.eye(2), [0.0, 0.0], np.eye(2)))
    0.0
    >>> print(covariance_rate_variance(np.eye(2), np.eye(2), [0.0, 0.0], np.eye(2)))
    inf

    References
    ----------
    :cite:`castin2025unified`
    """
    alpha, Sigma = _checks.gaussian(alpha, Sigma)
    if alpha.shape[0] != 2:
        raise ValueError("covariance_rate_variance is implemented for d = 2")
    rho = interaction_strength(A, Sigma)
    if rho >= 1 - 1e-12:
        return np.inf
    decay = 0.5 - rho**2 / (1 + rho**2)
    r_max = np.sqrt(tail / decay) + 6.0
    r = np.linspace(0.0, r_max, _checks.positive_int(radial, "radial"))
    th = np.linspace(0.0, 2 * np.pi, _checks.positive_int(angles, "angles"), endpoint=False)
    R, TH = np.meshgrid(r, th, indexing="ij")
    U = np.stack([R * np.cos(TH), R * np.sin(TH)], axis=-1).reshape(-1, 2)
    Y = alpha + U @ psd_sqrt(Sigma).T
    base, tilt, log_Z = covariance_rate_influence(A, V, alpha, Sigma, Y)
    log_phi = -0.5 * np.sum(U**2, axis=1) - np.log(2 * np.pi)
    sq = (np.sum(base**2, axis=(1, 2)) * np.exp(log_phi)
          + 2 * np.sum(base * tilt, axis=(1, 2)) * np.exp(log_Z + log_phi)
          + np.sum(tilt**2, axis=(1, 2)) * np.exp(2 * log_Z + log_phi))
    f = (sq.reshape(R.shape) * R).mean(axis=1) * 2 * np.pi  # angular average x 2 pi
    return float(np.sum((f[1:] + f[:-1]) / 2 * np.diff(r)))


def field_error_variance(A: ArrayLike, V: ArrayLike, alpha: ArrayLike, Sigma: ArrayLike) -> float:
    r"""Linearised limit of :math:`n` times the mean-square error of the field at the particles.

    .. math::

        n\,\mathbb E\,\frac1n\sum_i |\Gamma_{\hat\mu_n}(x_i) - \Gamma_\mu(x_i)|^2 \to
        \mathbb E_{x,y}\big[w(x,y)^2\, |V(y - b(x))|^2\big]
        = \mathbb E_x\Big[e^{q(x)}\big(|V\Sigma A x|^2 + \operatorname{tr}(V\Sigma V^\top)\big)
        \Big],

    :math:`b(x) = \alpha + \Sigma A x`, :math:`q(x) = x^\top A^\top\Sigma A x`, for
    :math:`x, y \sim \mathcal N(\alpha, \Sigma)` and softmax attention (the field
    :math:`\Gamma_\mu(x) = V b(x)` of the Gaussian solution of Castin, Ablin, Carrillo and
    Peyré, 2025): under the weight :math:`w^2` the key :math:`y` is
    :math:`\mathcal N(\alpha + 2\Sigma A x, \Sigma)` times :math:`e^{q(x)}`, and
    :math:`e^{q(x)}\mathcal N(\alpha, \Sigma)(dx)` is
    :math:`\mathbb E_x e^{q}\cdot\mathcal N(\mu', \Sigma')`,
    :math:`\Sigma'^{-1} = \Sigma^{-1} - 2A^\top\Sigma A`, :math:`\mu' = \Sigma'\Sigma^{-1}\alpha`.
    Finite iff :math:`\rho < 1/\sqrt2` (``inf`` otherwise). Derived here.

    Parameters
    ----------
    A, V : arrays (d, d)
        Key-query and value matrices.
    alpha : array (d,)
        Mean.
    Sigma : array (d, d)
        Covariance, symmetric positive definite.

    Returns
    -------
    float
        The limit, ``inf`` when :math:`\rho \ge 1/\sqrt 2`.

    Raises
    ------
    ValueError
        If the moments or matrices are not valid.

    Examples
    --------
    With :math:`A = 0` the field at every particle is :math:`V\bar x`, whose error has
    :math:`n\,\mathbb E|V(\bar x - \alpha)|^2 = \operatorname{tr}(V\Sigma V^\top)`:

    >>> import numpy as np
    >>> value = field_error_variance(np.zeros((2, 2)), np.eye(2), [0.0, 0.0], np.diag([1.0, 2.0]))
    >>> print(f"{value:.9f}")
    3.000000000

    References
    ----------
    :cite:`castin2025unified`
    """
    alpha, Sigma = _checks.gaussian(alpha, Sigma)
    d = alpha.shape[0]
    A = _checks.matrix(A, "A", (d, d))
    V = _checks.matrix(V, "V", (d, d))
    mass = normalised_weight_second_moment(A, alpha, Sigma)
    if not np.isfinite(mass):
        return np.inf
    Sp = np.linalg.inv(np.linalg.inv(Sigma) - 2 * A.T @ Sigma @ A)
    mp = Sp @ np.linalg.solve(Sigma, alpha)
    VSA = V @ Sigma @ A
    return float(mass * (np.sum((VSA @ mp) ** 2) + np.trace(VSA @ Sp @ VSA.T)
                         + np.trace(V @ Sigma @ V.T)))
