r"""Normalisation schemes as speed regulation of the token directions.

Write each token as :math:`x_i = r_i\theta_i` with :math:`r_i = |x_i| > 0` and
:math:`\theta_i \in \mathbb S^{d-1}`, and let the attention vector of the directions be

.. math::

    A_i(\Theta) = \sum_j \frac{e^{\beta\langle\theta_i, \theta_j\rangle}}
                         {\sum_k e^{\beta\langle\theta_i, \theta_k\rangle}}\,\theta_j

(self-attention with :math:`Q = K = V = I` on the normalised tokens). Karagodin, Ge,
Polyanskiy and Rigollet (2025) observe that the usual normalisation schemes all move the
directions by :math:`\dot\theta_i = s_i^{-1} P_{\theta_i} A_i(\Theta)`, with a scheme-dependent
*speed factor* :math:`s_i`. This module implements six schemes, as continuous-time flows
(:func:`flow_field`), as residual networks of step :math:`h` (:func:`residual_network`), and
in the equiangular reduction (:func:`equiangular_rhs`, :func:`equiangular_flow`). The flows
and layers (``alpha`` the nGPT step, ``switch`` the Mix-LN switching time):

=========  ==========================================  ===========================================
scheme     flow :math:`\dot x_i`                        layer :math:`x \mapsto`
=========  ==========================================  ===========================================
``post``   :math:`P_{x_i}A_i` (:math:`|x_i| = 1`)       :math:`(x + hA)/|x + hA|`
``pre``    :math:`A_i`                                  :math:`x + hA`
``peri``   :math:`A_i/|A_i|`                            :math:`x + hA/|A|`
``mix``    ``post`` for :math:`t <` ``switch``,         the same two layers
           then ``pre``
``ngpt``   :math:`\alpha P_{x_i}(A_i/|A_i|)`            :math:`(x + h\alpha(A/|A| - x))/|\cdot|`
``sqrt``   :math:`(1+t)^{-1/2}A_i`                      :math:`x + h(1 + t)^{-1/2}A`
``cod``    :math:`(1+t)^{-1/2}P_{x_i}A_i`               :math:`(x + h(1+t)^{-1/2}A)/|\cdot|`
=========  ==========================================  ===========================================

with speed factors (:func:`speed_factor`) :math:`s = 1`, :math:`r`, :math:`r|A|`, 1 then
:math:`r`, :math:`|A|/\alpha` and :math:`r\sqrt{1+t}`. Post-LN is the original Transformer's
(Vaswani et al., 2017), Pre-LN that of GPT-2 and LLaMA, Peri-LN that of Kim et al. (2025),
Mix-LN that of Li, Yin and Liu (2025), nGPT that of Loshchilov et al. (2025), ``sqrt`` our
model of the :math:`1/\sqrt{\ell}` LayerNorm Scaling of layer :math:`\ell` of Sun et al. (2025)
with one time unit per layer (layer :math:`\ell = 1 + t`, norms free), and ``cod`` the
sqrt-scaling scheme of Karagodin, Ge, Polyanskiy and Rigollet (2025) as it is described there
(speed factor :math:`\sqrt{1+t}`, tokens on the sphere); the layers are our transcriptions
with :math:`Q = K = V = I`, no gains, no feed-forward block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _checks, attention, sphere

__all__ = [
    "SCHEMES",
    "attention_vector",
    "speed_factor",
    "flow_field",
    "residual_network",
    "pair_gap",
    "equiangular_rhs",
    "equiangular_flow",
    "equiangular_network",
    "asymptotic_law",
    "RandomRun",
    "random_run",
    "network_rate",
    "LawFit",
    "fit_laws",
    "initial_velocity",
    "velocity_prediction",
    "random_weights_run",
]

#: The schemes, in the order of the table of the module notes.
SCHEMES = ("post", "pre", "peri", "mix", "ngpt", "sqrt", "cod")


def _scheme(scheme):
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    return scheme


def _beta(beta):
    try:
        val = float(beta)
    except (TypeError, ValueError):
        raise ValueError(f"beta must be a number, got {beta!r}") from None
    if not np.isfinite(val) or val < 0:
        raise ValueError(f"beta must be a finite number >= 0, got {beta!r}")
    return val


def _options(alpha, switch):
    alpha = _checks.positive_float(alpha, "alpha")
    switch = _checks.nonnegative_float(switch, "switch")
    return alpha, switch


def _unit_rows(X, name):
    r = np.linalg.norm(X, axis=1, keepdims=True)
    if np.any(r == 0):
        raise ValueError(f"{name} has a zero row: a token needs a direction")
    return X / r, r[:, 0]


def attention_vector(Theta: ArrayLike, beta: float) -> NDArray[np.float64]:
    r"""Rows :math:`A_i = \sum_j \mathrm{softmax}_j(\beta\langle\theta_i, \theta_j\rangle)\theta_j`.

    ``Theta`` (n, d) holds the directions (unit rows; other rows are normalised first). This
    is :func:`transformer_pde.attention.softmax` with :math:`A = \beta I` and :math:`V = I`
    on the normalised tokens (Karagodin, Ge, Polyanskiy and Rigollet, 2025).

    Parameters
    ----------
    Theta : array (n, d)
        Directions :math:`\theta_i` as rows (normalised first if not unit).
    beta : float
        Inverse temperature :math:`\beta \ge 0`.

    Returns
    -------
    array (n, d)
        The rows :math:`A_i(\Theta)`.

    Examples
    --------
    At :math:`\beta = 0` every row is the mean direction:

    >>> print(attention_vector(np.eye(2), 0.0).round(6).tolist())
    [[0.5, 0.5], [0.5, 0.5]]

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    Theta = _checks.points(Theta, "Theta")
    beta = _beta(beta)
    U, _ = _unit_rows(Theta, "Theta")
    d = U.shape[1]
    return attention.softmax(U, beta * np.eye(d), np.eye(d))


