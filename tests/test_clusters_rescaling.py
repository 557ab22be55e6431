"""Tests of the rescaled dynamics z = e^{-tV} x used by the clustering chapter.

References: finite differences of the unrescaled trajectory, a direct log-sum-exp evaluation of
the hardmax regime, and the closed-form exponential of a Jordan block.
"""

import numpy as np
import pytest
from scipy.special import softmax as row_softmax
from transformer_pde import attention, clusters, dynamics

RNG = np.random.default_rng(11)


def _reference_field(Z, E, A, V):
    """sum_j P_ij V (z_j - z_i) with logits <A E z_i, E z_j>, by an explicit loop."""
    logits = (Z @ E.T) @ A.T @ (Z @ E.T).T
    P = row_softmax(logits, axis=1)
    out = np.zeros_like(Z)
    for i in range(Z.shape[0]):
        for j in range(Z.shape[0]):
            out[i] += P[i, j] * (V @ (Z[j] - Z[i]))
    return out


def test_rescaled_field_matches_finite_differences_of_the_unrescaled_trajectory():
    n, d = 7, 3
    X0 = RNG.normal(size=(n, d))
    A = RNG.normal(scale=0.6, size=(d, d))
    V = RNG.normal(scale=0.5, size=(d, d))  # not symmetric, not normal
    t0, h = 1.5, 1e-3
    times = [0.0, t0 - h, t0, t0 + h]
    x = dynamics.integrate(dynamics.attention_field(attention.softmax, A=A, V=V), X0,
                           times, rtol=1e-13, atol=1e-13)
    z = dynamics.rescale(x, times, V)
    central = (z[3] - z[1]) / (2 * h)  # O(h^2) = 1e-6 truncation, 1e-10 from the solver
    field = dynamics.rescaled_field(None, V, A=A)(t0, z[2])
    np.testing.assert_allclose(field, central, rtol=0, atol=1e-5)


@pytest.mark.parametrize("t", [20.0, 30.0])
def test_rescaled_field_is_accurate_in_the_hardmax_regime(t):
    # V = A = I: logits e^{2t} <z_i, z_j>, up to e^{60}; a direct log-sum-exp reference
    Z = RNG.normal(size=(9, 2))
    I2 = np.eye(2)
    got = dynamics.rescaled_field(None, I2, A=I2)(t, Z)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, _reference_field(Z, np.exp(t) * I2, I2, I2),
                               rtol=0, atol=1e-12)
    # hardmax: each token moves straight to argmax_j <z_i, z_j>
    target = Z[np.argmax(Z @ Z.T, axis=1)]
    np.testing.assert_allclose(got, target - Z, rtol=0, atol=1e-12)


def test_rescaled_field_with_a_jordan_block_at_large_t():
    # V defective: e^{tV} = e^t [[1, t], [0, 1]] in closed form
    V = np.array([[1.0, 1.0], [0.0, 1.0]])
    A = np.array([[1.0, 0.2], [0.2, 0.5]])
    Z = RNG.normal(size=(6, 2))
    for t in (2.0, 20.0):
        E = np.exp(t) * np.array([[1.0, t], [0.0, 1.0]])
        got = dynamics.rescaled_field(None, V, A=A)(t, Z)
        np.testing.assert_allclose(got, _reference_field(Z, E, A, V), rtol=0, atol=1e-11)


def test_rescaled_integration_to_t_25_keeps_clusters_and_rate():
    # V = A = I, T = 25: the hull shrinks, the tokens stay finite, followers reach their
    # leader like e^{-t}, and the integration agrees with the unrescaled one where that is
    # still representable (t <= 20, |x| ~ 1e9).
    Z0 = RNG.normal(size=(12, 2))
    I2 = np.eye(2)
    t = np.linspace(0.0, 25.0, 26)
    z = dynamics.integrate(dynamics.rescaled_field(None, I2, A=I2), Z0, t,
                           rtol=1e-11, atol=1e-13)
    assert np.all(np.isfinite(z))
    assert all(clusters.in_hull(zk, Z0, tol=1e-8).all() for zk in z)
    dist = np.linalg.norm(z - z[-1], axis=2).max(axis=1)
    slope = np.polyfit(t[5:15], np.log(dist[5:15]), 1)[0]
    assert abs(slope + 1.0) < 0.1
    x = dynamics.integrate(dynamics.attention_field(attention.softmax, A=I2, V=I2), Z0,
                           t[:21], rtol=1e-12, atol=1e-12, blowup_radius=1e12)
    np.testing.assert_allclose(dynamics.rescale(x, t[:21], I2), z[:21], rtol=0, atol=1e-7)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"field": None, "V": np.eye(2)}, "A"),
    ({"field": None, "V": np.eye(2), "A": np.eye(3)}, "A"),
    ({"field": None, "V": np.ones((2, 3)), "A": np.eye(2)}, "V"),
    ({"field": None, "V": np.full((2, 2), np.nan), "A": np.eye(2)}, "V"),
    ({"field": None, "V": np.eye(2), "A": np.full((2, 2), np.inf)}, "A"),
    ({"field": "not callable", "V": np.eye(2)}, "field"),
])
def test_rescaled_field_bad_inputs(kwargs, name):
    with pytest.raises(ValueError, match=name):
        dynamics.rescaled_field(kwargs.pop("field"), **kwargs)
