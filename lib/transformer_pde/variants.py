r"""The six attention variants of the book as time-dependent velocity fields.

Chapter 2 checks the well-posedness statements of Castin, Ablin, Carrillo and Peyré (2025)
for every variant of :mod:`transformer_pde.attention` with continuous, non-constant
parameters (a Transformer with layer-dependent weights in the limit of infinite depth):

.. math::

    Q(t) = Q_0 + \sin(t)\,Q_1, \quad K(t) = K_0 + \cos(2t)\,K_1, \quad
    V(t) = V_0 + \sin(1.5t)\,V_1, \quad A(t) = K(t)^\top Q(t).

- :func:`random_parameters`: these parameters (and two heads of their own), as callables;
- :func:`variant_field`: the field :math:`(t, X) \mapsto \Gamma_{\mu(t)}` of one variant,
  for :func:`transformer_pde.dynamics.integrate`, with optional weights of the atoms;
- :func:`support_rate`: the growth rate of the support radius of one variant
  (:math:`\|V(t)\|_2`, or :math:`\kappa(t)` of :func:`transformer_pde.stability.heads_growth_rate`);
- :func:`uniform_ball`: tokens drawn uniformly in the unit ball;
- :func:`gaussian_moments`, :func:`max_interaction_strength`: the exact Gaussian solution
  (mean and covariance ODEs of :mod:`transformer_pde.gaussian`) of the softmax, L2 and
  multi-head variants with these parameters, and the largest interaction strength
  :math:`\rho = \|\Sigma^{1/2} A \Sigma^{1/2}\|_2` of a head along it;
- :func:`scale_interaction`, :func:`moderate_interaction`: the same parameters with a
  weaker interaction :math:`A`;
- :func:`particle_moment_errors`, :func:`sample_distances`: the mean-field limit against the
  Gaussian solution, on independent draws run through :class:`joblib.Parallel`
  (:mod:`transformer_pde.draws`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.integrate import solve_ivp

from . import _checks, _progress, attention, dynamics, gaussian, transport
from .meanfield import interaction_strength
from .stability import heads_growth_rate

__all__ = ["VARIANTS", "LABELS", "random_parameters", "variant_field", "support_rate",
           "uniform_ball", "gaussian_moments", "max_interaction_strength",
           "scale_interaction", "moderate_interaction", "ParticleErrors",
           "particle_moment_errors", "sample_distances"]

VARIANTS = ("softmax", "l2", "sinkhorn", "sigmoid", "multihead", "causal")
LABELS = {"softmax": "softmax", "l2": "L2", "sinkhorn": "Sinkhorn", "sigmoid": "sigmoid",
          "multihead": "multi-head (2 heads)", "causal": "causal softmax"}


def _gaussian_matrix(gen, shape, scale):
    """Entries N(0, scale^2 / shape[-1])."""
    return scale * gen.standard_normal(shape) / np.sqrt(shape[-1])


def random_parameters(gen: np.random.Generator, d: int = 2, heads: int = 2, *,
                      qk_scale: float = 0.6, v_scale: float = 0.5,
                      head_v_scale: float = 0.35) -> dict[str, Any]:
    r"""Random continuous time-dependent parameters of the six variants.

    .. math::

        Q(t) = Q_0 + \sin(t) Q_1,\ K(t) = K_0 + \cos(2t) K_1,\ V(t) = V_0 + \sin(1.5t) V_1,
        \ A = K^\top Q; \quad Q_h(t) = (1 + \tfrac12\sin t)\,Q_h,\
        V_h(t) = V_{h,0} + \cos(t)\,V_{h,1},\ A_h = K_h^\top Q_h(t),

    with i.i.d. Gaussian entries of variance ``qk_scale**2 / d`` (``Q_i, K_i, Q_h, K_h``),
    ``v_scale**2 / d`` (``V_i``) and ``head_v_scale**2 / d`` (``V_{h,i}``), drawn from
    ``gen`` in a fixed order. The setting of chapter 2 for the theorem of Castin, Ablin,
    Carrillo and Peyré (2025), which allows any continuous :math:`Q, K, V`.

    Returns
    -------
    dict of callables of t
        Keys ``"Q", "K", "V", "A"`` (d x d) and ``"Qs", "Vs", "As"`` (heads x d x d).

    Parameters
    ----------
    gen : numpy.random.Generator
        Source of the matrices.
    d : int
        Dimension.
    heads : int
        Number of heads of the multi-head variant.
    qk_scale, v_scale, head_v_scale : float
        Scales of the entries.

    Raises
    ------
    ValueError
        If ``d`` or ``heads`` is not a positive integer.

    Examples
    --------
    >>> import numpy as np
    >>> P = random_parameters(np.random.default_rng(0))
    >>> print(sorted(P), P["As"](0.0).shape)
    ['A', 'As', 'K', 'Q', 'Qs', 'V', 'Vs'] (2, 2, 2)
    >>> print(bool(np.allclose(P["A"](0.3), P["K"](0.3).T @ P["Q"](0.3), atol=0)))
    True

    References
    ----------
    :cite:`castin2025unified`
    """
    d = _checks.positive_int(d, "d")
    heads = _checks.positive_int(heads, "heads")
    qk_scale = _checks.finite_float(qk_scale, "qk_scale")
    v_scale = _checks.finite_float(v_scale, "v_scale")
    head_v_scale = _checks.finite_float(head_v_scale, "head_v_scale")
    Q0, Q1, K0, K1 = (_gaussian_matrix(gen, (d, d), qk_scale) for _ in range(4))
    V0, V1 = (_gaussian_matrix(gen, (d, d), v_scale) for _ in range(2))
    Qh, Kh = (_gaussian_matrix(gen, (heads, d, d), qk_scale) for _ in range(2))
    Vh0, Vh1 = (_gaussian_matrix(gen, (heads, d, d), head_v_scale) for _ in range(2))
    P = {"Q": lambda t: Q0 + np.sin(t) * Q1,
         "K": lambda t: K0 + np.cos(2 * t) * K1,
         "V": lambda t: V0 + np.sin(1.5 * t) * V1,
         "Qs": lambda t: (1 + 0.5 * np.sin(t)) * Qh,
         "Vs": lambda t: Vh0 + np.cos(t) * Vh1}
    P["A"] = lambda t: P["K"](t).T @ P["Q"](t)
    P["As"] = lambda t: np.einsum("hki,hkj->hij", Kh, P["Qs"](t))
    return P


def variant_field(name: str, P: dict[str, Any], *, weights: ArrayLike | None = None,
                  sinkhorn_tol: float = 1e-8) -> Callable[..., Any]:
    r"""The velocity field :math:`(t, X) \mapsto \Gamma_{\mu_X}(X)` of one attention variant.

    ``name`` is one of :data:`VARIANTS`: softmax (``P["A"], P["V"]``), L2
    (``P["Q"], P["K"], P["V"]``; Kim et al., 2021), Sinkhorn (the same, Sinkhorn limit
    recomputed at every evaluation to ``sinkhorn_tol``; Sander et al., 2022), sigmoid
    (``P["A"], P["V"]``, bias 0, against the probability measure), multi-head
    (``P["As"], P["Vs"]``) and causal softmax (``P["A"], P["V"]``, token ``i`` attends to
    ``j <= i``). Parameters may be callables of ``t``
    (:func:`transformer_pde.dynamics.attention_field`); ``weights`` are those of the atoms
    (uniform by default), passed to the attention function.

    Parameters
    ----------
    name : str
        One of :data:`VARIANTS`.
    P : dict
        Parameters, as from :func:`random_parameters`.
    weights : array (n,), optional
        Weights of the atoms.
    sinkhorn_tol : float
        Tolerance of the Sinkhorn iterations.

    Returns
    -------
    callable
        ``field(t, X) -> array (n, d)``.

    Raises
    ------
    ValueError
        If ``name`` is not one of :data:`VARIANTS`.

    Examples
    --------
    >>> import numpy as np
    >>> P = random_parameters(np.random.default_rng(0))
    >>> X = np.array([[0.1, 0.2], [0.3, -0.1], [-0.2, 0.0]])
    >>> print([variant_field(name, P)(0.5, X).shape for name in VARIANTS])
    [(3, 2), (3, 2), (3, 2), (3, 2), (3, 2), (3, 2)]

    References
    ----------
    :cite:`castin2025unified,vaswani2017attention,kim2021lipschitz,sander2022sinkformers,ramapuram2025sigmoid`
    """
    kw = {} if weights is None else {"weights": weights}
    field = dynamics.attention_field
    if name == "softmax":
        return field(attention.softmax, A=P["A"], V=P["V"], **kw)
    if name == "l2":
        return field(attention.l2, Q=P["Q"], K=P["K"], V=P["V"], **kw)
    if name == "sinkhorn":
        return field(attention.sinkhorn, Q=P["Q"], K=P["K"], V=P["V"], tol=sinkhorn_tol, **kw)
    if name == "sigmoid":
        return field(attention.sigmoid, A=P["A"], V=P["V"], **kw)
    if name == "multihead":
        return field(attention.multihead, As=P["As"], Vs=P["Vs"], **kw)
    if name == "causal":
        return field(attention.softmax, A=P["A"], V=P["V"], causal=True, **kw)
    raise ValueError(f"name must be one of {VARIANTS}, got {name!r}")


def support_rate(name: str, P: dict[str, Any], t: float) -> float:
    r"""Growth rate of the support radius: :math:`\|V(t)\|_2`, or :math:`\kappa(t)` (multi-head).

    :math:`R(t) \le R_0\exp\int_0^t \text{rate}` (Castin, Ablin, Carrillo and Peyré, 2025, for
    :math:`\|V\|_2`; :math:`\kappa` derived in chapter 2).

    Parameters
    ----------
    name : str
        One of :data:`VARIANTS`.
    P : dict
        Parameters, as from :func:`random_parameters`.
    t : float
        Time.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``name`` is not one of :data:`VARIANTS`.

    Examples
    --------
    >>> import numpy as np
    >>> P = random_parameters(np.random.default_rng(0))
    >>> print(bool(support_rate("softmax", P, 0.5) == np.linalg.norm(P["V"](0.5), 2)))
    True

    References
    ----------
    :cite:`castin2025unified`
    """
    t = _checks.finite_float(t, "t")
    if name == "multihead":
        return heads_growth_rate(P["Vs"](t))
    if name not in VARIANTS:
        raise ValueError(f"name must be one of {VARIANTS}, got {name!r}")
    return float(np.linalg.norm(P["V"](t), 2))


def uniform_ball(gen: np.random.Generator, n: int, d: int = 2) -> NDArray[np.float64]:
    r"""``n`` points drawn uniformly in the unit ball of :math:`\mathbb R^d` (rejection).

    Parameters
    ----------
    gen : numpy.random.Generator
        Source of the points.
    n : int
        Number of points.
    d : int
        Dimension.

    Returns
    -------
    array (n, d)

    Raises
    ------
    ValueError
        If ``n`` or ``d`` is not a positive integer.

    Examples
    --------
    >>> import numpy as np
    >>> X = uniform_ball(np.random.default_rng(0), 100, 3)
    >>> print(X.shape, bool(np.all(np.linalg.norm(X, axis=1) <= 1)))
    (100, 3) True

    References
    ----------
    :cite:`castin2025unified`
    """
    n = _checks.positive_int(n, "n")
    d = _checks.positive_int(d, "d")
    out = np.empty((0, d))
    while out.shape[0] < n:
        pts = gen.uniform(-1, 1, size=(4 * n, d))
        out = np.vstack([out, pts[np.linalg.norm(pts, axis=1) <= 1]])
    return out[:n]


_MOMENT_RHS: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "softmax": (gaussian.softmax_rhs, ("A", "V")),
    "l2": (gaussian.l2_rhs, ("Q", "K", "V")),
    "multihead": (gaussian.multihead_rhs, ("As", "Vs"))}


def gaussian_moments(name: str, P: dict[str, Any], alpha0: ArrayLike, Sigma0: ArrayLike,
                     times: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Exact mean and covariance of the Gaussian solution of one variant at ``times``.

    For softmax attention, :math:`\dot\alpha = V(I + \Sigma A)\alpha`,
    :math:`\dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top` (Castin, Ablin, Carrillo and
    Peyré, 2025; L2 and multi-head: :mod:`transformer_pde.gaussian`), with the time-dependent
    parameters ``P`` (callables of ``t``), integrated by ``solve_ivp`` (DOP853, relative
    tolerance ``1e-12``) from :math:`\mathcal N(\alpha_0, \Sigma_0)`. ``name`` is
    ``"softmax"``, ``"l2"`` or ``"multihead"``.

    Returns
    -------
    alpha : array (m, d)
    Sigma : array (m, d, d)

    Parameters
    ----------
    name : str
        ``"softmax"``, ``"l2"`` or ``"multihead"``.
    P : dict
        Parameters, callables of ``t``.
    alpha0 : array (d,)
        Initial mean.
    Sigma0 : array (d, d)
        Initial covariance.
    times : array (m,)
        Strictly increasing times, at least two; the first is the initial time.

    Raises
    ------
    ValueError
        If ``name`` is not one of the three, ``Sigma0`` is not square or ``times`` is not
        strictly increasing.
    RuntimeError
        If the integration fails (e.g. the covariance blows up).

    Examples
    --------
    Constant :math:`A = \mathrm{diag}(-1, 0)`, :math:`V = I`: :math:`\Sigma(t) =
    \mathrm{diag}(1/(1 + 2t), 1)`:

    >>> import numpy as np
    >>> P = {"A": lambda t: np.diag([-1.0, 0.0]), "V": lambda t: np.eye(2)}
    >>> alpha, Sigma = gaussian_moments("softmax", P, [0.0, 0.0], np.eye(2), [0.0, 1.0])
    >>> print((np.round(Sigma[-1], 6) + 0.0).tolist())
    [[0.333333, 0.0], [0.0, 1.0]]

    References
    ----------
    :cite:`castin2025unified,hairer1993solving`
    """
    if name not in _MOMENT_RHS:
        raise ValueError(f"name must be one of {tuple(_MOMENT_RHS)}, got {name!r}")
    rhs, keys = _MOMENT_RHS[name]
    alpha0 = _checks.real_array(alpha0, "alpha0")
    Sigma0 = _checks.matrix(Sigma0, "Sigma0", square=True)
    if alpha0.shape != (Sigma0.shape[0],) or not np.all(np.isfinite(alpha0)):
        raise ValueError(f"alpha0 must be a finite array of shape ({Sigma0.shape[0]},), "
                         f"got shape {alpha0.shape}")
    d = alpha0.shape[0]
    times = _checks.increasing_times(times, "times")

    def f(t, y):
        dalpha, dSigma = rhs(y[:d], y[d:].reshape(d, d), *(P[k](t) for k in keys))
        return np.concatenate([dalpha, dSigma.ravel()])

    sol = solve_ivp(f, (times[0], times[-1]), np.concatenate([alpha0, Sigma0.ravel()]),
                    t_eval=times, method="DOP853", rtol=1e-12, atol=1e-14)
    if not sol.success:
        raise RuntimeError(f"gaussian_moments: integration failed: {sol.message}")
    return sol.y[:d].T, sol.y[d:].T.reshape(-1, d, d)


