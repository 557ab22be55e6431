r"""Clusters of tokens, convex hulls, and the leaders of an attention matrix.

Tools to read the limits of the rescaled self-attention dynamics
:math:`\dot z_i = \sum_j P_{ij}(t)\, V(z_j - z_i)`, :math:`z_i = e^{-tV} x_i`
(Geshkovski, Letrouit, Polyanskiy and Rigollet, *The emergence of clusters in
self-attention dynamics*, NeurIPS 2023): which tokens share a limit (:func:`group`), which
points are vertices of a convex polytope (:func:`polytope_vertices`), how its volume changes
and who lies inside it (:func:`hull_volume`, :func:`in_hull`), the attention matrix seen
from the rescaled tokens (:func:`rescaled_attention_matrix`), and whether that matrix is
Boolean and which tokens lead (:func:`is_boolean`, :func:`leaders`); many runs integrated
together (:func:`integrate_draws`), and the time stepping of the authors' public scripts,
which is explicit Euler (:func:`scripts_scheme`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.sparse.csgraph import connected_components
from scipy.spatial import ConvexHull
from scipy.spatial.distance import cdist

from . import _checks, _linalg, attention, dynamics

__all__ = [
    "group",
    "polytope_vertices",
    "hull_polygon",
    "affine_frame",
    "hull_volume",
    "in_hull",
    "rescaled_attention_matrix",
    "integrate_draws",
    "scripts_scheme",
    "leaders",
    "is_boolean",
]


def group(Z: ArrayLike, tol: float) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
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

    Raises
    ------
    ValueError
        If ``Z`` is not a finite ``(n, d)`` array or ``tol`` is negative.

    Examples
    --------
    >>> import numpy as np
    >>> labels, centres = group(np.array([[0.0, 0.0], [0.05, 0.0], [1.0, 1.0]]), 0.1)
    >>> print(labels.tolist(), [f"{c:.3f}" for c in centres[0]])
    [0, 0, 1] ['0.025', '0.000']

    References
    ----------
    :cite:`geshkovski2023emergence`
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


def affine_frame(points: ArrayLike, *,
                 rtol: float = 1e-10) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""An orthonormal frame of the affine hull of ``points``.

    Returns ``(origin, basis)`` with ``origin`` the mean of the points and ``basis`` of shape
    ``(r, d)`` (orthonormal rows) spanning :math:`\operatorname{span}\{p_i - \bar p\}`; its
    dimension ``r`` counts the singular values above ``rtol`` times the largest extent.

    Parameters
    ----------
    points : array (n, d)
        The points :math:`p_i`.
    rtol : float
        Relative threshold on the singular values, ``>= 0``.

    Returns
    -------
    origin : array (d,)
        The mean :math:`\bar p` of the points.
    basis : array (r, d)
        Orthonormal rows spanning the directions of the affine hull.

    Raises
    ------
    ValueError
        If ``points`` is not a finite ``(n, d)`` array or ``rtol`` is negative.

    Examples
    --------
    Three collinear points of the plane span a line:

    >>> import numpy as np
    >>> origin, basis = affine_frame(np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]))
    >>> print(origin.tolist(), basis.shape, bool(abs(basis[0] @ [1.0, -1.0]) < 1e-12))
    [1.0, 1.0] (1, 2) True

    References
    ----------
    :cite:`virtanen2020scipy`
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


def polytope_vertices(points: ArrayLike, *, rtol: float = 1e-10) -> NDArray[np.int64]:
    r"""Indices of the points that are vertices of :math:`\operatorname{conv}\{p_i\}`.

    Works in any dimension: the points are first expressed in an orthonormal frame of their
    affine hull (:func:`affine_frame`), so collinear, coplanar and other lower-dimensional
    sets are handled; then a single point is its own vertex, a segment has its two ends, and
    otherwise :class:`scipy.spatial.ConvexHull` (Qhull) gives the vertices. Points lying on an
    edge or a face without being extreme are not vertices. Of several equal points, the first
    index is returned.

    Parameters
    ----------
    points : array (n, d)
        The points :math:`p_i`.
    rtol : float
        Relative threshold of :func:`affine_frame`.

    Returns
    -------
    int array
        Sorted indices of the vertices.

    Raises
    ------
    ValueError
        If ``points`` is not a finite ``(n, d)`` array.

    Examples
    --------
    The centre of a square is not a vertex:

    >>> import numpy as np
    >>> P = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, 0.5], [1.0, 1.0], [0.0, 1.0]])
    >>> polytope_vertices(P).tolist()
    [0, 1, 3, 4]

    References
    ----------
    :cite:`virtanen2020scipy`
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


