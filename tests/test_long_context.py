"""Tests of transformer_pde.long_context against independent references.

The finite-n formula against a dense equiangular computation; the limits and the profile;
the probe configurations' hypotheses; the kernel path against the formula; the width of the
transition; the chapter's checks against a wrong critical value and a wrong formula.
"""

import numpy as np
import pytest
from transformer_pde import long_context as lc
from transformer_pde import sphere


def dense_cosine(n, gamma, rho, residual=0.0):
    X = sphere.equiangular_configuration(n, rho)
    beta = gamma * np.log(n)
    G = np.exp(beta * (X @ X.T - 1.0))
    Y = (G / G.sum(axis=1, keepdims=True)) @ X + residual * X
    return Y[0] @ Y[1] / np.linalg.norm(Y[0]) / np.linalg.norm(Y[1])


@pytest.mark.parametrize("n", [3, 10, 60])
@pytest.mark.parametrize("gamma", [0.0, 0.7, 2.0, 5.0])
@pytest.mark.parametrize("rho", [0.1, 0.5, 0.9])
def test_output_cosine_against_a_dense_equiangular_layer(n, gamma, rho):
    assert np.isclose(lc.output_cosine(n, gamma, rho), dense_cosine(n, gamma, rho),
                      rtol=1e-11)


@pytest.mark.parametrize("n", [4, 50])
@pytest.mark.parametrize("gamma", [0.0, 0.9, 3.0])
@pytest.mark.parametrize("rho", [0.0, 0.3])
@pytest.mark.parametrize("residual", [0.0, 0.5, 2.0])
def test_output_cosine_with_residual_and_rho_zero_against_dense(n, gamma, rho, residual):
    assert np.isclose(lc.output_cosine(n, gamma, rho, residual=residual),
                      dense_cosine(n, gamma, rho, residual), rtol=1e-11)


def test_output_cosine_is_finite_up_to_n_1e18_and_any_gamma():
    g = np.array([0.0, 1e-6, 0.5, 1.0, 2.0, 2.0000001, 10.0, 100.0, 1e4, 1e8])
    for rho in (0.0, 0.01, 0.5, 0.99):
        for k in range(1, 19):
            c = lc.output_cosine(10**k, g, rho)
            assert np.all(np.isfinite(c)) and np.all(c >= rho - 1e-15) and np.all(c <= 1 + 1e-15)
            assert np.all(np.diff(c) <= 1e-15)  # decreasing in gamma
        for res in (0.3, 5.0):
            assert np.all(np.isfinite(lc.output_cosine(10**18, g, rho, residual=res)))
    assert abs(lc.output_cosine(10**9, 100.0, 0.5) - 0.5) < 1e-12
    assert abs(lc.output_cosine(10**18, 1e4, 0.3) - 0.3) < 1e-12
    # against an mpmath evaluation of the formula at a huge k
    import mpmath

    mpmath.mp.dps = 60
    n, gamma, rho = 10**15, 3.7, 0.4
    k = mpmath.mpf(n) ** (gamma * (1 - rho))
    K, sig = k - 1, 1 + (n - 1) * mpmath.mpf(rho)
    ref = (K**2 * rho + 2 * K * sig + n * sig) / (K**2 + 2 * K * sig + n * sig)
    assert abs(lc.output_cosine(n, gamma, rho) - float(ref)) < 1e-14


def test_residual_limits():
    rho, c = 0.5, 1.0
    vals = lc.output_cosine(10**32, np.array([1.0, 2.0, 3.0]), rho, residual=c)
    assert np.allclose(vals, [0.8, 0.64, 0.5], atol=1e-12)
    for g in (1.0, 2.0, 3.0):
        assert np.isclose(lc.critical_limit(g, rho, residual=c), vals[int(g) - 1], atol=1e-12)
    # the claim "the residual connection changes the three values" is rejected at
    # the supercritical value, and "it changes nothing" at the other two
    assert abs(vals[2] - rho) < 1e-12
    assert abs(vals[0] - 1.0) > 0.1 and abs(vals[1] - 4 * rho / (1 + 3 * rho)) > 0.1