def speed_factor(scheme: str, r: ArrayLike, A: ArrayLike, t: float = 0.0, *, alpha: float = 1.0,
                 switch: float = 1.0) -> NDArray[np.float64]:
    r"""Speed factor :math:`s_i` of a scheme: :math:`\dot\theta_i = s_i^{-1}P_{\theta_i}A_i`.

    .. math::

        s^{\mathrm{post}} = 1,\quad s^{\mathrm{pre}} = r,\quad s^{\mathrm{peri}} = r|A|,\quad
        s^{\mathrm{mix}} = 1 \text{ or } r,\quad s^{\mathrm{nGPT}} = |A|/\alpha,\quad
        s^{\mathrm{sqrt}} = r\sqrt{1+t},\quad s^{\mathrm{cod}} = \sqrt{1+t}

    (derived in chapter 8 from the flows of the module notes; the framework is that of
    Karagodin, Ge, Polyanskiy and Rigollet, 2025). ``r`` (n,) the norms, ``A`` (n, d) the
    attention vectors, ``t`` the time (Mix-LN: 1 for ``t < switch``, else ``r``).

    Parameters
    ----------
    scheme : {"post", "pre", "peri", "mix", "ngpt", "sqrt", "cod"}
        The normalisation scheme.
    r : array (n,)
        Positive norms :math:`r_i`.
    A : array (n, d)
        Attention vectors :math:`A_i`.
    t : float
        Time (for ``mix``, ``sqrt`` and ``cod``).
    alpha : float
        nGPT's step :math:`\alpha > 0`.
    switch : float
        Mix-LN's switching time, :math:`\ge 0`.

    Returns
    -------
    array (n,)
        The speed factors :math:`s_i`.

    Examples
    --------
    >>> r, A = np.array([2.0, 3.0]), np.array([[3.0, 4.0], [0.0, 0.5]])
    >>> print(speed_factor("pre", r, A).tolist(), speed_factor("peri", r, A).tolist())
    [2.0, 3.0] [10.0, 1.5]

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    scheme = _scheme(scheme)
    alpha, switch = _options(alpha, switch)
    r = _checks.real_array(r, "r")
    A = _checks.points(A, "A")
    if r.shape != (A.shape[0],) or np.any(~np.isfinite(r)) or np.any(r <= 0):
        raise ValueError(f"r must hold {A.shape[0]} positive norms, got shape {r.shape}")
    t = _checks.finite_float(t, "t")
    normA = np.linalg.norm(A, axis=1)
    if scheme == "post" or (scheme == "mix" and t < switch):
        return np.ones_like(r)
    if scheme in ("pre", "mix"):
        return r.copy()
    if scheme == "peri":
        return r * normA
    if scheme == "ngpt":
        return normA / alpha
    if scheme == "cod":
        return np.full_like(r, np.sqrt(1.0 + t))
    return r * np.sqrt(1.0 + t)


def _project(U, G):
    return G - np.einsum("ij,ij->i", U, G)[:, None] * U


def flow_field(scheme: str, beta: float, *, alpha: float = 1.0,
               switch: float = 1.0) -> Callable[..., Any]:
    r"""The flow ``(t, X) -> dX/dt`` of a scheme (module notes), for the integrators.

    For ``post``, ``ngpt``, ``cod`` and ``mix`` before its switch the tokens must be unit vectors
    (the field is tangent, so norms are first integrals); the others act on
    :math:`\mathbb R^d \setminus \{0\}`. In every case
    :math:`\dot\theta_i = s_i^{-1}P_{\theta_i}A_i` with :func:`speed_factor`.

    Parameters
    ----------
    scheme : {"post", "pre", "peri", "mix", "ngpt", "sqrt", "cod"}
        The normalisation scheme.
    beta : float
        Inverse temperature :math:`\beta \ge 0`.
    alpha : float
        nGPT's step :math:`\alpha > 0`.
    switch : float
        Mix-LN's switching time, :math:`\ge 0`.

    Returns
    -------
    callable
        ``field(t, X)``, the velocities of the tokens ``X`` (n, d) at time ``t``.

    Examples
    --------
    The Post-LN field is tangent to the sphere:

    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> V = flow_field("post", 1.0)(0.0, X)
    >>> print(bool(np.allclose(np.einsum("ij,ij->i", X, V), 0.0, atol=1e-15)))
    True

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    scheme = _scheme(scheme)
    beta = _beta(beta)
    alpha, switch = _options(alpha, switch)

    def field(t, X):
        U, _ = _unit_rows(np.asarray(X, dtype=np.float64), "X")
        A = attention_vector(U, beta)
        if scheme == "post" or (scheme == "mix" and t < switch):
            return _project(U, A)
        if scheme in ("pre", "mix"):
            return A
        if scheme == "peri":
            return A / np.linalg.norm(A, axis=1, keepdims=True)
        if scheme == "ngpt":
            return alpha * _project(U, A / np.linalg.norm(A, axis=1, keepdims=True))
        if scheme == "cod":
            return _project(U, A) / np.sqrt(1.0 + t)
        return A / np.sqrt(1.0 + t)

    field.__name__ = f"{scheme}_flow"
    return field


