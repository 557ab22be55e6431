"""Tests of the consensus form z(t) = Phi(t) z(0) of the clustering dynamics."""

import numpy as np
import pytest
from scipy.linalg import expm
from scipy.special import softmax
from transformer_pde import clusters, consensus

I2 = np.eye(2)


def test_tokens_match_the_rescaled_dynamics_and_phi_maps_the_start_to_them():
    rng = np.random.default_rng(0)
    Z0 = rng.normal(size=(9, 2))
    t = np.linspace(0.0, 6.0, 13)
    z, Phi = consensus.transition_matrix(Z0, t, I2)
    ref = clusters.integrate_draws(Z0, t, I2, I2)
    assert np.max(np.abs(z - ref)) < 1e-7
    assert np.max(np.abs(np.einsum("kij,jd->kid", Phi, Z0) - z)) < 1e-9
    # row-stochastic at every time
    assert np.max(np.abs(Phi.sum(axis=2) - 1)) < 1e-10 and Phi.min() > -1e-12


def test_short_time_is_the_exponential_of_the_frozen_generator():
    rng = np.random.default_rng(1)
    Z0 = rng.normal(size=(6, 2))
    A = np.array([[1.0, 0.3], [0.3, 0.5]])
    P0 = softmax(Z0 @ A @ Z0.T, axis=1)
    errors = []
    for h in (2e-3, 1e-3):  # the weights change over the step: an O(h^2) difference
        _, Phi = consensus.transition_matrix(Z0, [0.0, h], A, rtol=1e-13, atol=1e-15)
        errors.append(np.max(np.abs(Phi[-1] - expm(h * (P0 - np.eye(6))))))
    assert errors[1] < 1e-6 and 3.5 < errors[0] / errors[1] < 4.5


def test_bad_inputs():
    with pytest.raises(ValueError, match="times"):
        consensus.transition_matrix(np.ones((3, 2)), [0.5, 1.0], I2)
    with pytest.raises(ValueError, match="A"):
        consensus.transition_matrix(np.ones((3, 2)), [0.0, 1.0], np.eye(3))
