r"""Integration of the moment ODE of a Gaussian solution.

:func:`integrate_moments` integrates :math:`(\dot\alpha, \dot\Sigma) = \mathrm{rhs}(\alpha,
\Sigma)`, through a factor :math:`\Sigma = LL^\top` when the right-hand side has an affine
field (so :math:`\Sigma(t)` stays positive semi-definite exactly), stopping on blow-up (with
the time) and on convergence of :math:`\Sigma` (with the limit, its rank and the decay rates
of its eigenvalues); the result is a :class:`MomentTrajectory`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.integrate import BDF, DOP853, LSODA, RK23, RK45, Radau
from scipy.optimize import brentq

from .. import _checks
from .._linalg import psd_sqrt

_SOLVERS = {"RK45": RK45, "RK23": RK23, "DOP853": DOP853, "Radau": Radau, "BDF": BDF,
            "LSODA": LSODA}


# --------------------------------------------------------------------------------------
# integration
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MomentTrajectory:
    r"""Solution of a moment ODE from :func:`integrate_moments`.

    Attributes
    ----------
    times : array (k,)
        The requested times reached, followed by ``t_stop`` when the integration stopped
        between two requested times.
    alpha : array (k, d)
        Means at ``times``.
    Sigma : array (k, d, d)
        Covariances at ``times`` (symmetric PSD).
    status : str
        ``"finished"`` (reached ``times[-1]``), ``"blowup"`` (the second moment
        :math:`|\\alpha|^2 + \\mathrm{tr}\\Sigma` exceeded ``blowup_norm``, or the solver could not
        continue) or ``"converged"`` (:math:`\\Sigma` stopped moving, see ``conv_tol``).
    t_stop : float
        Time at which the integration stopped.
    limit : array (d, d) or None
        For ``"converged"``: :math:`\\Sigma(t_{stop})`, the estimate of the limit.
    rank : int or None
        For ``"converged"``: the numerical rank of ``limit``, the number of its eigenvalues
        that neither vanish (``log_rates`` below ``-rate_threshold``) nor fall below
        ``rank_tol`` times the largest.
    log_rates : array (d,) or None
        For ``"converged"``: for the eigenvalues :math:`\lambda_1 \le \dots \le \lambda_d` of
        :math:`\Sigma`, the average of :math:`d\log\lambda_k / d\log(1 + t - t_0)` over the last
        decade of time before ``t_stop``. An eigenvalue decaying like :math:`t^{-\gamma}` has
        rate :math:`\approx -\gamma` (the clustering regime: :math:`-1`); one converging to a
        positive limit has rate :math:`\approx 0`.

    Examples
    --------
    With :math:`A = \mathrm{diag}(-1, 0)` and :math:`V = I` the first eigenvalue collapses like
    :math:`1/(1 + 2t)` and the second stays at 1, so the limit has rank 1:

    >>> import numpy as np
    >>> from transformer_pde.gaussian import softmax_rhs
    >>> run = integrate_moments(softmax_rhs, [0.0, 0.0], np.eye(2), [0.0, 1e9],
    ...                         args=(np.diag([-1.0, 0.0]), np.eye(2)))
    >>> print(run.status, run.rank, (np.round(run.log_rates, 3) + 0.0).tolist())
    converged 1 [-1.0, 0.0]
    """

    times: np.ndarray
    alpha: np.ndarray
    Sigma: np.ndarray
    status: str
    t_stop: float
    limit: np.ndarray | None
    rank: int | None
    message: str
    log_rates: np.ndarray | None = None


def integrate_moments(rhs: Callable[..., Any], alpha0: ArrayLike, Sigma0: ArrayLike,
                      times: ArrayLike, *, args: tuple = (), formulation: str = "auto",
                      method: str = "DOP853", rtol: float = 1e-10, atol: float = 1e-12,
                      blowup_norm: float | None = None, conv_tol: float = 1e-7,
                      rank_tol: float = 1e-12, rate_threshold: float = 0.5,
                      t_origin: float | None = None) -> MomentTrajectory:
    r"""Integrate the moment ODE :math:`(\dot\alpha, \dot\Sigma) = \mathrm{rhs}(\alpha, \Sigma)`.

    Parameters
    ----------
    rhs : callable
        ``rhs(alpha, Sigma, *args) -> (dalpha, dSigma)``, e.g. :func:`softmax_rhs`.
    alpha0 : array (d,)
        Initial mean.
    Sigma0 : array (d, d)
        Initial covariance (symmetric PSD).
    times : array (k,)
        Strictly increasing output times; ``times[0]`` is the initial time.
    args : tuple
        Extra arguments of ``rhs`` (e.g. ``(A, V)``).
    formulation : {"auto", "factor", "covariance"}
        ``"factor"`` integrates :math:`\dot\alpha = M\alpha + b`, :math:`\dot L = ML` with
        :math:`\Sigma = LL^\top`, :math:`L_0 = \Sigma_0^{1/2}` and :math:`(M, b)` the affine field
        ``rhs.affine_field(alpha, Sigma, *args)``: :math:`L(t)` is the linear part of the
        particles' flow map times :math:`\Sigma_0^{1/2}`, so :math:`\Sigma(t)` is symmetric PSD
        exactly, whatever the step errors. ``"covariance"`` integrates :math:`\Sigma` itself for
        any ``rhs`` (symmetrised at every evaluation) and checks at every output time that its
        smallest eigenvalue is :math:`\ge -10^{-8}\|\Sigma\|_2`, stopping with ``RuntimeError``
        otherwise. ``"auto"``: ``"factor"`` when ``rhs`` has an ``affine_field`` (all
        right-hand sides of this module), else ``"covariance"``.
    method : str
        A solver class of :mod:`scipy.integrate` (``"DOP853"``, ``"RK45"``, ``"LSODA"``,
        ``"BDF"``, ``"Radau"``, ``"RK23"``), stepped one step at a time; the stiff solvers
        (``"LSODA"``) are much faster on the long runs of the clustering regime.
    rtol, atol : float
        Tolerances of the solver.
    blowup_norm : float, optional
        Stop with status ``"blowup"`` when :math:`|\alpha|^2 + \mathrm{tr}\,\Sigma` reaches it
        (default :math:`10^{8}\max(1, |\alpha_0|^2 + \mathrm{tr}\,\Sigma_0)`). Near a blow-up
        :math:`\mathrm{tr}\,\Sigma \sim c/(t^* - t)`, so ``t_stop`` approximates :math:`t^*` to
        relative accuracy about ``1 / blowup_norm``.
    conv_tol : float
        Stop with status ``"converged"`` when :math:`(1 + t - t_0)\|\dot\Sigma\|_F \le
        \text{conv\_tol}\,\max(\|\Sigma\|_F, \|\Sigma_0\|_F)`: the change still to come, at
        the current rate over a time of order :math:`t`, is a fraction ``conv_tol`` of the size
        of :math:`\Sigma` (suited to the :math:`1/t` convergence of the clustering regime,
        including a total collapse :math:`\Sigma \to 0`). Only :math:`\Sigma` is tested: the
        mean may keep moving (e.g. :math:`\alpha(t) = e^{tV}\alpha_0` for Sinkhorn).
    rank_tol : float
        Eigenvalues of the limit below ``rank_tol`` times the largest do not count in its rank.
    t_origin : float, optional
        The origin of the clock :math:`t_0` in the convergence test and in ``log_rates``
        (default ``times[0]``); pass the original start time when continuing a run from a
        later state, so that :math:`1/t` decays are measured on the right clock.
    rate_threshold : float
        An eigenvalue of the limit counts as vanishing when its ``log_rates`` entry is below
        ``-rate_threshold``: over the last decade of time it still decayed at least like
        :math:`t^{-\text{rate\_threshold}}`. In the clustering regime the vanishing eigenvalues
        decay like :math:`1/t` (rate :math:`-1`) and the others have rates near 0, so the
        default ``0.5`` separates them with a wide margin, even when a surviving eigenvalue is
        much smaller than the largest (which defeats a plain threshold on eigenvalues).

    Returns
    -------
    MomentTrajectory

    Raises
    ------
    ValueError
        If ``rhs`` is not callable, the initial moments are not valid, ``times`` is not strictly
        increasing, ``formulation`` or ``method`` is unknown, a tolerance is not positive,
        ``blowup_norm`` does not exceed the initial second moment, or ``t_origin`` is later than
        ``times[0]``.
    RuntimeError
        With ``formulation="covariance"``, if :math:`\Sigma` loses positive semi-definiteness.

    Examples
    --------
    Softmax attention with :math:`V = I`, :math:`\Sigma_0 = I` and
    :math:`A = \mathrm{diag}(1, -1)` blows up at :math:`t^* = 1/2`
    (:func:`~transformer_pde.gaussian.softmax_identity_blowup_time`):

    >>> import numpy as np
    >>> from transformer_pde.gaussian import softmax_rhs
    >>> run = integrate_moments(softmax_rhs, [1.0, 0.0], np.eye(2), [0.0, 1.0],
    ...                         args=(np.diag([1.0, -1.0]), np.eye(2)))
    >>> print(run.status, f"{run.t_stop:.4f}")
    blowup 0.5000

    References
    ----------
    :cite:`castin2025unified,hairer1993solving,virtanen2020scipy`
    """
    alpha0, Sigma0, t, formulation = _integration_inputs(rhs, alpha0, Sigma0, times,
                                                         formulation, method)
    conv_tol = _checks.positive_float(conv_tol, "conv_tol")
    rank_tol = _checks.positive_float(rank_tol, "rank_tol")
    rate_threshold = _checks.positive_float(rate_threshold, "rate_threshold")
    rtol = _checks.positive_float(rtol, "rtol")  # a NaN tolerance crashes LSODA
    atol = _checks.nonnegative_float(atol, "atol")
    m2_0 = float(alpha0 @ alpha0 + np.trace(Sigma0))
    if blowup_norm is None:
        blowup_norm = 1e8 * max(1.0, m2_0)
    blowup_norm = _checks.positive_float(blowup_norm, "blowup_norm")
    if blowup_norm <= m2_0:
        raise ValueError(f"blowup_norm must exceed the initial second moment {m2_0:.4g}")
    ode = _MomentODE(rhs, tuple(args), alpha0, Sigma0, formulation, blowup_norm)
    t0 = float(t[0]) if t_origin is None else float(t_origin)
    if t0 > t[0]:
        raise ValueError("t_origin must not be later than times[0]")
    run = _MomentRun(ode, t, t0, conv_tol)
    # already at rest?
    t_start = float(t[0])
    rate0, size0 = ode.sigma_rate(ode.y0)
    if (1.0 + t_start - t0) * rate0 <= conv_tol * size0:
        run.times_out, run.ys, run.t_stop = [t_start], [ode.y0], t_start
        run.status, run.message = "converged", f"Sigma is stationary at t = {t_start:.6g}"
    else:
        run.integrate(_SOLVERS[method](ode.flow, t_start, ode.y0, float(t[-1]), rtol=rtol,
                                       atol=atol), size0)
    return run.trajectory(rank_tol, rate_threshold)


def _integration_inputs(rhs, alpha0, Sigma0, times, formulation, method):
    """Validated ``(alpha0, Sigma0, times, formulation)`` of :func:`integrate_moments`."""
    if not callable(rhs):
        raise ValueError("rhs must be callable as rhs(alpha, Sigma, *args)")
    alpha0, Sigma0 = _checks.moments(alpha0, Sigma0, "alpha0", "Sigma0")
    t = _checks.increasing_times(times)
    if formulation == "auto":
        formulation = "factor" if hasattr(rhs, "affine_field") else "covariance"
    if formulation not in ("factor", "covariance"):
        raise ValueError("formulation must be 'auto', 'factor' or 'covariance', "
                         f"got {formulation!r}")
    if formulation == "factor" and not hasattr(rhs, "affine_field"):
        raise ValueError("formulation='factor' needs rhs.affine_field(alpha, Sigma, *args) "
                         "-> (M, b)")
    if method not in _SOLVERS:
        raise ValueError(f"method must be one of {tuple(_SOLVERS)}, got {method!r}")
    return alpha0, Sigma0, t, formulation


class _MomentODE:
    r"""The moment ODE as one first-order system for the solvers of :mod:`scipy.integrate`.

    ``"factor"``: the state is :math:`(\alpha, L)` with :math:`\Sigma = LL^\top`,
    :math:`\dot\alpha = M\alpha + b`, :math:`\dot L = ML`, :math:`(M, b)` the affine field;
    ``"covariance"``: the state is :math:`(\alpha, \Sigma)`, symmetrised at every evaluation.
    """

    def __init__(self, rhs, args, alpha0, Sigma0, formulation, blowup_norm):
        self.rhs, self.args, self.formulation = rhs, args, formulation
        self.d = alpha0.size
        self.blowup_norm = blowup_norm
        if formulation == "factor":
            rhs.affine_field(alpha0, Sigma0, *args)  # validates the parameters once
            self.field = getattr(rhs, "_unchecked_field", rhs.affine_field)
            self.args = tuple(a if np.isscalar(a) else np.asarray(a, dtype=np.float64)
                              for a in args)
            self.y0 = np.concatenate([alpha0, psd_sqrt(Sigma0).ravel()])
            self.flow = self._factor_flow
        else:
            self.y0 = np.concatenate([alpha0, Sigma0.ravel()])
            self.flow = self._covariance_flow

    def unpack(self, y):
        """``(alpha, Sigma)`` of a state."""
        d = self.d
        if self.formulation == "factor":
            L = y[d:].reshape(d, d)
            return y[:d], L @ L.T
        S = y[d:].reshape(d, d)
        return y[:d], 0.5 * (S + S.T)

    def _factor_flow(self, s, y):  # the solver's inner loop: few NumPy calls, no concatenation
        d = self.d
        alpha, L = y[:d], y[d:].reshape(d, d)
        M, b = self.field(alpha, L @ L.T, *self.args)
        out = np.empty_like(y)
        np.dot(M, alpha, out=out[:d])
        out[:d] += b
        np.dot(M, L, out=out[d:].reshape(d, d))
        return out

    def _covariance_flow(self, s, y):
        alpha, Sigma = self.unpack(y)
        da, dS = self.rhs(alpha, Sigma, *self.args)
        dS = np.asarray(dS, dtype=np.float64)
        return np.concatenate([np.asarray(da, dtype=np.float64), (0.5 * (dS + dS.T)).ravel()])

    def second_moment(self, y):
        r""":math:`|\alpha|^2 + \mathrm{tr}\,\Sigma` minus the blow-up level."""
        alpha, Sigma = self.unpack(y)
        return float(alpha @ alpha + np.trace(Sigma)) - self.blowup_norm

    def sigma_rate(self, y):
        r""":math:`(\|\dot\Sigma\|_F, \|\Sigma\|_F)` at a state."""
        alpha, Sigma = self.unpack(y)
        if self.formulation == "factor":
            MS = self.field(alpha, Sigma, *self.args)[0] @ Sigma
            dS = MS + MS.T
        else:
            dS = np.asarray(self.rhs(alpha, Sigma, *self.args)[1], dtype=np.float64)
        return np.linalg.norm(dS), np.linalg.norm(Sigma)


class _MomentRun:
    """One run of :func:`integrate_moments`: the solver's steps, the stopping tests, the
    states at the requested times and the history of states (for the decay rates)."""

    def __init__(self, ode, t, t0, conv_tol):
        self.ode, self.t, self.t0, self.conv_tol = ode, t, t0, conv_tol
        self.history = [(float(t[0]), ode.y0)]  # (time, state) after every step
        self.times_out, self.ys = [float(t[0])], [ode.y0]
        self.status, self.message = "finished", f"reached t = {float(t[-1]):.6g}"
        self.t_stop = float(t[-1])

    def integrate(self, solver, size0):
        """Step ``solver`` until the last requested time, a blow-up or convergence."""
        ode, t = self.ode, self.t
        k = 1  # next requested time
        y_stop = None
        with np.errstate(over="ignore", invalid="ignore"):
            while solver.status == "running":
                t_old = solver.t
                solver.step()
                if solver.status == "failed" or not np.all(np.isfinite(solver.y)):
                    self.status = "blowup"
                    why = "step size too small" if solver.status == "failed" else "overflow"
                    self.message = f"the solver stopped at t = {t_old:.6g}: {why}"
                    t_stop, y_stop = t_old, self.history[-1][1]
                    break
                t_new, y_new = solver.t, solver.y.copy()
                dense = solver.dense_output()
                t_stop, y_stop = self._stop_test(t_old, t_new, y_new, dense, size0)
                while k < t.size and t[k] <= t_stop:
                    self.times_out.append(float(t[k]))
                    self.ys.append(y_new if t[k] == t_new else dense(t[k]))
                    k += 1
                self.history.append((t_new, y_new))
                if self.status != "finished":
                    break
        if self.status != "finished":
            self.t_stop = t_stop
            if t_stop > self.times_out[-1]:
                self.times_out.append(float(t_stop))
                self.ys.append(y_stop)
        if ode.formulation == "covariance":
            self._check_psd()

    def _stop_test(self, t_old, t_new, y_new, dense, size0):
        """Blow-up (located by root finding on the dense output) or convergence after a step;
        returns ``(t_stop, y_stop)``, the step's end unless a blow-up came earlier."""
        ode = self.ode
        t_stop, y_stop = t_new, y_new
        if ode.second_moment(y_new) >= 0:
            self.status = "blowup"
            if ode.second_moment(dense(t_old)) < 0:
                t_stop = brentq(lambda s, f=dense: ode.second_moment(f(s)), t_old, t_new,
                                xtol=1e-14 * max(1.0, abs(t_new)), rtol=1e-15)
                y_stop = dense(t_stop)
            alpha, Sigma = ode.unpack(y_stop)
            part = "covariance" if np.trace(Sigma) >= alpha @ alpha else "mean"
            self.message = (f"blow-up at t = {t_stop:.6g}: |alpha|^2 + tr Sigma reached "
                            f"{ode.blowup_norm:.3g} (dominated by the {part})")
        else:
            rate, size = ode.sigma_rate(y_new)
            if (1.0 + t_new - self.t0) * rate <= self.conv_tol * max(size, size0):
                self.status = "converged"
                self.message = (f"Sigma converged at t = {t_new:.6g} "
                                f"(relative rate below {self.conv_tol:.3g})")
        return t_stop, y_stop

    def _check_psd(self):
        for s_, y in zip(self.times_out, self.ys, strict=True):
            lam = np.linalg.eigvalsh(self.ode.unpack(y)[1])
            if lam[0] < -1e-8 * max(abs(lam[-1]), 1e-300):
                raise RuntimeError(f"Sigma lost positive semi-definiteness at t = {s_:.6g} "
                                   f"(smallest eigenvalue {lam[0]:.3g}); use "
                                   "formulation='factor' or smaller tolerances")

    def decay_rates(self, Sigma_stop):
        """Average of d log(lambda_k) / d log(1 + t - t0) over the last decade of time."""
        t0, t_stop = self.t0, self.t_stop
        target = t0 - 1.0 + (1.0 + t_stop - t0) / 10.0
        t_ref, y_ref = min(self.history, key=lambda h: abs(h[0] - target))
        span = np.log((1.0 + t_stop - t0) / (1.0 + t_ref - t0))
        lam_stop = np.linalg.eigvalsh(Sigma_stop)
        lam_ref = np.linalg.eigvalsh(self.ode.unpack(y_ref)[1])
        tiny = np.finfo(float).tiny
        if span <= 0:
            return np.zeros(self.ode.d), lam_stop
        ratio = np.clip(lam_stop, tiny, None) / np.clip(lam_ref, tiny, None)
        return np.log(ratio) / span, lam_stop

    def trajectory(self, rank_tol, rate_threshold):
        """The :class:`MomentTrajectory` of the run (limit, rank and rates when converged)."""
        d = self.ode.d
        ys = np.asarray(self.ys).reshape(len(self.times_out), -1)
        Sigmas = np.array([self.ode.unpack(y)[1] for y in ys])
        limit = rank = rates = None
        if self.status == "converged":
            limit = Sigmas[-1]
            rates, lam = self.decay_rates(limit)
            scale = max(lam[-1], np.finfo(float).tiny)
            rank = int(np.sum((rates >= -rate_threshold) & (lam > rank_tol * scale)))
        return MomentTrajectory(np.asarray(self.times_out, dtype=np.float64), ys[:, :d], Sigmas,
                                self.status, float(self.t_stop), limit, rank, self.message,
                                rates)