def residual_network(X0: ArrayLike, scheme: str, beta: float, T: float, L: int, *,
                     alpha: float = 1.0, switch: float = 1.0) -> NDArray[np.float64]:
    r"""The residual network of a scheme: ``L`` layers of step :math:`h = T/L`.

    Layer :math:`\ell` (time :math:`t = \ell h`) is the map of the module notes' table,
    with :math:`A = A(\Theta)` computed on the directions of the layer's input (by
    :func:`transformer_pde.sphere.sa_field`, dense, for the small ``n`` of the
    experiments; :func:`attention_vector` computes the same without an
    :math:`n \times n` array). ``X0``
    (n, d): unit rows for ``post``, ``mix``, ``ngpt`` and ``cod`` (checked to :math:`10^{-12}`).
    Returns all ``L + 1`` layers, shape ``(L + 1, n, d)``. Each layer is an explicit Euler
    step of :func:`flow_field` followed, for the sphere schemes, by :math:`x \mapsto x/|x|`:
    a first-order scheme of the flow (chapter 7's lemma for ``post``).

    Parameters
    ----------
    X0 : array (n, d)
        Input tokens (unit rows for the sphere schemes).
    scheme : {"post", "pre", "peri", "mix", "ngpt", "sqrt", "cod"}
        The normalisation scheme.
    beta : float
        Inverse temperature :math:`\beta \ge 0`.
    T : float
        Depth in units of time, :math:`> 0`.
    L : int
        Number of layers.
    alpha : float
        nGPT's step :math:`\alpha > 0`.
    switch : float
        Mix-LN's switching time, :math:`\ge 0`.

    Returns
    -------
    array (L + 1, n, d)
        The tokens after ``0, ..., L`` layers.

    Examples
    --------
    >>> X0 = np.array([[1.0, 0.0], [0.6, 0.8]])
    >>> out = residual_network(X0, "post", 1.0, 2.0, 20)
    >>> print(out.shape, bool(pair_gap(out[-1]) < pair_gap(out[0])))
    (21, 2, 2) True

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    scheme = _scheme(scheme)
    beta = _beta(beta)
    alpha, switch = _options(alpha, switch)
    T = _checks.positive_float(T, "T")
    L = _checks.positive_int(L, "L")
    X = _checks.points(X0, "X0").copy()
    U, r = _unit_rows(X, "X0")
    if scheme in ("post", "mix", "ngpt", "cod") and np.max(np.abs(r - 1.0)) > 1e-12:
        raise ValueError(f"X0 must have unit rows for scheme {scheme!r}")
    h = T / L
    field = sphere.sa_field(beta, tangent=False)  # A(Theta), dense: fast for small n
    out = np.empty((L + 1, *X.shape))
    out[0] = X
    for ell in range(L):
        t = ell * h
        U, _ = _unit_rows(X, "X")
        A = field(t, U)
        if scheme == "post" or (scheme == "mix" and t < switch):
            Y = X + h * A
            X = Y / np.linalg.norm(Y, axis=1, keepdims=True)
        elif scheme in ("pre", "mix"):
            X = X + h * A
        elif scheme == "peri":
            X = X + h * A / np.linalg.norm(A, axis=1, keepdims=True)
        elif scheme == "ngpt":
            Y = X + h * alpha * (A / np.linalg.norm(A, axis=1, keepdims=True) - X)
            X = Y / np.linalg.norm(Y, axis=1, keepdims=True)
        elif scheme == "cod":
            Y = X + h / np.sqrt(1.0 + t) * A
            X = Y / np.linalg.norm(Y, axis=1, keepdims=True)
        else:
            X = X + h / np.sqrt(1.0 + t) * A
        out[ell + 1] = X
    return out


def pair_gap(X: ArrayLike) -> NDArray[np.float64]:
    r"""Mean over pairs :math:`i < j` of :math:`1 - \langle\theta_i, \theta_j\rangle`.

    Computed from the identity
    :math:`\sum_{i<j}|\theta_i - \theta_j|^2 = n\sum_i|\theta_i - \bar\theta|^2`, so
    the value is :math:`\frac{1}{n-1}\sum_i|\theta_i - \bar\theta|^2`: differences of
    nearly equal vectors, which keep their relative accuracy when the tokens nearly coincide,
    at a cost linear in ``n``. ``X`` (n, d) or (k, n, d) (one value per layer or time).

    Parameters
    ----------
    X : array (n, d) or (k, n, d)
        Tokens as rows (non-zero; only their directions matter), ``n >= 2``.

    Returns
    -------
    float or array (k,)
        The mean of :math:`1 - \langle\theta_i, \theta_j\rangle` over pairs.

    Examples
    --------
    >>> print(round(float(pair_gap([[1.0, 0.0], [0.0, 1.0]])), 12))
    1.0

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    arr = _checks.real_array(X, "X")
    if arr.ndim not in (2, 3) or arr.shape[-2] < 2 or not np.all(np.isfinite(arr)):
        raise ValueError(f"X must be a finite array (n, d) or (k, n, d) with n >= 2, got shape "
                         f"{arr.shape}")
    r = np.linalg.norm(arr, axis=-1, keepdims=True)
    if np.any(r == 0):
        raise ValueError("X has a zero row: a token needs a direction")
    U = arr / r
    n = U.shape[-2]
    dev = U - U.mean(axis=-2, keepdims=True)
    return np.einsum("...pd,...pd->...", dev, dev) / (n - 1)


# ---------------------------------------------------------------------------------------------
# Equiangular reduction
# ---------------------------------------------------------------------------------------------

def _equi_terms(u, n, beta):
    """Other-token weight b, self weight a, <theta, A> and |A| at 1 - rho = u."""
    with np.errstate(over="ignore"):
        b = 1.0 / (np.exp(beta * u) + (n - 1))
    a = 1.0 - (n - 1) * b
    rho = 1.0 - u
    g = a + (n - 1) * b * rho
    normA = np.sqrt(np.maximum(a * a + 2 * a * b * (n - 1) * rho
                               + b * b * (n - 1) * (1 + (n - 2) * rho), 0.0))
    return a, b, g, normA


