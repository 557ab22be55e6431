"""Tests of transformer_pde.meanfield and transformer_pde.stability (chapter 2)."""

import numpy as np
import pytest
from scipy import integrate
from scipy.linalg import expm, sqrtm
from transformer_pde import attention, dynamics
from transformer_pde.meanfield import interaction_strength, softmax_weight_second_moment
from transformer_pde.stability import flow_jacobian, gronwall_rate

ALPHA = np.array([0.5, -0.3])
SIGMA = np.array([[0.5, 0.2], [0.2, 0.3]])


# --------------------------------------------------------------------------------------
# second moment of the softmax weights
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("a, m, s2", [(0.3, 0.4, 0.8), (-0.5, -0.2, 0.6), (0.8, 0.1, 0.45)])
def test_second_moment_one_dimension_against_quadrature(a, m, s2):
    # d = 1: E exp(2 a x y) for x, y ~ N(m, s2) by two-dimensional adaptive quadrature
    # (rho = |a| s2 < 1/2 in all three cases).
    s = np.sqrt(s2)

    def integrand(y, x):
        dens = np.exp(-((x - m) ** 2 + (y - m) ** 2) / (2 * s2)) / (2 * np.pi * s2)
        return np.exp(2 * a * x * y) * dens

    ref, _ = integrate.dblquad(integrand, m - 14 * s, m + 14 * s, m - 14 * s, m + 14 * s,
                               epsabs=0, epsrel=1e-11)
    got = softmax_weight_second_moment([[a]], [m], [[s2]])
    assert got == pytest.approx(ref, rel=1e-8)


def test_second_moment_against_monte_carlo():
    # d = 2, rho = 0.15 < 1/4, so the Monte Carlo estimator exp(2<Ax,y>) has finite variance
    # (its own second moment is the fourth moment, finite for rho < 1/4): within 5 standard
    # errors.
    rng = np.random.default_rng(7)
    A = np.array([[0.3, -0.2], [0.1, 0.25]])
    A *= 0.15 / interaction_strength(A, SIGMA)
    L = np.linalg.cholesky(SIGMA)
    n = 400_000
    X = ALPHA + rng.standard_normal((n, 2)) @ L.T
    Y = ALPHA + rng.standard_normal((n, 2)) @ L.T
    samples = np.exp(2 * np.einsum("ij,jk,ik->i", Y, A, X))
    err = samples.std() / np.sqrt(n)
    assert abs(samples.mean() - softmax_weight_second_moment(A, ALPHA, SIGMA)) < 5 * err


def test_interaction_strength_against_sqrtm():
    A = np.array([[1.0, 2.0], [-0.5, 0.3]])
    S = np.real(sqrtm(SIGMA))
    assert interaction_strength(A, SIGMA) == pytest.approx(
        np.linalg.svd(S @ A @ S, compute_uv=False)[0], rel=1e-12)


def test_second_moment_threshold():
    # finite and increasing as rho -> 1/2 from below (to +inf: det(I - 2H) -> 0), inf at and
    # beyond 1/2
    A0 = np.array([[0.3, -0.2], [0.1, 0.25]])
    A0 /= interaction_strength(A0, SIGMA)
    below = [softmax_weight_second_moment(r * A0, ALPHA, SIGMA) for r in (0.4, 0.45, 0.49)]
    assert np.all(np.isfinite(below)) and below[0] < below[1] < below[2]
    assert below[2] > 5 * below[0]
    for r in (0.5 + 1e-9, 0.7, 2.0):
        assert softmax_weight_second_moment(r * A0, ALPHA, SIGMA) == np.inf


def test_second_moment_zero_interaction_is_one():
    assert softmax_weight_second_moment(np.zeros((2, 2)), ALPHA, SIGMA) == pytest.approx(1.0)


@pytest.mark.parametrize("args, match", [
    ((np.eye(3), ALPHA, SIGMA), "A"),
    ((np.eye(2), [[0.0, 1.0]], SIGMA), "alpha"),
    ((np.eye(2), ALPHA, [[1.0, 0.5], [0.0, 1.0]]), "symmetric"),
    ((np.eye(2), ALPHA, [[1.0, 0.0], [0.0, -1.0]]), r"positive (semi-)?definite"),
    ((np.eye(2), [np.nan, 0.0], SIGMA), "alpha"),
])
def test_second_moment_bad_inputs(args, match):
    with pytest.raises(ValueError, match=match):
        softmax_weight_second_moment(*args)