def max_interaction_strength(name: str, P: dict[str, Any], alpha0: ArrayLike, Sigma0: ArrayLike,
                             T: float, steps: int = 40) -> float:
    r"""Largest :math:`\rho(t) = \|\Sigma(t)^{1/2} A(t)\Sigma(t)^{1/2}\|_2` on the exact solution.

    Maximum over ``steps + 1`` equally spaced times of :math:`[0, T]` and over the heads
    (``P["A"]``, or ``P["As"]`` for ``"multihead"``), with :math:`\Sigma(t)` from
    :func:`gaussian_moments`; see :func:`transformer_pde.meanfield.interaction_strength`.

    Parameters
    ----------
    name : str
        ``"softmax"``, ``"l2"`` or ``"multihead"``.
    P : dict
        Parameters, callables of ``t``.
    alpha0 : array (d,)
        Initial mean.
    Sigma0 : array (d, d)
        Initial covariance.
    T : float
        Final time, positive.
    steps : int
        Number of intervals of the time grid.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        As in :func:`gaussian_moments`, or if ``T`` or ``steps`` is not positive.
    RuntimeError
        If the Gaussian solution cannot be integrated up to ``T``.

    Examples
    --------
    With :math:`A = \mathrm{diag}(-1, 0)` and :math:`V = I`, :math:`\rho(t) = 1/(1 + 2t)` is
    largest at :math:`t = 0`:

    >>> import numpy as np
    >>> P = {"A": lambda t: np.diag([-1.0, 0.0]), "V": lambda t: np.eye(2)}
    >>> print(f"{max_interaction_strength('softmax', P, [0.0, 0.0], np.eye(2), 1.0):.6f}")
    1.000000

    References
    ----------
    :cite:`castin2025unified`
    """
    steps = _checks.positive_int(steps, "steps")
    grid = np.linspace(0.0, _checks.positive_float(T, "T"), steps + 1)
    _, Sigmas = gaussian_moments(name, P, alpha0, Sigma0, grid)
    key = "As" if name == "multihead" else "A"
    d = Sigmas.shape[-1]
    return max(interaction_strength(A, S) for t, S in zip(grid, Sigmas, strict=True)
               for A in np.reshape(P[key](t), (-1, d, d)))