def equiangular_rhs(scheme: str, t: float, u: float, r: float, n: int, beta: float, *,
                    alpha: float | Callable[[float], float] = 1.0,
                    switch: float = 1.0) -> tuple[float, float]:
    r"""Right-hand side :math:`(\dot u, \dot r)` of the equiangular reduction, :math:`u = 1 - \rho`.

    If :math:`\langle\theta_i, \theta_j\rangle = \rho` for all :math:`i \ne j` and all norms
    equal :math:`r`, the configuration stays so, with (derived in chapter 8)

    .. math::

        \dot u = -\frac{2b\,u\,(n - (n-1)u)}{s}, \qquad
        b = \frac{1}{e^{\beta u} + n - 1}, \qquad
        \dot r = \frac{r}{s}\langle\theta, A\rangle \text{ (schemes off the sphere)},

    :math:`\langle\theta, A\rangle = a + (n-1)b\rho`, :math:`a = 1 - (n-1)b`,
    :math:`|A|^2 = a^2 + 2ab(n-1)\rho + b^2(n-1)(1 + (n-2)\rho)`, and :math:`s` the speed
    factor (:func:`speed_factor`). Post-LN with :math:`u = 1 - \rho` is chapter 7's SA
    equation. ``alpha`` may be a function of :math:`t` (nGPT with a time-varying
    :math:`\alpha_t`).

    Parameters
    ----------
    scheme : {"post", "pre", "peri", "mix", "ngpt", "sqrt", "cod"}
        The normalisation scheme.
    t : float
        Time.
    u : float
        :math:`u = 1 - \rho \in [0, n/(n-1)]`.
    r : float
        Common norm :math:`r > 0`.
    n : int
        Number of tokens, at least 2.
    beta : float
        Inverse temperature :math:`\beta \ge 0`.
    alpha : float or callable
        nGPT's step, or a function of :math:`t`.
    switch : float
        Mix-LN's switching time.

    Returns
    -------
    (float, float)
        :math:`(\dot u, \dot r)`.

    Examples
    --------
    At :math:`\beta = 0` and :math:`n = 2`, :math:`b = 1/2` and :math:`\dot u = -u(2 - u)`:

    >>> du, dr = equiangular_rhs("post", 0.0, 0.5, 1.0, 2, 0.0)
    >>> print(round(du, 12), dr)
    -0.75 0.0

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    scheme = _scheme(scheme)
    beta = _beta(beta)
    if callable(alpha):
        alpha = alpha(float(t))
    alpha, switch = _options(alpha, switch)
    n = _checks.positive_int(n, "n")
    if n < 2:
        raise ValueError(f"n must be at least 2, got {n}")
    u = _checks.finite_float(u, "u")
    r = _checks.finite_float(r, "r")
    if not (0.0 <= u <= n / (n - 1)) or not np.isfinite(u):
        raise ValueError(f"u = 1 - rho must lie in [0, n/(n-1)], got {u!r}")
    if not (r > 0 and np.isfinite(r)):
        raise ValueError(f"r must be a positive norm, got {r!r}")
    _, b, g, normA = _equi_terms(u, n, beta)
    on_sphere = scheme in ("post", "ngpt", "cod") or (scheme == "mix" and t < switch)
    if scheme == "post" or (scheme == "mix" and t < switch):
        s = 1.0
    elif scheme == "cod":
        s = np.sqrt(1.0 + t)
    elif scheme in ("pre", "mix"):
        s = r
    elif scheme == "peri":
        s = r * normA
    elif scheme == "ngpt":
        s = normA / alpha
    else:
        s = r * np.sqrt(1.0 + t)
    du = -2.0 * b * u * (n - (n - 1) * u) / s
    dr = 0.0 if on_sphere else r * g / s
    return du, dr


def equiangular_flow(scheme: str, u0: float, n: int, beta: float, times: ArrayLike, *,
                     r0: float = 1.0, alpha: float | Callable[[float], float] = 1.0,
                     switch: float = 1.0, rtol: float = 1e-11,
                     atol: float = 1e-12) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Solve :func:`equiangular_rhs` from :math:`(u_0, r_0)` at ``times[0]``.

    Integrates :math:`(\log u, r)` with SciPy's ``DOP853`` (relative accuracy of :math:`u`
    down to any size, so that decays to :math:`10^{-30}` are resolved); Mix-LN is integrated
    in two pieces, before and after ``switch``. ``alpha`` may be a function of :math:`t`
    (:func:`equiangular_rhs`). Returns ``(u, r)`` at ``times``.

    Parameters
    ----------
    scheme : {"post", "pre", "peri", "mix", "ngpt", "sqrt", "cod"}
        The normalisation scheme.
    u0 : float
        Initial :math:`u = 1 - \rho`, :math:`> 0`.
    n : int
        Number of tokens, at least 2.
    beta : float
        Inverse temperature :math:`\beta \ge 0`.
    times : array (k,)
        Strictly increasing times, ``k >= 2``.
    r0 : float
        Initial norm, :math:`> 0`.
    alpha : float or callable
        nGPT's step, or a function of :math:`t`.
    switch : float
        Mix-LN's switching time.
    rtol, atol : float
        Tolerances of ``DOP853`` on :math:`(\log u, r)`.

    Returns
    -------
    (array (k,), array (k,))
        :math:`u` and :math:`r` at ``times``.

    Examples
    --------
    For Post-LN at :math:`\beta = 0`, :math:`n = 2`, :math:`\dot u = -u(2 - u)` gives
    :math:`1/u = \frac12 + (1/u_0 - \frac12)e^{2t}`:

    >>> u, r = equiangular_flow("post", 0.5, 2, 0.0, np.linspace(0.0, 1.0, 3))
    >>> print(bool(np.isclose(u[-1], 1 / (0.5 + 1.5 * np.exp(2.0)), rtol=1e-8)))
    True

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    from scipy.integrate import solve_ivp

    t = _checks.increasing_times(times)
    u0, r0 = _checks.finite_float(u0, "u0"), _checks.positive_float(r0, "r0")
    rtol, atol = _checks.positive_float(rtol, "rtol"), _checks.nonnegative_float(atol, "atol")
    equiangular_rhs(scheme, t[0], u0, r0, n, beta, alpha=alpha, switch=switch)
    if not u0 > 0:
        raise ValueError(f"u0 must be > 0 (u = 0 is the cluster, a fixed point), got {u0!r}")

    def rhs(tt, y):
        u = min(float(np.exp(y[0])), n / (n - 1))
        du, dr = equiangular_rhs(scheme, tt, u, y[1], n, beta, alpha=alpha, switch=switch)
        return [du / u, dr]

    pieces = [(t[0], t[-1])]
    if scheme == "mix" and t[0] < switch < t[-1]:
        pieces = [(t[0], switch), (switch, t[-1])]
    y = [np.log(u0), float(r0)]
    u_out, r_out = np.empty(t.size), np.empty(t.size)
    for lo, hi in pieces:
        sel = (t >= lo) & (t <= hi)
        ev = t[sel]
        if ev.size == 0 or ev[0] > lo:
            ev = np.concatenate([[lo], ev])
        if ev[-1] < hi:
            ev = np.concatenate([ev, [hi]])
        sol = solve_ivp(rhs, (lo, hi), y, method="DOP853", t_eval=ev, rtol=rtol, atol=atol)
        if not sol.success:
            raise RuntimeError(f"equiangular flow of {scheme!r} failed: {sol.message}")
        keep = np.isin(ev, t[sel])
        idx = np.flatnonzero(sel)
        u_out[idx] = np.exp(sol.y[0][keep])
        r_out[idx] = sol.y[1][keep]
        y = sol.y[:, -1]
    return u_out, r_out


def equiangular_network(scheme: str, u0: float, n: int, beta: float, T: float, L: int, *,
                        alpha: float = 1.0,
                        switch: float = 1.0) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""The residual network (:func:`residual_network`) on an equiangular start, reduced.

    Every layer keeps an equiangular configuration equiangular with equal norms: with
    :math:`x_i = r\theta_i`, :math:`S = \sum_j\theta_j` and the layer's update
    :math:`x_i \mapsto p\,\theta_i + q\,(S - \theta_i)` (:math:`p, q` from the weights
    :math:`a, b` and the scheme), :math:`\langle S - \theta_i, \theta_i\rangle = (n-1)\rho`
    and :math:`|S - \theta_i|^2 = (n-1)(1 + (n-2)\rho)` give the new :math:`\rho` and
    :math:`r` in closed form (derived in chapter 8). Returns ``(u, r)`` after
    ``0, ..., L`` layers; :math:`u = 1 - \rho` is updated as
    :math:`u' = (|y_i|^2 - \langle y_i, y_j\rangle)/|y_i|^2` with
    :math:`|y_i|^2 - \langle y_i, y_j\rangle = (p - q)^2 u`, exactly, so that it keeps its
    relative accuracy.

    Parameters
    ----------
    scheme : {"post", "pre", "peri", "mix", "ngpt", "sqrt", "cod"}
        The normalisation scheme.
    u0 : float
        Initial :math:`u = 1 - \rho`.
    n : int
        Number of tokens, at least 2.
    beta : float
        Inverse temperature :math:`\beta \ge 0`.
    T : float
        Depth in units of time, :math:`> 0`.
    L : int
        Number of layers.
    alpha : float
        nGPT's step :math:`\alpha > 0`.
    switch : float
        Mix-LN's switching time.

    Returns
    -------
    (array (L + 1,), array (L + 1,))
        :math:`u` and :math:`r` after ``0, ..., L`` layers (:math:`r_0 = 1`).

    Examples
    --------
    Pre-LN contracts the angles and lets the norms grow:

    >>> u, r = equiangular_network("pre", 0.5, 4, 1.0, 2.0, 20)
    >>> print(u.size, bool(u[-1] < u[0]), bool(r[-1] > 1.0))
    21 True True

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    scheme = _scheme(scheme)
    beta = _beta(beta)
    alpha, switch = _options(alpha, switch)
    T = _checks.positive_float(T, "T")
    L = _checks.positive_int(L, "L")
    u0 = _checks.finite_float(u0, "u0")
    equiangular_rhs(scheme, 0.0, u0, 1.0, n, beta, alpha=alpha, switch=switch)
    h = T / L
    u_out, r_out = np.empty(L + 1), np.empty(L + 1)
    u, r = float(u0), 1.0
    u_out[0], r_out[0] = u, r
    for ell in range(L):
        t = ell * h
        a, b, _, normA = _equi_terms(u, n, beta)
        sphere = scheme in ("post", "ngpt", "cod") or (scheme == "mix" and t < switch)
        if scheme == "post" or (scheme == "mix" and t < switch):
            c, keep = h, 1.0
        elif scheme == "cod":
            c, keep = h / np.sqrt(1.0 + t), 1.0
        elif scheme in ("pre", "mix"):
            c, keep = h, r
        elif scheme == "peri":
            c, keep = h / normA, r
        elif scheme == "ngpt":
            c, keep = h * alpha / normA, 1.0 - h * alpha
        else:
            c, keep = h / np.sqrt(1.0 + t), r
        # y_i = keep theta_i + c A_i = p theta_i + q (S - theta_i)
        p, q = keep + c * a, c * b
        rho = 1.0 - u
        norm2 = p * p + 2 * p * q * (n - 1) * rho + q * q * (n - 1) * (1 + (n - 2) * rho)
        gap = (p - q) ** 2 * u  # |y_i|^2 - <y_i, y_j>
        u = gap / norm2
        r = 1.0 if sphere else float(np.sqrt(norm2))
        u_out[ell + 1], r_out[ell + 1] = u, r
    return u_out, r_out


def asymptotic_law(scheme: str, *, alpha: float = 1.0) -> tuple[str, float]:
    r"""How :math:`u = 1 - \rho` vanishes along the equiangular flow, as :math:`t \to \infty`.

    Returns ``("exp", lam)`` for :math:`u \sim Ce^{-\lambda t}`, ``("power", p)`` for
    :math:`u \sim Ct^{-p}` or ``("stretched", c)`` for :math:`u \sim Ce^{-c\sqrt{1+t}}`
    (derived in chapter 8): Post-LN :math:`e^{-2t}`, nGPT :math:`e^{-2\alpha t}`, Pre-LN,
    Peri-LN and Mix-LN :math:`t^{-2}`, ``sqrt`` :math:`t^{-1}`, ``cod``
    :math:`e^{-4\sqrt{1+t}}`. The survey of Rigollet (2025) states Post-LN's and Pre-LN's.

    Parameters
    ----------
    scheme : {"post", "pre", "peri", "mix", "ngpt", "sqrt", "cod"}
        The normalisation scheme.
    alpha : float
        nGPT's step :math:`\alpha > 0`.

    Returns
    -------
    (str, float)
        The law (``"exp"``, ``"power"`` or ``"stretched"``) and its rate or exponent.

    Examples
    --------
    >>> asymptotic_law("post"), asymptotic_law("ngpt", alpha=0.5), asymptotic_law("pre")
    (('exp', 2.0), ('exp', 1.0), ('power', 2.0))

    References
    ----------
    :cite:`karagodin2025normalization,rigollet2025meanfield`
    """
    scheme = _scheme(scheme)
    alpha = _checks.positive_float(alpha, "alpha")
    if scheme == "post":
        return ("exp", 2.0)
    if scheme == "ngpt":
        return ("exp", 2.0 * alpha)
    if scheme == "sqrt":
        return ("power", 1.0)
    if scheme == "cod":
        return ("stretched", 4.0)
    return ("power", 2.0)


class RandomRun(NamedTuple):
    """``(gap, radius, step)`` of :func:`random_run`, one value per layer.

    Attributes
    ----------
    gap : array (L + 1,)
        :func:`pair_gap` after each layer.
    radius : array (L + 1,)
        Mean norm of the tokens after each layer.
    step : array (L,)
        Mean angle moved by the directions in each layer.
    """

    gap: np.ndarray
    radius: np.ndarray
    step: np.ndarray


def random_run(key: Sequence[int], scheme: str, n: int, d: int, beta: float, T: float, L: int, *,
               alpha: float = 1.0, switch: float = 1.0) -> RandomRun:
    r"""One network of a scheme on ``n`` uniform random unit tokens of :math:`\mathbb R^d`.

    The tokens are drawn by ``numpy.random.default_rng(key)``, so that a sweep through
    :func:`transformer_pde.draws.map_keys` gives the same results whatever its jobs and
    backend. Returns a :class:`RandomRun`: ``gap`` the :func:`pair_gap` after each layer
    (``L + 1`` values), ``radius`` the mean norm :math:`\frac1n\sum_i r_i`, and ``step`` the
    mean angle :math:`\frac1n\sum_i \angle(\theta_i^{\ell}, \theta_i^{\ell+1})` moved by the
    directions in each layer (``L`` values).

    Parameters
    ----------
    key : sequence of int
        Seed of the generator (non-negative integers).
    scheme : {"post", "pre", "peri", "mix", "ngpt", "sqrt", "cod"}
        The normalisation scheme.
    n, d : int
        Number of tokens and dimension.
    beta : float
        Inverse temperature :math:`\beta \ge 0`.
    T : float
        Depth in units of time.
    L : int
        Number of layers.
    alpha : float
        nGPT's step :math:`\alpha > 0`.
    switch : float
        Mix-LN's switching time.

    Returns
    -------
    RandomRun
        ``gap`` (L + 1,), ``radius`` (L + 1,) and ``step`` (L,).

    Examples
    --------
    >>> run = random_run([0, 1], "post", 8, 4, 1.0, 2.0, 10)
    >>> print(run.gap.shape, run.step.shape, bool(run.gap[-1] < run.gap[0]))
    (11,) (10,) True

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    key = _checks.seed_key(key, "key")
    rng = np.random.default_rng(key)
    X0 = sphere.uniform_on_sphere(n, d, rng)
    net = residual_network(X0, scheme, beta, T, L, alpha=alpha, switch=switch)
    U = net / np.linalg.norm(net, axis=-1, keepdims=True)
    chord = np.linalg.norm(U[1:] - U[:-1], axis=-1)
    angle = 2.0 * np.arcsin(np.minimum(chord / 2.0, 1.0))
    return RandomRun(pair_gap(net), np.linalg.norm(net, axis=-1).mean(axis=1),
                     angle.mean(axis=1))


