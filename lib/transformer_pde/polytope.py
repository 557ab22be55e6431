r"""The limit polytope of the clustering dynamics seen through the hardmax.

For :math:`V = I_d` and a symmetric positive definite key-query matrix :math:`A`, the
rescaled tokens of Geshkovski, Letrouit, Polyanskiy and Rigollet (*The emergence of clusters
in self-attention dynamics*, NeurIPS 2023, Theorem 3.1 in its full form) converge to points
of the finite set

.. math::

    \mathcal S = \{x \in \mathcal K : \langle A x, x\rangle = \max_j \langle A x, v_j\rangle\},

where :math:`\mathcal K` is a convex polytope with vertices :math:`v_1, \dots, v_m` (the
paper writes :math:`\|A^{1/2}x\|^2` and :math:`\langle A^{1/2}x, A^{1/2}v_j\rangle`). Since a
linear form attains its maximum over :math:`\mathcal K` at a vertex, :math:`\mathcal S` is the
set of *self-attending* points of :math:`\mathcal K`: a point :math:`x` belongs to it when,
under the hardmax, it attends to itself. This module computes the hardmax gap that measures
it (:func:`attention_gap`), the hardmax cells (:func:`hardmax_cells`), the set itself
(:func:`self_attending_set`) and a boundary test (:func:`on_boundary`).
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.spatial import ConvexHull

from . import _checks
from .clusters import affine_frame, in_hull

__all__ = ["attention_gap", "hardmax_cells", "self_attending_set", "on_boundary"]


def _points_and_vertices(points, vertices, A):
    X = _checks.points(points, "points")
    W = _checks.points(vertices, "vertices")
    d = W.shape[1]
    if X.shape[1] != d:
        raise ValueError(f"points must have d = {d} columns like vertices, got shape {X.shape}")
    A = _checks.matrix(A, "A", shape=(d, d))
    return X, W, A


def attention_gap(points: ArrayLike, vertices: ArrayLike, A: ArrayLike) -> NDArray[np.float64]:
    r"""Hardmax gap :math:`g(x) = \max_j \langle A x, v_j\rangle - \langle A x, x\rangle`.

    For :math:`x \in \mathcal K = \operatorname{conv}\{v_j\}`, :math:`g(x) \ge 0`, with
    equality exactly when :math:`x` belongs to the set :math:`\mathcal S` of Geshkovski et
    al. (2023): the linear form :math:`y \mapsto \langle Ax, y\rangle` is maximised over
    :math:`\mathcal K` at :math:`x` itself. When :math:`x` is one of the :math:`v_j` and
    maximises, the two terms are the same floating-point number and the gap is exactly 0.

    Parameters
    ----------
    points : array (k, d)
    vertices : array (m, d)
        Vertices :math:`v_j` (or any points whose hull is :math:`\mathcal K`).
    A : array (d, d)

    Returns
    -------
    array (k,)

    Raises
    ------
    ValueError
        If the arrays are not finite, their dimensions differ or ``A`` is not ``(d, d)``.

    Examples
    --------
    On the square :math:`[-1, 1]^2` with :math:`A = I`, a vertex and the midpoint of an edge are
    self-attending, :math:`(1/2, 0)` is not:

    >>> import numpy as np
    >>> square = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    >>> print(attention_gap([[1.0, 1.0], [1.0, 0.0], [0.5, 0.0]], square, np.eye(2)).tolist())
    [0.0, 0.0, 0.25]

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    X, W, A = _points_and_vertices(points, vertices, A)
    AX = X @ A.T
    return (AX @ W.T).max(axis=1) - np.einsum("ij,ij->i", AX, X)