def scale_interaction(P: dict[str, Any], c: float) -> dict[str, Any]:
    r"""Parameters with the interaction scaled by ``c > 0``: :math:`A \mapsto cA`.

    ``A`` and every head's ``As`` are multiplied by ``c``, ``Q`` and ``K`` by
    :math:`\sqrt c` (so that :math:`A = K^\top Q` still holds) and ``Qs`` by ``c`` (so that
    :math:`A_h = K_h^\top Q_h`); ``V`` and ``Vs`` are unchanged. The interaction strength
    :math:`\rho = \|\Sigma^{1/2}A\Sigma^{1/2}\|_2` at a given :math:`\Sigma` scales by ``c``.

    Parameters
    ----------
    P : dict
        Parameters, callables of ``t``.
    c : float
        Factor, positive.

    Returns
    -------
    dict

    Raises
    ------
    ValueError
        If ``c`` is not positive.

    Examples
    --------
    >>> import numpy as np
    >>> P = random_parameters(np.random.default_rng(0))
    >>> Pc = scale_interaction(P, 0.25)
    >>> print(bool(np.allclose(Pc["A"](0.3), 0.25 * P["A"](0.3), atol=1e-15)),
    ...       bool(np.allclose(Pc["K"](0.3).T @ Pc["Q"](0.3), Pc["A"](0.3), atol=1e-15)))
    True True

    References
    ----------
    :cite:`castin2025unified`
    """
    c = _checks.positive_float(c, "c")
    r = np.sqrt(c)
    out = dict(P)
    for key, factor in (("A", c), ("As", c), ("Q", r), ("K", r), ("Qs", c)):
        if key in P:
            out[key] = lambda t, f=P[key], a=factor: a * f(t)
    return out