def network_rate(scheme: str, h: float, t: ArrayLike, *, alpha: float = 1.0) -> NDArray[np.float64]:
    r"""The network's clock for the exponential schemes: :math:`-\log u` gained per layer.

    Near the cluster a layer of ``post`` divides the deviations from the mean direction by
    :math:`1 + h`, ``ngpt`` multiplies them by :math:`1 - h\alpha`, ``cod`` divides them by
    :math:`1 + h/\sqrt{1+t}`; the gap :math:`u` is their square, so per layer
    :math:`-\Delta\log u = 2\log(1 + h)`, :math:`-2\log(1 - h\alpha)`,
    :math:`2\log(1 + h/\sqrt{1+t})`, up to :math:`O(u)` (derived in chapter 8). Returns the
    cumulative sum ``c`` with ``c[0] = 0`` over the layer times ``t`` (``t[l] = l h``), so
    that :math:`\log u \approx \mathrm{const} - c`.

    Parameters
    ----------
    scheme : {"post", "ngpt", "cod"}
        An exponential scheme.
    h : float
        Step of a layer, :math:`> 0`.
    t : array (L + 1,)
        Layer times, finite and :math:`\ge 0`.
    alpha : float
        nGPT's step, with :math:`h\alpha < 1`.

    Returns
    -------
    array (L + 1,)
        The cumulative clock ``c``, ``c[0] = 0``.

    Examples
    --------
    >>> c = network_rate("post", 0.1, 0.1 * np.arange(11))
    >>> round(float(c[-1]), 6) == round(20 * float(np.log1p(0.1)), 6)
    True

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    scheme = _scheme(scheme)
    if scheme not in ("post", "ngpt", "cod"):
        raise ValueError(f"scheme must be 'post', 'ngpt' or 'cod' for an exponential clock, "
                         f"got {scheme!r}")
    h = _checks.positive_float(h, "h")
    alpha = _checks.positive_float(alpha, "alpha")
    t = _checks.real_array(t, "t")
    if t.ndim != 1 or t.size < 2 or not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ValueError("t must be a 1-D array of at least 2 finite times >= 0")
    if scheme == "ngpt" and not h * alpha < 1:
        raise ValueError(f"h * alpha must be < 1 for nGPT, got {h * alpha!r}")
    if scheme == "post":
        per = np.full(t.size - 1, 2.0 * np.log1p(h))
    elif scheme == "ngpt":
        per = np.full(t.size - 1, -2.0 * np.log1p(-h * alpha))
    else:
        per = 2.0 * np.log1p(h / np.sqrt(1.0 + t[:-1]))
    return np.concatenate([[0.0], np.cumsum(per)])


class LawFit(NamedTuple):
    r"""What :func:`fit_laws` measures on one run (``nan`` where it does not apply).

    Attributes
    ----------
    rate : float
        Slope of :math:`-\log\bar u` against the network's clock (exponential schemes).
    exponent_r : float
        Exponent of :math:`\bar u` against the mean norm :math:`\bar r`.
    growth : float
        Slope of :math:`\bar r` against :math:`t` (``sqrt``: against :math:`\sqrt{1+t}`).
    exponent_t, exponent_rt : float
        Exponents of :math:`\bar u` and of :math:`\bar r` against :math:`t`.
    """

    rate: float
    exponent_r: float
    growth: float
    exponent_t: float
    exponent_rt: float


def fit_laws(run: RandomRun, scheme: str, h: float, *, alpha: float = 1.0,
             high: float = 1e-6, low: float = 1e-12) -> LawFit:
    r"""Fit the collapse law of a scheme to one :func:`random_run`.

    For ``post``, ``ngpt`` and ``cod``: ``rate`` is the least-squares slope of
    :math:`-\log\bar u` against the network's clock (:func:`network_rate`, so the
    prediction is 1) over the samples with ``low`` :math:`< \bar u <` ``high``
    (:func:`transformer_pde.rates.decay_rate`). For the other schemes, over the second half
    of the layers: ``exponent_r`` the exponent of :math:`\bar u` against the mean norm
    :math:`\bar r` (predicted :math:`-2`: :math:`u r^2 \to C`), ``growth`` the slope of
    :math:`\bar r` against :math:`t` (``sqrt``: against :math:`\sqrt{1+t}`; predicted 1 and
    2), ``exponent_t`` the exponent of :math:`\bar u` against :math:`t` and ``exponent_rt``
    that of :math:`\bar r` against :math:`t` (chapter 8).

    Parameters
    ----------
    run : RandomRun
        The output of :func:`random_run`.
    scheme : {"post", "pre", "peri", "mix", "ngpt", "sqrt", "cod"}
        The scheme of the run.
    h : float
        Step of a layer (``T / L`` of the run).
    alpha : float
        nGPT's step.
    high, low : float
        The window of :math:`\bar u` of the exponential fit.

    Returns
    -------
    LawFit
        ``rate``, ``exponent_r``, ``growth``, ``exponent_t`` and ``exponent_rt`` (``nan``
        where they do not apply).

    Examples
    --------
    Post-LN's gap decays at the network's clock:

    >>> run = random_run([0, 1], "post", 8, 4, 1.0, 15.0, 150)
    >>> print(bool(abs(fit_laws(run, "post", 0.1).rate - 1.0) < 1e-3))
    True

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    from . import fitting, rates

    scheme = _scheme(scheme)
    h = _checks.positive_float(h, "h")
    if not isinstance(run, RandomRun):
        raise ValueError("run must be a RandomRun from random_run")
    L = run.gap.size - 1
    t = h * np.arange(L + 1)
    nan = float("nan")
    if scheme in ("post", "ngpt", "cod"):
        clock = network_rate(scheme, h, t, alpha=alpha)
        return LawFit(rates.decay_rate(clock, run.gap, high=high, low=low), nan, nan, nan, nan)
    late = t >= t[-1] / 2
    clock = np.sqrt(1.0 + t[late]) if scheme == "sqrt" else t[late]
    return LawFit(
        nan,
        fitting.fit_power_law(run.radius[late], run.gap[late]).exponent,
        float(np.polyfit(clock, run.radius[late], 1)[0]),
        fitting.fit_power_law(t[late], run.gap[late]).exponent,
        fitting.fit_power_law(t[late], run.radius[late]).exponent,
    )


