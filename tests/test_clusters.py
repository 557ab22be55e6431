"""Tests of transformer_pde.clusters against hand-built configurations."""

import itertools

import numpy as np
import pytest
from scipy.linalg import expm
from transformer_pde import attention, clusters

RNG = np.random.default_rng(7)


# --------------------------------------------------------------------------------------
# group
# --------------------------------------------------------------------------------------

def test_group_known_clusters_labels_in_order_of_first_appearance():
    centres = np.array([[5.0, 0.0], [0.0, 0.0], [0.0, 5.0]])
    order = [1, 1, 0, 2, 0, 1, 2]
    Z = centres[order] + 1e-3 * RNG.normal(size=(7, 2))
    labels, found = clusters.group(Z, 0.1)
    np.testing.assert_array_equal(labels, [0, 0, 1, 2, 1, 0, 2])
    assert found.shape == (3, 2)
    for k, c in enumerate([1, 0, 2]):
        np.testing.assert_allclose(found[k], Z[np.array(order) == c].mean(axis=0), atol=1e-15)


def test_group_is_single_linkage_chain():
    # a chain of points 0.4 apart links end to end at tol 0.5 though the ends are 1.6 apart
    Z = np.array([[0.0], [0.4], [0.8], [1.2], [1.6], [10.0]])
    labels, centres = clusters.group(Z, 0.5)
    np.testing.assert_array_equal(labels, [0, 0, 0, 0, 0, 1])
    np.testing.assert_allclose(centres[:, 0], [0.8, 10.0])
    labels, _ = clusters.group(Z, 0.3)
    np.testing.assert_array_equal(labels, np.arange(6))


def test_group_tol_zero_groups_equal_tokens_only():
    Z = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0 + 1e-12]])
    labels, _ = clusters.group(Z, 0.0)
    np.testing.assert_array_equal(labels, [0, 0, 1])


def test_group_against_brute_force_components():
    Z = RNG.uniform(size=(30, 2))
    tol = 0.15
    labels, _ = clusters.group(Z, tol)
    # same label iff linked by a chain: transitive closure of the adjacency by squaring
    adj = (np.linalg.norm(Z[:, None] - Z[None], axis=2) <= tol).astype(int)
    reach = adj.copy()
    for _ in range(6):
        reach = np.minimum(reach @ reach, 1)
    np.testing.assert_array_equal(reach.astype(bool), labels[:, None] == labels[None, :])


# --------------------------------------------------------------------------------------
# polytope_vertices, hull_volume, in_hull
# --------------------------------------------------------------------------------------

def test_vertices_1d():
    P = np.array([[0.3], [-2.0], [1.5], [0.0], [1.5]])
    np.testing.assert_array_equal(clusters.polytope_vertices(P), [1, 2])


def test_vertices_one_and_two_points_and_duplicates():
    np.testing.assert_array_equal(clusters.polytope_vertices([[1.0, 2.0, 3.0]]), [0])
    np.testing.assert_array_equal(clusters.polytope_vertices([[1.0, 2.0], [3.0, 4.0]]), [0, 1])
    np.testing.assert_array_equal(clusters.polytope_vertices([[1.0, 2.0], [1.0, 2.0]]), [0])


def test_vertices_2d_square_with_edge_and_interior_points():
    square = [[0, 0], [1, 0], [1, 1], [0, 1]]
    P = np.array([[0.5, 0.5], *square, [0.5, 0.0], [0.2, 0.7], [1.0, 1.0]], dtype=float)
    np.testing.assert_array_equal(clusters.polytope_vertices(P), [1, 2, 3, 4])


def test_vertices_collinear_in_2d_and_3d():
    t = np.array([0.3, -1.0, 2.0, 0.5])
    np.testing.assert_array_equal(clusters.polytope_vertices(np.outer(t, [1.0, 2.0])), [1, 2])
    np.testing.assert_array_equal(
        clusters.polytope_vertices(np.outer(t, [1.0, -1.0, 0.5]) + 3.0), [1, 2])