def test_midpoint_against_root_finding():
    from scipy.optimize import brentq

    for rho in (0.0, 0.01, 0.5):
        for n in (10**3, 10**6):
            target = (1 + rho) / 2
            root = brentq(lambda g, n=n, rho=rho, target=target:
                          lc.output_cosine(n, g, rho) - target, 0.0, 300.0, xtol=1e-14)
            assert abs(lc.midpoint_gamma(n, rho) - root) < 1e-10
    # rho = 0: K = 1 + sqrt(1 + n), the midpoint tends to 1/2, not to gamma = 1
    n = 10**6
    assert np.isclose(lc.midpoint_gamma(n, 0.0), np.log(2 + np.sqrt(1 + n)) / np.log(n))
    assert abs(lc.midpoint_gamma(10**12, 0.0) - 0.5) < 1e-3
    assert lc.output_cosine(10**6, 1.0, 0.0) < 3e-6
    # rho = 0.01: the lag log(x_mid)/((1 - rho) log n)
    rho = 0.01
    lag = np.log(rho + np.sqrt(rho**2 + rho)) / ((1 - rho) * np.log(10**12))
    assert abs(lc.midpoint_gamma(10**12, rho) - (1 / (1 - rho) + lag)) < 1e-3


def test_limits_and_the_critical_value():
    for rho in (0.2, 0.5, 0.8):
        gc = lc.critical_gamma(rho)
        assert lc.critical_limit(0.5 * gc, rho) == 1.0
        assert lc.critical_limit(1.5 * gc, rho) == rho
        crit = 4 * rho / (1 + 3 * rho)
        assert np.isclose(lc.critical_limit(gc, rho), crit)
        assert np.isclose(lc.transition_profile(1.0, rho), crit)
        assert abs(lc.output_cosine(10**8, gc, rho) - crit) < 1e-7
        # a wrong critical value (e.g. (1 + rho)/2) is far from the formula's
        assert abs(lc.output_cosine(10**8, gc, rho) - (1 + rho) / 2) > 1e-2
        assert abs(lc.output_cosine(10**12, 0.5 * gc, rho) - 1) < 1e-4
        assert abs(lc.output_cosine(10**12, 1.5 * gc, rho) - rho) < 1e-4


def test_bound_against_the_profile():
    rho = 0.3
    g = np.linspace(0, 6, 601)
    for n in (10, 100, 10**4):
        x = np.expm1(g * (1 - rho) * np.log(n)) / n
        dev = np.abs(lc.output_cosine(n, g, rho) - lc.transition_profile(x, rho))
        assert np.all(dev <= 2 * (1 - rho) ** 2 / (rho * n))
        assert dev.max() > 0.05 * (1 - rho) ** 2 / (rho * n)  # the 1/n order is real


def test_profile_width_against_bisection():
    from scipy.optimize import brentq

    rho = 0.5
    w = lc.profile_width(rho, 0.1)
    f = lambda z, p: lc.transition_profile(np.exp(z), rho) - (rho + (1 - rho) * p)  # noqa: E731
    assert np.isclose(w, brentq(f, -30, 30, args=(0.1,)) - brentq(f, -30, 30, args=(0.9,)),
                      rtol=1e-10)


def test_transition_width_sharpens_like_one_over_log_n():
    rho = 0.5
    w = lc.profile_width(rho)
    for n in (10**3, 10**5):
        scaled = lc.transition_width(n, rho) * (1 - rho) * np.log(n)
        assert abs(scaled - w) < 20.0 / n
    # a width that does not sharpen (or sharpens like n^-1/2) is rejected
    assert abs(lc.transition_width(10**5, rho) - lc.transition_width(10**3, rho)) > 0.1


