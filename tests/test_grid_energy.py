"""Tests of the energy minimisation over a grid (transformer_pde.grid_energy)."""

import math

import numpy as np
import pytest
from scipy.optimize import minimize
from transformer_pde import grid_energy as ge
from transformer_pde import sphere


def test_nnls_matches_a_generic_constrained_solver():
    # independent reference: SLSQP on the simplex, small problem
    rng = np.random.default_rng(0)
    Y = sphere.uniform_on_sphere(12, 3, rng)
    beta, D = 1.5, np.diag([1.0, 0.4, 0.1])
    K = np.exp(beta * Y @ D @ Y.T)
    res = minimize(lambda w: w @ K @ w / (2 * beta), np.full(12, 1 / 12),
                   jac=lambda w: K @ w / beta, bounds=[(0, 1)] * 12,
                   constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1}],
                   method="SLSQP", options={"ftol": 1e-15, "maxiter": 1000})
    out = ge.energy_nnls(Y, beta, D)
    assert np.isclose(out.energy, res.fun, rtol=1e-9)
    assert out.energy <= res.fun + 1e-12
    assert 0 <= out.gap < 1e-12 and np.isclose(out.weights.sum(), 1) and out.weights.min() >= 0
    assert np.isclose(ge.energy_gap(Y, out.weights, beta, D), out.gap, atol=1e-15)


def test_nnls_gives_the_known_minimisers():
    # D = 2I on an equally spaced circle grid: the uniform weights are optimal; the kernel is
    # so ill-conditioned that other weights have the same energy to rounding, so compare the
    # energy and the low moments, not the weights
    Y, _ = sphere.sphere_quadrature(40, 2)
    out = ge.energy_nnls(Y, 2.0, 2 * np.eye(2))
    uniform = np.full(40, 1 / 40)
    assert np.isclose(out.energy, sphere.energy(Y, 2.0, 2 * np.eye(2), uniform), rtol=1e-13)
    for k in (1, 2, 3):
        np.testing.assert_allclose(ge.moment_tensor(Y, out.weights, k),
                                   ge.moment_tensor(Y, uniform, k), atol=1e-6)
    out = ge.energy_nnls(Y, 1.0, np.diag([1.0, 0.0]))
    assert np.isclose(out.energy, 0.5, rtol=1e-12)
    on_kernel = np.abs(Y[:, 0]) < 1e-12
    assert np.isclose(out.weights[on_kernel].sum(), 1.0, atol=1e-9)
    with pytest.raises(ValueError, match="positive semidefinite"):
        ge.energy_nnls(Y, 1.0, np.diag([1.0, -0.5]))
    with pytest.raises(ValueError, match="symmetric"):
        ge.energy_nnls(Y, 1.0, np.array([[1.0, 0.5], [0.0, 1.0]]))


def test_gap_agrees_with_mirror_descent_and_bounds_the_excess():
    Y, _ = sphere.sphere_quadrature(60, 2)
    D, beta = np.diag([1.0, 0.3]), 2.0
    md = sphere.energy_mirror_descent(Y, beta, D, steps=300)
    assert np.isclose(ge.energy_gap(Y, md.weights, beta, D), md.gap, rtol=1e-12)
    best = ge.energy_nnls(Y, beta, D)
    assert 0 <= md.energy - best.energy <= md.gap


def test_moment_tensor_against_loops_and_the_kernel_expansion():
    rng = np.random.default_rng(1)
    Y = sphere.uniform_on_sphere(5, 2, rng)
    w = rng.dirichlet(np.ones(5))
    D = np.diag([1.0, 0.3])
    R = np.diag(np.sqrt([1.0, 0.3]))
    m3 = sum(w[i] * np.einsum("a,b,c->abc", *(3 * [R @ Y[i]])) for i in range(5))
    np.testing.assert_allclose(ge.moment_tensor(Y, w, 3, D), m3.ravel(), atol=1e-15)
    np.testing.assert_allclose(ge.moment_tensor(Y, w, 0, D), [1.0])
    # a signed measure nu = mu1 - mu2: iint e^{beta <x, D y>} dnu dnu = sum_k beta^k/k! |m_k|^2
    v = rng.dirichlet(np.ones(5))
    beta = 1.7
    K = np.exp(beta * Y @ D @ Y.T)
    lhs = (w - v) @ K @ (w - v)
    rhs = sum(beta**k / math.factorial(k)
              * np.sum((ge.moment_tensor(Y, w, k, D) - ge.moment_tensor(Y, v, k, D)) ** 2)
              for k in range(19))  # tail beta^19 / 19! * 4 < 1e-12
    assert np.isclose(lhs, rhs, rtol=1e-9)


def test_moment_bound_holds_and_is_tight_enough_to_fail_when_misused():
    rng = np.random.default_rng(2)
    Y, _ = sphere.sphere_quadrature(48, 2)
    beta, D = 2.0, np.diag([1.0, 0.3])
    best = ge.energy_nnls(Y, beta, D)
    worst_ratio = 0.0
    for _ in range(20):
        w = rng.dirichlet(np.ones(48))
        excess = sphere.energy(Y, beta, D, w) - best.energy
        for k in range(1, 5):
            diff = np.linalg.norm(ge.moment_tensor(Y, w, k, D)
                                  - ge.moment_tensor(Y, best.weights, k, D))
            bound = ge.moment_bound(excess + best.gap, beta, k)
            assert diff <= bound
            worst_ratio = max(worst_ratio, diff / bound)
    assert worst_ratio > 0.1  # the bound is not vacuous on these draws
    with pytest.raises(ValueError, match="gap"):
        ge.moment_bound(-1.0, 1.0, 2)