# ---------------------------------------------------------------------------------------------
# Random tokens at initialisation, and random weights


def _sizes(n, d):
    n = _checks.positive_int(n, "n")
    d = _checks.positive_int(d, "d")
    if n < 2 or d < 2:
        raise ValueError(f"n and d must be at least 2, got n = {n}, d = {d}")
    return n, d


def initial_velocity(key: Sequence[int], n: int, d: int, beta: float = 1.0) -> NDArray[np.float64]:
    r"""Norms :math:`|A_j(\Theta)|` of the attention vectors of ``n`` uniform random tokens.

    .. math::

        A_j(\Theta) = \sum_k \frac{e^{\beta\langle\theta_j, \theta_k\rangle}}
        {\sum_l e^{\beta\langle\theta_j, \theta_l\rangle}}\,\theta_k

    with :math:`\theta_1, \dots, \theta_n` i.i.d. uniform on :math:`\mathbb S^{d-1}`, drawn by
    ``numpy.random.default_rng(key)``: the quantity Karagodin, Ge, Polyanskiy and Rigollet
    (2025, Theorem 4.2) bound by :math:`C(\sqrt{\log n/n} + \log n/d)` (Peri-LN's initial
    speed is :math:`1/|A_j|` times Pre-LN's).

    Parameters
    ----------
    key : sequence of int
        Seed of the generator.
    n, d : int
        Number of tokens (at least 2) and dimension (at least 2).
    beta : float
        Inverse temperature, :math:`\ge 0`.

    Returns
    -------
    ndarray, shape (n,)

    Raises
    ------
    ValueError
        On bad ``key``, ``n``, ``d`` or ``beta``.

    Examples
    --------
    >>> a = initial_velocity([0], 400, 400)
    >>> bool(0.03 < a.mean() < 0.1)
    True

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    key = _checks.seed_key(key, "key")
    n, d = _sizes(n, d)
    beta = _beta(beta)
    Theta = sphere.uniform_on_sphere(n, d, np.random.default_rng(key))
    return np.linalg.norm(attention_vector(Theta, beta), axis=1)


def velocity_prediction(n: int, d: int, beta: float = 1.0) -> float:
    r"""Law-of-large-numbers value of :math:`|A_j|^2` for uniform random tokens (chapter 8).

    .. math::

        |A_j|^2 \approx \frac{(e^\beta + (n-1)m_1)^2 + (n-1)m_2}{(e^\beta + (n-1)m_0)^2},\quad
        m_0 = \mathbb E e^{\beta t},\ m_1 = \mathbb E\,t e^{\beta t},\
        m_2 = \mathbb E\,e^{2\beta t}(1 - t^2)

    with :math:`t = \langle\theta_j, \theta_k\rangle`, of density proportional to
    :math:`(1-t^2)^{(d-3)/2}` on :math:`[-1, 1]` (derived in chapter 8: the sums over the
    :math:`n - 1` other tokens replaced by their means; the cross terms of the
    perpendicular part have mean zero). For large :math:`d`, :math:`m_1/m_0 \approx \beta/d` and
    :math:`m_2/m_0^2 \approx 1`, so :math:`|A_j|^2 \approx 1/n + (\beta/d + e^\beta/n)^2`.

    Parameters
    ----------
    n, d : int
        Number of tokens (at least 2) and dimension (at least 2).
    beta : float
        Inverse temperature, :math:`\ge 0`.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        On bad ``n``, ``d`` or ``beta``.

    Examples
    --------
    >>> round(velocity_prediction(10**6, 10**6, 0.0) * 10**6, 3)  # 1/n + (1/n)^2 ...
    1.0

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    from scipy import special

    n, d = _sizes(n, d)
    beta = _beta(beta)
    a = (d - 3) / 2.0
    if d <= 200:  # Gauss-Jacobi: the weight (1 - t^2)^a exactly
        t, w = special.roots_jacobi(200, a, a)
    else:  # t is within 15 / sqrt(d) of 0 up to a mass below e^-100: Gauss-Legendre there
        half = min(1.0, 15.0 / np.sqrt(d))
        t, w = np.polynomial.legendre.leggauss(400)
        t, w = half * t, half * w * np.exp(a * np.log1p(-(half * t) ** 2))
    w = w / w.sum()
    e = np.exp(beta * (t - 1.0))  # scaled by e^-beta against overflow
    m0, m1, m2 = (w * e).sum(), (w * t * e).sum(), (w * e * e * (1 - t * t)).sum()
    num = (1.0 + (n - 1) * m1) ** 2 + (n - 1) * m2
    return float(num / (1.0 + (n - 1) * m0) ** 2)