def hull_polygon(points: ArrayLike, *, rtol: float = 1e-10) -> NDArray[np.float64]:
    r"""The boundary of the convex hull of planar points, as a closed polygon.

    Returns the vertices of :math:`\operatorname{conv}\{p_i\}` (see
    :func:`polytope_vertices`) in counter-clockwise order with the first repeated at the
    end, shape ``(k + 1, 2)``; for collinear points the two ends of the segment, for a
    single point that point (twice). Ready for ``ax.plot(*hull_polygon(P).T)``.

    Parameters
    ----------
    points : array (n, 2)
        Planar points.
    rtol : float
        Relative threshold of :func:`affine_frame`.

    Returns
    -------
    array (k + 1, 2)
        The vertices in counter-clockwise order, the first repeated at the end.

    Raises
    ------
    ValueError
        If ``points`` is not a finite ``(n, 2)`` array.

    Examples
    --------
    >>> import numpy as np
    >>> P = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, 0.5], [1.0, 1.0], [0.0, 1.0]])
    >>> hull_polygon(P).tolist()
    [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]

    References
    ----------
    :cite:`virtanen2020scipy`
    """
    P = _checks.points(points, "points")
    if P.shape[1] != 2:
        raise ValueError(f"points must be planar, of shape (n, 2), got {P.shape}")
    V = P[polytope_vertices(P, rtol=rtol)]
    if len(V) > 2:
        c = V.mean(axis=0)
        V = V[np.argsort(np.arctan2(V[:, 1] - c[1], V[:, 0] - c[0]))]
    return np.vstack([V, V[:1]])


def hull_volume(points: ArrayLike, *, rtol: float = 1e-10) -> float:
    r"""The :math:`d`-dimensional volume of :math:`\operatorname{conv}\{p_i\}` (area in 2-D).

    Zero for a set contained in a proper affine subspace (e.g. collinear points in 2-D).

    Parameters
    ----------
    points : array (n, d)
        The points :math:`p_i`.
    rtol : float
        Relative threshold of :func:`affine_frame` for the dimension of the hull.

    Returns
    -------
    float
        The volume (length in 1-D, area in 2-D).

    Raises
    ------
    ValueError
        If ``points`` is not a finite ``(n, d)`` array.

    Examples
    --------
    >>> import numpy as np
    >>> print(f"{hull_volume(np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 1.0]])):.6f}")
    1.000000
    >>> hull_volume(np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]))  # collinear
    0.0

    References
    ----------
    :cite:`virtanen2020scipy`
    """
    P = _checks.points(points, "points")
    _, basis = affine_frame(P, rtol=rtol)
    d = P.shape[1]
    if basis.shape[0] < d:
        return 0.0
    if d == 1:
        return float(np.ptp(P[:, 0]))
    return float(ConvexHull(P).volume)


def in_hull(points: ArrayLike, hull_points: ArrayLike, *, tol: float = 1e-10) -> NDArray[np.bool_]:
    r"""Whether each of ``points`` lies in :math:`\operatorname{conv}\{q_k\}` of ``hull_points``.

    A point counts as inside when it is within ``tol`` of the affine hull of the
    :math:`q_k` and, in coordinates of that hull, satisfies every facet inequality
    :math:`\langle a, y\rangle + b \le tol` of Qhull (unit normals ``a``), i.e. it is at
    most ``tol`` outside each facet's hyperplane.

    Parameters
    ----------
    points : array (m, d)
        The points to test.
    hull_points : array (k, d)
        The points :math:`q_k` whose convex hull is tested against.
    tol : float
        Distance allowed outside the hull, ``>= 0``.

    Returns
    -------
    bool array (m,)

    Raises
    ------
    ValueError
        If the arrays are not finite, of different widths, or ``tol`` is negative.

    Examples
    --------
    >>> import numpy as np
    >>> square = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    >>> in_hull(np.array([[0.5, 0.5], [1.5, 0.5]]), square).tolist()
    [True, False]

    References
    ----------
    :cite:`virtanen2020scipy`
    """
    Y, H = _checks.points_and_hull(points, hull_points)
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