def test_probe_configuration_and_kernel():
    rng = np.random.default_rng(3)
    X, S2 = lc.probe_configuration(500, 0.4, 8, rng)
    assert np.allclose(np.linalg.norm(X, axis=1), 1, atol=1e-15)
    G = X @ X.T
    assert np.allclose(G[0, 1:], 0.4, atol=1e-15) and np.allclose(G[1, [0, *range(2, 500)]], 0.4)
    assert np.isclose(S2, X.sum(axis=0) @ X.sum(axis=0))
    for gamma in (0.5, 1 / 0.6, 3.0):
        exact = lc.output_cosine(500, gamma, 0.4, sum_sq=S2)
        assert abs(lc.probe_cosine(X, gamma) - exact) < 1e-12
        assert abs(lc.probe_cosine(X, gamma, chunk_size=1) - exact) < 1e-12
    # the equiangular |S|^2 would be a wrong reference for the probe configuration
    assert abs(lc.output_cosine(500, 0.5, 0.4) - lc.probe_cosine(X, 0.5)) > 1e-9
    m, e = lc.probe_sweep_task([3, 200], 0.4, 8, [0.5, 2.0])
    assert m.shape == e.shape == (2,) and np.all(np.abs(m - e) < 1e-12)
    m, e = lc.probe_sweep_task([3, 200], 0.4, 8, [0.5, 2.0], residual=1.0)
    assert np.all(np.abs(m - e) < 1e-12)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="rho"):
        lc.output_cosine(10, 1.0, 1.0)
    with pytest.raises(ValueError, match="rho"):
        lc.critical_gamma(0.0)
    with pytest.raises(ValueError, match="residual"):
        lc.output_cosine(10, 1.0, 0.5, residual=-1.0)
    with pytest.raises(ValueError, match="gamma"):
        lc.output_cosine(10, -1.0, 0.5)
    with pytest.raises(ValueError, match="n"):
        lc.output_cosine(1, 1.0, 0.5)
    with pytest.raises(ValueError, match="sum_sq"):
        lc.output_cosine(10, 1.0, 0.5, sum_sq=-1)
    with pytest.raises(ValueError, match="x"):
        lc.transition_profile(-1.0, 0.5)
    with pytest.raises(ValueError, match="level"):
        lc.profile_width(0.5, 0.7)
    with pytest.raises(ValueError, match="rng"):
        lc.probe_configuration(10, 0.5, 4, 0)
    with pytest.raises(ValueError, match="d_bulk"):
        lc.probe_configuration(10, 0.5, 0, np.random.default_rng(0))


def test_one_minus_cosine_and_the_stack_of_layers():
    # 1 - cos = (1 - rho) K^2 / (K^2 + 2 K sigma + n sigma), exactly (chapter 8)
    for n, gamma, rho in ((50, 0.3, 0.2), (10**4, 1.1, 0.6), (10**6, 0.05, 0.4)):
        K = n ** (gamma * (1 - rho)) - 1
        sigma = 1 + (n - 1) * rho
        exact = (1 - rho) * K**2 / (K**2 + 2 * K * sigma + n * sigma)
        assert np.isclose(1 - lc.output_cosine(n, gamma, rho), exact, rtol=1e-6, atol=1e-15)
    # the one-layer map never spreads equiangular tokens, and its outputs are equiangular
    # again: a dense two-layer computation agrees with iterating output_cosine
    n, gamma, rho = 40, 3.0, 0.5
    X = sphere.equiangular_configuration(n, rho)
    for _ in range(2):
        G = np.exp(gamma * np.log(n) * (X @ X.T - 1.0))
        Y = (G / G.sum(axis=1, keepdims=True)) @ X
        X = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    two = lc.output_cosine(n, gamma, lc.output_cosine(n, gamma, rho))
    assert np.isclose(X[0] @ X[1], two, rtol=1e-12) and np.isclose(X[2] @ X[7], two)
    rhos = np.linspace(0, 0.99, 100)
    assert np.all([lc.output_cosine(10**5, 2.5, r) >= r for r in rhos])
