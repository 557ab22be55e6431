"""Tests of the interaction energy of self-attention in R^d (transformer_pde.energy)."""

import numpy as np
import pytest
from transformer_pde import attention, energy


def _spd(rng, d):
    M = rng.normal(size=(d, d))
    return M @ M.T / d + 0.2 * np.eye(d)


def test_log_energy_against_the_double_sum():
    rng = np.random.default_rng(0)
    X, A = rng.normal(size=(7, 3)), _spd(rng, 3)
    direct = np.log(sum(np.exp(X[i] @ A @ X[j]) for i in range(7) for j in range(7)))
    assert abs(energy.log_interaction_energy(X, A) - direct) < 1e-12
    # no overflow where the double sum would: logits of order 1e4
    assert np.isfinite(energy.log_interaction_energy(100 * X, A))


def test_gradient_against_central_differences():
    rng = np.random.default_rng(1)
    X, A = rng.normal(size=(5, 2)), _spd(rng, 2)
    grad = energy.log_energy_gradient(X, A)
    h = 1e-6
    for i in range(5):
        for k in range(2):
            E = np.zeros_like(X)
            E[i, k] = h
            fd = (energy.log_interaction_energy(X + E, A)
                  - energy.log_interaction_energy(X - E, A)) / (2 * h)
            assert abs(fd - grad[i, k]) < 1e-8


def test_self_attention_is_the_gradient_flow_in_the_attention_metric():
    rng = np.random.default_rng(2)
    X, A = rng.normal(size=(9, 3)), _spd(rng, 3)
    velocity = attention.softmax(X, A, np.eye(3))  # sum_j P_ij x_j
    c = energy.attention_metric_weights(X, A)
    grad = energy.log_energy_gradient(X, A)
    assert np.max(np.abs(c[:, None] * velocity @ A - grad)) < 1e-12
    # hence d/dt log E = sum_i c_i <A v_i, v_i> >= 0, checked along a short Euler step
    h = 1e-7
    slope = (energy.log_interaction_energy(X + h * velocity, A)
             - energy.log_interaction_energy(X - h * velocity, A)) / (2 * h)
    assert abs(slope - np.sum(c * np.einsum("ij,jk,ik->i", velocity, A, velocity))) < 1e-6


def test_unnormalised_attention_is_the_euclidean_gradient_flow():
    rng = np.random.default_rng(3)
    X, A = rng.normal(size=(6, 2)), _spd(rng, 2)
    n = 6
    unnormalised = np.exp(X @ A @ X.T) @ X @ A / n  # (1/n) sum_j e^{<A x_i, x_j>} A x_j
    E = np.exp(energy.log_interaction_energy(X, A))
    assert np.max(np.abs(unnormalised - E * energy.log_energy_gradient(X, A) / (2 * n))) < 1e-10


def test_bad_inputs():
    with pytest.raises(ValueError, match="symmetric"):
        energy.log_interaction_energy(np.ones((2, 2)), np.array([[1.0, 2.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="A"):
        energy.log_energy_gradient(np.ones((2, 2)), np.eye(3))
    with pytest.raises(ValueError, match="X"):
        energy.attention_metric_weights(np.full((2, 2), np.nan), np.eye(2))
