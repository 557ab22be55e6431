r"""Minimising the interaction energy over measures carried by a fixed grid (chapter 7).

Among the measures :math:`\mu = \sum_k w_k\delta_{y_k}` on points :math:`y_1, \dots, y_m`
of the sphere, the energy of :func:`transformer_pde.sphere.energy` is the quadratic form
:math:`E(w) = \frac{1}{2\beta}w^\top Kw`, :math:`K_{kl} = e^{\beta\langle y_k, Dy_l\rangle}`, on
the simplex. For symmetric :math:`D \succeq 0` the kernel is positive semidefinite (expand the
exponential: :math:`\langle x, Dy\rangle^k` is the inner product of
:math:`(D^{1/2}x)^{\otimes k}` and :math:`(D^{1/2}y)^{\otimes k}`) and the problem is convex:

- :func:`energy_nnls` solves it exactly, as a non-negative least-squares problem (the
  active-set method of Lawson and Hanson, 1974, through :func:`scipy.optimize.nnls`);
- :func:`energy_gap` is the Frank-Wolfe gap of any weights, an upper bound on
  :math:`E(w) - \min E`;
- :func:`moment_tensor` and :func:`moment_bound` turn a gap into a certificate on the moments
  :math:`m_k(\mu) = \int (D^{1/2}x)^{\otimes k}\,d\mu`, which is all the energy can see:
  :math:`\frac{\beta^k}{k!}|m_k(\mu) - m_k(\mu^*)|^2 \le 2\beta\,(E(\mu) - E(\mu^*))`.

:func:`transformer_pde.sphere.energy_mirror_descent` is the iterative alternative.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import nnls

from . import _checks, _sphere

__all__ = ["energy_nnls", "energy_gap", "moment_tensor", "moment_bound"]


def _kernel(Y, beta, D):
    Y = _checks.points(Y, "Y")
    beta = _sphere.beta(beta)
    D = _sphere.interaction_matrix(D, Y.shape[1])
    if not np.allclose(D, D.T, rtol=0, atol=1e-12 * max(1.0, np.abs(D).max())):
        raise ValueError("D must be symmetric")
    return Y, beta, D, _sphere.exp_logits(beta * (Y @ D @ Y.T))


def _psd_root(D, name="D"):
    lam, U = np.linalg.eigh((D + D.T) / 2)
    if lam.min() < -1e-12 * max(1.0, abs(lam).max()):
        raise ValueError(f"{name} must be positive semidefinite (the problem is then convex), "
                         f"got an eigenvalue {lam.min():.3g}")
    return (U * np.sqrt(np.clip(lam, 0.0, None))) @ U.T


class GridMinimum(tuple):
    """``(weights, energy, gap)`` of :func:`energy_nnls`."""

    __slots__ = ()

    def __new__(cls, weights, energy, gap):
        return super().__new__(cls, (weights, energy, gap))

    weights = property(lambda self: self[0])
    energy = property(lambda self: self[1])
    gap = property(lambda self: self[2])


def energy_nnls(Y: ArrayLike, beta: float = 1.0, D: ArrayLike | None = None, *,
                maxiter: int | None = None) -> tuple[NDArray[np.float64], float, float]:
    r"""Exact minimiser of the energy over the weights on the points ``Y`` (:math:`D \succeq 0`).

    With :math:`K = B^\top B` (:math:`B` the symmetric square root of the positive
    semidefinite kernel matrix), minimise :math:`|Bu|^2 + (\mathbf 1^\top u - 1)^2` over
    :math:`u \ge 0` by non-negative least squares (Lawson and Hanson, 1974). Writing
    :math:`u = s w` with :math:`w` in the simplex, the minimum over :math:`s \ge 0` is
    :math:`|Bw|^2/(1 + |Bw|^2)`, increasing in :math:`|Bw|^2 = w^\top Kw`: so
    :math:`w = u/\mathbf 1^\top u` minimises :math:`E(w) = \frac{1}{2\beta}w^\top Kw` on the
    simplex (derived in chapter 7). Requires symmetric :math:`D \succeq 0` (else
    :class:`ValueError`).

    Parameters
    ----------
    Y : array_like, shape (m, d)
        The points :math:`y_k` of the grid, on the sphere.
    beta : float
        The inverse temperature :math:`\beta > 0`.
    D : array_like, shape (d, d), optional
        The symmetric positive semidefinite interaction matrix (identity by default).
    maxiter : int, optional
        Iteration limit of :func:`scipy.optimize.nnls` (default ``50 m``).

    Returns
    -------
    GridMinimum
        ``(weights, energy, gap)``: the minimising weights (summing to one), the energy
        :math:`E(w)`, and the Frank-Wolfe gap of :func:`energy_gap` (zero up to rounding at an
        exact minimiser).

    Examples
    --------
    >>> import numpy as np
    >>> t = np.linspace(0, 2 * np.pi, 8, endpoint=False)
    >>> Y = np.column_stack([np.cos(t), np.sin(t)])  # a regular octagon on the circle
    >>> w, E, gap = energy_nnls(Y, beta=1.0)
    >>> bool(np.allclose(w, 1 / 8)), gap < 1e-12  # symmetry: the uniform weights
    (True, True)

    References
    ----------
    C. L. Lawson and R. J. Hanson, *Solving Least Squares Problems*, Prentice-Hall, 1974.
    """
    Y, beta, D, K = _kernel(Y, beta, D)
    _psd_root(D)
    m = Y.shape[0]
    lam, U = np.linalg.eigh(K)
    B = (U * np.sqrt(np.clip(lam, 0.0, None))) @ U.T
    A = np.vstack([B, np.ones((1, m))])
    b = np.zeros(m + 1)
    b[-1] = 1.0
    maxiter = 50 * m if maxiter is None else _checks.positive_int(maxiter, "maxiter")
    u, _ = nnls(A, b, maxiter=maxiter)
    if not u.sum() > 0:
        raise RuntimeError("the non-negative least-squares solution is zero")
    w = u / u.sum()
    g = K @ w / beta
    return GridMinimum(w, float(0.5 * w @ g), float(w @ g - g.min()))


def energy_gap(Y: ArrayLike, weights: ArrayLike, beta: float = 1.0,
               D: ArrayLike | None = None) -> float:
    r"""Frank-Wolfe gap :math:`\langle\nabla E(w), w\rangle - \min_k \partial_k E(w)`.

    For :math:`E(w) = \frac{1}{2\beta}w^\top Kw` on the simplex (points ``Y``), with
    :math:`\nabla E = Kw/\beta`. For convex :math:`E` (:math:`D \succeq 0`),
    :math:`E(w) - \min E \le` gap (Jaggi, 2013): a certificate of near-optimality.

    Parameters
    ----------
    Y : array_like, shape (m, d)
        The points of the grid, on the sphere.
    weights : array_like, shape (m,)
        Non-negative weights summing to one.
    beta : float
        The inverse temperature :math:`\beta > 0`.
    D : array_like, shape (d, d), optional
        The symmetric interaction matrix (identity by default).

    Returns
    -------
    float
        The gap, non-negative; an upper bound on :math:`E(w) - \min E` when
        :math:`D \succeq 0`.

    Examples
    --------
    >>> import numpy as np
    >>> t = np.linspace(0, 2 * np.pi, 8, endpoint=False)
    >>> Y = np.column_stack([np.cos(t), np.sin(t)])  # a regular octagon on the circle
    >>> energy_gap(Y, np.full(8, 1 / 8)) < 1e-12  # the minimiser
    True
    >>> round(energy_gap(Y, np.eye(8)[0]), 6)  # a point mass: e - 1/e
    2.350402

    References
    ----------
    M. Jaggi, "Revisiting Frank-Wolfe: projection-free sparse convex optimization", ICML 2013.
    """
    Y, beta, D, K = _kernel(Y, beta, D)
    w = _checks.weights(weights, Y.shape[0])
    g = K @ w / beta
    return float(w @ g - g.min())


def moment_tensor(Y: ArrayLike, weights: ArrayLike, k: int,
                  D: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""Moment tensor :math:`m_k = \sum_i w_i (D^{1/2}y_i)^{\otimes k}`, flattened.

    :math:`D^{1/2}` is the symmetric square root of :math:`D \succeq 0` (identity by default).
    Returns an array of :math:`d^k` entries (:math:`k = 0` gives ``[1.0]``). These are the
    quantities the energy sees: :math:`\iint e^{\beta\langle x, Dy\rangle}d\nu\,d\nu =
    \sum_k \frac{\beta^k}{k!}|m_k(\nu)|^2` for a signed measure :math:`\nu`.

    Parameters
    ----------
    Y : array_like, shape (n, d)
        The points carrying the measure.
    weights : array_like, shape (n,)
        Non-negative weights summing to one.
    k : int
        The degree, :math:`k \ge 0`, with :math:`d^k \le 10^7`.
    D : array_like, shape (d, d), optional
        The symmetric positive semidefinite interaction matrix (identity by default).

    Returns
    -------
    numpy.ndarray, shape (d**k,)
        The flattened tensor :math:`m_k`.

    Examples
    --------
    >>> import numpy as np
    >>> t = np.linspace(0, 2 * np.pi, 8, endpoint=False)
    >>> Y = np.column_stack([np.cos(t), np.sin(t)])  # a regular octagon on the circle
    >>> w = np.full(8, 1 / 8)
    >>> moment_tensor(Y, w, 0)
    array([1.])
    >>> bool(np.allclose(moment_tensor(Y, w, 1), 0))  # centred
    True
    >>> bool(np.allclose(moment_tensor(Y, w, 2), [0.5, 0, 0, 0.5]))  # covariance I/2
    True
    """
    Y = _checks.points(Y, "Y")
    n, d = Y.shape
    w = _checks.weights(weights, n)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be an integer >= 0, got {k!r}")
    if d ** int(k) > 10**7:
        raise ValueError(f"d^k = {d}^{k} entries is too many")
    Z = Y @ _psd_root(_sphere.interaction_matrix(D, d)).T
    T = w.copy()[:, None]  # (n, 1): running tensor powers, flattened
    for _ in range(int(k)):
        T = (T[:, :, None] * Z[:, None, :]).reshape(n, -1)
    return T.sum(axis=0)