def hardmax_cells(points: ArrayLike, vertices: ArrayLike, A: ArrayLike) -> NDArray[np.int64]:
    r"""The vertex each point attends to under the hardmax.

    .. math::

        c(x) = \arg\max_j \langle A x, v_j\rangle .

    The cells :math:`C_j = \{x : \langle A x, v_j\rangle \ge \langle A x, v_k\rangle\ \forall k\}`
    are polyhedral cones with apex :math:`0`. For symmetric :math:`A` they are the cells of
    the power (Laguerre) diagram of the :math:`v_j` with weights :math:`\langle A v_j, v_j\rangle`
    in the geometry of :math:`A`, since
    :math:`\langle Ax, v_j\rangle = \tfrac12(\langle A x, x\rangle + \langle A v_j, v_j\rangle
    - \langle A(x - v_j), x - v_j\rangle)`. Ties go to the smallest index.

    Returns
    -------
    int array (k,)

    Parameters
    ----------
    points : array (k, d)
        Query points.
    vertices : array (m, d)
        The keys :math:`v_j`.
    A : array (d, d)
        Key-query matrix.

    Raises
    ------
    ValueError
        If the arrays are not finite, their dimensions differ or ``A`` is not ``(d, d)``.

    Examples
    --------
    >>> import numpy as np
    >>> square = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    >>> print(hardmax_cells([[2.0, 1.0], [-1.0, -3.0]], square, np.eye(2)).tolist())
    [0, 3]

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    X, W, A = _points_and_vertices(points, vertices, A)
    return np.argmax(X @ A.T @ W.T, axis=1).astype(int)


def self_attending_set(vertices: ArrayLike, A: ArrayLike, *,
                       tol: float = 1e-9) -> NDArray[np.float64]:
    r"""The finite set of self-attending points of :math:`\mathcal K = \operatorname{conv}\{v_j\}`.

    .. math::

        \mathcal S = \{x \in \mathcal K :
        \langle Ax, x\rangle = \max_j \langle Ax, v_j\rangle\}.

    Geshkovski, Letrouit, Polyanskiy and Rigollet (2023) prove that for :math:`V = I_d` and a
    symmetric positive definite :math:`A` every rescaled token converges to a point of
    :math:`\mathcal S`, and that :math:`\mathcal V \subseteq \mathcal S \subseteq \partial
    \mathcal K \cup \{0\}` for the limit polytope :math:`\mathcal K` (vertices
    :math:`\mathcal V`).

    Computation: a point :math:`x \in \mathcal S` lies on the face :math:`F` of
    :math:`\mathcal K` exposed by :math:`Ax`, and :math:`\langle Ax, y - x\rangle = 0` for
    :math:`y \in F`: :math:`x` is the :math:`A`-orthogonal projection of :math:`0` onto the
    affine hull of :math:`F`. By Carathéodory it lies in the hull of at most :math:`d + 1`
    affinely independent vertices of :math:`F`, onto whose affine hull it is also the
    projection. So every subset of at most :math:`d + 1` vertices gives one candidate (the
    projection of :math:`0` onto its affine hull), kept when it lies in the subset's hull
    and has :math:`g(x) \le tol \cdot s^2` (:func:`attention_gap`, :math:`s` the largest
    :math:`|v_j|`); candidates closer than :math:`tol \cdot s` are merged.

    Parameters
    ----------
    vertices : array (m, d)
        The vertices of :math:`\mathcal K`, at most 24 of them.
    A : array (d, d)
        Symmetric positive definite.
    tol : float
        Relative tolerance.

    Returns
    -------
    array (k, d)
        The points of :math:`\mathcal S`, in the order found (vertices first).

    Raises
    ------
    ValueError
        If there are more than 24 vertices, ``A`` is not symmetric positive definite or ``tol``
        is negative.

    Examples
    --------
    For the square :math:`[-1, 1]^2` and :math:`A = I`: the 4 vertices, the 4 midpoints of the
    edges and the origin:

    >>> import numpy as np
    >>> square = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    >>> S = self_attending_set(square, np.eye(2))
    >>> print(len(S), (np.round(S[4:], 9) + 0.0).tolist())
    9 [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, -1.0], [-1.0, 0.0]]

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    W = _checks.points(vertices, "vertices")
    m, d = W.shape
    if m > 24:
        raise ValueError(f"vertices: at most 24 points are supported, got {m}")
    A = _checks.matrix(A, "A", shape=(d, d))
    scale_A = max(float(np.max(np.abs(A))), np.finfo(float).tiny)
    if np.max(np.abs(A - A.T)) > 1e-12 * scale_A:
        raise ValueError("A must be symmetric (the theorem assumes Q^T K symmetric)")
    if np.linalg.eigvalsh(A)[0] <= 0:
        raise ValueError("A must be positive definite")
    tol = _checks.nonnegative_float(tol, "tol")
    scale = max(float(np.max(np.linalg.norm(W, axis=1))), np.finfo(float).tiny)
    found: list[NDArray[np.float64]] = []
    for size in range(1, min(m, d + 1) + 1):
        for J in itertools.combinations(range(m), size):
            origin, basis = affine_frame(W[list(J)])
            if basis.shape[0] != size - 1:  # affinely dependent: covered by a smaller subset
                continue
            if size == 1:
                x = origin
            else:  # minimise <A x, x> over x = origin + basis^T c
                G = basis @ A @ basis.T
                x = origin + basis.T @ np.linalg.solve(G, -basis @ A @ origin)
            if not in_hull(x[None], W[list(J)], tol=tol * scale)[0]:
                continue
            if attention_gap(x[None], W, A)[0] > tol * scale ** 2:
                continue
            if all(np.linalg.norm(x - y) > tol * scale for y in found):
                found.append(x)
    return np.array(found).reshape(-1, d)


def on_boundary(points: ArrayLike, hull_points: ArrayLike, *,
                tol: float = 1e-9) -> NDArray[np.bool_]:
    r"""Whether each point lies on the boundary of :math:`\mathcal K = \operatorname{conv}\{q_k\}`.

    The boundary :math:`\partial \mathcal K` is taken in :math:`\mathbb R^d`.

    A point is on the boundary when it lies in :math:`\mathcal K` (within ``tol``, see
    :func:`transformer_pde.clusters.in_hull`) and either :math:`\mathcal K` has empty
    interior (every point of a segment in the plane is a boundary point) or the point is
    within ``tol`` of one of the facet hyperplanes of Qhull.

    Returns
    -------
    bool array (k,)

    Parameters
    ----------
    points : array (k, d)
        Points to test.
    hull_points : array (m, d)
        Points whose convex hull is :math:`\mathcal K`.
    tol : float
        Absolute tolerance, non-negative.

    Raises
    ------
    ValueError
        If the arrays are not finite, their dimensions differ or ``tol`` is negative.

    Examples
    --------
    >>> import numpy as np
    >>> square = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    >>> print(on_boundary([[1.0, 0.0], [0.5, 0.0], [2.0, 0.0]], square).tolist())
    [True, False, False]

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    X, H = _checks.points_and_hull(points, hull_points)
    tol = _checks.nonnegative_float(tol, "tol")
    inside = in_hull(X, H, tol=tol)
    _, basis = affine_frame(H)
    d = H.shape[1]
    if basis.shape[0] < d:
        return inside
    if d == 1:
        lo, hi = H[:, 0].min(), H[:, 0].max()
        near = np.minimum(np.abs(X[:, 0] - lo), np.abs(X[:, 0] - hi)) <= tol
        return inside & near
    eq = ConvexHull(H).equations  # a.y + b <= 0 inside, |a| = 1
    return inside & (np.max(X @ eq[:, :-1].T + eq[:, -1], axis=1) >= -tol)