def rescaled_attention_matrix(Z: ArrayLike, t: float, A: ArrayLike,
                              V: ArrayLike) -> NDArray[np.float64]:
    r"""The attention matrix :math:`P(t)` of :math:`x_i = e^{tV} z_i`, computed from :math:`z`.

    .. math::

        P_{ij}(t) = \frac{e^{\langle B z_i, z_j\rangle}}{\sum_k e^{\langle B z_i, z_k\rangle}},
        \qquad B = e^{tV^\top} A\, e^{tV},

    the matrix that drives :math:`\dot z_i = \sum_j P_{ij}(t) V (z_j - z_i)` (Geshkovski et
    al., 2023). Computed with log-sum-exp, so it is accurate in the hardmax regime.

    Parameters
    ----------
    Z : array (n, d)
        Rescaled tokens :math:`z_i`.
    t : float
        Time, finite.
    A, V : arrays (d, d)
        Key-query and value matrices.

    Returns
    -------
    array (n, n)
        The row-stochastic matrix :math:`P(t)`.

    Raises
    ------
    ValueError
        On bad shapes or non-finite values.

    Examples
    --------
    At :math:`t = 0` it is the softmax matrix of :math:`A`; for :math:`V = 0` it does not
    depend on :math:`t`:

    >>> import numpy as np
    >>> Z = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> P = rescaled_attention_matrix(Z, 3.0, np.eye(2), np.zeros((2, 2)))
    >>> print([f"{p:.6f}" for p in P[0]], f"{np.e / (np.e + 1):.6f}")
    ['0.731059', '0.268941'] 0.731059

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    Z = _checks.points(Z, "Z")
    d = Z.shape[1]
    t = float(t)
    if not np.isfinite(t):
        raise ValueError(f"t must be finite, got {t!r}")
    A = _checks.matrix(A, "A", shape=(d, d))
    V = _checks.matrix(V, "V", shape=(d, d))
    E = _linalg.exponential(V)(t)
    return attention.softmax_matrix(Z, E.T @ A @ E)


def integrate_draws(Z0: ArrayLike, times: ArrayLike, A: ArrayLike, V: ArrayLike, *,
                    method: str = "DOP853", rtol: float = 1e-10,
                    atol: float = 1e-12) -> NDArray[np.float64]:
    r"""Several independent runs of the rescaled dynamics, integrated as one system.

    Each of the ``k`` configurations ``Z0[r]`` (``n`` tokens) follows
    :math:`\dot z_i = \sum_j P_{ij}(t)\, V (z_j - z_i)` with its own attention matrix
    (:func:`rescaled_attention_matrix`, Geshkovski et al., 2023): the runs do not interact.
    Stacking them lets one adaptive solver (``DOP853`` of
    :func:`transformer_pde.dynamics.integrate`) advance all of them with one batched
    evaluation of the ``k`` attention matrices per stage, which for small ``n`` costs little
    more than a single run. SciPy's error norm is the root mean square over all components,
    so the error of one run is controlled up to a factor :math:`\sqrt{k}` of the tolerances.
    With a fixed-step ``method`` (``"euler"``, ``"rk4"``: one step per interval of ``times``)
    each run gets exactly the steps it would get alone.

    Parameters
    ----------
    Z0 : array (k, n, d) or (n, d)
        Initial tokens of each run (a single run when 2-D).
    times : array (m,)
        Strictly increasing output times.
    A, V : arrays (d, d)
        :math:`K^\top Q` and the value matrix, shared by the runs.
    method, rtol, atol
        As in :func:`transformer_pde.dynamics.integrate`.

    Returns
    -------
    array (m, k, n, d), or (m, n, d) for a single run

    Examples
    --------
    The runs do not interact: two runs stacked are the two runs alone.

    >>> import numpy as np
    >>> Z0 = np.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.5], [-1.0, 0.2]]])
    >>> t = np.linspace(0.0, 0.5, 3)
    >>> both = integrate_draws(Z0, t, np.eye(2), np.eye(2))
    >>> alone = integrate_draws(Z0[1], t, np.eye(2), np.eye(2))
    >>> print(both.shape, bool(np.max(np.abs(both[:, 1] - alone)) < 1e-8))
    (3, 2, 2, 2) True

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    Z0, times = _checks.real_array(Z0, "Z0"), _checks.real_array(times, "times")
    rtol, atol = _checks.positive_float(rtol, "rtol"), _checks.nonnegative_float(atol, "atol")
    single = Z0.ndim == 2
    if single:
        Z0 = Z0[None]
    if Z0.ndim != 3 or 0 in Z0.shape or not np.all(np.isfinite(Z0)):
        raise ValueError(f"Z0 must be a finite array of shape (k, n, d) or (n, d), got {Z0.shape}")
    k, n, d = Z0.shape
    A = _checks.matrix(A, "A", shape=(d, d))
    V = _checks.matrix(V, "V", shape=(d, d))
    exp_V = _linalg.exponential(V)

    def field(t, Z):
        Zr = Z.reshape(k, n, d)
        E = exp_V(t)
        logits = (Zr @ (E.T @ A @ E).T) @ Zr.transpose(0, 2, 1)  # <B z_i, z_j>
        logits -= logits.max(axis=2, keepdims=True)
        P = np.exp(logits)
        P /= P.sum(axis=2, keepdims=True)
        return ((P @ Zr - Zr) @ V.T).reshape(k * n, d)

    traj = dynamics.integrate(field, Z0.reshape(k * n, d), times, method=method, rtol=rtol,
                              atol=atol)
    traj = traj.reshape(-1, k, n, d)
    return traj[:, 0] if single else traj


