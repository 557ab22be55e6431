r"""Two clusters on the circle under the noisy USA dynamics: formation, persistence, merging
(chapter 10).

The particles follow the noisy USA dynamics of chapter 10 on the circle,

.. math::

    d\theta_i = \frac1n\sum_j f(\theta_j - \theta_i)\,dt + \sqrt{2/\kappa}\,dB_i,
    \qquad f(s) = e^{\beta\cos s}\sin s .

Since :math:`f` is odd, the forces inside a group cancel in the group's mean angle, so the
centre :math:`c_A = \frac1{m_A}\sum_{i\in A}\theta_i` (angles unwrapped) moves only by the
pull of the other group and by noise of variance rate exactly :math:`2/(\kappa m_A)`. For two
point-like groups the angle :math:`\Delta = c_B - c_A` is then the one-dimensional diffusion

.. math::

    d\Delta = -M f_v(\Delta)\,dt + \sigma\,dW, \qquad M = \frac{m_A + m_B}{n},\quad
    \sigma^2 = \frac2\kappa\Big(\frac1{m_A} + \frac1{m_B}\Big),

with :math:`f_v(\Delta) = \mathbb E f(\Delta + S)`, :math:`S \sim N(0, v)` the spread of the
pair differences (:math:`v = 0` for point clusters). The groups *merge* when :math:`\Delta`
leaves :math:`(a, 2\pi - a)`.

- :func:`pair_force`: :math:`f_v` through its Fourier series;
- :func:`deterministic_merge_time`: the noiseless time from :math:`\Delta_0` to :math:`a`;
- :func:`mean_merge_time`: the mean exit time of the diffusion (Pontryagin's formula);
- :func:`merge_survival`: :math:`P(\tau > t)` from the backward equation;
- :func:`simulate_two_groups`: the particle system from two arcs, many systems at once.

The derivation is chapter 10's (:cite:`rigollet2025meanfield` for the model).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.integrate import quad
from scipy.sparse import diags
from scipy.sparse.linalg import expm_multiply, spsolve
from scipy.special import ive

from . import _checks
from .sphere_sde import circle_usa_drift

__all__ = [
    "pair_force",
    "deterministic_merge_time",
    "mean_merge_time",
    "merge_survival",
    "simulate_two_groups",
]


def _beta(beta):
    return _checks.positive_float(beta, "beta")


def _modes(beta):
    """Number of Fourier modes: I_K(beta) <= 1e-17 I_1(beta)."""
    k = 1
    ref = ive(1, beta)
    while ive(k + 1, beta) > 1e-17 * ref and k < 400:
        k += 1
    return k + 1


def _potential(x, beta, var):
    """g_v with g_v' = f_v, scaled by e^{-beta}: -(2/beta) sum I_k e^{-k^2 v/2} cos kx."""
    k = np.arange(1, _modes(beta) + 1)
    c = ive(k, beta) * np.exp(-0.5 * k**2 * var)
    return -(2.0 / beta) * np.cos(np.multiply.outer(x, k)) @ c


def _force(x, beta, var):
    k = np.arange(1, _modes(beta) + 1)
    c = k * ive(k, beta) * np.exp(-0.5 * k**2 * var)
    return (2.0 / beta) * np.sin(np.multiply.outer(x, k)) @ c * math.exp(beta)