def moderate_interaction(P: dict[str, Any], alpha0: ArrayLike, Sigma0: ArrayLike, T: float,
                         rho_max: float, *, scales: Iterable[float] = (1.0, 0.8, 0.6, 0.4, 0.2, 0.1)
                         ) -> tuple[dict[str, Any], float, float]:
    r"""The first scale ``c`` of ``scales`` that keeps the interaction strength below ``rho_max``.

    Searches ``scales`` in order for the first ``c`` such that, with
    :func:`scale_interaction` ``(P, c)``, the largest interaction strength of the softmax and
    multi-head variants along their exact Gaussian solutions on :math:`[0, T]`
    (:func:`max_interaction_strength`) is below ``rho_max``; a solution that blows up before
    :math:`T` counts as unbounded. Used to keep the mean-field
    experiments of chapter 2 in the regime where the :math:`n^{-1/2}` rate is reached at
    small :math:`n` (Castin, Ablin, Carrillo and Peyré, 2025, for the model).

    Returns
    -------
    P_scaled : dict
    c : float
    rho : float
        The largest interaction strength with ``P_scaled``.

    Raises
    ------
    RuntimeError
        If no scale of ``scales`` brings it below ``rho_max``.

    Parameters
    ----------
    P : dict
        Parameters, callables of ``t``.
    alpha0 : array (d,)
        Initial mean.
    Sigma0 : array (d, d)
        Initial covariance.
    T : float
        Final time.
    rho_max : float
        Bound on the interaction strength, positive.
    scales : iterable of float
        Factors tried in order.

    Examples
    --------
    With the parameters below, :math:`\rho` is about 0.35 at scale 1, 0.28 at 0.8 and 0.22 at
    0.6:

    >>> import numpy as np
    >>> P = random_parameters(np.random.default_rng(0))
    >>> Pc, c, rho = moderate_interaction(P, [0.0, 0.0], np.eye(2), 1.0, 0.25)
    >>> print(c, f"{rho:.2f}")
    0.6 0.22

    References
    ----------
    :cite:`castin2025unified`
    """
    rho_max = _checks.positive_float(rho_max, "rho_max")
    if isinstance(scales, (str, bytes)) or not hasattr(scales, "__iter__"):
        raise ValueError(f"scales must be an iterable of positive factors, got {scales!r}")
    scales = [_checks.positive_float(c, "scales") for c in scales]
    if not scales:
        raise ValueError("scales must hold at least one positive factor")
    rho = np.inf
    for c in scales:
        Pc = scale_interaction(P, c)
        try:
            rho = max(max_interaction_strength(name, Pc, alpha0, Sigma0, T)
                      for name in ("softmax", "multihead"))
        except RuntimeError:  # the Gaussian solution blows up before T: rho is unbounded
            rho = np.inf
        if rho < rho_max:
            return Pc, float(c), float(rho)
    raise RuntimeError(f"moderate_interaction: rho = {rho:.3g} >= rho_max = {rho_max:g} "
                       f"at the smallest scale {scales[-1]!r}")