def _increment(config, i, P, V, h):
    """h times the velocity of token i in the configuration ``config``, attention ``P``."""
    return h * (P[i] @ (config - config[i])) @ V.T


def scripts_scheme(Z0: ArrayLike, times: ArrayLike, A: ArrayLike,
                   V: ArrayLike) -> NDArray[np.float64]:
    r"""The time stepping of the public scripts of Geshkovski et al. (2023), transcribed.

    On each step :math:`[t_l, t_l + h]` the scripts compute the attention matrix with the
    logits :math:`\langle A e^{t_l V} z_i, A e^{t_l V} z_j\rangle` (so the key-query matrix
    of this book is :math:`A^\top A`), then, token by token, four Runge-Kutta stages
    :math:`k_1, \dots, k_4` of the increment of token :math:`i`. Each stage is evaluated at
    the configuration whose *every* token is shifted by the previous stage's increment of
    token :math:`i` (a vector of :math:`\mathbb R^d`). The velocity
    :math:`\sum_j P_{ij} V (z_j - z_i)` depends on differences only, so the shift cancels,
    :math:`k_1 = k_2 = k_3 = k_4`, and the update is :math:`z_i + k_1`: explicit Euler with
    the attention of :math:`A^\top A` (compare :func:`transformer_pde.dynamics.integrate`
    with ``method="euler"``), up to rounding. Kept to check that identity; it costs
    :math:`4n` velocity evaluations per step.

    Parameters
    ----------
    Z0 : array (n, d)
    times : array (m,)
        Strictly increasing; one step per interval.
    A, V : arrays (d, d)

    Returns
    -------
    array (m, n, d)

    Examples
    --------
    The scheme is explicit Euler (up to rounding):

    >>> import numpy as np
    >>> from transformer_pde import dynamics
    >>> Z0, t = np.array([[1.0, 0.0], [0.0, 1.0], [-0.5, 0.3]]), np.linspace(0.0, 0.2, 3)
    >>> A, V = np.array([[1.0, 0.2], [0.0, 0.8]]), np.eye(2)
    >>> field = dynamics.rescaled_field(None, V, A=A.T @ A)
    >>> euler = dynamics.integrate(field, Z0, t, method="euler")
    >>> bool(np.max(np.abs(scripts_scheme(Z0, t, A, V) - euler)) < 1e-12)
    True

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    Z0 = _checks.points(Z0, "Z0")
    n, d = Z0.shape
    A = _checks.matrix(A, "A", shape=(d, d))
    V = _checks.matrix(V, "V", shape=(d, d))
    t = _checks.real_array(times, "times")
    if t.ndim != 1 or t.size < 1 or not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0):
        raise ValueError("times must be a finite, strictly increasing 1-D array")
    exp_V = _linalg.exponential(V)
    traj = np.empty((t.size, n, d))
    traj[0] = Z0
    for step in range(t.size - 1):
        h, Z = t[step + 1] - t[step], traj[step]
        P = attention.softmax_matrix(Z, (A @ exp_V(t[step])).T @ (A @ exp_V(t[step])))

        for i in range(n):
            k1 = _increment(Z, i, P, V, h)
            k2 = _increment(Z + k1 / 2, i, P, V, h)  # the shift is added to every token
            k3 = _increment(Z + k2 / 2, i, P, V, h)
            k4 = _increment(Z + k3, i, P, V, h)
            traj[step + 1, i] = Z[i] + (k1 + 2 * k2 + 2 * k3 + k4) / 6
    return traj


def leaders(P: ArrayLike, tol: float) -> NDArray[np.int64]:
    r"""Leaders of ``P``: the sorted :math:`j` with :math:`P_{ij} > 1 - tol` for some :math:`i`.

    When the attention matrix of the clustering dynamics becomes Boolean, each token attends
    to one *leader* (possibly itself; Geshkovski et al., 2023); the leaders are the non-zero
    columns of that limit.

    Parameters
    ----------
    P : array (n, n)
        An attention matrix.
    tol : float
        Tolerance, ``>= 0``.

    Returns
    -------
    int array
        Sorted indices of the leaders.

    Raises
    ------
    ValueError
        If ``P`` is not a finite 2-D array or ``tol`` is negative.

    Examples
    --------
    >>> import numpy as np
    >>> leaders(np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]), 1e-6).tolist()
    [0, 2]

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    P = _checks.points(P, "P")
    tol = _checks.nonnegative_float(tol, "tol")
    return np.flatnonzero(np.any(P > 1.0 - tol, axis=0)).astype(int)


