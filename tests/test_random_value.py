"""Unit tests of transformer_pde.random_value against Monte Carlo of one layer, finite
differences and the scale-function ODE."""

import numpy as np
import pytest
from transformer_pde import random_value as rv


def _one_layer(rho, beta, d, h, V):
    # the network written out directly: tokens e_1 and rho e_1 + sqrt(1 - rho^2) e_2,
    # softmax weights over the two tokens, value matrices V of shape (N, d, d)
    x1 = np.zeros(d)
    x1[0] = 1.0
    x2 = np.zeros(d)
    x2[0], x2[1] = rho, np.sqrt(1.0 - rho**2)
    X = np.stack([x1, x2])
    logits = beta * X @ X.T
    W = np.exp(logits - logits.max(axis=1, keepdims=True))
    W /= W.sum(axis=1, keepdims=True)
    A = W @ X
    Y = X[None] + np.sqrt(h) * np.einsum("nij,kj->nki", V, A)
    Y /= np.linalg.norm(Y, axis=2, keepdims=True)
    lin = np.sqrt(h) * (np.einsum("nij,j,i->n", V, A[0], x2 - rho * x1)
                        + np.einsum("nij,j,i->n", V, A[1], x1 - rho * x2))
    return np.einsum("ni,ni->n", Y[:, 0], Y[:, 1]), lin


@pytest.mark.parametrize("rho,beta,d", [(0.3, 2.0, 6), (-0.6, 0.5, 4), (0.0, 1.0, 3)])
def test_coefficients_against_monte_carlo_of_one_layer(rho, beta, d):
    rng = np.random.default_rng(11)
    h, N = 1e-4, 200_000
    V = rng.standard_normal((N, d, d)) / np.sqrt(d)
    new, lin = _one_layer(rho, beta, d, h, V)
    mu, var = rv.two_token_coefficients(rho, beta, d)
    # the linear term has mean zero (V -> -V); subtracting it leaves O(h) terms
    rest = (new - rho - lin) / h
    se = rest.std(ddof=1) / np.sqrt(N)
    assert abs(rest.mean() - mu) < 5 * se + 0.01 * abs(mu) + 1e-3
    assert abs(np.var(new - rho) / h / var - 1.0) < 0.02


def test_boundary_exponents_against_finite_differences():
    e = 1e-5
    for beta, d in [(0.5, 6), (2.0, 6), (1.0, 3), (3.0, 12)]:
        lam_c, lam_a = rv.boundary_exponents(beta, d)
        for end, lam in ((1.0, lam_c), (-1.0, lam_a)):
            inner = end - np.sign(end) * np.array([e, 2 * e])
            mu, var = rv.two_token_coefficients(inner, beta, d)
            slope = (mu[1] - mu[0]) / (inner[1] - inner[0])
            k = var[0] / e**2
            assert abs(slope - k / 2 - lam) < 1e-3


def test_threshold_is_where_the_antipodal_exponent_changes_sign():
    for d in (4, 6, 12, 50):
        b = rv.antipodal_threshold(d)
        assert abs(rv.boundary_exponents(b, d)[1]) < 1e-14
        assert rv.boundary_exponents(0.99 * b, d)[1] > 0 > rv.boundary_exponents(1.01 * b, d)[1]
    assert rv.antipodal_threshold(3) == 0.0
    assert rv.boundary_exponents(0.01, 3)[1] < 0


@pytest.mark.parametrize("beta,d", [(2.0, 6), (1.5, 4), (3.0, 12), (0.7, 3)])
def test_antipodal_probability_solves_the_scale_ode(beta, d):
    r = np.linspace(-0.9, 0.9, 13)
    e = 1e-3
    S = rv.antipodal_probability(np.concatenate([r - e, r, r + e]), beta, d).reshape(3, -1)
    dS = (S[2] - S[0]) / (2 * e)
    d2S = (S[2] - 2 * S[1] + S[0]) / e**2
    mu, var = rv.two_token_coefficients(r, beta, d)
    assert np.all(np.abs(mu * dS + var / 2 * d2S) < 1e-4 * np.abs(mu * dS) + 1e-8)
    assert np.all(np.diff(S[1]) < 0)
    assert np.allclose(rv.antipodal_probability([-1.0, 1.0], beta, d), [1.0, 0.0])
    # continuity at the split point 0 of the two quadratures
    s = rv.antipodal_probability([-1e-12, 1e-12], beta, d)
    assert abs(s[0] - s[1]) < 1e-10


def test_antipodal_probability_is_zero_when_the_antipodal_end_repels():
    assert np.all(rv.antipodal_probability([-0.9, 0.0, 0.9], 0.5, 6) == 0.0)


def test_simulation_is_the_network_and_is_seeded():
    beta, d, h = 1.3, 5, 0.02
    rho, _ = rv.simulate_two_tokens(0.4, beta, d, h, 1, 7, np.random.default_rng(3))
    V = np.random.default_rng(3).standard_normal((7, d, d))
    direct, _ = _one_layer(0.4, beta, d, h, V / np.sqrt(d))
    assert np.allclose(rho, direct, atol=1e-14)
    again, gap = rv.simulate_two_tokens(0.4, beta, d, h, 1, 7, np.random.default_rng(3))
    assert np.array_equal(rho, again)
    assert np.allclose(gap, 1.0 + rho, atol=1e-14)


@pytest.mark.parametrize("call", [
    lambda: rv.two_token_coefficients(1.5, 1.0, 4),
    lambda: rv.two_token_coefficients(0.0, -1.0, 4),
    lambda: rv.boundary_exponents(1.0, 1),
    lambda: rv.antipodal_probability(0.0, 1.0, 1),
    lambda: rv.simulate_two_tokens(0.0, 1.0, 4, 0.0, 1, 1, np.random.default_rng(0)),
    lambda: rv.simulate_two_tokens(0.0, 1.0, 4, 0.1, 1, 1, 0),
])
def test_bad_input_raises(call):
    with pytest.raises(ValueError):
        call()
