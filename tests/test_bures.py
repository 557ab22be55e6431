"""Tests of transformer_pde.bures: the Bures-Wasserstein geometry of Gaussian measures.

References: POT's closed form (ot.gaussian.bures_wasserstein_distance), the one-dimensional
formula W2^2 = (a1 - a2)^2 + (s1 - s2)^2, exact optimal transport between large samples,
finite differences of W2 along an integrated Gaussian curve, Monte Carlo for the field norm.
"""

import numpy as np
import ot
import pytest
from transformer_pde import bures, transport
from transformer_pde import gaussian as G


def _spd(rng, d, floor=0.1):
    L = rng.normal(size=(d, d))
    return L @ L.T + floor * np.eye(d)


@pytest.mark.parametrize("d", [1, 2, 4])
def test_wasserstein2_against_pot_and_one_dimensional_formula(d):
    rng = np.random.default_rng(d)
    a1, a2 = rng.normal(size=d), rng.normal(size=d)
    S1, S2 = _spd(rng, d), _spd(rng, d, floor=0.0)
    ref = ot.gaussian.bures_wasserstein_distance(a1, a2, S1, S2)
    assert bures.wasserstein2(a1, S1, a2, S2) == pytest.approx(float(ref), rel=1e-10)
    if d == 1:
        s1, s2 = np.sqrt(S1[0, 0]), np.sqrt(S2[0, 0])
        exact = np.sqrt((a1[0] - a2[0]) ** 2 + (s1 - s2) ** 2)
        assert bures.wasserstein2(a1, S1, a2, S2) == pytest.approx(exact, rel=1e-12)
    assert bures.wasserstein2(a1, S1, a1, S1) < 1e-7


def test_wasserstein2_against_exact_transport_between_samples():
    rng = np.random.default_rng(7)
    a1, a2 = np.array([0.0, 1.0]), np.array([0.5, -0.2])
    S1, S2 = _spd(rng, 2), _spd(rng, 2)
    n = 1500
    X = rng.multivariate_normal(a1, S1, size=n)
    Y = rng.multivariate_normal(a2, S2, size=n)
    emp = transport.wasserstein(X, Y)
    # sample W2 converges at n^-1/2 in d = 2 (up to a log): a few percent at n = 1500
    assert emp == pytest.approx(bures.wasserstein2(a1, S1, a2, S2), rel=0.08)


def test_metric_speed_is_the_limit_of_difference_quotients_at_first_order():
    rng = np.random.default_rng(3)
    d = 3
    alpha, Sigma = rng.normal(size=d), _spd(rng, d)
    A, V = rng.normal(size=(d, d)), rng.normal(size=(d, d))
    speed = bures.metric_speed(*G.softmax_rhs(alpha, Sigma, A, V)[:1], Sigma,
                               G.softmax_rhs(alpha, Sigma, A, V)[1])
    errs = []
    for h in (2e-3, 1e-3, 5e-4):
        run = G.integrate_moments(G.softmax_rhs, alpha, Sigma, [0.0, h], args=(A, V))
        errs.append(bures.wasserstein2(alpha, Sigma, run.alpha[-1], run.Sigma[-1]) / h - speed)
    errs = np.abs(errs)
    assert errs[-1] < 1e-2 * speed
    assert 1.7 < errs[0] / errs[1] < 2.3 and 1.7 < errs[1] / errs[2] < 2.3


def test_tangent_matrix_solves_the_lyapunov_equation_and_field_norm_bounds_speed():
    rng = np.random.default_rng(4)
    d = 3
    alpha, Sigma = rng.normal(size=d), _spd(rng, d)
    M, b = rng.normal(size=(d, d)), rng.normal(size=d)
    da, dS = G.affine_moments_rhs(M, b, alpha, Sigma)
    S = bures.tangent_matrix(Sigma, dS)
    np.testing.assert_allclose(S @ Sigma + Sigma @ S, dS, atol=1e-12)
    np.testing.assert_allclose(S, S.T, atol=0)
    speed = bures.metric_speed(da, Sigma, dS)
    assert bures.field_norm(M, b, alpha, Sigma) > speed * (1 + 1e-3)
    Msym = 0.5 * (M + M.T)
    da, dS = G.affine_moments_rhs(Msym, b, alpha, Sigma)
    assert bures.field_norm(Msym, b, alpha, Sigma) == pytest.approx(
        bures.metric_speed(da, Sigma, dS), rel=1e-12)