def moment_bound(gap: float, beta: float, k: int) -> float:
    r"""Bound on :math:`|m_k(\mu) - m_k(\mu^*)|` from an energy gap, for :math:`D \succeq 0`.

    If :math:`\mu^*` minimises the energy over a convex set of measures containing
    :math:`\mu` (e.g. all measures on a grid), then :math:`E(\mu) = E(\mu^*) +
    \langle\nabla E(\mu^*), \mu - \mu^*\rangle + \frac{1}{2\beta}\iint e^{\beta\langle x,
    Dy\rangle}d(\mu - \mu^*)^{\otimes 2}` with a non-negative middle term, and the last
    integral is :math:`\sum_j \frac{\beta^j}{j!}|m_j(\mu) - m_j(\mu^*)|^2`. Hence

    .. math::  |m_k(\mu) - m_k(\mu^*)| \le \sqrt{2\,k!\,\beta^{1-k}\,(E(\mu) - E(\mu^*))},

    and ``gap`` (e.g. :func:`energy_gap`) bounds :math:`E(\mu) - E(\mu^*)`. Derived in
    chapter 7. The factor :math:`\sqrt{k!/\beta^k}` grows without bound: an energy known to
    :math:`10^{-15}` says nothing about moments of high degree.

    Parameters
    ----------
    gap : float
        A bound on :math:`E(\mu) - E(\mu^*) \ge 0`.
    beta : float
        The inverse temperature :math:`\beta > 0`.
    k : int
        The degree of the moment, :math:`k \ge 0`.

    Returns
    -------
    float
        The bound :math:`\sqrt{2\,k!\,\beta^{1-k}\,\mathrm{gap}}`.

    Examples
    --------
    >>> round(moment_bound(1e-10, 1.0, 2), 12)
    2e-05
    >>> moment_bound(1e-10, 0.1, 12) > 1  # degree 12 at beta = 0.1: nothing certified
    True
    """
    gap = _checks.nonnegative_float(gap, "gap")
    beta = _sphere.beta(beta)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be an integer >= 0, got {k!r}")
    return math.sqrt(2.0 * math.factorial(int(k)) * beta ** (1 - int(k)) * gap)
