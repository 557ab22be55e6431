"""Tests of the dynamics on the unit sphere (transformer_pde.sphere)."""

import numpy as np
import pytest
from transformer_pde import attention, dynamics, sphere


def angle(x, y):
    return float(np.arctan2(abs(x[0] * y[1] - x[1] * y[0]), np.dot(x, y)))


def test_tangent_projection_is_the_orthogonal_projection():
    rng = np.random.default_rng(0)
    X = sphere.uniform_on_sphere(30, 4, rng)
    Y = rng.normal(size=(30, 4))
    P = sphere.tangent_projection(X, Y)
    np.testing.assert_allclose(np.einsum("ij,ij->i", X, P), 0.0, atol=1e-14)
    np.testing.assert_allclose(sphere.tangent_projection(X, P), P, atol=1e-14)
    # on the sphere it is y - <x, y> x; off the sphere it only depends on the direction
    np.testing.assert_allclose(P, Y - np.einsum("ij,ij->i", X, Y)[:, None] * X, atol=1e-14)
    np.testing.assert_allclose(sphere.tangent_projection(3.0 * X, Y), P, atol=1e-13)


def test_normalise_and_uniform_points():
    rng = np.random.default_rng(1)
    U = sphere.uniform_on_sphere(20000, 3, rng)
    np.testing.assert_allclose(np.linalg.norm(U, axis=1), 1.0, atol=1e-15)
    # Monte Carlo: the mean of the uniform law is 0, each coordinate has variance 1/3
    assert np.all(np.abs(U.mean(axis=0)) < 5 * np.sqrt(1 / 3 / 20000))
    np.testing.assert_allclose((U**2).mean(axis=0), 1 / 3, atol=0.02)
    np.testing.assert_allclose(sphere.normalise([[3.0, 4.0]]), [[0.6, 0.8]])


@pytest.mark.parametrize("causal", [False, True])
def test_field_is_tangent_and_norms_are_preserved(causal):
    rng = np.random.default_rng(2)
    n, d = 12, 3
    X0 = sphere.uniform_on_sphere(n, d, rng)
    A = 2.0 * rng.normal(size=(d, d))
    V = rng.normal(size=(d, d))
    field = dynamics.attention_field(attention.softmax, A=A, V=V, causal=causal)
    v = sphere.sphere_field(field)(0.0, X0)
    np.testing.assert_allclose(np.einsum("ij,ij->i", X0, v), 0.0, atol=1e-13)
    traj = sphere.integrate_on_sphere(field, X0, np.linspace(0, 5, 11))
    assert sphere.sphere_drift(traj) < 1e-9
    # the field is evaluated at normalised tokens: scaling a state does not change it
    np.testing.assert_allclose(sphere.sphere_field(field)(0.0, 2.0 * X0), v, atol=1e-13)


@pytest.mark.parametrize("causal,rate", [(False, 1.0), (True, 0.5)])
def test_two_tokens_closed_form(causal, rate):
    # A = 0, V = I: uniform attention. Unmasked: each token moves toward the other at speed
    # (1/2) sin(theta), so theta' = -sin(theta), tan(theta/2) = tan(theta0/2) e^{-t}.
    # Causal: token 1 is fixed and token 2 moves at (1/2) sin(theta): rate 1/2.
    theta0 = 2.5
    X0 = np.array([[1.0, 0.0], [np.cos(theta0), np.sin(theta0)]])
    field = dynamics.attention_field(attention.softmax, A=np.zeros((2, 2)), V=np.eye(2),
                                     causal=causal)
    times = np.linspace(0, 6, 13)
    traj = sphere.integrate_on_sphere(field, X0, times)
    theta = np.array([angle(x[0], x[1]) for x in traj])
    expected = 2 * np.arctan(np.tan(theta0 / 2) * np.exp(-rate * times))
    np.testing.assert_allclose(theta, expected, rtol=1e-7, atol=1e-9)
    if causal:
        np.testing.assert_allclose(traj[:, 0], np.broadcast_to(X0[0], (13, 2)), atol=1e-15)


def test_symmetric_configuration_is_an_equilibrium():
    # the vertices of a regular simplex / polygon are stationary for unmasked attention
    # with A = beta I and V = I: by symmetry Gamma(x_i) is parallel to x_i
    n = 7
    ang = 2 * np.pi * np.arange(n) / n
    X = np.column_stack([np.cos(ang), np.sin(ang)])
    field = dynamics.attention_field(attention.softmax, A=3.0 * np.eye(2), V=np.eye(2))
    np.testing.assert_allclose(sphere.sphere_field(field)(0.0, X), 0.0, atol=1e-14)
    E = np.eye(4) - 0.25
    E = E / np.linalg.norm(E, axis=1, keepdims=True)  # regular simplex in R^4 (rank 3)
    field = dynamics.attention_field(attention.softmax, A=-2.0 * np.eye(4), V=np.eye(4))
    np.testing.assert_allclose(sphere.sphere_field(field)(0.0, E), 0.0, atol=1e-14)


def test_normalised_residual_stack_converges_at_order_one():
    rng = np.random.default_rng(3)
    n, d = 8, 3
    X0 = sphere.uniform_on_sphere(n, d, rng)
    field = dynamics.attention_field(attention.softmax, A=rng.normal(size=(d, d)),
                                     V=np.eye(d), causal=True)
    exact = sphere.integrate_on_sphere(field, X0, [0.0, 2.0])[-1]
    errors = []
    for L in (20, 40, 80, 160):
        stack = sphere.normalised_residual_stack(field, X0, 2.0, L)
        assert stack.shape == (L + 1, n, d)
        assert sphere.sphere_drift(stack) < 1e-14
        errors.append(np.abs(stack[-1] - exact).max())
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    np.testing.assert_allclose(ratios, 2.0, rtol=0.1)


def test_bad_inputs_raise():
    field = dynamics.attention_field(attention.softmax, A=np.eye(2), V=np.eye(2))
    with pytest.raises(ValueError, match="zero row"):
        sphere.normalise([[0.0, 0.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="zero row"):
        sphere.tangent_projection([[0.0, 0.0]], [[1.0, 0.0]])
    with pytest.raises(ValueError, match="same shape"):
        sphere.tangent_projection([[1.0, 0.0]], [[1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="unit rows"):
        sphere.integrate_on_sphere(field, [[2.0, 0.0]], [0.0, 1.0])
    with pytest.raises(ValueError, match="unit rows"):
        sphere.normalised_residual_stack(field, [[2.0, 0.0]], 1.0, 4)
    with pytest.raises(ValueError, match="callable"):
        sphere.sphere_field(None)
    with pytest.raises(ValueError, match="rng"):
        sphere.uniform_on_sphere(3, 2, 0)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        sphere.uniform_on_sphere(0, 2, np.random.default_rng(0))
    # a coarse Euler step leaves the sphere: detected, not hidden
    X0 = np.array([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(RuntimeError, match="drifted off the sphere"):
        sphere.integrate_on_sphere(field, X0, [0.0, 1.0, 2.0], method="euler")
