"""Tests of transformer_pde.long_context against independent references.

The finite-n formula against a dense equiangular computation; the limits and the profile;
the probe configurations' hypotheses; the kernel path against the formula; the width of the
transition; the chapter's checks against a wrong critical value and a wrong formula.
"""

import numpy as np
import pytest
from transformer_pde import long_context as lc
from transformer_pde import sphere


def dense_cosine(n, gamma, rho):
    X = sphere.equiangular_configuration(n, rho)
    beta = gamma * np.log(n)
    G = np.exp(beta * (X @ X.T - 1.0))
    Y = (G / G.sum(axis=1, keepdims=True)) @ X
    return Y[0] @ Y[1] / np.linalg.norm(Y[0]) / np.linalg.norm(Y[1])


@pytest.mark.parametrize("n", [3, 10, 60])
@pytest.mark.parametrize("gamma", [0.0, 0.7, 2.0, 5.0])
@pytest.mark.parametrize("rho", [0.1, 0.5, 0.9])
def test_output_cosine_against_a_dense_equiangular_layer(n, gamma, rho):
    assert np.isclose(lc.output_cosine(n, gamma, rho), dense_cosine(n, gamma, rho),
                      rtol=1e-11)


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


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="rho"):
        lc.output_cosine(10, 1.0, 1.0)
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