class ParticleErrors(NamedTuple):
    r"""Squared errors of the particle system's moments, one row per size, one column per
    draw; ``final[k]`` holds the particles at time ``T`` of every draw of size ``k``, shape
    ``(draws, n, d)`` (``None`` unless asked for).

    Attributes
    ----------
    mean : array (sizes, draws)
        :math:`|\hat\alpha_n(T) - \alpha(T)|^2`.
    covariance : array (sizes, draws)
        :math:`\|\hat\Sigma_n(T) - \Sigma(T)\|_F^2`.
    final : list of arrays or None
        The particles at time ``T``.

    Examples
    --------
    See :func:`particle_moment_errors`.

    >>> print(ParticleErrors._fields)
    ('mean', 'covariance', 'final')
    """

    mean: np.ndarray
    covariance: np.ndarray
    final: list | None


def _moment_errors_of_draw(key, name, P, alpha0, chol0, n, T, max_step, exact, keep):
    X0 = alpha0 + np.random.default_rng(key).standard_normal((n, alpha0.shape[0])) @ chol0.T
    XT = dynamics.integrate(variant_field(name, P), X0, [0.0, T], method="rk4",
                            max_step=max_step)[-1]
    alpha_T, Sigma_T = exact
    errors = (float(np.sum((XT.mean(axis=0) - alpha_T) ** 2)),
              float(np.sum((np.cov(XT.T, bias=True) - Sigma_T) ** 2)))
    return errors, (XT if keep else None)