def test_vertices_3d_cube_and_planar_set_in_3d():
    cube = np.array(list(itertools.product([0.0, 1.0], repeat=3)))
    extra = np.array([[0.5, 0.5, 0.5], [0.5, 0.5, 0.0], [0.5, 0.0, 0.0]])  # centre, face, edge
    P = np.vstack([extra, cube])
    np.testing.assert_array_equal(clusters.polytope_vertices(P), np.arange(3, 11))
    # a triangle with an interior point, embedded in a tilted plane of R^3
    tri = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.2, 0.2]])
    frame = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    np.testing.assert_array_equal(clusters.polytope_vertices(tri @ frame), [0, 1, 2])


def test_vertices_of_points_on_a_circle_are_all_of_them():
    a = np.sort(RNG.uniform(0, 2 * np.pi, 12))
    circle = np.c_[np.cos(a), np.sin(a)]
    P = np.vstack([0.5 * circle, circle])  # the inner circle is inside
    np.testing.assert_array_equal(clusters.polytope_vertices(P), np.arange(12, 24))


def test_hull_volume_closed_forms():
    assert clusters.hull_volume([[0.0, 0.0], [2.0, 0.0], [0.0, 3.0], [0.5, 0.5]]) == \
        pytest.approx(3.0)
    cube = np.array(list(itertools.product([0.0, 2.0], repeat=3)))
    assert clusters.hull_volume(cube) == pytest.approx(8.0)
    assert clusters.hull_volume([[0.0], [-1.0], [2.5]]) == pytest.approx(3.5)
    assert clusters.hull_volume([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]) == 0.0
    assert clusters.hull_volume([[1.0, 1.0]]) == 0.0


def test_in_hull_square_segment_and_point():
    square = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], dtype=float)
    pts = np.array([[0.5, 0.5], [1.0, 0.5], [1.0 + 1e-6, 0.5], [-0.1, 0.2]])
    np.testing.assert_array_equal(clusters.in_hull(pts, square), [True, True, False, False])
    seg = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    pts = np.array([[0.5, 0.5, 0.5], [1.5, 1.5, 1.5], [0.5, 0.5, 0.6]])
    np.testing.assert_array_equal(clusters.in_hull(pts, seg), [True, False, False])
    np.testing.assert_array_equal(clusters.in_hull([[1.0, 2.0], [1.0, 2.1]], [[1.0, 2.0]]),
                                  [True, False])


def test_in_hull_against_barycentric_test_of_a_triangle():
    tri = np.array([[0.0, 0.0], [2.0, 0.5], [0.5, 1.5]])
    pts = RNG.uniform(-0.5, 2.5, size=(200, 2))
    # barycentric coordinates
    T = np.c_[tri[1] - tri[0], tri[2] - tri[0]]
    lam = np.linalg.solve(T, (pts - tri[0]).T).T
    inside = (lam >= 0).all(axis=1) & (lam.sum(axis=1) <= 1)
    np.testing.assert_array_equal(clusters.in_hull(pts, tri, tol=0.0), inside)


# --------------------------------------------------------------------------------------
# leaders, is_boolean, rescaled_attention_matrix
# --------------------------------------------------------------------------------------

def test_boolean_matrix_and_its_leaders():
    P = np.zeros((5, 5))
    P[[0, 1, 2, 3, 4], [3, 3, 1, 3, 1]] = 1.0
    assert clusters.is_boolean(P, 0.0)
    np.testing.assert_array_equal(clusters.leaders(P, 1e-9), [1, 3])
    # rank = number of leaders (distinct non-zero columns)
    assert np.linalg.matrix_rank(P) == 2
    Q = P * (1 - 1e-4) + 1e-4 / 5
    assert clusters.is_boolean(Q, 1e-3) and not clusters.is_boolean(Q, 1e-5)
    np.testing.assert_array_equal(clusters.leaders(Q, 1e-3), [1, 3])
    assert clusters.leaders(Q, 1e-5).size == 0