def is_boolean(P: ArrayLike, tol: float) -> bool:
    r"""Whether every row of ``P`` is within ``tol`` of a standard basis row.

    .. math::

        \max_i \min_k \| P_{i\cdot} - e_k \|_\infty \le tol .

    A Boolean row-stochastic matrix assigns each token to exactly one token (its leader,
    possibly itself).

    Parameters
    ----------
    P : array (m, n)
        A row-stochastic matrix.
    tol : float
        Tolerance, ``>= 0``.

    Returns
    -------
    bool

    Raises
    ------
    ValueError
        If ``P`` is not a finite 2-D array or ``tol`` is negative.

    Examples
    --------
    >>> import numpy as np
    >>> is_boolean(np.array([[1.0, 0.0], [1.0 - 1e-9, 1e-9]]), 1e-6)
    True
    >>> is_boolean(np.array([[0.5, 0.5], [0.0, 1.0]]), 1e-6)
    False

    References
    ----------
    :cite:`geshkovski2023emergence`
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


def passage_times(dist: ArrayLike, times: ArrayLike, deltas: ArrayLike) -> NDArray[np.float64]:
    r"""First sampled times after which a distance stays below each threshold.

    .. math::

        \tau_\delta = \min\{t_k : \mathrm{dist}(t_m) < \delta \text{ for every } m \ge k\}.

    For a distance decaying like :math:`C e^{-\lambda t}` the differences
    :math:`\tau_{\delta/100} - \tau_\delta` are :math:`\log(100)/\lambda` up to one grid step:
    the rate of the hardmax phase of Geshkovski et al. (2023) is :math:`\lambda = 1`.

    Parameters
    ----------
    dist : array (m,)
        Non-negative distances at ``times``.
    times : array (m,)
        Strictly increasing sample times.
    deltas : array (q,)
        Positive thresholds, each above ``dist`` at the last time.

    Returns
    -------
    array (q,)
        :math:`\tau_\delta` for each threshold (``times[0]`` if the distance is below it
        throughout).

    Raises
    ------
    ValueError
        If ``dist`` is not non-negative of the shape of ``times``, ``times`` is not strictly
        increasing, or some ``delta`` is not positive or not above the last distance.

    Examples
    --------
    >>> t = np.linspace(0.0, 10.0, 101)
    >>> passage_times(np.exp(-t), t, [1e-2, 1e-4]).round(1).tolist()
    [4.7, 9.3]

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    t = _checks.increasing_times(times, "times")
    d = _checks.real_array(dist, "dist")
    if d.shape != t.shape or not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ValueError(f"dist must be {t.size} finite non-negative values, got shape {d.shape}")
    q = _checks.real_array(deltas, "deltas")
    if q.ndim != 1 or not np.all(q > 0) or not np.all(q > d[-1]):
        raise ValueError(f"deltas must be positive and above the last distance {d[-1]:g}")
    out = np.empty(q.size)
    for j, level in enumerate(q):
        above = np.flatnonzero(d >= level)
        out[j] = t[0] if above.size == 0 else t[above[-1] + 1]
    return out
