r"""Wasserstein distances between weighted point clouds, through POT.

An empirical measure is an array ``X`` of shape ``(n, d)`` (atoms are rows) with optional
``weights`` of shape ``(n,)`` (default uniform; non-negative, summing to one), as everywhere
in the library. Three distances:

- :func:`wasserstein`: the exact :math:`W_p`, by the network simplex of :func:`ot.emd2`
  (Flamary et al., 2021; Peyré and Cuturi, 2019);
- :func:`sliced_wasserstein`: the sliced :math:`SW_p`, a Monte Carlo average over random
  directions of one-dimensional distances (Bonneel et al., 2015), seeded;
- :func:`conditional_wasserstein`: a binned estimator of the conditional distance
  :math:`(\int_0^1 W_p(\mu_s, \nu_s)^p \, ds)^{1/p}` between measures on
  :math:`[0, 1] \times \mathbb{R}^d` with the same first marginal. Castin, Ablin, Carrillo
  and Peyré (2025) handle masked (causal) attention in a conditional Wasserstein framework
  (FoCM abstract); this distance is our reading of that framework, not checked against the
  paper's text.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import ot
from numpy.typing import ArrayLike, NDArray
from scipy.spatial.distance import cdist

from . import _checks

__all__ = ["wasserstein", "sliced_wasserstein", "conditional_wasserstein", "cost_matrix"]


def _order(p):
    """The order ``p >= 1`` of a Wasserstein distance, as a float."""
    try:
        val = float(p)
    except (TypeError, ValueError):
        raise ValueError(f"p must be a number >= 1, got {p!r}") from None
    if not np.isfinite(val) or val < 1:
        raise ValueError(f"p must be a finite number >= 1 (W_p is a distance for p >= 1), "
                         f"got {p!r}")
    return val


def _two_measures(X, Y, weights_x, weights_y):
    """Validate two weighted point clouds in the same dimension; return ``(X, Y, a, b)``."""
    X = _checks.points(X, "X")
    Y = _checks.points(Y, "Y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X and Y must have the same dimension d, got X of shape {X.shape} "
                         f"and Y of shape {Y.shape}")
    a = _checks.weights(weights_x, X.shape[0], "weights_x")
    b = _checks.weights(weights_y, Y.shape[0], "weights_y")
    return X, Y, a, b


def cost_matrix(X: ArrayLike, Y: ArrayLike, p: float = 2) -> NDArray[np.float64]:
    r"""The cost matrix :math:`M_{ij} = |x_i - y_j|^p` (Euclidean norm), shape ``(n, m)``.

    Computed by :func:`scipy.spatial.distance.cdist` from the exact differences (not from
    :math:`|x|^2 + |y|^2 - 2\langle x,y\rangle`, which loses all relative accuracy for
    nearby points), in memory ``O(n m)``.

    Parameters
    ----------
    X : array (n, d)
        First points.
    Y : array (m, d)
        Second points.
    p : float
        Exponent, ``p >= 1``.

    Returns
    -------
    array (n, m)

    Raises
    ------
    ValueError
        If the points are not finite 2-D arrays of the same dimension or ``p < 1``.

    Examples
    --------
    >>> print(cost_matrix([[0.0, 0.0]], [[3.0, 4.0], [0.0, 1.0]]).tolist())
    [[25.0, 1.0]]
    >>> print(cost_matrix([[0.0, 0.0]], [[3.0, 4.0]], p=1).tolist())
    [[5.0]]

    References
    ----------
    :cite:`peyre2019computational`
    """
    X = _checks.points(X, "X")
    Y = _checks.points(Y, "Y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X and Y must have the same dimension d, got {X.shape} and {Y.shape}")
    p = _order(p)
    if p == 2:
        return cdist(X, Y, "sqeuclidean")
    return cdist(X, Y, "euclidean") ** p


def wasserstein(X: ArrayLike, Y: ArrayLike, *, weights_x: ArrayLike | None = None,
                weights_y: ArrayLike | None = None, p: float = 2,
                num_iter_max: int | None = None) -> float:
    r"""Exact Wasserstein distance :math:`W_p(\mu, \nu)` between two weighted point clouds.

    .. math::

        W_p(\mu, \nu) = \Big(\min_{\pi \in \Pi(a, b)} \sum_{i,j} \pi_{ij}\,
        |x_i - y_j|^p\Big)^{1/p}, \qquad \mu = \sum_i a_i \delta_{x_i},\;
        \nu = \sum_j b_j \delta_{y_j},

    solved exactly by the network simplex of :func:`ot.emd2` (Flamary et al., 2021; see
    Peyré and Cuturi, 2019, ch. 3; Villani, 2009, ch. 6).

    Parameters
    ----------
    X : array (n, d)
        Atoms of :math:`\mu`.
    Y : array (m, d)
        Atoms of :math:`\nu`.
    weights_x, weights_y : arrays (n,) and (m,), optional
        Weights (non-negative, summing to one); uniform by default.
    p : float
        Order, ``p >= 1``.
    num_iter_max : int, optional
        Iteration cap of the network simplex; by default ``max(10**5, 50 n m)``.

    Returns
    -------
    float
        :math:`W_p(\mu, \nu)`.

    Raises
    ------
    ValueError
        On bad shapes, non-finite values, bad weights or ``p < 1``.
    RuntimeError
        If the network simplex stops before optimality (iteration cap reached).

    Examples
    --------
    Two atoms moved by 2:

    >>> print(f"{wasserstein([[0.0], [1.0]], [[2.0], [3.0]]):.9f}")
    2.000000000

    References
    ----------
    :cite:`flamary2021pot,peyre2019computational,villani2009optimal`
    """
    X, Y, a, b = _two_measures(X, Y, weights_x, weights_y)
    p = _order(p)
    n, m = X.shape[0], Y.shape[0]
    if num_iter_max is None:
        num_iter_max = max(100_000, 50 * n * m)
    num_iter_max = _checks.positive_int(num_iter_max, "num_iter_max")
    M = cost_matrix(X, Y, p)
    cost, log = ot.emd2(a, b, M, numItermax=num_iter_max, log=True)
    if log.get("warning") is not None:
        raise RuntimeError(f"ot.emd2 did not reach the optimum: {log['warning']}")
    return float(max(cost, 0.0)) ** (1.0 / p)


def sliced_wasserstein(X: ArrayLike, Y: ArrayLike, *, weights_x: ArrayLike | None = None,
                       weights_y: ArrayLike | None = None, p: float = 2, n_projections: int = 200,
                       seed: int | Sequence[int] | np.random.Generator = 0) -> float:
    r"""Sliced Wasserstein distance :math:`SW_p(\mu, \nu)`, a Monte Carlo estimate.

    .. math::

        SW_p(\mu, \nu) = \Big(\int_{S^{d-1}} W_p\big((\theta^\top)_\sharp \mu,
        (\theta^\top)_\sharp \nu\big)^p \, d\sigma(\theta)\Big)^{1/p}
        \approx \Big(\frac1N \sum_{k=1}^N W_p\big((\theta_k^\top)_\sharp \mu,
        (\theta_k^\top)_\sharp \nu\big)^p\Big)^{1/p},

    :math:`\sigma` the uniform measure on the sphere and :math:`\theta_k` i.i.d. uniform
    directions drawn from ``numpy.random.default_rng(seed)`` (Bonneel et al., 2015; computed
    by :func:`ot.sliced_wasserstein_distance`, Flamary et al., 2021). Each projection is
    1-Lipschitz, so :math:`SW_p \le W_p`; in :math:`d = 1`, :math:`SW_p = W_p`.

    Parameters
    ----------
    X, Y, weights_x, weights_y, p
        As in :func:`wasserstein`.
    n_projections : int
        Number :math:`N` of random directions.
    seed : int, sequence of int or numpy.random.Generator
        Seed of the directions (the same seed gives the same directions).

    Returns
    -------
    float
        The estimate of :math:`SW_p(\mu, \nu)`.

    Raises
    ------
    ValueError
        As in :func:`wasserstein`, or if ``n_projections`` is not a positive integer.

    Examples
    --------
    In :math:`d = 1` every direction is :math:`\pm 1`, so :math:`SW_2 = W_2`:

    >>> print(f"{sliced_wasserstein([[0.0], [1.0]], [[2.0], [3.0]], n_projections=5):.9f}")
    2.000000000

    References
    ----------
    :cite:`flamary2021pot,peyre2019computational`
    """
    X, Y, a, b = _two_measures(X, Y, weights_x, weights_y)
    p = _order(p)
    n_projections = _checks.positive_int(n_projections, "n_projections")
    rng = seed if isinstance(seed, np.random.Generator) else \
        np.random.default_rng(_checks.seed_key(seed))
    theta = rng.standard_normal((X.shape[1], n_projections))
    theta /= np.linalg.norm(theta, axis=0, keepdims=True)
    return float(ot.sliced_wasserstein_distance(X, Y, a, b, p=p, projections=theta))


def conditional_wasserstein(s: ArrayLike, X: ArrayLike, t: ArrayLike, Y: ArrayLike, *,
                            weights_x: ArrayLike | None = None, weights_y: ArrayLike | None = None,
                            p: float = 2, bins: int = 10) -> float:
    r"""Binned estimator of the conditional Wasserstein distance on :math:`[0,1]\times\mathbb{R}^d`.

    For :math:`\bar\mu = \sum_i a_i \delta_{(s_i, x_i)}` and
    :math:`\bar\nu = \sum_j b_j \delta_{(t_j, y_j)}` with positions in :math:`[0, 1]`, the
    conditional distance (our reading of the conditional Wasserstein framework of masked
    attention in Castin, Ablin, Carrillo and Peyré, 2025; its exact form was not checked
    against the paper's text) is

    .. math::

        W_p^{\mathrm{cond}}(\bar\mu, \bar\nu) = \Big(\int_0^1 W_p(\mu_s, \nu_s)^p \, ds\Big)^{1/p},

    :math:`\mu_s, \nu_s` the conditional laws of the token given the position :math:`s`.
    This function returns its binned estimate

    .. math::

        \Big(\sum_{b=1}^{B} |I_b| \, W_p(\mu_b, \nu_b)^p\Big)^{1/p},

    where :math:`I_1, \dots, I_B` are the ``bins`` equal subintervals of :math:`[0, 1]`
    (:math:`I_b = [(b-1)/B, b/B)`, the last one closed), and :math:`\mu_b, \nu_b` are the
    restrictions of the two measures to positions in :math:`I_b`, each renormalised to a
    probability measure (:math:`W_p` computed exactly by :func:`wasserstein`). A bin where
    both measures have no mass contributes zero.

    Parameters
    ----------
    s : array (n,)
        Positions of the atoms of :math:`\bar\mu`, in :math:`[0, 1]`.
    X : array (n, d)
        Tokens of :math:`\bar\mu`.
    t : array (m,)
        Positions of the atoms of :math:`\bar\nu`, in :math:`[0, 1]`.
    Y : array (m, d)
        Tokens of :math:`\bar\nu`.
    weights_x, weights_y : arrays (n,) and (m,), optional
        Weights (non-negative, summing to one); uniform by default.
    p : float
        Order, ``p >= 1``.
    bins : int
        Number :math:`B` of equal subintervals.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        On bad shapes or weights, ``p < 1``, a position outside :math:`[0, 1]`, or a bin
        holding mass in one measure and not in the other (the message names the bin).

    Examples
    --------
    Two bins of length 1/2, with distances 1 and 3: :math:`(\tfrac12 + \tfrac92)^{1/2} =
    \sqrt 5`:

    >>> value = conditional_wasserstein([0.1, 0.6], [[0.0], [0.0]], [0.2, 0.7], [[1.0], [3.0]],
    ...                                 bins=2)
    >>> print(f"{value:.9f}")
    2.236067977

    References
    ----------
    :cite:`castin2025unified,flamary2021pot`
    """
    X, Y, a, b = _two_measures(X, Y, weights_x, weights_y)
    s = _checks.positions(s, X.shape[0], "s")
    t = _checks.positions(t, Y.shape[0], "t")
    p = _order(p)
    bins = _checks.positive_int(bins, "bins")
    edges = np.linspace(0.0, 1.0, bins + 1)
    bin_x = np.minimum(np.searchsorted(edges, s, side="right") - 1, bins - 1)
    bin_y = np.minimum(np.searchsorted(edges, t, side="right") - 1, bins - 1)
    mass_x = np.bincount(bin_x, weights=a, minlength=bins)
    mass_y = np.bincount(bin_y, weights=b, minlength=bins)
    total = 0.0
    for k in range(bins):
        has_x, has_y = mass_x[k] > 0, mass_y[k] > 0
        if has_x != has_y:
            which, other = ("the first", "the second") if has_x else ("the second", "the first")
            raise ValueError(
                f"bin {k} (positions in [{edges[k]:.6g}, {edges[k + 1]:.6g}"
                f"{']' if k == bins - 1 else ')'}) holds mass in {which} measure and none in "
                f"{other}: the conditional distance is undefined there (use fewer bins)")
        if not has_x:
            continue
        in_x, in_y = bin_x == k, bin_y == k
        w_b = wasserstein(X[in_x], Y[in_y], weights_x=a[in_x] / mass_x[k],
                          weights_y=b[in_y] / mass_y[k], p=p)
        total += (edges[k + 1] - edges[k]) * w_b**p
    return total ** (1.0 / p)
