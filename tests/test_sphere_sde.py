"""Unit tests of transformer_pde.sphere_sde against closed forms and Monte Carlo."""

import math

import numpy as np
import pytest
from scipy.special import eval_legendre
from transformer_pde import sphere_sde as sde


def _uniform(n, d, rng):
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def test_tangent_noise_is_tangent_and_keeps_the_tangent_part():
    rng = np.random.default_rng(1)
    X = _uniform(50, 4, rng)
    xi = rng.standard_normal((50, 4))
    P = sde.tangent_noise(X, xi)
    assert np.max(np.abs(np.einsum("ij,ij->i", P, X))) < 1e-14
    assert np.allclose(sde.tangent_noise(X, P), P, atol=1e-14)


@pytest.mark.parametrize("step", [sde.projected_em_step, sde.exponential_em_step])
def test_steps_stay_on_the_sphere_and_follow_a_deterministic_drift(step):
    rng = np.random.default_rng(2)
    X = _uniform(30, 3, rng)
    B = rng.standard_normal((30, 3))
    Y = step(X, B, 1e-3, 1e12, np.zeros((30, 3)))
    assert np.max(np.abs(np.linalg.norm(Y, axis=1) - 1)) < 1e-14
    PB = B - np.einsum("ij,ij->i", B, X)[:, None] * X
    # one step of the ODE x' = P_x b: Y = X + h P b + O(h^2)
    assert np.max(np.abs(Y - X - 1e-3 * PB)) < 1e-5


def test_exponential_step_is_the_angle_step_on_the_circle():
    rng = np.random.default_rng(3)
    th = rng.uniform(-3, 3, 20)
    X = np.column_stack([np.cos(th), np.sin(th)])
    b = rng.standard_normal(20)
    xi_t = rng.standard_normal(20)
    tang = np.column_stack([-np.sin(th), np.cos(th)])
    xi = xi_t[:, None] * tang + rng.standard_normal(20)[:, None] * X  # radial part dropped
    Y = sde.exponential_em_step(X, b[:, None] * tang, 0.01, 2.0, xi)
    th2 = th + 0.01 * b + math.sqrt(0.01) * xi_t
    assert np.allclose(Y, np.column_stack([np.cos(th2), np.sin(th2)]), atol=1e-13)


def test_zonal_harmonics_match_legendre_and_chebyshev():
    t = np.linspace(-1, 1, 11)
    for ell in range(5):
        assert np.allclose(sde.zonal_harmonic(ell, 3, t), eval_legendre(ell, t), atol=1e-14)
        assert np.allclose(sde.zonal_harmonic(ell, 2, t), np.cos(ell * np.arccos(t)),
                           atol=1e-13)


def test_zonal_harmonic_is_a_laplace_eigenfunction_by_finite_differences():
    # on S^{d-1}, for f(x) = g(x_1): Delta f = (1 - t^2) g'' - (d - 1) t g'
    for d in (3, 5):
        for ell in (1, 2, 3):
            t, h = 0.3, 1e-4
            g = [float(sde.zonal_harmonic(ell, d, t + k * h)) for k in (-1, 0, 1)]
            g1, g2 = (g[2] - g[0]) / (2 * h), (g[2] - 2 * g[1] + g[0]) / h**2
            lap = (1 - t * t) * g2 - (d - 1) * t * g1
            assert abs(lap + ell * (ell + d - 2) * g[1]) < 1e-5


def test_step_multiplier_first_order_and_against_monte_carlo():
    for d in (2, 3, 6):
        for ell in (1, 2):
            lam = sde.heat_decay_rate(ell, d, 1.5)
            for scheme in ("projected", "exponential"):
                # m(h) = 1 - lam h + O(h^2): the defect over h^2 stays bounded as h -> 0
                defects = [(sde.step_multiplier(ell, d, h, 1.5, scheme) - 1 + lam * h) / h**2
                           for h in (1e-2, 5e-3, 2.5e-3)]
                # (a first-order defect would grow like 1/h; a wrong rate lam would too)
                assert abs(defects[2] - defects[1]) < 0.05 * abs(defects[1]) + 1e-3
    # Monte Carlo of one step from e_1 (Hoeffding band 2 exp(-N t^2 / 2), t = 0.02: 1e-17)
    rng = np.random.default_rng(4)
    N, d, h, kappa = 200_000, 3, 0.2, 1.0
    X = np.tile(np.eye(d)[0], (N, 1))
    for scheme, step in (("projected", sde.projected_em_step),
                         ("exponential", sde.exponential_em_step)):
        Y = step(X, np.zeros((N, d)), h, kappa, rng.standard_normal((N, d)))
        for ell in (1, 2):
            mc = np.mean(sde.zonal_harmonic(ell, d, Y[:, 0]))
            assert abs(mc - sde.step_multiplier(ell, d, h, kappa, scheme)) < 0.02