def pair_force(delta: ArrayLike, beta: float, var: float = 0.0) -> NDArray[np.float64]:
    r"""The pull between two points of the circle at angle :math:`\Delta`, averaged over a
    Gaussian spread.

    .. math::

        f_v(\Delta) = \mathbb E\big[e^{\beta\cos(\Delta + S)}\sin(\Delta + S)\big]
        = \frac2\beta\sum_{k\ge1}kI_k(\beta)e^{-k^2v/2}\sin k\Delta,
        \qquad S \sim N(0, v),

    from :math:`e^{\beta\cos s}\sin s = \frac2\beta\sum_k kI_k(\beta)\sin ks` and
    :math:`\mathbb E\sin k(\Delta + S) = e^{-k^2v/2}\sin k\Delta` (chapter 10); truncated
    where :math:`I_K(\beta) \le 10^{-17}I_1(\beta)`.

    Parameters
    ----------
    delta : array_like
        Angles.
    beta : float
        Inverse temperature > 0.
    var : float
        Variance :math:`v \ge 0` of the spread (0: point clusters).

    Returns
    -------
    array
        :math:`f_v(\Delta)`, of the shape of ``delta``.

    Raises
    ------
    ValueError
        If ``delta`` is not finite, ``beta`` not positive or ``var`` negative.

    Examples
    --------
    >>> import numpy as np
    >>> bool(abs(pair_force(1.0, 2.0) - np.exp(2 * np.cos(1.0)) * np.sin(1.0)) < 1e-12)
    True

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    delta = _checks.real_array(delta, "delta")
    if not np.all(np.isfinite(delta)):
        raise ValueError("delta must be finite")
    beta = _beta(beta)
    var = _checks.nonnegative_float(var, "var")
    return _force(delta, beta, var)


def _sizes(m_a, m_b, n):
    m_a = _checks.positive_int(m_a, "m_a")
    m_b = _checks.positive_int(m_b, "m_b")
    n = _checks.positive_int(n, "n")
    if m_a + m_b > n:
        raise ValueError(f"n must be at least m_a + m_b = {m_a + m_b}, got {n}")
    return m_a, m_b, n


def _level(a):
    a = _checks.positive_float(a, "a")
    if a >= math.pi:
        raise ValueError(f"a must lie in (0, pi), got {a!r}")
    return a


def _start(delta0, a):
    x = _checks.finite_float(delta0, "delta0")
    if not a < x < 2 * math.pi - a:
        raise ValueError(f"delta0 must lie in (a, 2 pi - a) = ({a:g}, {2 * math.pi - a:g}), "
                         f"got {delta0!r}")
    return min(x, 2 * math.pi - x)  # the problem is symmetric about pi


def deterministic_merge_time(delta0: float, beta: float, a: float, mass: float = 1.0,
                             var: float = 0.0) -> float:
    r"""Time for two noiseless clusters to go from angle :math:`\Delta_0` to :math:`a`.

    .. math::

        T_{\rm det} = \int_a^{\Delta_0}\frac{d\Delta}{M f_v(\Delta)},
        \qquad 0 < a < \Delta_0 < \pi,

    the separation of variables in :math:`\dot\Delta = -Mf_v(\Delta)` (chapter 10; the USA
    analogue of chapter 9's merging time). For :math:`v = 0`, as :math:`\beta \to \infty`
    it grows like :math:`e^{-\beta\cos\Delta_0}/(M\beta\sin^2\Delta_0)` if
    :math:`\cos\Delta_0 < 0` (Laplace's method).

    Parameters
    ----------
    delta0 : float
        Initial angle in :math:`(a, \pi)`.
    beta : float
        Inverse temperature > 0.
    a : float
        Merging level in :math:`(0, \pi)`.
    mass : float
        :math:`M = (m_A + m_B)/n > 0`.
    var : float
        Spread variance :math:`v \ge 0` (see :func:`pair_force`).

    Returns
    -------
    float
        :math:`T_{\rm det}`.

    Raises
    ------
    ValueError
        On bad input or :math:`\Delta_0 \notin (a, \pi)`.

    Examples
    --------
    >>> import numpy as np
    >>> t = deterministic_merge_time(np.pi / 2, 1e-3, np.pi / 4)  # f ~ sin: log tan
    >>> bool(abs(t - np.log(np.tan(np.pi / 4) / np.tan(np.pi / 8))) < 1e-2)
    True

    References
    ----------
    :cite:`rigollet2025meanfield,geshkovski2024dynamic`
    """
    beta = _beta(beta)
    a = _level(a)
    x0 = _checks.finite_float(delta0, "delta0")
    if not a < x0 < math.pi:
        raise ValueError(f"delta0 must lie in (a, pi), got {delta0!r}")
    mass = _checks.positive_float(mass, "mass")
    var = _checks.nonnegative_float(var, "var")
    val, _ = quad(lambda x: 1.0 / float(_force(x, beta, var)), a, x0, limit=400,
                  epsrel=1e-10)
    return val / mass


def _diffusion(beta, kappa, m_a, m_b, n, var):
    beta = _beta(beta)
    kappa = _checks.positive_float(kappa, "kappa")
    m_a, m_b, n = _sizes(m_a, m_b, n)
    var = _checks.nonnegative_float(var, "var")
    M = (m_a + m_b) / n
    sig2 = 2.0 / kappa * (1.0 / m_a + 1.0 / m_b)
    # U = M g_v; 2 U / sigma^2 in units where g_v is scaled by e^{-beta}
    scale = 2.0 * M * math.exp(beta) / sig2
    return beta, var, sig2, scale


def _generator(beta, var, sig2, scale, a, N):
    """The backward generator on the nodes x_1..x_N of [a, pi] (x_0 = a absorbing, x_N = pi
    reflecting), in the conservative form (sigma^2/2) w^{-1} (w u')', w = e^{-2U/sigma^2}."""
    hx = (math.pi - a) / N
    x = a + hx * np.arange(N + 1)
    phi = -scale * _potential(x[1:], beta, var)  # log w at the unknowns
    phim = -scale * _potential(x[:-1] + 0.5 * hx, beta, var)  # at the half nodes
    c = 0.5 * sig2 / hx**2
    # ratios w_{k+1/2} / w_j, computed in logs (the weights span many orders)
    left = c * np.exp(phim - phi)  # flux through x_{j-1/2}
    right = c * np.exp(np.append(phim[1:], -np.inf) - phi)  # through x_{j+1/2}
    right[-1] = 0.0
    left[-1] *= 2.0  # half cell at the reflecting end
    L = diags([-(left + right), left[1:], right[:-1]], [0, -1, 1], format="csc")
    return x, L


def mean_merge_time(delta0: float, beta: float, kappa: float, m_a: int, m_b: int, n: int,
                    a: float, var: float = 0.0, grid: int = 4000) -> float:
    r"""Mean time for the angle between two clusters to leave :math:`(a, 2\pi - a)`.

    For :math:`d\Delta = -U'(\Delta)\,dt + \sigma\,dW`, :math:`U = Mg_v`,
    :math:`g_v' = f_v` (:func:`pair_force`), the drift is odd about :math:`\pi`, and the
    mean exit time :math:`T` solves :math:`\frac{\sigma^2}2T'' - U'T' = -1`,
    :math:`T(a) = 0`, :math:`T'(\pi) = 0` (Pontryagin), so for :math:`a < \Delta_0 \le \pi`

    .. math::

        T(\Delta_0) = \frac2{\sigma^2}\int_a^{\Delta_0}\!\int_y^\pi
        \exp\Big(\frac2{\sigma^2}\big(U(y) - U(z)\big)\Big)\,dz\,dy,

    and :math:`T(2\pi - \Delta_0) = T(\Delta_0)`. With :math:`U` flat (noise dominating),
    :math:`T(\pi) = (\pi - a)^2/\sigma^2`. Computed by solving :math:`LT = -1` with the
    second-order conservative discretisation :math:`L` of :func:`merge_survival` (the
    unit tests compare it with the double integral).

    Parameters
    ----------
    delta0 : float
        Initial angle in :math:`(a, 2\pi - a)`.
    beta : float
        Inverse temperature > 0.
    kappa : float
        Inverse noise level > 0.
    m_a, m_b : int
        Sizes of the two groups.
    n : int
        Number of particles (>= ``m_a + m_b``; the others are taken as absent).
    a : float
        Merging level in :math:`(0, \pi)`.
    var : float
        Spread variance :math:`v \ge 0`.
    grid : int
        Number of grid intervals on :math:`[a, \pi]` (>= 16).

    Returns
    -------
    float
        :math:`T(\Delta_0)`.

    Raises
    ------
    ValueError
        On bad input.

    Examples
    --------
    >>> import numpy as np
    >>> t = mean_merge_time(np.pi, 1e-6, 1e-4, 1, 1, 10**6, 1.0)  # nearly free diffusion
    >>> bool(abs(t - (np.pi - 1) ** 2 / 4e4) < 1e-7)
    True

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    beta, var, sig2, scale = _diffusion(beta, kappa, m_a, m_b, n, var)
    a = _level(a)
    x0 = _start(delta0, a)
    N = _checks.int_at_least(grid, "grid", 16)
    x, L = _generator(beta, var, sig2, scale, a, N)
    T = spsolve(L, -np.ones(N))
    return float(np.interp(x0, x, np.concatenate([[0.0], T])))


def merge_survival(times: ArrayLike, delta0: float, beta: float, kappa: float, m_a: int,
                   m_b: int, n: int, a: float, var: float = 0.0,
                   grid: int = 300) -> NDArray[np.float64]:
    r"""Probability that two clusters have not merged by time :math:`t`.

    :math:`u(t, x) = P_x(\tau > t)` solves the backward equation
    :math:`\partial_tu = \frac{\sigma^2}2u'' - U'u'` on :math:`(a, \pi]`, :math:`u(t, a) = 0`,
    :math:`\partial_xu(t, \pi) = 0` (symmetry), :math:`u(0, \cdot) = 1`. The generator
    :math:`\frac{\sigma^2}2e^{2U/\sigma^2}\partial_x(e^{-2U/\sigma^2}\partial_x)` is
    discretised in this conservative form on a uniform grid (second order), and
    :math:`u = e^{tL}1` is evaluated by ``scipy.sparse.linalg.expm_multiply``, then
    interpolated linearly at :math:`\Delta_0`.

    Parameters
    ----------
    times : array_like
        Times >= 0.
    delta0, beta, kappa, m_a, m_b, n, a, var
        As in :func:`mean_merge_time`.
    grid : int
        Number of grid intervals on :math:`[a, \pi]` (>= 16).

    Returns
    -------
    array
        :math:`P(\tau > t)` for each time.

    Raises
    ------
    ValueError
        On bad input.

    Examples
    --------
    >>> import numpy as np
    >>> s = merge_survival([0.0, 1.0], np.pi, 1e-6, 1.0, 1, 1, 10**6, 1.0, grid=64)
    >>> free = 4 / np.pi * np.exp(-np.pi**2 / (2 * (np.pi - 1) ** 2))  # first mode, free
    >>> bool(s[0] == 1.0 and abs(s[1] - free) < 1e-3)
    True

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    t = _checks.real_array(times, "times")
    if not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ValueError("times must be finite and >= 0")
    beta, var, sig2, scale = _diffusion(beta, kappa, m_a, m_b, n, var)
    a = _level(a)
    x0 = _start(delta0, a)
    N = _checks.int_at_least(grid, "grid", 16)
    x, L = _generator(beta, var, sig2, scale, a, N)
    order = np.argsort(t, axis=None)
    flat = t.reshape(-1)
    out = np.empty(flat.size)
    u, now = np.ones(N), 0.0
    for k in order:
        if flat[k] > now:
            u = expm_multiply(L * (flat[k] - now), u)
            now = flat[k]
        out[k] = np.interp(x0, x, np.concatenate([[0.0], u]))
    return np.clip(out.reshape(t.shape), 0.0, 1.0)


def simulate_two_groups(delta0: float, m_a: int, m_b: int, beta: float, kappa: float,
                        dt: float, steps: int, systems: int, rng: np.random.Generator,
                        spread: float = 0.5, a: float = 0.3, record_every: int = 1,
                        noise: bool = True
                        ) -> tuple[NDArray[np.float64], NDArray[np.float64],
                                   NDArray[np.float64], NDArray[np.float64]]:
    r"""The noisy USA dynamics on the circle from two arcs: centres, spreads, merge times.

    Group A starts evenly spaced on the arc of width ``spread`` centred at 0, group B on
    the arc centred at :math:`\Delta_0`; each step is the Euler-Maruyama step of
    :func:`~transformer_pde.sphere_sde.simulate_circle`,
    :math:`\theta \leftarrow \theta + b(\theta)h + \sqrt{2h/\kappa}\,\xi` (one standard
    normal array of shape ``(unmerged systems, m_a + m_b)`` per step, in order, from
    ``rng``), on unwrapped angles; the run stops early when every system has merged. The
    centres are the mean angles of the groups, :math:`\Delta = c_B - c_A`, and a system is
    merged at the first recorded step where :math:`\Delta \le a` or
    :math:`\Delta \ge 2\pi - a`.

    Parameters
    ----------
    delta0 : float
        Initial angle between the arcs' centres, in :math:`(a, 2\pi - a)`.
    m_a, m_b : int
        Sizes of the groups.
    beta : float
        Inverse temperature > 0.
    kappa : float
        Inverse noise level > 0 (unused if ``noise`` is False).
    dt : float
        Step > 0.
    steps : int
        Number of steps.
    systems : int
        Number of independent systems.
    rng : numpy.random.Generator
        Source of the noise.
    spread : float
        Width of the initial arcs, in :math:`[0, 1]`.
    a : float
        Merging level in :math:`(0, \pi)`.
    record_every : int
        Record every this many steps.
    noise : bool
        False: the noiseless dynamics (no draws).

    Returns
    -------
    times : array (records,)
        Recorded times (0 first).
    delta : array (records, systems)
        :math:`\Delta` at those times (NaN after the system merged: merged systems are
        no longer stepped, and the noise of later steps has one row per unmerged system).
    width : array (records, systems)
        The larger of the two groups' standard deviations of angle about their centres
        (NaN after merging).
    merged : array (systems,)
        Merge times (recorded times), ``inf`` if not merged.

    Raises
    ------
    ValueError
        On bad input.

    Examples
    --------
    >>> import numpy as np
    >>> t, d, w, tau = simulate_two_groups(np.pi, 2, 2, 2.0, 1.0, 0.01, 3, 1,
    ...                                    np.random.default_rng(0), noise=False)
    >>> bool(np.allclose(d, np.pi) and np.isinf(tau[0]) and w[-1, 0] < w[0, 0])
    True

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    a = _level(a)
    x0 = _checks.finite_float(delta0, "delta0")
    if not a < x0 < 2 * math.pi - a:
        raise ValueError(f"delta0 must lie in (a, 2 pi - a), got {delta0!r}")
    m_a = _checks.positive_int(m_a, "m_a")
    m_b = _checks.positive_int(m_b, "m_b")
    beta = _beta(beta)
    kappa = _checks.positive_float(kappa, "kappa")
    dt = _checks.positive_float(dt, "dt")
    steps = _checks.positive_int(steps, "steps")
    systems = _checks.positive_int(systems, "systems")
    spread = _checks.nonnegative_float(spread, "spread")
    if spread > 1.0:
        raise ValueError(f"spread must lie in [0, 1], got {spread!r}")
    record_every = _checks.positive_int(record_every, "record_every")
    noise = _checks.flag(noise, "noise")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")

    def arc(m, centre):
        return centre + spread * ((np.arange(m) + 0.5) / m - 0.5)

    theta0 = np.concatenate([arc(m_a, 0.0), arc(m_b, x0)])
    theta = np.tile(theta0, (systems, 1))
    sigma = math.sqrt(2.0 * dt / kappa)

    def observe(th):
        A, B = th[:, :m_a], th[:, m_a:]
        return (B.mean(axis=1) - A.mean(axis=1),
                np.maximum(A.std(axis=1), B.std(axis=1)))

    times, deltas, widths = [0.0], [], []
    d, w = observe(theta)
    deltas.append(d)
    widths.append(w)
    merged = np.full(systems, np.inf)
    live = np.arange(systems)  # systems not merged yet (merged ones stop moving)
    for s in range(1, steps + 1):
        step = dt * circle_usa_drift(theta, beta)
        if noise:
            step += sigma * rng.standard_normal(theta.shape)
        theta = theta + step
        if s % record_every == 0:
            d, w = observe(theta)
            t = s * dt
            dd, ww = np.full(systems, np.nan), np.full(systems, np.nan)
            dd[live], ww[live] = d, w
            times.append(t)
            deltas.append(dd)
            widths.append(ww)
            new = (d <= a) | (d >= 2 * math.pi - a)
            merged[live[new]] = t
            live, theta = live[~new], theta[~new]
            if live.size == 0:
                break
    return np.array(times), np.array(deltas), np.array(widths), merged
