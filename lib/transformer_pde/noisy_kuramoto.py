r"""Stationary states of the noisy attention dynamics: Kuramoto and Bessel helpers (chapter 10).

Conventions of Rigollet's survey (arXiv 2512.01868, section "Noisy Transformers"): the
McKean-Vlasov equation :math:`\partial_t\mu = \kappa^{-1}\Delta\mu - \operatorname{div}(\mu
\nabla\psi_\mu)`, :math:`\psi_\mu(x) = \beta^{-1}\int e^{\beta\langle x, y\rangle}d\mu(y)`,
whose stationary states solve :math:`\mu \propto e^{\kappa\psi_\mu}`.

- :func:`kuramoto_order`: the order parameter of the noisy Kuramoto model
  (:math:`\beta = 0`), the root of :math:`r = A_d(\kappa r)`,
  :math:`A_d = I_{d/2}/I_{d/2-1}`;
- :func:`phase_diffusion`: the diffusion coefficient of the synchronised phase of n
  oscillators on the circle, :math:`D/n` per unit time;
- :func:`funk_hecke`, :func:`mode_threshold`: the eigenvalue :math:`a_\ell(\beta, d)` of
  :math:`f \mapsto \int e^{\beta\langle\cdot, y\rangle}f(y)\,d\sigma(y)` on degree-:math:`\ell`
  harmonics and the value :math:`\kappa_\ell = \beta/a_\ell` above which that mode of the
  uniform law is linearly unstable;
- :func:`k_sharp`, :func:`beta_star`: Mun and Rosenzweig's :math:`K_\#^{(d)}(\beta)` and
  :math:`\beta_*^{(d)}` (arXiv 2606.05140);
- :func:`circle_branch`, :func:`circle_free_energy`: the non-uniform stationary states on the
  circle bifurcating from the uniform law, and their free energy;
- :func:`circle_mean_field_sweep`: the McKean-Vlasov equation on the circle (even laws,
  Fourier-Galerkin) solved while :math:`\kappa` is swept up or down;
- :func:`zonal_branch`, :func:`zonal_free_energy`, :func:`zonal_mean_field_sweep`,
  :func:`zonal_transition`: the same for zonal laws on :math:`\mathbb S^{d-1}`
  (Gegenbauer coefficients, Gauss-Jacobi quadrature), equal to the circle's at d = 2.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.integrate import solve_ivp
from scipy.optimize import brentq, minimize_scalar, root
from scipy.special import gammaln, ive, roots_jacobi

from . import _checks, _sphere

__all__ = [
    "kuramoto_order",
    "phase_diffusion",
    "funk_hecke",
    "mode_threshold",
    "k_sharp",
    "beta_star",
    "circle_branch",
    "circle_free_energy",
    "circle_mean_field_sweep",
    "circle_transition",
    "zonal_branch",
    "zonal_free_energy",
    "zonal_mean_field_sweep",
    "zonal_transition",
]


def _dim(d):
    d = _checks.positive_int(d, "d")
    if d < 2:
        raise ValueError(f"d must be at least 2 (the sphere S^(d-1)), got {d}")
    return d


def _bessel_ratio(nu, x):
    """I_{nu+1}(x) / I_nu(x) for x > 0 (exponentially scaled, no overflow)."""
    return ive(nu + 1, x) / ive(nu, x)


def kuramoto_order(kappa: float, d: int = 2) -> float:
    r"""Order parameter of the stationary noisy Kuramoto model (:math:`\beta = 0`).

    The stationary laws are :math:`\mu \propto e^{\kappa\langle x, m\rangle}`, :math:`m =
    \int y\,d\mu`; with :math:`r = |m|`, :math:`r = A_d(\kappa r)`, :math:`A_d(x) =
    I_{d/2}(x)/I_{d/2-1}(x)`. :math:`A_d` is concave on :math:`[0, \infty)` with slope
    :math:`1/d` at 0, so a root :math:`r > 0` exists iff :math:`\kappa > d` (:math:`\kappa =
    2` on the circle: Bertini, Giacomin and Pakdaman 2010, in the survey's normalisation).
    Returned to about 1e-15 (Brent's method on :math:`A_d(\kappa r) - r`).

    Parameters
    ----------
    kappa : float
        Inverse noise level > 0.
    d : int
        Ambient dimension >= 2.

    Returns
    -------
    float
        The positive root r, or 0.0 when :math:`\kappa \le d`.

    Raises
    ------
    ValueError
        On bad arguments.

    Examples
    --------
    >>> kuramoto_order(1.5)
    0.0
    >>> r = kuramoto_order(4.0)
    >>> from scipy.special import i0, i1
    >>> bool(abs(r - i1(4 * r) / i0(4 * r)) < 1e-14)
    True

    References
    ----------
    :cite:`bertini2010dynamical,rigollet2025meanfield`
    """
    kappa = _checks.positive_float(kappa, "kappa")
    d = _dim(d)
    if kappa <= d:
        return 0.0
    nu = d / 2.0 - 1.0

    def g(r):
        return _bessel_ratio(nu, kappa * r) - r

    # g > 0 near 0 (slope kappa/d - 1 > 0); g(1) < 0 since A_d < 1
    lo = min(1e-3, 0.5 * math.sqrt(max(kappa - d, 0.0) / kappa))
    while g(lo) <= 0 and lo > 1e-300:
        lo /= 4
    return float(brentq(g, lo, 1.0, xtol=1e-16, rtol=4 * np.finfo(float).eps, maxiter=500))


def phase_diffusion(kappa: float) -> float:
    r"""Diffusion coefficient of the phase of the synchronised noisy Kuramoto model.

    .. math::

        D(\kappa) = \frac{2/\kappa}{1 - I_0(\kappa r)^{-2}}, \qquad r = A_2(\kappa r),

    for :math:`d\theta_i = r_n\sin(\varphi_n - \theta_i)\,dt + \sqrt{2/\kappa}\,dB_i`
    (:math:`\beta = 0` on the circle, :math:`\kappa > 2`): to leading order in :math:`1/n`
    the centre of the synchronised state of n oscillators is a Brownian motion of variance
    rate :math:`D/n` (Bertini, Giacomin and Poquet 2014 prove the Brownian motion on times
    of order n). Derived in chapter 10 from the adjoint zero mode of the linearised
    Fokker-Planck operator at :math:`q \propto e^{\kappa r\cos\theta}`: :math:`v' = 1/q -
    \langle 1/q\rangle`, :math:`D = (2/\kappa)\int v'^2q / (\int vq')^2`.

    Parameters
    ----------
    kappa : float
        Inverse noise level > 2 (a synchronised state exists).

    Returns
    -------
    float
        :math:`D(\kappa)`.

    Raises
    ------
    ValueError
        If kappa is not a number > 2.

    Examples
    --------
    >>> print(f"{phase_diffusion(3.0):.5f}")
    0.78484

    References
    ----------
    :cite:`bertini2014synchronization`
    """
    kappa = _checks.positive_float(kappa, "kappa")
    if kappa <= 2.0:
        raise ValueError(f"kappa must exceed 2 (no synchronised state), got {kappa}")
    x = kappa * kuramoto_order(kappa)
    inv_sq = math.exp(-2.0 * x) / float(ive(0, x)) ** 2  # I_0(x)^{-2}, no overflow
    return float((2.0 / kappa) / (1.0 - inv_sq))


def funk_hecke(ell: ArrayLike, beta: float, d: int) -> NDArray[np.float64] | float:
    r"""Funk-Hecke eigenvalue of the attention kernel on degree-:math:`\ell` harmonics.

    .. math::

        \int_{\mathbb S^{d-1}} e^{\beta\langle x, y\rangle}Y_\ell(y)\,d\sigma(y) =
        a_\ell Y_\ell(x), \qquad
        a_\ell(\beta, d) = \Gamma(\tfrac d2)\big(\tfrac2\beta\big)^{d/2-1}
        I_{\ell + d/2 - 1}(\beta),

    :math:`\sigma` the uniform probability measure (on the circle, :math:`a_\ell =
    I_\ell(\beta)`). This is :math:`\kappa_\ell` of chapter 7's linearisation.

    Parameters
    ----------
    ell : int or array of int
        Degrees >= 0.
    beta : float
        Inverse temperature > 0.
    d : int
        Ambient dimension >= 2.

    Returns
    -------
    float or array
        :math:`a_\ell`.

    Raises
    ------
    ValueError
        On bad arguments.

    Examples
    --------
    >>> from scipy.special import iv
    >>> bool(abs(funk_hecke(3, 2.0, 2) - iv(3, 2.0)) < 1e-15)
    True

    References
    ----------
    :cite:`rigollet2025meanfield`
    """
    beta = _sphere.beta(beta)
    d = _dim(d)
    ell_arr = np.asarray(ell)
    if not np.issubdtype(ell_arr.dtype, np.integer) or np.any(ell_arr < 0):
        raise ValueError("ell must be integers >= 0 (degrees of spherical harmonics)")
    nu = ell_arr + d / 2.0 - 1.0
    log_a = (gammaln(d / 2.0) + (d / 2.0 - 1.0) * math.log(2.0 / beta)
             + np.log(ive(nu, beta)) + beta)
    out = np.exp(log_a)
    return out if out.ndim else float(out)


def mode_threshold(ell: ArrayLike, beta: float, d: int) -> NDArray[np.float64] | float:
    r"""The :math:`\kappa` above which the degree-:math:`\ell` mode of the uniform law grows.

    Linearising the McKean-Vlasov equation at :math:`\sigma`: a degree-:math:`\ell`
    harmonic :math:`f` evolves by :math:`\partial_t f = -\kappa^{-1}\ell(\ell + d - 2)f +
    \beta^{-1}\ell(\ell + d - 2)a_\ell f`, so it grows iff :math:`\kappa > \kappa_\ell =
    \beta/a_\ell(\beta, d)` (derived in chapter 10). :math:`a_\ell` decreases in
    :math:`\ell`, so :math:`\kappa_1` is the smallest. At :math:`\beta \to 0`,
    :math:`\kappa_1 \to d`.

    Parameters
    ----------
    ell : int or array of int
        Degrees >= 1.
    beta : float
        Inverse temperature > 0.
    d : int
        Ambient dimension >= 2.

    Returns
    -------
    float or array
        :math:`\kappa_\ell(\beta, d)`.

    Raises
    ------
    ValueError
        On bad arguments (``ell = 0`` has no threshold: mass is conserved).

    Examples
    --------
    >>> from scipy.special import iv
    >>> bool(abs(mode_threshold(1, 1.0, 2) - 1 / iv(1, 1.0)) < 1e-13)
    True

    References
    ----------
    :cite:`rigollet2025meanfield,shalova2024solutions`
    """
    ell_arr = np.asarray(ell)
    if not np.issubdtype(ell_arr.dtype, np.integer) or np.any(ell_arr < 1):
        raise ValueError("ell must be integers >= 1")
    beta = _sphere.beta(beta)
    out = beta / np.asarray(funk_hecke(ell_arr, beta, d))
    return out if out.ndim else float(out)


def k_sharp(beta: float, d: int) -> float:
    r"""Mun and Rosenzweig's linear-stability threshold
    :math:`K_\#^{(d)}(\beta) = \beta^{d/2}/(2^{d/2}\Gamma(d/2)I_{d/2}(\beta))`.

    It equals :math:`\kappa_1(\beta, d)/2` (:func:`mode_threshold`): the coupling :math:`K`
    is :math:`\kappa/2` (chapter 10 states the convention).

    Parameters
    ----------
    beta : float
        Inverse temperature > 0.
    d : int
        Ambient dimension >= 2.

    Returns
    -------
    float
        :math:`K_\#^{(d)}(\beta)`.

    Raises
    ------
    ValueError
        On bad arguments.

    Examples
    --------
    >>> from scipy.special import iv
    >>> bool(abs(k_sharp(1.0, 2) - 1 / (2 * iv(1, 1.0))) < 1e-14)
    True

    References
    ----------
    :cite:`mun2026phase`
    """
    beta = _sphere.beta(beta)
    d = _dim(d)
    log_k = (d / 2.0 * math.log(beta) - d / 2.0 * math.log(2.0) - gammaln(d / 2.0)
             - math.log(ive(d / 2.0, beta)) - beta)
    return float(math.exp(log_k))


def beta_star(d: int) -> float:
    r"""The :math:`\beta_*^{(d)}` of Mun and Rosenzweig: the root of
    :math:`I_{d/2+1}(\beta)/I_{d/2}(\beta) = 1/d`.

    The ratio increases from 0 to 1 on :math:`(0, \infty)`, so the root is unique; it is
    found by Brent's method to about 1e-15 relative. Equivalently
    :math:`a_2(\beta, d)/a_1(\beta, d) = 1/d`.

    Parameters
    ----------
    d : int
        Ambient dimension >= 2.

    Returns
    -------
    float
        :math:`\beta_*^{(d)}`.

    Raises
    ------
    ValueError
        If ``d < 2``.

    Examples
    --------
    >>> from scipy.special import iv
    >>> b = beta_star(2)
    >>> bool(abs(iv(2, b) / iv(1, b) - 0.5) < 1e-14)
    True

    References
    ----------
    :cite:`mun2026phase`
    """
    d = _dim(d)
    nu = d / 2.0

    def g(b):
        return _bessel_ratio(nu, b) - 1.0 / d

    return float(brentq(g, 1e-8, 50.0 * d, xtol=1e-15, rtol=4 * np.finfo(float).eps,
                        maxiter=500))


def circle_branch(beta: float, r1: ArrayLike, modes: int | None = None,
                  grid: int = 512) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""The branch of non-uniform stationary states on the circle, parametrised by
    :math:`r_1`.

    Even stationary laws solve :math:`\rho(\theta) \propto \exp\big(\frac{2\kappa}{\beta}
    \sum_{k\ge1}I_k(\beta)r_k\cos k\theta\big)` with :math:`r_k = \int\cos k\theta\,
    d\rho`. For each target :math:`r_1` the unknowns :math:`(\kappa, r_2, \dots, r_K)` solve
    the :math:`K` equations :math:`r_k = \langle\cos k\theta\rangle_\rho` (midpoint rule in
    :math:`\theta` on ``grid`` points, spectrally accurate; Powell's hybrid method, continued
    from the previous ``r1``): :func:`zonal_branch` at :math:`d = 2`. Passing through
    :math:`r_1` lets the branch turn back in :math:`\kappa` (a fold). At small :math:`r_1` it
    leaves :math:`\kappa_1 = \beta/I_1(\beta)`.

    Parameters
    ----------
    beta : float
        Inverse temperature > 0.
    r1 : array
        Increasing values in :math:`(0, 1)`.
    modes : int, optional
        Number K of Fourier modes (default: enough that :math:`I_K \le 10^{-16}I_1`, at
        least 8).
    grid : int
        Quadrature points (>= 64).

    Returns
    -------
    kappa : array (len(r1),)
        :math:`\kappa` on the branch.
    r : array (len(r1), K)
        :math:`(r_1, \dots, r_K)`.

    Raises
    ------
    ValueError
        On bad arguments, or if the solver fails (the message says where).

    Examples
    --------
    >>> from transformer_pde.noisy_kuramoto import kuramoto_order
    >>> kap, r = circle_branch(1e-6, [0.5])
    >>> bool(abs(kuramoto_order(float(kap[0])) - 0.5) < 1e-6)
    True

    References
    ----------
    :cite:`rigollet2025meanfield,bertini2010dynamical`
    """
    grid = _checks.positive_int(grid, "grid")
    if grid < 64:
        raise ValueError(f"grid must be at least 64, got {grid}")
    # Gauss-Chebyshev nodes t = cos(theta_j) at d = 2: the midpoint rule in theta
    return zonal_branch(beta, r1, 2, modes, grid)



def circle_free_energy(beta: float, kappa: float, r: ArrayLike, grid: int = 512) -> float:
    r"""Free energy of an even stationary state on the circle, relative to the uniform law.

    .. math::

        \mathcal F(\rho) = \frac1\kappa\int\rho\log\rho\,d\sigma
        - \frac{1}{2\beta}\iint e^{\beta\cos(\theta - \phi)}\rho(\theta)\rho(\phi)
        \,d\sigma\,d\sigma,

    (:math:`\rho` the density with respect to the uniform probability :math:`\sigma`),
    whose Wasserstein gradient flow is the McKean-Vlasov equation of the survey; returned is
    :math:`\mathcal F(\rho) - \mathcal F(\sigma)` for :math:`\rho \propto
    \exp(\frac{2\kappa}\beta\sum_k I_k r_k\cos k\theta)`, the interaction computed from
    all of :math:`\rho`'s own Fourier coefficients (which equal ``r`` on the branch).

    Parameters
    ----------
    beta : float
        Inverse temperature > 0.
    kappa : float
        Inverse noise level > 0.
    r : array (K,)
        Fourier coefficients :math:`r_1, \dots, r_K`.
    grid : int
        Quadrature points (>= 64).

    Returns
    -------
    float
        :math:`\mathcal F(\rho) - \mathcal F(\sigma)` (negative: the state beats the uniform
        law).

    Raises
    ------
    ValueError
        On bad arguments.

    Examples
    --------
    >>> abs(circle_free_energy(1.0, 1.0, [0.0, 0.0])) < 1e-15
    True

    References
    ----------
    :cite:`rigollet2025meanfield,mun2026phase`
    """
    grid = _checks.positive_int(grid, "grid")
    if grid < 64:
        raise ValueError(f"grid must be at least 64, got {grid}")
    return zonal_free_energy(beta, kappa, r, 2, grid)



def circle_mean_field_sweep(beta: float, kappas: ArrayLike, c0: ArrayLike, hold: float,
                            seed: float = 1e-6, grid: int = 128
                            ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""The McKean-Vlasov equation on the circle, solved while :math:`\kappa` is swept.

    For an even density :math:`\rho = 1 + 2\sum_{k\ge1}c_k\cos k\theta` (with respect to
    :math:`d\theta/2\pi`), :math:`\partial_t\rho = \kappa^{-1}\rho'' - (\rho\psi')'`,
    :math:`\psi = \beta^{-1}(I_0 + 2\sum_k I_k(\beta)c_k\cos k\theta)`, reads

    .. math::

        \dot c_k = -\frac{k^2}{\kappa}c_k - k\,\big\langle\rho\,\psi'\,\sin k\theta
        \big\rangle, \qquad k = 1, \dots, K,

    with :math:`K` = ``len(c0)`` and the average computed exactly on ``grid`` points (a
    Galerkin truncation; evenness is preserved by the equation): :func:`zonal_mean_field_sweep`
    at :math:`d = 2`, where :math:`G_k(\cos\theta) = \cos k\theta` and :math:`N_k = 2`.
    For each :math:`\kappa` in turn the state is advanced by ``hold`` time units (BDF,
    rtol 1e-10) after adding ``seed`` to :math:`c_1` (a small kick, so that an unstable
    uniform law is left); the final state of one stage starts the next. Sweeping up from the
    uniform law and down from a clustered law shows the type of the transition.

    Parameters
    ----------
    beta : float
        Inverse temperature > 0.
    kappas : array
        The values of :math:`\kappa` (> 0) in the order of the sweep.
    c0 : array (K,)
        Initial coefficients :math:`c_1, \dots, c_K` (K >= 2).
    hold : float
        Time per value (> 0).
    seed : float
        Kick added to :math:`c_1` at each stage (>= 0).
    grid : int
        Quadrature points, at least ``2 K + 2``.

    Returns
    -------
    r1 : array (len(kappas),)
        :math:`c_1 = \int\cos\theta\,d\rho` at the end of each stage.
    c : array (len(kappas), K)
        The states at the end of each stage.

    Raises
    ------
    ValueError
        On bad arguments, or if the density becomes negative (the truncation is too short).

    Examples
    --------
    >>> r, _ = circle_mean_field_sweep(1.0, [1.0, 3.0], [0.0] * 8, 100.0)
    >>> bool(abs(r[0]) < 1e-6 and r[1] > 0.3)
    True

    References
    ----------
    :cite:`rigollet2025meanfield,mun2026phase`
    """
    grid = _checks.positive_int(grid, "grid")
    size = _checks.real_array(c0, "c0").size
    if grid < 2 * size + 2:
        raise ValueError(f"grid must be at least 2 K + 2 = {2 * size + 2}, got {grid}")
    return zonal_mean_field_sweep(beta, 2, kappas, c0, hold, seed, grid)



def circle_transition(beta: float, points: int = 60) -> tuple[float, float, float]:
    r"""The three couplings of the transition on the circle at inverse temperature
    :math:`\beta`: :math:`(\kappa_1, \kappa_{\mathrm{fold}}, \kappa_c)`.

    :math:`\kappa_1 = \beta/I_1(\beta)` is where the uniform law loses linear stability;
    :math:`\kappa_{\mathrm{fold}}` the smallest :math:`\kappa` on the even branch of
    :func:`circle_branch` (bounded minimisation over :math:`r_1`); :math:`\kappa_c` the
    :math:`\kappa` at which the branch's free energy (:func:`circle_free_energy`) crosses
    that of the uniform law on the upper part of the branch (Brent's method over
    :math:`r_1`). When the branch leaves :math:`\kappa_1` forwards (no fold, a continuous
    transition) the three are equal to :math:`\kappa_1`.

    Parameters
    ----------
    beta : float
        Inverse temperature > 0.
    points : int
        Points of the coarse scan of the branch in :math:`r_1 \in [0.005, 0.95]` (>= 10).

    Returns
    -------
    tuple of float
        :math:`(\kappa_1, \kappa_{\mathrm{fold}}, \kappa_c)`, about 1e-9 relative.

    Raises
    ------
    ValueError
        On bad arguments or if the branch cannot be followed.

    Examples
    --------
    >>> k1, kf, kc = circle_transition(1.0)
    >>> k1 == kf == kc
    True

    References
    ----------
    :cite:`mun2026phase`
    """
    beta = _sphere.beta(beta)
    return _transition(float(mode_threshold(1, beta, 2)), lambda x: circle_branch(beta, x),
                       lambda k, r: circle_free_energy(beta, k, r), points)


def _harmonic_dims(ks, d):
    """Dimension N_k of the degree-k spherical harmonics on S^(d-1), k >= 1."""
    ks = np.asarray(ks, dtype=float)
    return np.exp(np.log(2 * ks + d - 2) + gammaln(ks + d - 2) - gammaln(ks + 1)
                  - gammaln(d - 1.0))


def _zonal_basis(d, top, nodes):
    """Gauss-Jacobi nodes t_j, weights w_j (sum 1) of the law of <x, e> under the
    uniform probability on S^(d-1), and G_k(t_j), G_k'(t_j) for k = 1..top (three-term
    recurrence (k + d - 2) G_{k+1} = (2k + d - 2) t G_k - k G_{k-1})."""
    a = (d - 3) / 2.0
    t, w = roots_jacobi(nodes, a, a)
    w = w / w.sum()
    G = np.empty((top + 1, nodes))
    dG = np.empty((top + 1, nodes))
    G[0], dG[0] = 1.0, 0.0
    G[1], dG[1] = t, 1.0
    for k in range(1, top):
        G[k + 1] = ((2 * k + d - 2) * t * G[k] - k * G[k - 1]) / (k + d - 2)
        dG[k + 1] = ((2 * k + d - 2) * (G[k] + t * dG[k]) - k * dG[k - 1]) / (k + d - 2)
    return t, w, G[1:], dG[1:]


def _zonal_top(beta, d, low):
    """Smallest K >= 8 with a_K(beta, d) <= 1e-16 a_1 (at most 200)."""
    top = 8
    while ive(top + d / 2.0 - 1.0, beta) > 1e-16 * ive(d / 2.0, beta) and top < 200:
        top += 1
    return max(top, low)


def _zonal_coupling(beta, d, top):
    """a_k(beta, d) N_k for k = 1..top: the weight of mode k in beta psi_mu."""
    ks = np.arange(1, top + 1)
    return np.asarray(funk_hecke(ks, beta, d)) * _harmonic_dims(ks, d)


def _zonal_residual(unknowns, r1, beta, G, w, aN):
    kappa, rest = unknowns[0], unknowns[1:]
    r = np.concatenate([[r1], rest])
    U = (kappa / beta) * (aN * r) @ G
    p = w * np.exp(U - U.max())
    p /= p.sum()
    return G @ p - r


def zonal_branch(beta: float, r1: ArrayLike, d: int, modes: int | None = None,
                 nodes: int = 256) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""The branch of zonal stationary states on :math:`\mathbb S^{d-1}` bifurcating from
    the uniform law, parametrised by :math:`r_1 = \int\langle x, e\rangle\,d\mu`.

    A zonal law has density :math:`\rho(t) = 1 + \sum_k N_k r_k G_k(t)`, :math:`t =
    \langle x, e\rangle`, :math:`r_k = \int G_k\,d\mu` (:math:`G_k` the zonal harmonic,
    :math:`N_k` the dimension of degree-:math:`k` harmonics); by Funk-Hecke
    :math:`\beta\psi_\mu = a_0 + \sum_k a_k N_k r_k G_k`, so stationary zonal laws solve

    .. math::

        \rho \propto \exp\Big(\frac\kappa\beta\sum_{k\ge1}a_k(\beta, d)N_k r_kG_k(t)\Big),
        \qquad r_k = \langle G_k\rangle_\rho .

    For each target :math:`r_1` the unknowns :math:`(\kappa, r_2, \dots, r_K)` are found by
    Powell's hybrid method (continued along ``r1``), the averages by Gauss-Jacobi
    quadrature on ``nodes`` points for the weight :math:`(1 - t^2)^{(d-3)/2}`. On the circle
    (:math:`d = 2`, :math:`N_k = 2`, :math:`a_k = I_k`) this is :func:`circle_branch`.

    Parameters
    ----------
    beta : float
        Inverse temperature > 0.
    r1 : array
        Increasing values in :math:`(0, 1)`.
    d : int
        Ambient dimension >= 2.
    modes : int, optional
        Number K of modes (default: enough that :math:`a_K \le 10^{-16}a_1`, at least 8).
    nodes : int
        Quadrature points (>= 64).

    Returns
    -------
    kappa : array (len(r1),)
        :math:`\kappa` on the branch.
    r : array (len(r1), K)
        :math:`(r_1, \dots, r_K)`.

    Raises
    ------
    ValueError
        On bad arguments, or if the solver fails (the message says where).

    Examples
    --------
    >>> kap, r = zonal_branch(1e-6, [0.5], 3)
    >>> bool(abs(kuramoto_order(float(kap[0]), 3) - 0.5) < 1e-6)
    True

    References
    ----------
    :cite:`rigollet2025meanfield,mun2026phase`
    """
    beta = _sphere.beta(beta)
    d = _dim(d)
    r1 = _checks.real_array(r1, "r1").ravel()
    if r1.size < 1 or np.any(~np.isfinite(r1)) or np.any(r1 <= 0) or np.any(r1 >= 1) \
            or np.any(np.diff(r1) <= 0):
        raise ValueError("r1 must be increasing values in (0, 1)")
    nodes = _checks.positive_int(nodes, "nodes")
    if nodes < 64:
        raise ValueError(f"nodes must be at least 64, got {nodes}")
    modes = _zonal_top(beta, d, 2) if modes is None else _checks.positive_int(modes, "modes")
    if modes < 2:
        raise ValueError(f"modes must be at least 2, got {modes}")
    _, w, G, _ = _zonal_basis(d, modes, nodes)
    aN = _zonal_coupling(beta, d, modes)
    guess = np.concatenate([[float(mode_threshold(1, beta, d))], np.zeros(modes - 1)])
    kappas, rs = [], []
    for target in r1:
        sol = root(_zonal_residual, guess, args=(target, beta, G, w, aN),
                   method="hybr", options={"xtol": 1e-14})
        res = _zonal_residual(sol.x, target, beta, G, w, aN)
        if not np.all(np.isfinite(res)) or np.max(np.abs(res)) > 1e-11:
            raise ValueError(f"zonal_branch: no solution found at r1 = {target:g} "
                             f"(residual {np.max(np.abs(res)):.1e})")
        guess = sol.x
        kappas.append(sol.x[0])
        rs.append(np.concatenate([[target], sol.x[1:]]))
    return np.array(kappas), np.array(rs)


def zonal_free_energy(beta: float, kappa: float, r: ArrayLike, d: int,
                      nodes: int = 256) -> float:
    r"""Free energy of a zonal stationary state on :math:`\mathbb S^{d-1}`, relative to the
    uniform law.

    .. math::

        \mathcal F(\rho) - \mathcal F(1) = \frac1\kappa\int\rho\log\rho\,d\sigma
        - \frac1{2\beta}\sum_{k\ge1}a_k(\beta, d)N_k c_k^2 ,

    for :math:`\rho \propto \exp(\frac\kappa\beta\sum_k a_kN_kr_kG_k)`, with
    :math:`c_k = \int G_k\rho\,d\sigma` the density's own coefficients (every :math:`k`
    with :math:`a_k > 10^{-17}a_1`; they equal ``r`` on the branch): Funk-Hecke gives
    :math:`\iint e^{\beta\langle x, y\rangle}\rho\rho = a_0 + \sum_k a_kN_kc_k^2`.
    On the circle this is :func:`circle_free_energy`.

    Parameters
    ----------
    beta : float
        Inverse temperature > 0.
    kappa : float
        Inverse noise level > 0.
    r : array (K,)
        Coefficients :math:`r_1, \dots, r_K`.
    d : int
        Ambient dimension >= 2.
    nodes : int
        Quadrature points (>= 64).

    Returns
    -------
    float
        :math:`\mathcal F(\rho) - \mathcal F(\sigma)` (negative: the state beats the uniform
        law).

    Raises
    ------
    ValueError
        On bad arguments.

    Examples
    --------
    >>> abs(zonal_free_energy(1.0, 1.0, [0.0, 0.0], 3)) < 1e-15
    True

    References
    ----------
    :cite:`rigollet2025meanfield,mun2026phase`
    """
    beta = _sphere.beta(beta)
    kappa = _checks.positive_float(kappa, "kappa")
    d = _dim(d)
    r = _checks.real_array(r, "r").ravel()
    if r.size < 1 or not np.all(np.isfinite(r)):
        raise ValueError("r must be a finite vector of coefficients")
    nodes = _checks.positive_int(nodes, "nodes")
    if nodes < 64:
        raise ValueError(f"nodes must be at least 64, got {nodes}")
    top = r.size
    while top < nodes // 2 - 1 and \
            ive(top + d / 2.0, beta) > 1e-17 * ive(d / 2.0, beta):
        top += 1
    _, w, G, _ = _zonal_basis(d, top, nodes)
    aN = _zonal_coupling(beta, d, top)
    U = (kappa / beta) * (aN[:r.size] * r) @ G[:r.size]
    rho = np.exp(U - U.max())
    rho /= w @ rho  # density w.r.t. the uniform probability measure
    entropy = w @ (rho * np.log(rho))
    c = G @ (w * rho)
    return float(entropy / kappa - np.sum(aN * c * c) / (2.0 * beta))


def _zonal_rhs(_t, c, kappa, beta, aN, N, G, dG, wt, lam):
    rho = 1.0 + (N * c) @ G
    dpsi = ((aN * c) @ dG) / beta
    return -(lam / kappa) * c + dG @ (wt * rho * dpsi)


def zonal_mean_field_sweep(beta: float, d: int, kappas: ArrayLike, c0: ArrayLike,
                           hold: float, seed: float = 1e-6, nodes: int | None = None
                           ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""The McKean-Vlasov equation on :math:`\mathbb S^{d-1}` for zonal laws, solved while
    :math:`\kappa` is swept.

    For :math:`\rho = 1 + \sum_{k=1}^K N_kc_kG_k(t)` (density with respect to the uniform
    probability, :math:`t = \langle x, e\rangle`, :math:`c_k = \int G_k\rho\,d\sigma`),
    the weak form of :math:`\partial_t\mu = \kappa^{-1}\Delta\mu -
    \operatorname{div}(\mu\nabla\psi_\mu)` tested on :math:`G_\ell` reads

    .. math::

        \dot c_\ell = -\frac{\ell(\ell + d - 2)}{\kappa}c_\ell
        + \int G_\ell'(t)\,\psi'(t)\,(1 - t^2)\,\rho(t)\,d\sigma, \qquad
        \psi' = \beta^{-1}\sum_k a_kN_kc_kG_k',

    (a Galerkin truncation; zonal laws stay zonal), the integral by Gauss-Jacobi quadrature
    exact for the polynomial integrand. Each :math:`\kappa` in turn is held for ``hold``
    time units (BDF, rtol 1e-10) after adding ``seed`` to :math:`c_1`; the final state of
    one stage starts the next. On the circle this is :func:`circle_mean_field_sweep`.

    Parameters
    ----------
    beta : float
        Inverse temperature > 0.
    d : int
        Ambient dimension >= 2.
    kappas : array
        The values of :math:`\kappa` (> 0) in the order of the sweep.
    c0 : array (K,)
        Initial coefficients :math:`c_1, \dots, c_K` (K >= 2).
    hold : float
        Time per value (> 0).
    seed : float
        Kick added to :math:`c_1` at each stage (>= 0).
    nodes : int, optional
        Quadrature points (default and minimum ``2 K + 2``).

    Returns
    -------
    r1 : array (len(kappas),)
        :math:`c_1 = \int\langle x, e\rangle\,d\mu` at the end of each stage.
    c : array (len(kappas), K)
        The states at the end of each stage.

    Raises
    ------
    ValueError
        On bad arguments, or if the density becomes negative at a node (the truncation is
        too short).

    Examples
    --------
    >>> r, _ = zonal_mean_field_sweep(1.0, 3, [2.0, 3.5], [0.0] * 12, 100.0)
    >>> bool(abs(r[0]) < 1e-6 and r[1] > 0.3)
    True

    References
    ----------
    :cite:`rigollet2025meanfield,mun2026phase`
    """
    beta = _sphere.beta(beta)
    d = _dim(d)
    kappas = _checks.real_array(kappas, "kappas").ravel()
    if kappas.size < 1 or not np.all(np.isfinite(kappas)) or np.any(kappas <= 0):
        raise ValueError("kappas must be positive finite numbers")
    c = _checks.real_array(c0, "c0").ravel().copy()
    if c.size < 2 or not np.all(np.isfinite(c)):
        raise ValueError("c0 must be a finite vector of at least 2 coefficients")
    hold = _checks.positive_float(hold, "hold")
    seed = _checks.nonnegative_float(seed, "seed")
    nodes = 2 * c.size + 2 if nodes is None else _checks.positive_int(nodes, "nodes")
    if nodes < 2 * c.size + 2:
        raise ValueError(f"nodes must be at least 2 K + 2 = {2 * c.size + 2}, got {nodes}")
    t, w, G, dG = _zonal_basis(d, c.size, nodes)
    ks = np.arange(1, c.size + 1)
    N = _harmonic_dims(ks, d)
    aN = _zonal_coupling(beta, d, c.size)
    lam = ks * (ks + d - 2.0)
    wt = w * (1.0 - t * t)
    r1, states = [], []
    for kappa in kappas:
        c[0] += seed
        sol = solve_ivp(_zonal_rhs, (0.0, hold), c, method="BDF", rtol=1e-10, atol=1e-13,
                        args=(kappa, beta, aN, N, G, dG, wt, lam))
        if not sol.success:
            raise ValueError(f"zonal_mean_field_sweep: integration failed at kappa = "
                             f"{kappa:g} ({sol.message})")
        c = sol.y[:, -1].copy()
        if np.min(1.0 + (N * c) @ G) < 0:
            raise ValueError(f"zonal_mean_field_sweep: negative density at kappa = "
                             f"{kappa:g}; increase the number of coefficients")
        r1.append(c[0])
        states.append(c.copy())
    return np.array(r1), np.array(states)


def zonal_transition(beta: float, d: int, points: int = 60) -> tuple[float, float, float]:
    r"""The three couplings of the transition on :math:`\mathbb S^{d-1}` among zonal laws:
    :math:`(\kappa_1, \kappa_{\mathrm{fold}}, \kappa_c)`.

    As :func:`circle_transition`, with :func:`zonal_branch` and :func:`zonal_free_energy`:
    :math:`\kappa_1 = \beta/a_1(\beta, d)` (:func:`mode_threshold`), the smallest
    :math:`\kappa` on the zonal branch, and the :math:`\kappa` where the branch's free
    energy crosses the uniform law's on the upper part of the branch. All three equal
    :math:`\kappa_1` when the branch leaves forwards.

    Parameters
    ----------
    beta : float
        Inverse temperature > 0.
    d : int
        Ambient dimension >= 2.
    points : int
        Points of the coarse scan of the branch in :math:`r_1 \in [0.005, 0.95]` (>= 10).

    Returns
    -------
    tuple of float
        :math:`(\kappa_1, \kappa_{\mathrm{fold}}, \kappa_c)`, about 1e-9 relative.

    Raises
    ------
    ValueError
        On bad arguments or if the branch cannot be followed.

    Examples
    --------
    >>> k1, kf, kc = zonal_transition(1.0, 3)
    >>> k1 == kf == kc
    True

    References
    ----------
    :cite:`mun2026phase`
    """
    beta = _sphere.beta(beta)
    d = _dim(d)
    return _transition(float(mode_threshold(1, beta, d)), lambda x: zonal_branch(beta, x, d),
                       lambda k, r: zonal_free_energy(beta, k, r, d), points)


def _transition(k1, branch, free_energy, points):
    """(kappa_1, fold, kappa_c) along a branch r1 -> (kappa, r) with free energy
    (kappa, r) -> F - F(uniform); shared by circle_transition and zonal_transition."""
    points = _checks.positive_int(points, "points")
    if points < 10:
        raise ValueError(f"points must be at least 10, got {points}")
    r1 = np.linspace(0.005, 0.95, points)
    kap, r = branch(r1)
    i = int(np.argmin(kap))
    if i == 0 and kap[0] >= k1:
        return k1, k1, k1

    def kappa_at(x):
        return float(branch([x])[0][0])

    lo, hi = r1[max(i - 1, 0)], r1[min(i + 1, points - 1)]
    fold = minimize_scalar(kappa_at, bounds=(lo, hi), method="bounded",
                           options={"xatol": 1e-10})
    k_fold = float(fold.fun)

    def free(x):
        kk, rr = branch([x])
        return free_energy(float(kk[0]), rr[0])

    F = np.array([free_energy(float(k), rk) for k, rk in zip(kap, r, strict=True)])
    upper = np.arange(i, points)
    neg = upper[F[upper] < 0]
    if neg.size == 0:
        raise ValueError("the branch never beats the uniform law on r1 <= 0.95")
    j = int(neg[0])
    x_c = r1[i] if j == i else brentq(free, r1[j - 1], r1[j], xtol=1e-12)
    return k1, k_fold, kappa_at(x_c)
