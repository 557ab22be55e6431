r"""Clusters of tokens, convex hulls, and the leaders of an attention matrix.

Tools to read the limits of the rescaled self-attention dynamics
:math:`\dot z_i = \sum_j P_{ij}(t)\, V(z_j - z_i)`, :math:`z_i = e^{-tV} x_i`
(Geshkovski, Letrouit, Polyanskiy and Rigollet, *The emergence of clusters in
self-attention dynamics*, NeurIPS 2023): which tokens share a limit (:func:`group`), which
points are vertices of a convex polytope (:func:`polytope_vertices`), how its volume changes
and who lies inside it (:func:`hull_volume`, :func:`in_hull`), the attention matrix seen
from the rescaled tokens (:func:`rescaled_attention_matrix`), and whether that matrix is
Boolean and which tokens lead (:func:`is_boolean`, :func:`leaders`), and the time stepping
with frozen attention of the authors' public scripts (:func:`integrate_frozen_attention`).
"""

import numpy as np
from scipy.sparse.csgraph import connected_components
from scipy.spatial import ConvexHull
from scipy.spatial.distance import cdist

from . import _checks, attention
from .dynamics import _exponential

__all__ = [
    "group",
    "polytope_vertices",
    "hull_polygon",
    "affine_frame",
    "hull_volume",
    "in_hull",
    "rescaled_attention_matrix",
    "integrate_frozen_attention",
    "leaders",
    "is_boolean",
]


def group(Z, tol):
    r"""Single-linkage groups of tokens: the connected components of :math:`|z_i - z_j| \le tol`.

    Two tokens share a label when a chain of tokens, each at distance at most ``tol`` from
    the next, joins them. Used to count the clusters of
    :math:`z_i(t) = e^{-tV} x_i(t)` (Geshkovski et al., 2023).

    Parameters
    ----------
    Z : array (n, d)
        Tokens.
    tol : float
        Linkage distance, ``>= 0`` (``0`` groups exactly equal tokens only).

    Returns
    -------
    labels : int array (n,)
        Labels ``0..k-1`` in order of first appearance (token 0 has label 0).
    centres : array (k, d)
        The mean of each group.
    """
    Z = _checks.points(Z, "Z")
    tol = _checks.nonnegative_float(tol, "tol")
    adjacency = cdist(Z, Z) <= tol
    _, raw = connected_components(adjacency, directed=False)
    _, first = np.unique(raw, return_index=True)
    order = np.argsort(first)  # raw labels sorted by first appearance
    relabel = np.empty_like(order)
    relabel[order] = np.arange(order.size)
    labels = relabel[raw]
    k = order.size
    centres = np.zeros((k, Z.shape[1]))
    np.add.at(centres, labels, Z)
    centres /= np.bincount(labels, minlength=k)[:, None]
    return labels.astype(int), centres


def affine_frame(points, *, rtol=1e-10):
    r"""An orthonormal frame of the affine hull of ``points``.

    Returns ``(origin, basis)`` with ``origin`` the mean of the points and ``basis`` of shape
    ``(r, d)`` (orthonormal rows) spanning :math:`\operatorname{span}\{p_i - \bar p\}`; its
    dimension ``r`` counts the singular values above ``rtol`` times the largest extent.
    """
    P = _checks.points(points, "points")
    rtol = _checks.nonnegative_float(rtol, "rtol")
    origin = P.mean(axis=0)
    C = P - origin
    if P.shape[0] == 1:
        return origin, np.zeros((0, P.shape[1]))
    _, s, Vt = np.linalg.svd(C, full_matrices=False)
    scale = max(float(np.max(np.abs(C))), np.finfo(float).tiny)
    r = int(np.sum(s > rtol * scale * np.sqrt(P.shape[0])))
    return origin, Vt[:r]


def polytope_vertices(points, *, rtol=1e-10):
    r"""Indices of the points that are vertices of :math:`\operatorname{conv}\{p_i\}`.

    Works in any dimension: the points are first expressed in an orthonormal frame of their
    affine hull (:func:`affine_frame`), so collinear, coplanar and other lower-dimensional
    sets are handled; then a single point is its own vertex, a segment has its two ends, and
    otherwise :class:`scipy.spatial.ConvexHull` (Qhull) gives the vertices. Points lying on an
    edge or a face without being extreme are not vertices. Of several equal points, the first
    index is returned.

    Returns
    -------
    int array
        Sorted indices of the vertices.
    """
    P = _checks.points(points, "points")
    # remove duplicates, keeping the first index of each distinct point
    _, first = np.unique(P, axis=0, return_index=True)
    first = np.sort(first)
    U = P[first]
    origin, basis = affine_frame(U, rtol=rtol)
    r = basis.shape[0]
    if r == 0:
        return first[:1]
    Y = (U - origin) @ basis.T
    if r == 1:
        return np.sort(first[[int(np.argmin(Y[:, 0])), int(np.argmax(Y[:, 0]))]])
    hull = ConvexHull(Y)
    return np.sort(first[hull.vertices])