# --------------------------------------------------------------------------------------
# Groenwall rate
# --------------------------------------------------------------------------------------

def test_gronwall_rate_formula_and_limits():
    a, v, R = 0.7, 1.3, 0.9
    for p in (1, 2, 3.5):
        ref = v * (a * R * R + (1 + 2 * a * R * R) * np.exp(2 * a * R * R / p))
        assert gronwall_rate(a, v, R, p) == pytest.approx(ref, rel=1e-14)
    assert gronwall_rate(a, v, 0.0, 2) == pytest.approx(v)  # uniform attention
    R = np.linspace(0, 3, 7)
    rates = gronwall_rate(a, v, R, 2)
    assert rates.shape == R.shape and np.all(np.diff(rates) > 0)
    assert gronwall_rate(a, v, 2.0, 1) > gronwall_rate(a, v, 2.0, 2)
    assert gronwall_rate(1.0, 1.0, 30.0, 1) == np.inf  # overflow is reported as inf


@pytest.mark.parametrize("kwargs", [dict(a=-1, v=1, R=1, p=2), dict(a=1, v=np.nan, R=1, p=2),
                                    dict(a=1, v=1, R=1, p=0.5), dict(a=1, v=1, R=1, p="x")])
def test_gronwall_rate_bad_inputs(kwargs):
    with pytest.raises(ValueError):
        gronwall_rate(**kwargs)


# --------------------------------------------------------------------------------------
# flow Jacobian
# --------------------------------------------------------------------------------------

def _parameters():
    rng = np.random.default_rng(3)
    A0, A1 = rng.standard_normal((2, 2, 2)) / 2
    V0 = rng.standard_normal((2, 2)) / 3
    return (lambda t: A0 + np.sin(2 * t) * A1), (lambda t: 0.5 * np.eye(2) + np.cos(t) * V0)


def test_flow_jacobian_against_finite_differences():
    A, V = _parameters()
    X0 = np.random.default_rng(4).uniform(-1, 1, (5, 2))
    times = np.array([0.0, 0.5, 1.0])
    X, J = flow_jacobian(A, V, X0, times, rtol=1e-11, atol=1e-13)
    assert np.allclose(J[0], np.eye(10))
    field = dynamics.attention_field(attention.softmax, A=A, V=V)
    ref = dynamics.integrate(field, X0, times, rtol=1e-11, atol=1e-13)
    assert np.allclose(X, ref, atol=1e-9)
    h = 1e-5
    for col in (0, 3, 9):
        E = np.zeros(10)
        E[col] = 1.0
        ends = [dynamics.integrate(field, X0 + s * h * E.reshape(5, 2), times, rtol=1e-12,
                                   atol=1e-14)[-1].ravel() for s in (1, -1)]
        fd = (ends[0] - ends[1]) / (2 * h)
        assert np.allclose(J[-1][:, col], fd, rtol=1e-6, atol=1e-7)


def test_flow_jacobian_constant_matrices_and_uniform_limit():
    # A = 0: uniform attention, x_i' = V xbar, so J(t) = I + (expm(tV) - I) (x) (1 1^T / n)
    V = np.array([[0.2, -0.4], [0.3, 0.1]])
    X0 = np.random.default_rng(5).standard_normal((4, 2))
    _, J = flow_jacobian(np.zeros((2, 2)), V, X0, [0.0, 1.3], rtol=1e-12, atol=1e-14)
    ref = np.eye(8) + np.kron(np.ones((4, 4)) / 4, expm(1.3 * V) - np.eye(2))
    assert np.allclose(J[-1], ref, atol=1e-10)


def test_flow_jacobian_bad_inputs():
    with pytest.raises(ValueError, match="times"):
        flow_jacobian(np.eye(2), np.eye(2), np.zeros((3, 2)), [0.0, 0.0])
    with pytest.raises(ValueError, match="A"):
        flow_jacobian(np.eye(3), np.eye(2), np.zeros((3, 2)), [0.0, 1.0])
