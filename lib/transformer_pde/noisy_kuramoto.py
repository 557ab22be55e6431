r"""Stationary states of the noisy attention dynamics: Kuramoto and Bessel helpers (chapter 10).

Conventions of Rigollet's survey (arXiv 2512.01868, section "Noisy Transformers"): the
McKean-Vlasov equation :math:`\partial_t\mu = \kappa^{-1}\Delta\mu - \operatorname{div}(\mu
\nabla\psi_\mu)`, :math:`\psi_\mu(x) = \beta^{-1}\int e^{\beta\langle x, y\rangle}d\mu(y)`,
whose stationary states solve :math:`\mu \propto e^{\kappa\psi_\mu}`.

- :func:`kuramoto_order`: the order parameter of the noisy Kuramoto model
  (:math:`\beta = 0`), the root of :math:`r = A_d(\kappa r)`,
  :math:`A_d = I_{d/2}/I_{d/2-1}`;
- :func:`funk_hecke`, :func:`mode_threshold`: the eigenvalue :math:`a_\ell(\beta, d)` of
  :math:`f \mapsto \int e^{\beta\langle\cdot, y\rangle}f(y)\,d\sigma(y)` on degree-:math:`\ell`
  harmonics and the value :math:`\kappa_\ell = \beta/a_\ell` above which that mode of the
  uniform law is linearly unstable;
- :func:`k_sharp`, :func:`beta_star`: Mun and Rosenzweig's :math:`K_\#^{(d)}(\beta)` and
  :math:`\beta_*^{(d)}` (arXiv 2606.05140);
- :func:`circle_branch`, :func:`circle_free_energy`: the non-uniform stationary states on the
  circle bifurcating from the uniform law, and their free energy.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import brentq, root
from scipy.special import gammaln, ive

from . import _checks, _sphere

__all__ = [
    "kuramoto_order",
    "funk_hecke",
    "mode_threshold",
    "k_sharp",
    "beta_star",
    "circle_branch",
    "circle_free_energy",
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


def _circle_grid(m):
    return 2 * np.pi * np.arange(m) / m


def _circle_residual(unknowns, r1, beta, C, Ik):
    kappa, rest = unknowns[0], unknowns[1:]
    r = np.concatenate([[r1], rest])
    U = (2.0 * kappa / beta) * (Ik * r) @ C
    w = np.exp(U - U.max())
    w /= w.sum()
    return C @ w - r


def circle_branch(beta: float, r1: ArrayLike, modes: int | None = None,
                  grid: int = 512) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""The branch of non-uniform stationary states on the circle, parametrised by
    :math:`r_1`.

    Even stationary laws solve :math:`\rho(\theta) \propto \exp\big(\frac{2\kappa}{\beta}
    \sum_{k\ge1}I_k(\beta)r_k\cos k\theta\big)` with :math:`r_k = \int\cos k\theta\,
    d\rho`. For each target :math:`r_1` the unknowns :math:`(\kappa, r_2, \dots, r_K)` solve
    the :math:`K` equations :math:`r_k = \langle\cos k\theta\rangle_\rho` (trapezoidal rule on
    ``grid`` points, spectrally accurate; Powell's hybrid method, continued from the previous
    ``r1``). Passing through :math:`r_1` lets the branch turn back in :math:`\kappa` (a fold).
    At small :math:`r_1` it leaves :math:`\kappa_1 = \beta/I_1(\beta)`.

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
    beta = _sphere.beta(beta)
    r1 = _checks.real_array(r1, "r1").ravel()
    if r1.size < 1 or np.any(~np.isfinite(r1)) or np.any(r1 <= 0) or np.any(r1 >= 1) \
            or np.any(np.diff(r1) <= 0):
        raise ValueError("r1 must be increasing values in (0, 1)")
    grid = _checks.positive_int(grid, "grid")
    if grid < 64:
        raise ValueError(f"grid must be at least 64, got {grid}")
    if modes is None:
        modes = 8
        while ive(modes, beta) > 1e-16 * ive(1, beta) and modes < 200:
            modes += 1
    modes = _checks.positive_int(modes, "modes")
    ks = np.arange(1, modes + 1)
    Ik = ive(ks, beta) * math.exp(beta)
    C = np.cos(np.outer(ks, _circle_grid(grid)))
    guess = np.concatenate([[beta / Ik[0]], np.zeros(modes - 1)])
    kappas, rs = [], []
    for target in r1:
        sol = root(_circle_residual, guess, args=(target, beta, C, Ik),
                   method="hybr", options={"xtol": 1e-14})
        res = _circle_residual(sol.x, target, beta, C, Ik)
        if not np.all(np.isfinite(res)) or np.max(np.abs(res)) > 1e-11:
            raise ValueError(f"circle_branch: no solution found at r1 = {target:g} "
                             f"(residual {np.max(np.abs(res)):.1e})")
        guess = sol.x
        kappas.append(sol.x[0])
        rs.append(np.concatenate([[target], sol.x[1:]]))
    return np.array(kappas), np.array(rs)


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
    beta = _sphere.beta(beta)
    kappa = _checks.positive_float(kappa, "kappa")
    r = _checks.real_array(r, "r").ravel()
    if r.size < 1 or not np.all(np.isfinite(r)):
        raise ValueError("r must be a finite vector of Fourier coefficients")
    grid = _checks.positive_int(grid, "grid")
    if grid < 64:
        raise ValueError(f"grid must be at least 64, got {grid}")
    ks = np.arange(1, r.size + 1)
    Ik = ive(ks, beta) * math.exp(beta)
    theta = _circle_grid(grid)
    C = np.cos(np.outer(ks, theta))
    U = (2.0 * kappa / beta) * (Ik * r) @ C
    w = np.exp(U - U.max())
    rho = w / w.mean()  # density w.r.t. the uniform probability measure
    entropy = np.mean(rho * np.log(rho))
    # every Fourier coefficient of rho that the kernel sees (I_k > 1e-17 I_1, k < grid / 2)
    top = r.size
    while top < grid // 2 - 1 and ive(top + 1, beta) > 1e-17 * ive(1, beta):
        top += 1
    ks = np.arange(1, top + 1)
    Ik = ive(ks, beta) * math.exp(beta)
    c = np.cos(np.outer(ks, theta)) @ rho / grid  # its own Fourier coefficients r_k(rho)
    # (1/2beta) iint e^{beta cos}: I_0 + 2 sum I_k c_k^2 (even law), minus the uniform I_0
    interaction = (2.0 * np.sum(Ik * c * c)) / (2.0 * beta)
    return float(entropy / kappa - interaction)