def random_weights_run(key: Sequence[int], scheme: str, n: int, d: int, beta: float, T: float,
                       L: int) -> RandomRun:
    r"""A Post-LN or Pre-LN network with random query and key matrices and :math:`V = I`.

    .. math::

        A_i = \sum_j \mathrm{softmax}_j\bigl(\beta\langle Q\theta_i, K\theta_j\rangle\bigr)
        \theta_j

    with :math:`Q, K` of i.i.d. :math:`N(0, 1/d)` entries (Kaiming's scale), fixed across the
    ``L`` layers of step :math:`h = T/L`, and ``n`` uniform random unit tokens, all drawn by
    ``numpy.random.default_rng(key)``; the layers are those of :func:`residual_network`. The
    setting of the random-weight experiment that Karagodin, Ge, Polyanskiy and Rigollet (2025)
    report with :math:`d = 512`, :math:`\beta = \sqrt d` (our transcription: their value
    matrix and scales are not checked; we keep :math:`V = I`, which their Theorem 4.3 assumes).

    Parameters
    ----------
    key : sequence of int
        Seed.
    scheme : {"post", "pre"}
        The normalisation.
    n, d : int
        Tokens and dimension (at least 2 each).
    beta : float
        Inverse temperature, :math:`\ge 0`.
    T : float
        Depth in units of time.
    L : int
        Number of layers.

    Returns
    -------
    RandomRun
        ``gap``, ``radius`` and ``step`` per layer, as :func:`random_run`.

    Raises
    ------
    ValueError
        On bad input or a scheme other than ``post`` and ``pre``.

    Examples
    --------
    >>> run = random_weights_run([0], "post", 8, 16, 4.0, 2.0, 20)
    >>> bool(run.gap[-1] < run.gap[0])
    True

    References
    ----------
    :cite:`karagodin2025normalization`
    """
    key = _checks.seed_key(key, "key")
    if scheme not in ("post", "pre"):
        raise ValueError(f"scheme must be 'post' or 'pre', got {scheme!r}")
    n, d = _sizes(n, d)
    beta = _beta(beta)
    T = _checks.positive_float(T, "T")
    L = _checks.positive_int(L, "L")
    rng = np.random.default_rng(key)
    Q = rng.normal(0.0, 1.0 / np.sqrt(d), (d, d))
    K = rng.normal(0.0, 1.0 / np.sqrt(d), (d, d))
    M = beta * Q.T @ K  # logits theta_i^T M theta_j
    X = sphere.uniform_on_sphere(n, d, rng)
    h = T / L
    out = np.empty((L + 1, n, d))
    out[0] = X
    for ell in range(L):
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        S = (U @ M) @ U.T
        W = np.exp(S - S.max(axis=1, keepdims=True))
        A = (W / W.sum(axis=1, keepdims=True)) @ U
        X = X + h * A
        if scheme == "post":
            X = X / np.linalg.norm(X, axis=1, keepdims=True)
        out[ell + 1] = X
    U = out / np.linalg.norm(out, axis=-1, keepdims=True)
    chord = np.linalg.norm(U[1:] - U[:-1], axis=-1)
    angle = 2.0 * np.arcsin(np.minimum(chord / 2.0, 1.0))
    return RandomRun(pair_gap(out), np.linalg.norm(out, axis=-1).mean(axis=1), angle.mean(axis=1))