def test_field_norm_against_monte_carlo():
    rng = np.random.default_rng(5)
    d = 2
    alpha, Sigma = rng.normal(size=d), _spd(rng, d)
    M, b = rng.normal(size=(d, d)), rng.normal(size=d)
    X = rng.multivariate_normal(alpha, Sigma, size=200_000)
    mc = np.sqrt(np.mean(np.sum((X @ M.T + b) ** 2, axis=1)))
    assert bures.field_norm(M, b, alpha, Sigma) == pytest.approx(mc, rel=1e-2)


def test_bad_inputs_raise():
    S = np.eye(2)
    with pytest.raises(ValueError, match="alpha1 and alpha2"):
        bures.wasserstein2(np.zeros(2), S, np.zeros(3), np.eye(3))
    with pytest.raises(ValueError, match="positive semi-definite"):
        bures.wasserstein2(np.zeros(2), -S, np.zeros(2), S)
    with pytest.raises(ValueError, match="positive definite"):
        bures.tangent_matrix(np.diag([1.0, 0.0]), S)
    with pytest.raises(ValueError, match="symmetric"):
        bures.tangent_matrix(S, np.array([[0.0, 1.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="dalpha"):
        bures.metric_speed(np.zeros(3), S, S)
    with pytest.raises(ValueError, match="b must"):
        bures.field_norm(S, np.zeros(3), np.zeros(2), S)


def _softmax_case(seed, d=2):
    rng = np.random.default_rng(seed)
    return rng.normal(size=d), _spd(rng, d, 0.3), 0.4 * rng.normal(size=(d, d)), \
        rng.normal(size=(d, d))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chord_and_length_defect_is_second_order_and_nonnegative(seed):
    alpha, Sigma, A, V = _softmax_case(seed)
    defects = []
    for h in (4e-3, 2e-3, 1e-3):
        c = bures.chord_and_length(G.softmax_rhs, alpha, Sigma, h, args=(A, V))
        assert c.defect >= -c.rounding
        assert c.length == pytest.approx(c.chord, rel=1e-3)
        defects.append(c.defect)
    # delta(h) = K h^2 + O(h^3): halving h divides it by about 4
    assert 3.0 < defects[0] / defects[1] < 5.0


def test_chord_and_length_rejects_wrong_speed_formulas():
    alpha, Sigma, A, V = _softmax_case(3)
    h, K = 1e-3, 5.0  # the bound delta <= K h^2 of the chapter

    def non_symmetric(da, S, dS):  # S = dSigma Sigma^-1 / 2 instead of the Lyapunov solution
        T = 0.5 * dS @ np.linalg.inv(S)
        return float(np.sqrt(da @ da + np.trace(T @ S @ T.T)))

    right = bures.chord_and_length(G.softmax_rhs, alpha, Sigma, h, args=(A, V))
    assert -right.rounding <= right.defect <= K * h**2 + right.rounding
    for wrong in (lambda *a: 1.001 * bures.metric_speed(*a), non_symmetric):
        c = bures.chord_and_length(G.softmax_rhs, alpha, Sigma, h, args=(A, V), speed=wrong)
        assert c.defect > K * h**2 + c.rounding
    small = bures.chord_and_length(G.softmax_rhs, alpha, Sigma, h, args=(A, V),
                                   speed=lambda *a: 0.999 * bures.metric_speed(*a))
    assert small.defect < -small.rounding


def test_chord_and_length_bad_inputs():
    alpha, Sigma, A, V = _softmax_case(4)
    with pytest.raises(ValueError, match="h"):
        bures.chord_and_length(G.softmax_rhs, alpha, Sigma, -1.0, args=(A, V))
    with pytest.raises(ValueError, match="speed"):
        bures.chord_and_length(G.softmax_rhs, alpha, Sigma, 1e-3, args=(A, V), speed=3.0)
    with pytest.raises(ValueError, match="move"):
        bures.chord_and_length(G.softmax_rhs, alpha, Sigma, 1e-3, args=(0 * A, 0 * V))
