r"""The minimiser of the interaction energy on the circle, computed from its Fourier series.

On :math:`\mathbb S^1`, with :math:`x = (\cos\theta, \sin\theta)` in the eigenbasis of a
symmetric :math:`D = \mathrm{diag}(\lambda_1, \lambda_2)`, :math:`\lambda_1 \ge \lambda_2`,

.. math::

    \langle x, Dy\rangle = A\cos(\theta - \varphi) + B\cos(\theta + \varphi), \qquad
    A = \frac{\lambda_1 + \lambda_2}{2}, \quad B = \frac{\lambda_1 - \lambda_2}{2},

and the generating function :math:`e^{z\cos s} = \sum_j I_j(z)e^{ijs}` of the modified Bessel
functions turns the potential :math:`U_\mu(\theta) = \int e^{\beta\langle x, Dy\rangle}\,d\mu(y)`
of a measure with Fourier coefficients :math:`\hat\mu(m) = \int e^{-im\varphi}d\mu(\varphi)`
into

.. math::

    U_\mu(\theta) = \sum_{j, l} I_j(\beta A)\, I_l(\beta B)\, e^{i(j + l)\theta}\,
    \hat\mu(j - l).

A measure even under :math:`\theta \mapsto -\theta` and :math:`\theta \mapsto \theta + \pi`
(the symmetries of :math:`D`, which every minimiser has when :math:`D \succ 0`) has only the
real coefficients :math:`c_k = \hat\mu(2k) = c_{-k}`, and its potential is constant iff its
Fourier coefficient of order :math:`2p` vanishes for every :math:`p \ge 1`:

.. math::

    \sum_{k \in \mathbb Z} I_{p+k}(\beta A)\, I_{p-k}(\beta B)\, c_{|k|} = 0
    \quad (p = 1, 2, \dots), \qquad c_0 = 1.

:func:`circle_minimiser` solves this system truncated at ``modes`` coefficients (derived in
chapter 7). When the resulting density is positive it is the unique minimiser of the energy
over all probability measures: a positive density with constant potential satisfies the
first-order condition of a strictly convex problem. The system is severely ill-conditioned
(the kernel is analytic, so its high modes barely change the potential): in double precision
its condition number grows like :math:`10^{N/2}` with the number :math:`N` of modes, while the
coefficients decay only geometrically, like :math:`(B/A)^k`. It is therefore solved in
multiple-precision arithmetic (mpmath, which SymPy installs) and rounded to double precision
at the end; the energy, which depends on the coefficients only through a rapidly convergent
sum, is accurate to rounding.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from . import _checks

__all__ = ["CircleMinimiser", "circle_minimiser"]

#: Largest number of Fourier modes :func:`circle_minimiser` accepts.
MAX_MODES = 200


def _eigen(D):
    D = _checks.matrix(D, "D", shape=(2, 2))
    if not np.allclose(D, D.T, rtol=0, atol=1e-12 * max(1.0, np.abs(D).max())):
        raise ValueError("D must be symmetric")
    lam, U = np.linalg.eigh((D + D.T) / 2)
    if lam[0] <= 0:
        raise ValueError(f"D must be positive definite (the energy is then strictly convex), "
                         f"got eigenvalues {lam[0]:.6g} and {lam[1]:.6g}")
    top = U[:, 1]
    return float(lam[1]), float(lam[0]), float(np.arctan2(top[1], top[0]))


def _solve(rows, N):
    """Gaussian elimination with partial pivoting on the augmented rows (in place)."""
    for j in range(N):
        piv = max(range(j, N), key=lambda i: abs(rows[i][j]))
        rows[j], rows[piv] = rows[piv], rows[j]
        head = rows[j]
        if head[j] == 0:
            raise ArithmeticError("the Fourier system is singular at this precision; raise dps")
        for i in range(j + 1, N):
            f = rows[i][j] / head[j]
            if f:
                ri = rows[i]
                for m in range(j + 1, N + 1):
                    ri[m] -= f * head[m]
    c = [None] * N
    for j in range(N - 1, -1, -1):
        acc = rows[j][N]
        for m in range(j + 1, N):
            acc -= rows[j][m] * c[m]
        c[j] = acc / rows[j][j]
    return c


def _modes_needed(ratio, tol):
    if ratio == 0.0:
        return 1
    return int(math.ceil(math.log(tol) / math.log(ratio))) + 5


class CircleMinimiser:
    r"""The measure with constant potential on :math:`\mathbb S^1` (see :func:`circle_minimiser`).

    Attributes: ``beta``, ``eigenvalues`` :math:`(\lambda_1, \lambda_2)`, ``angle`` (the
    angle of the top eigenvector :math:`v_1` of :math:`D`), ``coefficients``
    :math:`c_k = \hat\mu(2k)`, :math:`k = 0, \dots, N`, in the eigenbasis (``c[0] = 1``),
    ``energy`` :math:`E_\beta = \frac{1}{2\beta}U` with :math:`U` the constant potential.
    """

    def __init__(self, beta, eigenvalues, angle, coefficients, energy):
        self.beta = beta
        self.eigenvalues = eigenvalues
        self.angle = angle
        self.coefficients = coefficients
        self.energy = energy

    @property
    def modes(self):
        """Number :math:`N` of Fourier coefficients kept (besides :math:`c_0 = 1`)."""
        return self.coefficients.size - 1

    def _relative(self, theta):
        t = np.asarray(theta, dtype=np.float64)
        if not np.all(np.isfinite(t)):
            raise ValueError("theta must be finite")
        return t - self.angle

    def density(self, theta):
        r"""Density with respect to the uniform measure :math:`\sigma` at the angles ``theta``.

        .. math::  \frac{d\mu}{d\sigma}(\theta) = 1 + 2\sum_{k=1}^N c_k\cos(2k(\theta - \theta_1)),

        :math:`\theta_1` the angle of the top eigenvector (``angle``); it integrates to one
        against :math:`d\theta/2\pi`.
        """
        u = self._relative(theta)
        k = np.arange(1, self.modes + 1)
        c = self.coefficients[1:]
        return 1.0 + 2.0 * np.cos(2.0 * np.multiply.outer(u, k)) @ c

    def cdf(self, theta):
        r"""Mass of the arc :math:`[-\pi, \theta]`, for ``theta`` in :math:`[-\pi, \pi]`.

        .. math::  F(\theta) = G(\theta - \theta_1) - G(-\pi - \theta_1), \quad
                   G(u) = \frac{u}{2\pi} + \sum_{k=1}^N \frac{c_k\sin(2ku)}{2\pi k}.
        """
        t = np.asarray(theta, dtype=np.float64)
        if not np.all(np.isfinite(t)) or np.any(np.abs(t) > np.pi + 1e-12):
            raise ValueError("theta must lie in [-pi, pi]")
        k = np.arange(1, self.modes + 1)
        c = self.coefficients[1:] / k

        def G(u):
            return (u + np.sin(2.0 * np.multiply.outer(u, k)) @ c) / (2.0 * np.pi)

        return G(t - self.angle) - G(-np.pi - self.angle)

    def potential(self, theta, nodes=1024):
        r"""Potential :math:`U(\theta) = \int e^{\beta\langle x, Dy\rangle}\,d\mu(y)` by quadrature.

        The trapezoidal rule on ``nodes`` equally spaced angles, applied to the density; the
        integrand is analytic and periodic, so the rule converges exponentially. Independent
        of the linear system: a constant result checks that the coefficients solve it.
        """
        nodes = _checks.positive_int(nodes, "nodes")
        t = np.asarray(theta, dtype=np.float64)
        if not np.all(np.isfinite(t)):
            raise ValueError("theta must be finite")
        phi = 2.0 * np.pi * np.arange(nodes) / nodes
        w = self.density(phi) / nodes
        lam1, lam2 = self.eigenvalues
        u, v = t - self.angle, phi - self.angle
        logits = self.beta * (lam1 * np.multiply.outer(np.cos(u), np.cos(v))
                              + lam2 * np.multiply.outer(np.sin(u), np.sin(v)))
        return np.exp(logits) @ w

    def kolmogorov_distance(self, angles, weights):
        r"""Largest gap :math:`\sup_\theta |F_w(\theta) - F(\theta)|` between arc masses.

        ``weights`` (summing to one) carried by the points of ``angles`` (in
        :math:`[-\pi, \pi]`), against :func:`cdf`: the supremum is attained at an atom, from
        the left or from the right.
        """
        a = np.asarray(angles, dtype=np.float64)
        if a.ndim != 1:
            raise ValueError("angles must be a 1-D array")
        w = _checks.weights(weights, a.size)
        order = np.argsort(a)
        a, w = a[order], w[order]
        right = np.cumsum(w)
        F = self.cdf(a)
        return float(max(np.max(np.abs(right - F)), np.max(np.abs(right - w - F))))


def circle_minimiser(beta: float, D: ArrayLike, *, modes: int | None = None,
                     tol: float = 1e-17, dps: int | None = None) -> CircleMinimiser:
    r"""The measure on :math:`\mathbb S^1` whose potential is constant, for :math:`D \succ 0`.

    Solves the linear system of the module notes for the even Fourier coefficients
    :math:`c_k = \hat\mu(2k)`, :math:`k = 1, \dots, N`, of a measure with
    :math:`\int e^{\beta\langle x, Dy\rangle}\,d\mu(y)` constant in :math:`x`, in
    ``dps``-digit arithmetic (default :math:`30 + 0.6N`), and returns a
    :class:`CircleMinimiser`. ``D`` is a symmetric positive definite 2 x 2 matrix. ``modes``
    (default: enough for :math:`(B/A)^N <` ``tol``, the asymptotic decay of the coefficients)
    is at most :data:`MAX_MODES`.

    The energy :math:`E_\beta(\mu) = \frac{1}{2\beta}\iint e^{\beta\langle x, Dy\rangle}\,
    d\mu\,d\mu` (the convention of :func:`transformer_pde.sphere.energy`) equals
    :math:`\frac{1}{2\beta}\sum_k I_k(\beta A)I_k(\beta B)c_{|k|}`, the constant value of the
    potential over :math:`2\beta`. If ``density`` is positive, :math:`\mu` is the unique
    minimiser of :math:`E_\beta` over probability measures (chapter 7).

    Parameters
    ----------
    beta : float
        The inverse temperature :math:`\beta > 0`.
    D : array_like, shape (2, 2)
        Symmetric positive definite interaction matrix.
    modes : int, optional
        Number :math:`N` of Fourier coefficients, at most :data:`MAX_MODES`.
    tol : float
        Target size of the first neglected coefficient when ``modes`` is not given.
    dps : int, optional
        Decimal digits of the multiple-precision solve.

    Returns
    -------
    CircleMinimiser
        The coefficients, the density, the potential and the energy of the measure.

    Examples
    --------
    >>> import numpy as np
    >>> m = circle_minimiser(1.0, np.diag([2.0, 1.0]))
    >>> bool(m.density(np.linspace(-np.pi, np.pi, 64)).min() > 0)  # hence the minimiser
    True
    >>> U = m.potential(np.linspace(-np.pi, np.pi, 9))
    >>> bool(np.ptp(U) < 1e-12 * U.max())  # constant potential, by an independent quadrature
    True
    """
    import mpmath

    try:
        beta = float(beta)
    except (TypeError, ValueError):
        raise ValueError(f"beta must be a number, got {beta!r}") from None
    if not (np.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    lam1, lam2, angle = _eigen(D)
    tol = _checks.positive_float(tol, "tol")
    ratio = (lam1 - lam2) / (lam1 + lam2)
    N = _modes_needed(ratio, tol) if modes is None else _checks.positive_int(modes, "modes")
    if N > MAX_MODES:
        raise ValueError(f"{N} Fourier modes needed (the coefficients decay like "
                         f"{ratio:.3g}^k), more than {MAX_MODES}: D is too close to singular")
    dps = 30 + int(0.6 * N) if dps is None else _checks.positive_int(dps, "dps")
    with mpmath.workdps(dps):
        a = mpmath.mpf(beta) * (mpmath.mpf(lam1) + mpmath.mpf(lam2)) / 2
        b = mpmath.mpf(beta) * (mpmath.mpf(lam1) - mpmath.mpf(lam2)) / 2
        IA = [mpmath.besseli(j, a) for j in range(2 * N + 1)]
        IB = [mpmath.besseli(j, b) for j in range(2 * N + 1)]
        rows = []
        for p in range(1, N + 1):
            row = [mpmath.mpf(0)] * (N + 1)  # coefficients of c_1..c_N, then the right side
            for k in range(-N, N + 1):
                coef = IA[abs(p + k)] * IB[abs(p - k)]
                if k == 0:
                    row[N] -= coef
                else:
                    row[abs(k) - 1] += coef
            scale = max(abs(v) for v in row[:N])  # rows of very different sizes
            rows.append([v / scale for v in row])
        c = _solve(rows, N)
        U = IA[0] * IB[0] + 2 * mpmath.fsum(IA[k] * IB[k] * c[k - 1] for k in range(1, N + 1))
        energy = float(U / (2 * beta))
        coefficients = np.array([1.0] + [float(v) for v in c])
    return CircleMinimiser(beta, (lam1, lam2), angle, coefficients, energy)