def test_weak_error_is_first_order_on_the_heat_kernel():
    T, d, kappa, ell = 1.0, 3, 1.0, 1
    exact = math.exp(-sde.heat_decay_rate(ell, d, kappa) * T)
    for scheme in ("projected", "exponential"):
        err = [abs(sde.step_multiplier(ell, d, T / N, kappa, scheme) ** N - exact)
               for N in (40, 80, 160)]
        ratios = np.array(err[:-1]) / np.array(err[1:])
        assert np.all(np.abs(ratios - 2) < 0.1), ratios


def test_usa_drift_against_a_loop_and_the_circle_fourier_drift():
    rng = np.random.default_rng(5)
    X = _uniform(9, 4, rng)
    beta = 1.7
    ref = np.zeros_like(X)
    for i in range(9):
        m = sum(np.exp(beta * X[i] @ X[j]) * X[j] for j in range(9)) / 9
        ref[i] = m - (m @ X[i]) * X[i]
    assert np.allclose(sde.usa_drift(X, beta), ref, atol=1e-13)
    th = rng.uniform(-np.pi, np.pi, (3, 11))
    for beta in (0.0, 0.5, 4.0, 12.0):
        b = sde.circle_usa_drift(th, beta)
        s = th[:, None, :] - th[:, :, None]  # s[r, i, j] = theta_j - theta_i
        direct = np.mean(np.exp(beta * np.cos(s)) * np.sin(s), axis=2)
        assert np.max(np.abs(b - direct)) < 1e-12 * math.exp(beta)


def test_simulate_circle_heat_kernel_and_reproducibility():
    # drift negligible (one particle has no neighbour but itself): pure diffusion,
    # E cos(theta_T) = exp(-T / kappa) exactly for the angle step (Gaussian increments)
    rng = np.random.default_rng(6)
    R, T, kappa = 40_000, 0.5, 2.0
    th0 = np.zeros((R, 1))
    _, th = sde.simulate_circle(th0, 0.0, kappa, 0.05, 10, rng)
    # Hoeffding band: false alarm 2 exp(-R 0.025^2 / 2) = 8e-6
    assert abs(np.mean(np.cos(th)) - math.exp(-T / kappa)) < 0.025
    a = sde.simulate_circle(th0[:5], 1.0, 1.0, 0.01, 7, np.random.default_rng(7), 7)
    b = sde.simulate_circle(th0[:5], 1.0, 1.0, 0.01, 7, np.random.default_rng(7), 7)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert a[0].shape == (2, 5)


def test_bad_input_raises():
    X = np.eye(3)[:2]
    with pytest.raises(ValueError, match="dt"):
        sde.projected_em_step(X, np.zeros((2, 3)), 0.0, 1.0, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="kappa"):
        sde.exponential_em_step(X, np.zeros((2, 3)), 0.1, -1.0, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="xi"):
        sde.projected_em_step(X, np.zeros((2, 3)), 0.1, 1.0, np.zeros((3, 3)))
    with pytest.raises(ValueError, match="scheme"):
        sde.step_multiplier(1, 3, 0.1, 1.0, "heun")
    with pytest.raises(ValueError, match="ell"):
        sde.zonal_harmonic(-1, 3, 0.0)
    with pytest.raises(ValueError, match="d must"):
        sde.heat_decay_rate(1, 1, 1.0)
    with pytest.raises(ValueError, match="theta"):
        sde.circle_usa_drift(np.array([np.nan]), 1.0)
    with pytest.raises(ValueError, match="rng"):
        sde.simulate_circle(np.zeros(3), 1.0, 1.0, 0.1, 2, 0)