def test_non_boolean_matrices():
    assert not clusters.is_boolean(np.full((3, 3), 1 / 3), 0.1)
    half = np.array([[0.5, 0.5], [0.0, 1.0]])
    assert not clusters.is_boolean(half, 0.49) and clusters.is_boolean(half, 0.5)
    np.testing.assert_array_equal(clusters.leaders(half, 0.1), [1])
    # rows with negative entries: distance to the nearest basis row in the sup norm
    assert not clusters.is_boolean(np.array([[1.0, -0.2]]), 0.1)
    assert clusters.is_boolean(np.array([[1.0, -0.2]]), 0.2)
    assert clusters.is_boolean(np.array([[1.0], [0.95]]), 0.06)
    assert not clusters.is_boolean(np.array([[1.0], [0.95]]), 0.04)


def test_is_boolean_against_brute_force():
    for _ in range(50):
        P = RNG.uniform(-0.2, 1.2, size=(4, 3))
        dist = max(min(np.max(np.abs(row - np.eye(3)[k])) for k in range(3)) for row in P)
        for tol in (dist - 1e-9, dist + 1e-9):
            assert clusters.is_boolean(P, tol) == (dist <= tol)


def test_rescaled_attention_matrix_is_that_of_x():
    Z = RNG.normal(size=(6, 3))
    A = RNG.normal(size=(3, 3))
    V = RNG.normal(scale=0.5, size=(3, 3))
    t = 1.3
    X = Z @ expm(t * V).T
    np.testing.assert_allclose(clusters.rescaled_attention_matrix(Z, t, A, V),
                               attention.softmax_matrix(X, A), rtol=1e-10, atol=1e-14)


def test_rescaled_attention_matrix_is_hardmax_at_large_t():
    Z = np.array([[1.0, 0.0], [0.0, 1.2], [0.5, 0.4]])
    P = clusters.rescaled_attention_matrix(Z, 20.0, np.eye(2), np.eye(2))
    assert np.all(np.isfinite(P))
    # token i attends to argmax_j <z_i, z_j>
    np.testing.assert_array_equal(np.argmax(P, axis=1), np.argmax(Z @ Z.T, axis=1))
    assert clusters.is_boolean(P, 1e-12)


# --------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("call", "name"), [
    (lambda: clusters.group(np.zeros(3), 0.1), "Z"),
    (lambda: clusters.group([[np.nan, 0.0]], 0.1), "Z"),
    (lambda: clusters.group(np.zeros((3, 2)), -0.1), "tol"),
    (lambda: clusters.group(np.zeros((3, 2)), np.inf), "tol"),
    (lambda: clusters.group(np.zeros((3, 2)), "a"), "tol"),
    (lambda: clusters.polytope_vertices(np.zeros((0, 2))), "points"),
    (lambda: clusters.polytope_vertices([[np.inf, 1.0]]), "points"),
    (lambda: clusters.hull_volume(np.zeros((2, 2, 2))), "points"),
    (lambda: clusters.in_hull(np.zeros((2, 3)), np.zeros((2, 2))), "points"),
    (lambda: clusters.in_hull(np.zeros((2, 2)), np.zeros((2, 2)), tol=-1.0), "tol"),
    (lambda: clusters.leaders(np.ones(3), 0.1), "P"),
    (lambda: clusters.leaders(np.eye(2), -1e-3), "tol"),
    (lambda: clusters.is_boolean(np.array([[np.nan]]), 0.1), "P"),
    (lambda: clusters.is_boolean(np.eye(2), np.nan), "tol"),
    (lambda: clusters.rescaled_attention_matrix(np.zeros((3, 2)), 1.0, np.eye(3), np.eye(2)),
     "A"),
    (lambda: clusters.rescaled_attention_matrix(np.zeros((3, 2)), 1.0, np.eye(2), np.eye(3)),
     "V"),
    (lambda: clusters.rescaled_attention_matrix(np.zeros((3, 2)), np.nan, np.eye(2), np.eye(2)),
     "t"),
])
def test_bad_inputs(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# --------------------------------------------------------------------------------------
# the scripts' time stepping, and many runs at once
# --------------------------------------------------------------------------------------

def _scripts_step_by_loop(Z, t, h, A, V):
    """One step of the scripts' scheme, written out token by token with explicit sums."""
    n = Z.shape[0]
    E = expm(t * V)
    Y = [A @ E @ z for z in Z]
    logits = np.array([[Y[i] @ Y[j] for j in range(n)] for i in range(n)])
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)

    def velocity(W, i):
        return sum(P[i, j] * (V @ (W[j] - W[i])) for j in range(n))

    out = np.empty_like(Z)
    for i in range(n):
        k1 = h * velocity(Z, i)
        k2 = h * velocity(Z + k1 / 2, i)
        k3 = h * velocity(Z + k2 / 2, i)
        k4 = h * velocity(Z + k3, i)
        out[i] = Z[i] + (k1 + 2 * k2 + 2 * k3 + k4) / 6
    return out