def hull_polygon(points, *, rtol=1e-10):
    r"""The boundary of the convex hull of planar points, as a closed polygon.

    Returns the vertices of :math:`\operatorname{conv}\{p_i\}` (see
    :func:`polytope_vertices`) in counter-clockwise order with the first repeated at the
    end, shape ``(k + 1, 2)``; for collinear points the two ends of the segment, for a
    single point that point (twice). Ready for ``ax.plot(*hull_polygon(P).T)``.
    """
    P = _checks.points(points, "points")
    if P.shape[1] != 2:
        raise ValueError(f"points must be planar, of shape (n, 2), got {P.shape}")
    V = P[polytope_vertices(P, rtol=rtol)]
    if len(V) > 2:
        c = V.mean(axis=0)
        V = V[np.argsort(np.arctan2(V[:, 1] - c[1], V[:, 0] - c[0]))]
    return np.vstack([V, V[:1]])


def hull_volume(points, *, rtol=1e-10):
    r"""The :math:`d`-dimensional volume of :math:`\operatorname{conv}\{p_i\}` (area in 2-D).

    Zero for a set contained in a proper affine subspace (e.g. collinear points in 2-D).
    """
    P = _checks.points(points, "points")
    _, basis = affine_frame(P, rtol=rtol)
    d = P.shape[1]
    if basis.shape[0] < d:
        return 0.0
    if d == 1:
        return float(np.ptp(P[:, 0]))
    return float(ConvexHull(P).volume)


def in_hull(points, hull_points, *, tol=1e-10):
    r"""Whether each of ``points`` lies in :math:`\operatorname{conv}\{q_k\}` of ``hull_points``.

    A point counts as inside when it is within ``tol`` of the affine hull of the
    :math:`q_k` and, in coordinates of that hull, satisfies every facet inequality
    :math:`\langle a, y\rangle + b \le tol` of Qhull (unit normals ``a``), i.e. it is at
    most ``tol`` outside each facet's hyperplane.

    Returns
    -------
    bool array (m,)
    """
    Y = _checks.points(points, "points")
    H = _checks.points(hull_points, "hull_points")
    if Y.shape[1] != H.shape[1]:
        raise ValueError(f"points must have d = {H.shape[1]} columns like hull_points, "
                         f"got shape {Y.shape}")
    tol = _checks.nonnegative_float(tol, "tol")
    origin, basis = affine_frame(H)
    Yc, Hc = Y - origin, H - origin
    coords = Yc @ basis.T
    r = basis.shape[0]
    if r == H.shape[1]:  # full-dimensional hull: no distance to the affine hull to check
        off = np.ones(Y.shape[0], dtype=bool)
    else:
        off = np.linalg.norm(Yc - coords @ basis, axis=1) <= tol
    if r == 0:
        return off
    Hy = Hc @ basis.T
    if r == 1:
        lo, hi = Hy[:, 0].min(), Hy[:, 0].max()
        return off & (coords[:, 0] >= lo - tol) & (coords[:, 0] <= hi + tol)
    eq = ConvexHull(Hy).equations  # rows (a, b) with |a| = 1, inside: a.y + b <= 0
    return off & np.all(coords @ eq[:, :-1].T + eq[:, -1] <= tol, axis=1)


def rescaled_attention_matrix(Z, t, A, V):
    r"""The attention matrix :math:`P(t)` of :math:`x_i = e^{tV} z_i`, computed from :math:`z`.

    .. math::

        P_{ij}(t) = \frac{e^{\langle B z_i, z_j\rangle}}{\sum_k e^{\langle B z_i, z_k\rangle}},
        \qquad B = e^{tV^\top} A\, e^{tV},

    the matrix that drives :math:`\dot z_i = \sum_j P_{ij}(t) V (z_j - z_i)` (Geshkovski et
    al., 2023). Computed with log-sum-exp, so it is accurate in the hardmax regime.
    """
    Z = _checks.points(Z, "Z")
    d = Z.shape[1]
    t = float(t)
    if not np.isfinite(t):
        raise ValueError(f"t must be finite, got {t!r}")
    A = _checks.matrix(A, "A", shape=(d, d))
    V = _checks.matrix(V, "V", shape=(d, d))
    E = _exponential(V)(t)
    return attention.softmax_matrix(Z, E.T @ A @ E)


