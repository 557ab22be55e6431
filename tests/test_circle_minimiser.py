"""The minimiser on the circle: against the grid minimum, the constant-potential condition, a
closed form, an independent high-precision solve, and the symmetries of D."""

import mpmath
import numpy as np
import pytest
from scipy.special import i0
from transformer_pde import circle_minimiser as cm
from transformer_pde import grid_energy, sphere

D_AN = np.diag([1.0, 0.3])


@pytest.fixture(scope="module")
def mu_an():
    return cm.circle_minimiser(2.0, D_AN)


def _rotation(a):
    return np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])


def test_published_coefficients_and_energy(mu_an):
    # an independent 160-digit computation: mu(2) = -0.8449, mu(4) = 0.5559, mu(6) = -0.3252,
    # E* = 0.29269398436152549
    assert np.allclose(mu_an.coefficients[1:4], [-0.8449, 0.5559, -0.3252], atol=5e-5)
    assert abs(mu_an.energy - 0.29269398436152549) < 1e-15
    g = mu_an.density(np.linspace(-np.pi, np.pi, 2001))
    assert 0.0059 < g.min() < 0.0061 and 5.2 < g.max() < 5.3


def test_potential_is_constant(mu_an):
    # quadrature of the kernel against the density, independent of the linear system
    U = mu_an.potential(np.linspace(-np.pi, np.pi, 181))
    assert np.ptp(U) < 1e-13 * U.mean()
    assert abs(U.mean() / (2 * mu_an.beta) - mu_an.energy) < 1e-14


def test_grid_minimum_is_the_energy_of_the_density(mu_an):
    Y, _ = sphere.sphere_quadrature(720, 2)
    theta = np.arctan2(Y[:, 1], Y[:, 0])
    exact = grid_energy.energy_nnls(Y, 2.0, D_AN)
    # measures on the grid are a subset: the grid minimum is not below E*, and the density
    # sampled on the grid (trapezoidal rule, exponentially accurate) is a grid measure
    assert -1e-14 <= exact.energy - mu_an.energy < 1e-13
    w = mu_an.density(theta)
    w /= w.sum()
    assert abs(sphere.energy(Y, 2.0, D_AN, w) - mu_an.energy) < 1e-14
    # mirror descent from the uniform weights stays above E*
    res = sphere.energy_mirror_descent(Y[::4], 2.0, D_AN, steps=500)
    assert res.energy >= mu_an.energy - 1e-14


def test_independent_high_precision_solve():
    # mpmath's own LU (rows divided by their largest entry), 60 digits, 30 modes
    beta, a, b = 2.0, 0.65 * 2.0, 0.35 * 2.0
    N = 30
    with mpmath.workdps(60):
        M = mpmath.matrix(N, N)
        r = mpmath.matrix(N, 1)
        for p in range(1, N + 1):
            for k in range(-N, N + 1):
                coef = mpmath.besseli(abs(p + k), a) * mpmath.besseli(abs(p - k), b)
                if k == 0:
                    r[p - 1] -= coef
                else:
                    M[p - 1, abs(k) - 1] += coef
            scale = max(abs(M[p - 1, j]) for j in range(N))
            for j in range(N):
                M[p - 1, j] /= scale
            r[p - 1] /= scale
        c = mpmath.lu_solve(M, r)
        ref = np.array([float(c[i]) for i in range(N)])
    mine = cm.circle_minimiser(beta, D_AN, modes=N).coefficients[1:]
    assert np.allclose(mine, ref, rtol=0, atol=1e-14)
    # truncation: 30 modes against the default, to the size of the 30th coefficient
    full = cm.circle_minimiser(beta, D_AN).coefficients[1:N + 1]
    assert np.max(np.abs(mine - full)) < 1e-9


def test_multiple_of_identity_gives_the_uniform_measure():
    res = cm.circle_minimiser(1.5, 2.0 * np.eye(2))
    assert np.all(res.coefficients[1:] == 0)
    assert abs(res.energy - i0(3.0) / 3.0) < 1e-15


def test_rotating_D_rotates_the_minimiser(mu_an):
    a = 0.7
    R = _rotation(a)
    rot = cm.circle_minimiser(2.0, R @ D_AN @ R.T)
    theta = np.linspace(-np.pi, np.pi, 37)
    assert np.allclose(rot.density(theta + a), mu_an.density(theta), atol=1e-12)
    assert abs(rot.energy - mu_an.energy) < 1e-15


def test_cdf_and_kolmogorov_distance(mu_an):
    theta = np.linspace(-np.pi, np.pi, 4001)
    F = mu_an.cdf(theta)
    assert abs(F[0]) < 1e-15 and abs(F[-1] - 1) < 1e-15 and np.all(np.diff(F) >= 0)
    # the derivative of the arc mass is the density over 2 pi
    mid = (theta[1:] + theta[:-1]) / 2
    assert np.allclose(np.diff(F) / np.diff(theta), mu_an.density(mid) / (2 * np.pi), atol=1e-5)
    # the grid measure with the density's weights is within one cell's mass
    m = 720
    ang = -np.pi + 2 * np.pi * (np.arange(m) + 0.5) / m
    w = mu_an.density(ang)
    w /= w.sum()
    assert mu_an.kolmogorov_distance(ang, w) < 5.3 / m
    # a Dirac mass at 0 is at distance max(F(0), 1 - F(0)) = 1/2
    assert abs(mu_an.kolmogorov_distance([0.0], [1.0]) - 0.5) < 1e-12


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(beta=0.0, D=D_AN),
        dict(beta=1.0, D=np.diag([1.0, 0.0])),
        dict(beta=1.0, D=np.diag([1.0, -0.5])),
        dict(beta=1.0, D=np.array([[1.0, 0.2], [0.0, 1.0]])),
        dict(beta=1.0, D=np.eye(3)),
        dict(beta=1.0, D=np.diag([1.0, 0.001])),
        dict(beta=1.0, D=D_AN, modes=0),
    ],
)
def test_bad_input_raises(kwargs):
    with pytest.raises(ValueError):
        cm.circle_minimiser(**kwargs)


def test_bad_angles_raise(mu_an):
    with pytest.raises(ValueError):
        mu_an.cdf([4.0])
    with pytest.raises(ValueError):
        mu_an.kolmogorov_distance([0.0, 1.0], [0.5, 0.6])