def test_scripts_scheme_matches_a_loop_and_is_explicit_euler():
    from transformer_pde import dynamics

    Z0 = RNG.uniform(-5, 5, size=(7, 2))
    A = np.array([[1.0, 0.3], [0.1, 0.7]])
    V = np.array([[0.5, 0.2], [-0.1, 0.4]])
    times = np.linspace(0.0, 1.0, 11)
    got = clusters.scripts_scheme(Z0, times, A, V)
    np.testing.assert_allclose(got[1], _scripts_step_by_loop(Z0, 0.0, 0.1, A, V),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[2], _scripts_step_by_loop(got[1], 0.1, 0.1, A, V),
                               rtol=1e-12, atol=1e-12)
    # explicit Euler with the key-query matrix A^T A: equal up to rounding
    euler = dynamics.integrate(dynamics.rescaled_field(None, V, A=A.T @ A), Z0, times,
                               method="euler")
    np.testing.assert_allclose(got, euler, rtol=0, atol=1e-12)
    # and not classical RK4 (which would differ at order h^2 per step)
    rk4 = dynamics.integrate(dynamics.rescaled_field(None, V, A=A.T @ A), Z0, times,
                             method="rk4")
    assert np.abs(got[-1] - rk4[-1]).max() > 1e-6


def test_integrate_draws_matches_separate_runs():
    from transformer_pde import dynamics

    Z0 = RNG.normal(size=(4, 6, 2))
    A = np.array([[1.0, 0.2], [0.2, 0.6]])
    V = np.array([[1.0, 0.3], [0.0, 0.5]])
    times = np.linspace(0.0, 3.0, 7)
    together = clusters.integrate_draws(Z0, times, A, V, rtol=1e-12, atol=1e-13)
    assert together.shape == (7, 4, 6, 2)
    for r in range(4):
        alone = dynamics.integrate(dynamics.rescaled_field(None, V, A=A), Z0[r], times,
                                   rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(together[:, r], alone, rtol=0, atol=1e-9)
    single = clusters.integrate_draws(Z0[0], times, A, V, rtol=1e-12, atol=1e-13)
    assert single.shape == (7, 6, 2)
    np.testing.assert_allclose(single, together[:, 0], rtol=0, atol=1e-9)
    # fixed steps: each run gets the steps it would get alone, to rounding
    for method in ("euler", "rk4"):
        fixed = clusters.integrate_draws(Z0, times, A, V, method=method)
        for r in range(4):
            alone = dynamics.integrate(dynamics.rescaled_field(None, V, A=A), Z0[r], times,
                                       method=method)
            np.testing.assert_allclose(fixed[:, r], alone, rtol=0, atol=1e-13)


def test_integrate_draws_hardmax_regime_stays_finite():
    # logits up to e^{24}: each follower heads straight for argmax_j <z_i, z_j>
    Z0 = RNG.normal(size=(3, 5, 2))
    I2 = np.eye(2)
    z = clusters.integrate_draws(Z0, [0.0, 12.0], I2, I2)
    assert np.all(np.isfinite(z))
    assert all(clusters.in_hull(z[-1, r], Z0[r], tol=1e-8).all() for r in range(3))


@pytest.mark.parametrize(("call", "name"), [
    (lambda: clusters.integrate_draws(np.zeros(3), [0.0, 1.0], np.eye(2), np.eye(2)), "Z0"),
    (lambda: clusters.integrate_draws(np.full((1, 2, 2), np.nan), [0.0, 1.0], np.eye(2),
                                      np.eye(2)), "Z0"),
    (lambda: clusters.integrate_draws(np.zeros((1, 2, 2)), [0.0, 1.0], np.eye(3),
                                      np.eye(2)), "A"),
    (lambda: clusters.integrate_draws(np.zeros((1, 2, 2)), [1.0, 0.0], np.eye(2),
                                      np.eye(2)), "times"),
    (lambda: clusters.scripts_scheme(np.zeros(3), [0.0, 1.0], np.eye(2), np.eye(2)), "Z0"),
    (lambda: clusters.scripts_scheme(np.zeros((3, 2)), [0.0, 0.0], np.eye(2), np.eye(2)),
     "times"),
    (lambda: clusters.scripts_scheme(np.zeros((3, 2)), [0.0, 1.0], np.eye(2),
                                     np.full((2, 2), np.nan)), "V"),
])
def test_draws_and_scripts_bad_inputs(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_hull_polygon_is_closed_counter_clockwise_and_handles_flat_sets():
    P = np.array([[0.5, 0.5], [1, 1], [0, 0], [1, 0], [0, 1], [0.5, 0.0]], dtype=float)
    poly = clusters.hull_polygon(P)
    np.testing.assert_array_equal(poly[0], poly[-1])
    np.testing.assert_array_equal(poly[:-1], [[0, 0], [1, 0], [1, 1], [0, 1]])
    # shoelace formula: positive area means counter-clockwise
    x, y = poly[:, 0], poly[:, 1]
    assert 0.5 * np.sum(x[:-1] * y[1:] - x[1:] * y[:-1]) == pytest.approx(1.0)
    np.testing.assert_array_equal(clusters.hull_polygon([[0, 0], [2, 2], [1, 1]]),
                                  [[0, 0], [2, 2], [0, 0]])
    np.testing.assert_array_equal(clusters.hull_polygon([[3.0, 4.0]]), [[3, 4], [3, 4]])
    with pytest.raises(ValueError, match="points"):
        clusters.hull_polygon(np.zeros((3, 3)))


def test_passage_times_of_exponential_decays_separate_rate_one_from_others():
    # the chapter's check: tau_(delta/100) - tau_delta = log(100) within 0.25; a distance
    # decaying like e^-t passes on the grid of 0.1, rates 0.9 and 1.1 miss by 0.5 and 0.4
    t = np.linspace(0.0, 25.0, 251)
    deltas = np.array([1e-2, 1e-4, 1e-6, 1e-8])
    for rate, passes in ((1.0, True), (0.9, False), (1.1, False)):
        dist = 3.0 * np.exp(-rate * t)
        dist[-1] = 0.0  # the reference is the last sample
        gaps = np.diff(clusters.passage_times(dist, t, deltas))
        assert np.all(np.abs(gaps - np.log(100)) < 0.25) == passes, (rate, gaps)
        assert np.allclose(gaps, np.log(100) / rate, atol=0.1 + 1e-12)


def test_passage_times_brute_force_and_bad_input():
    rng = np.random.default_rng(3)
    t = np.linspace(0.0, 1.0, 30)
    dist = np.append(rng.uniform(0, 1, 29), 0.0)
    for level in (0.1, 0.5, 0.9, 2.0):
        brute = min(t[k] for k in range(30) if np.all(dist[k:] < level))
        assert clusters.passage_times(dist, t, [level])[0] == brute
    with pytest.raises(ValueError, match="deltas"):
        clusters.passage_times(dist + 0.2, t, [0.1])
    with pytest.raises(ValueError, match="dist"):
        clusters.passage_times(-dist, t, [0.1])
    with pytest.raises(ValueError, match="times"):
        clusters.passage_times(dist, t[::-1], [0.1])