def integrate_frozen_attention(Z0, times, A, V, *, max_step=None):
    r"""The rescaled dynamics stepped with the attention matrix frozen over each RK4 step.

    On a step :math:`[t_k, t_k + h]` the matrix :math:`P = P(t_k)` of
    :func:`rescaled_attention_matrix` is computed once and the *linear* system
    :math:`\dot z_i = \sum_j P_{ij} V (z_j - z_i)` is advanced by one classical Runge-Kutta
    step. This is how the public scripts accompanying Geshkovski, Letrouit, Polyanskiy and
    Rigollet (2023) integrate (inferred from their code). Since the variation of
    :math:`P` over the step is ignored, the scheme is consistent of order 1 only, whatever
    the order of the Runge-Kutta stages; compare :func:`transformer_pde.dynamics.integrate`
    with :func:`transformer_pde.dynamics.rescaled_field`, which has the true order.

    Parameters
    ----------
    Z0 : array (n, d)
        Initial tokens (:math:`z(t_0) = e^{-t_0 V} x(t_0)`).
    times : array (k,)
        Strictly increasing output times; one step per interval unless ``max_step``
        subdivides it into equal steps no longer than ``max_step``.
    A, V : arrays (d, d)
        :math:`K^\top Q` and the value matrix.

    Returns
    -------
    array (k, n, d)
    """
    Z0 = _checks.points(Z0, "Z0")
    d = Z0.shape[1]
    A = _checks.matrix(A, "A", shape=(d, d))
    V = _checks.matrix(V, "V", shape=(d, d))
    t = np.asarray(times, dtype=np.float64)
    if t.ndim != 1 or t.size < 1 or not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0):
        raise ValueError("times must be a finite, strictly increasing 1-D array")
    if max_step is not None:
        max_step = _checks.positive_float(max_step, "max_step")
    exp_V = _exponential(V)
    traj = np.empty((t.size, *Z0.shape))
    traj[0] = Z = Z0.copy()
    for k in range(t.size - 1):
        m = 1 if max_step is None else max(1, int(np.ceil((t[k + 1] - t[k]) / max_step - 1e-12)))
        h = (t[k + 1] - t[k]) / m
        for s in range(m):
            E = exp_V(t[k] + s * h)
            P = attention.softmax_matrix(Z, E.T @ A @ E)
            L = P - np.eye(P.shape[0])  # z' = (P - I) z V^T, linear with P frozen
            k1 = L @ Z @ V.T
            k2 = L @ (Z + (h / 2) * k1) @ V.T
            k3 = L @ (Z + (h / 2) * k2) @ V.T
            k4 = L @ (Z + h * k3) @ V.T
            Z = Z + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
        traj[k + 1] = Z
    return traj


def leaders(P, tol):
    r"""Leaders of ``P``: the sorted :math:`j` with :math:`P_{ij} > 1 - tol` for some :math:`i`.

    In the limit :math:`t \to \infty` the attention matrix of the clustering dynamics becomes
    Boolean and each token attends to one *leader* (Geshkovski et al., 2023); the leaders
    are the non-zero columns of that limit.
    """
    P = _checks.points(P, "P")
    tol = _checks.nonnegative_float(tol, "tol")
    return np.flatnonzero(np.any(P > 1.0 - tol, axis=0)).astype(int)


def is_boolean(P, tol):
    r"""Whether every row of ``P`` is within ``tol`` of a standard basis row.

    .. math::

        \max_i \min_k \| P_{i\cdot} - e_k \|_\infty \le tol .

    A Boolean row-stochastic matrix assigns each token to exactly one other token (its leader).
    """
    P = _checks.points(P, "P")
    tol = _checks.nonnegative_float(tol, "tol")
    a = np.abs(P)
    m, n = P.shape
    if n == 1:
        return bool(np.max(np.abs(P[:, 0] - 1.0)) <= tol)
    top = np.argmax(a, axis=1)
    rows = np.arange(m)
    largest = a[rows, top]
    a_without_top = a.copy()
    a_without_top[rows, top] = -1.0
    second = a_without_top.max(axis=1)
    # |P_i - e_k|_inf = max(|1 - P_ik|, max_{j != k} |P_ij|) for every k, minimised over k
    others = np.where(np.arange(n)[None, :] == top[:, None], second[:, None], largest[:, None])
    dist = np.maximum(np.abs(1.0 - P), others).min(axis=1)
    return bool(np.max(dist) <= tol)