def particle_moment_errors(name: str, P: dict[str, Any], alpha0: ArrayLike, Sigma0: ArrayLike,
                           sizes: ArrayLike, draws: int, T: float, seed: int | Sequence[int], *,
                           max_step: float = 0.2, keep: bool = False, n_jobs: int | None = None,
                           progress: bool | None = None) -> ParticleErrors:
    r"""Squared errors of the mean and covariance of the particle system at time ``T``.

    For each size :math:`n` and draw :math:`r`, :math:`n` particles are drawn i.i.d. from
    :math:`\mathcal N(\alpha_0, \Sigma_0)` by ``numpy.random.default_rng([*seed, k, r])``
    (``k`` the index of the size), moved by the particle system of the variant ``name``
    (parameters ``P``, RK4 with steps of at most ``max_step``), and their empirical mean
    :math:`\hat\alpha_n(T)` and covariance :math:`\hat\Sigma_n(T)` (divisor :math:`n`) are
    compared with those of the exact Gaussian solution (:func:`gaussian_moments`; the
    mean-field limit of Castin, Ablin, Carrillo and Peyré, 2025):
    :math:`|\hat\alpha_n(T) - \alpha(T)|^2` and
    :math:`\|\hat\Sigma_n(T) - \Sigma(T)\|_F^2`. The draws run like
    :func:`transformer_pde.draws.map_keys` (``n_jobs`` and backend from
    :func:`joblib.parallel_config` unless ``n_jobs`` is given); the values do not depend on
    them. ``progress``: one progress bar over every draw, shown by default (``None``) only
    when the output is interactive (a terminal, a notebook open in Jupyter; never under
    nbval or ``nbconvert --execute``); ``True`` always, ``False`` never.

    Parameters
    ----------
    name : str
        ``"softmax"``, ``"l2"`` or ``"multihead"`` (the variants with Gaussian solutions).
    P : dict
        Parameters as from :func:`random_parameters`.
    alpha0 : array (d,)
    Sigma0 : array (d, d)
    sizes : sequence of int
    draws : int
        Independent draws per size.
    T : float
        Final time.
    seed : int or sequence of int
    max_step : float
        RK4 step bound.
    keep : bool
        Also return the particles at time ``T``.

    Returns
    -------
    ParticleErrors
        ``mean`` and ``covariance`` of shape ``(len(sizes), draws)``, and ``final``.

    n_jobs : int, optional
        Passed to :class:`joblib.Parallel`.
    progress : bool, optional
        Progress bar (see above).

    Raises
    ------
    ValueError
        If ``name`` is not one of the three, the moments are not valid, a size, ``draws``,
        ``T`` or ``max_step`` is not positive, or ``seed`` is not a valid key.
    RuntimeError
        If the Gaussian solution cannot be integrated up to ``T``.

    Examples
    --------
    >>> import numpy as np
    >>> P = random_parameters(np.random.default_rng(0))
    >>> err = particle_moment_errors("softmax", P, [0.0, 0.0], np.eye(2), [10, 20], 2, 0.2,
    ...                              seed=0, keep=True)
    >>> print(err.mean.shape, err.covariance.shape, err.final[1].shape)
    (2, 2) (2, 2) (2, 20, 2)

    References
    ----------
    :cite:`castin2025unified`
    """
    if name not in _MOMENT_RHS:
        raise ValueError(f"name must be one of {tuple(_MOMENT_RHS)}, got {name!r}")
    alpha0, Sigma0 = _checks.moments(alpha0, Sigma0, "alpha0", "Sigma0")
    alpha0, Sigma0 = _checks.gaussian(alpha0, Sigma0)  # positive definite
    sizes = [_checks.positive_int(n, "sizes") for n in np.atleast_1d(sizes)]
    draws = _checks.positive_int(draws, "draws")
    T = _checks.positive_float(T, "T")
    max_step = _checks.positive_float(max_step, "max_step")
    seed = _checks.seed_key(seed)
    chol0 = np.linalg.cholesky(Sigma0)
    exact = tuple(m[-1] for m in gaussian_moments(name, P, alpha0, Sigma0, [0.0, T]))
    sq = np.empty((2, len(sizes), draws))
    final: list[NDArray[np.float64]] | None = [] if keep else None
    with _progress.bar(len(sizes) * draws, progress, "particle_moment_errors") as shown:
        for k, n in enumerate(sizes):
            out = _progress.map_blocks(
                _moment_errors_of_draw, [[*seed, k, r] for r in range(draws)],
                (name, P, alpha0, chol0, n, T, max_step, exact, keep), {}, n_jobs=n_jobs,
                bar=shown)
            sq[:, k] = np.array([errors for errors, _ in out]).T
            if final is not None:
                final.append(np.array([XT for _, XT in out]))
    return ParticleErrors(sq[0], sq[1], final)


