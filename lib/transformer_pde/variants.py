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
  :math:`\rho = \|\Sigma^{1/2} A \Sigma^{1/2}\|_2` of a head along it.
"""

import numpy as np
from scipy.integrate import solve_ivp

from . import _checks, attention, dynamics, gaussian
from .meanfield import interaction_strength
from .stability import heads_growth_rate

__all__ = ["VARIANTS", "LABELS", "random_parameters", "variant_field", "support_rate",
           "uniform_ball", "gaussian_moments", "max_interaction_strength"]

VARIANTS = ("softmax", "l2", "sinkhorn", "sigmoid", "multihead", "causal")
LABELS = {"softmax": "softmax", "l2": "L2", "sinkhorn": "Sinkhorn", "sigmoid": "sigmoid",
          "multihead": "multi-head (2 heads)", "causal": "causal softmax"}


def _gaussian_matrix(gen, shape, scale):
    """Entries N(0, scale^2 / shape[-1])."""
    return scale * gen.standard_normal(shape) / np.sqrt(shape[-1])


def random_parameters(gen, d=2, heads=2, *, qk_scale=0.6, v_scale=0.5, head_v_scale=0.35):
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
    """
    d = _checks.positive_int(d, "d")
    heads = _checks.positive_int(heads, "heads")
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


def variant_field(name, P, *, weights=None, sinkhorn_tol=1e-8):
    r"""The velocity field :math:`(t, X) \mapsto \Gamma_{\mu_X}(X)` of one attention variant.

    ``name`` is one of :data:`VARIANTS`: softmax (``P["A"], P["V"]``), L2
    (``P["Q"], P["K"], P["V"]``; Kim et al., 2021), Sinkhorn (the same, Sinkhorn limit
    recomputed at every evaluation to ``sinkhorn_tol``; Sander et al., 2022), sigmoid
    (``P["A"], P["V"]``, bias 0, against the probability measure), multi-head
    (``P["As"], P["Vs"]``) and causal softmax (``P["A"], P["V"]``, token ``i`` attends to
    ``j <= i``). Parameters may be callables of ``t``
    (:func:`transformer_pde.dynamics.attention_field`); ``weights`` are those of the atoms
    (uniform by default), passed to the attention function.
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


def support_rate(name, P, t):
    r"""Growth rate of the support radius: :math:`\|V(t)\|_2`, or :math:`\kappa(t)` (multi-head).

    :math:`R(t) \le R_0\exp\int_0^t \text{rate}` (Castin, Ablin, Carrillo and Peyré, 2025, for
    :math:`\|V\|_2`; :math:`\kappa` derived in chapter 2).
    """
    if name == "multihead":
        return heads_growth_rate(P["Vs"](t))
    if name not in VARIANTS:
        raise ValueError(f"name must be one of {VARIANTS}, got {name!r}")
    return float(np.linalg.norm(P["V"](t), 2))


def uniform_ball(gen, n, d=2):
    r"""``n`` points drawn uniformly in the unit ball of :math:`\mathbb R^d` (rejection)."""
    n = _checks.positive_int(n, "n")
    d = _checks.positive_int(d, "d")
    out = np.empty((0, d))
    while out.shape[0] < n:
        pts = gen.uniform(-1, 1, size=(4 * n, d))
        out = np.vstack([out, pts[np.linalg.norm(pts, axis=1) <= 1]])
    return out[:n]


_MOMENT_RHS = {"softmax": (gaussian.softmax_rhs, ("A", "V")),
               "l2": (gaussian.l2_rhs, ("Q", "K", "V")),
               "multihead": (gaussian.multihead_rhs, ("As", "Vs"))}


def gaussian_moments(name, P, alpha0, Sigma0, times):
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
    """
    if name not in _MOMENT_RHS:
        raise ValueError(f"name must be one of {tuple(_MOMENT_RHS)}, got {name!r}")
    rhs, keys = _MOMENT_RHS[name]
    alpha0 = np.asarray(alpha0, dtype=float)
    Sigma0 = _checks.matrix(Sigma0, "Sigma0", square=True)
    d = alpha0.shape[0]
    times = np.asarray(times, dtype=float)
    if times.ndim != 1 or times.size < 2 or np.any(np.diff(times) <= 0):
        raise ValueError("times must be a strictly increasing 1-D array of length >= 2")

    def f(t, y):
        dalpha, dSigma = rhs(y[:d], y[d:].reshape(d, d), *(P[k](t) for k in keys))
        return np.concatenate([dalpha, dSigma.ravel()])

    sol = solve_ivp(f, (times[0], times[-1]), np.concatenate([alpha0, Sigma0.ravel()]),
                    t_eval=times, method="DOP853", rtol=1e-12, atol=1e-14)
    if not sol.success:
        raise RuntimeError(f"gaussian_moments: integration failed: {sol.message}")
    return sol.y[:d].T, sol.y[d:].T.reshape(-1, d, d)


def max_interaction_strength(name, P, alpha0, Sigma0, T, steps=40):
    r"""Largest :math:`\rho(t) = \|\Sigma(t)^{1/2} A(t)\Sigma(t)^{1/2}\|_2` on the exact solution.

    Maximum over ``steps + 1`` equally spaced times of :math:`[0, T]` and over the heads
    (``P["A"]``, or ``P["As"]`` for ``"multihead"``), with :math:`\Sigma(t)` from
    :func:`gaussian_moments`; see :func:`transformer_pde.meanfield.interaction_strength`.
    """
    steps = _checks.positive_int(steps, "steps")
    grid = np.linspace(0.0, _checks.positive_float(T, "T"), steps + 1)
    _, Sigmas = gaussian_moments(name, P, alpha0, Sigma0, grid)
    key = "As" if name == "multihead" else "A"
    d = Sigmas.shape[-1]
    return max(interaction_strength(A, S) for t, S in zip(grid, Sigmas, strict=True)
               for A in np.reshape(P[key](t), (-1, d, d)))
