"""Tests of transformer_pde.polytope: the hardmax gap, cells and the set S of the limit polytope.

References: closed forms on squares and rectangles, explicit loops, and a dense grid search
for the zeros of the gap.
"""

import itertools

import numpy as np
import pytest
from transformer_pde import clusters, polytope

RNG = np.random.default_rng(5)
SQUARE = np.array([[1.0, 1.0], [-1.0, 1.0], [-1.0, -1.0], [1.0, -1.0]])


def test_attention_gap_closed_forms_on_a_square():
    pts = np.array([[1.0, 1.0], [1.0, 0.0], [0.5, 0.0], [0.0, 0.0], [0.5, 0.5]])
    # max_j <x, v_j> = |x_1| + |x_2| on this square
    expected = np.abs(pts).sum(axis=1) - (pts ** 2).sum(axis=1)
    np.testing.assert_allclose(polytope.attention_gap(pts, SQUARE, np.eye(2)), expected,
                               atol=1e-15)
    assert polytope.attention_gap(SQUARE, SQUARE, np.eye(2)).max() == 0.0  # exactly


def test_hardmax_cells_against_a_loop():
    W = RNG.normal(size=(5, 3))
    X = RNG.normal(size=(40, 3))
    A = RNG.normal(size=(3, 3))
    got = polytope.hardmax_cells(X, W, A)
    ref = [int(np.argmax([(A @ x) @ w for w in W])) for x in X]
    np.testing.assert_array_equal(got, ref)


def test_self_attending_set_of_a_centred_rectangle():
    # A = diag(a, b), rectangle [-p, p] x [-q, q]: the 4 vertices, the 4 edge midpoints
    # (feet of the A-perpendiculars from 0) and 0 itself
    p, q = 2.0, 0.5
    R = np.array([[p, q], [-p, q], [-p, -q], [p, -q]])
    S = polytope.self_attending_set(R, np.diag([1.0, 3.0]))
    expected = np.vstack([R, [[p, 0], [-p, 0], [0, q], [0, -q], [0, 0]]])
    assert len(S) == 9
    for e in expected:
        assert np.min(np.linalg.norm(S - e, axis=1)) < 1e-12


def test_self_attending_set_of_a_triangle_away_from_the_origin():
    # a triangle in x1 > 0, A = I, so 0 is not in K. Vertex (1, -1): <v, (3, 0.5)> = 2.5 > |v|^2
    # = 2, not in S. The foot of the perpendicular from 0 onto the edge (1, 2)-(3, 0.5) is
    # (1.32, 1.76), inside that edge, and it exposes that edge: in S. The foot (1, 0) on the
    # left edge is not: <(1, 0), (3, 0.5)> = 3 > 1.
    T = np.array([[1.0, -1.0], [1.0, 2.0], [3.0, 0.5]])
    S = polytope.self_attending_set(T, np.eye(2))
    expected = np.array([[1.0, 2.0], [3.0, 0.5], [1.32, 1.76]])
    assert len(S) == 3
    for e in expected:
        assert np.min(np.linalg.norm(S - e, axis=1)) < 1e-12


def test_self_attending_set_against_a_grid_search():
    # every point of K where the gap nearly vanishes is near a returned point, and every
    # returned point has zero gap and lies in K
    W = RNG.normal(size=(6, 2)) + np.array([0.3, 0.0])
    W = W[clusters.polytope_vertices(W)]
    M = RNG.normal(size=(2, 2))
    A = M @ M.T + 0.5 * np.eye(2)
    S = polytope.self_attending_set(W, A)
    assert np.all(np.abs(polytope.attention_gap(S, W, A)) < 1e-9)
    assert clusters.in_hull(S, W, tol=1e-9).all()
    lo, hi = W.min(axis=0), W.max(axis=0)
    g = np.stack(np.meshgrid(np.linspace(lo[0], hi[0], 400), np.linspace(lo[1], hi[1], 400)),
                 axis=-1).reshape(-1, 2)
    g = g[clusters.in_hull(g, W)]
    near_zero = g[polytope.attention_gap(g, W, A) < 1e-4]
    assert len(near_zero) > 0
    dist = np.min(np.linalg.norm(near_zero[:, None] - S[None], axis=2), axis=1)
    assert dist.max() < 0.05


def test_self_attending_set_of_a_cube_contains_vertices_face_centres_and_origin():
    cube = np.array(list(itertools.product([-1.0, 1.0], repeat=3)))
    S = polytope.self_attending_set(cube, np.eye(3))
    # vertices (8), edge midpoints (12), face centres (6), the origin: 27 points
    assert len(S) == 27
    assert np.all(np.abs(polytope.attention_gap(S, cube, np.eye(3))) < 1e-12)


def test_on_boundary_square_segment_and_interval():
    pts = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [2.0, 0.0], [0.99, 0.0]])
    np.testing.assert_array_equal(polytope.on_boundary(pts, SQUARE),
                                  [False, True, True, False, False])
    seg = np.array([[0.0, 0.0], [2.0, 2.0]])
    np.testing.assert_array_equal(polytope.on_boundary([[1.0, 1.0], [1.0, 1.5]], seg),
                                  [True, False])
    np.testing.assert_array_equal(polytope.on_boundary([[0.0], [1.0], [3.0]], [[0.0], [3.0]]),
                                  [True, False, True])


@pytest.mark.parametrize(("call", "name"), [
    (lambda: polytope.attention_gap(np.zeros((2, 3)), SQUARE, np.eye(2)), "points"),
    (lambda: polytope.attention_gap(np.zeros((2, 2)), SQUARE, np.eye(3)), "A"),
    (lambda: polytope.hardmax_cells(np.zeros((2, 2)), np.zeros(2), np.eye(2)), "vertices"),
    (lambda: polytope.self_attending_set(SQUARE, np.array([[1.0, 0.5], [0.0, 1.0]])), "A"),
    (lambda: polytope.self_attending_set(SQUARE, -np.eye(2)), "A"),
    (lambda: polytope.self_attending_set(SQUARE, np.eye(2), tol=-1.0), "tol"),
    (lambda: polytope.self_attending_set(np.zeros((25, 2)), np.eye(2)), "vertices"),
    (lambda: polytope.on_boundary(np.zeros((2, 3)), SQUARE), "points"),
])
def test_bad_inputs(call, name):
    with pytest.raises(ValueError, match=name):
        call()