def _distances_of_draw(key, clouds, alpha, chol):
    X = clouds[key[-1]]
    fresh = alpha + np.random.default_rng(key).standard_normal((2,) + X.shape) @ chol.T
    return (transport.wasserstein(X, fresh[0]), transport.wasserstein(fresh[1], fresh[0]))


def sample_distances(clouds: Sequence[ArrayLike], alpha: ArrayLike, Sigma: ArrayLike,
                     seed: int | Sequence[int], *,
                     n_jobs: int | None = None) -> NDArray[np.float64]:
    r"""Exact :math:`W_2` from point clouds to fresh samples of :math:`\mathcal N(\alpha, \Sigma)`.

    For cloud :math:`j` (an array ``(n, d)``), two independent samples :math:`Y, Y'` of
    :math:`n` points of :math:`\mathcal N(\alpha, \Sigma)` are drawn by
    ``numpy.random.default_rng([*seed, j])``, and the function returns
    :math:`W_2(X_j, Y)` and :math:`W_2(Y', Y)` (:func:`transformer_pde.transport.wasserstein`,
    POT's exact solver). The second is what an exact sampler of the measure gives, the
    reference for a particle approximation of a mean-field limit (Castin, Ablin, Carrillo
    and Peyré, 2025). Runs through :func:`transformer_pde.draws.map_keys`.

    Returns
    -------
    array (len(clouds), 2)

    Parameters
    ----------
    clouds : sequence of arrays (n, d)
        The point clouds.
    alpha : array (d,)
        Mean.
    Sigma : array (d, d)
        Covariance, symmetric positive definite.
    seed : int or sequence of int
        Key of the draws.
    n_jobs : int, optional
        Passed to :class:`joblib.Parallel`.

    Raises
    ------
    ValueError
        If the moments are not valid, a cloud is not a finite ``(n, d)`` array, or ``seed`` is
        not a valid key.

    Examples
    --------
    >>> import numpy as np
    >>> clouds = [np.random.default_rng(1).standard_normal((10, 2))]
    >>> out = sample_distances(clouds, [0.0, 0.0], np.eye(2), seed=0)
    >>> print(out.shape, bool(np.all(out > 0)))
    (1, 2) True

    References
    ----------
    :cite:`castin2025unified,flamary2021pot`
    """
    from . import draws as _draws

    alpha, Sigma = _checks.gaussian(alpha, Sigma)
    if isinstance(clouds, (str, bytes)) or not hasattr(clouds, "__iter__"):
        raise ValueError(f"clouds must be a sequence of point clouds, got {clouds!r}")
    arrays = [_checks.points(X, "clouds") for X in clouds]
    if any(X.shape[1] != alpha.size for X in arrays):
        raise ValueError(f"clouds must have {alpha.size} columns, like alpha")
    seed = _checks.seed_key(seed)
    chol = np.linalg.cholesky(Sigma)
    out = _draws.map_keys(_distances_of_draw, [[*seed, j] for j in range(len(arrays))],
                          arrays, alpha, chol, n_jobs=n_jobs)
    return np.array(out)
