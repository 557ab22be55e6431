"""Tests of the masked-attention facts at the adversarial configurations (masked_lipschitz).

The reference is independent of the library's attention code: masked attention written with
loops, and its Jacobian by central finite differences, then a dense SVD.
"""

import numpy as np
import pytest
from transformer_pde import lipschitz, masked_lipschitz


def masked_attention_loop(X, A):
    """f^m(X)_i = sum_{j <= i} P_ij x_j (V = I), by loops."""
    out = np.zeros_like(X)
    for i in range(X.shape[0]):
        logits = np.array([X[i] @ A.T @ X[j] for j in range(i + 1)])
        w = np.exp(logits - logits.max())
        out[i] = (w / w.sum()) @ X[: i + 1]
    return out


def fd_jacobian(X, A, h=1e-6):
    n, d = X.shape
    J = np.empty((n * d, n * d))
    for k in range(n * d):
        E = np.zeros(n * d)
        E[k] = h
        E = E.reshape(n, d)
        J[:, k] = ((masked_attention_loop(X + E, A) - masked_attention_loop(X - E, A)) / (2 * h)
                   ).ravel()
    return J


def key_query_matrices():
    rng = np.random.default_rng(11)
    H = rng.normal(size=(3, 3))
    G = rng.normal(size=(3, 3))
    return {
        "psd": H @ H.T / 3,                     # configuration "half"
        "negative": -np.eye(3) + 0.1 * G,       # configuration "opposite"
        "gaussian": G / np.sqrt(3),             # odd dimension: a real eigenvalue
    }


@pytest.mark.parametrize("name", ["psd", "negative", "gaussian"])
@pytest.mark.parametrize("n", [2, 3, 6])
@pytest.mark.parametrize("R", [0.5, 1.0, 2.0])
def test_bounds_against_finite_difference_jacobian(name, n, R):
    A = key_query_matrices()[name]
    X, gamma = lipschitz.adversarial_configuration(A, n, R)
    _, _, u = lipschitz.lower_bound_gamma(A)
    J = fd_jacobian(X, A)
    E = np.zeros_like(X)
    E[0] = u
    # the exact value along E = (u, 0, ..., 0)
    exact = masked_lipschitz.special_first_norm(n, R, gamma)
    assert np.linalg.norm(J @ E.ravel()) == pytest.approx(exact, rel=1e-7)
    top = np.linalg.svd(J, compute_uv=False)[0]
    paper = np.sqrt(n - 1) / (1 + (n - 1) * np.exp(-2 * gamma * R**2))
    assert top >= exact - 1e-7 and exact > paper
    # distance to the hardmax limit sqrt(n)
    assert abs(top - np.sqrt(n)) <= masked_lipschitz.special_first_sqrt_n_gap(A, n, R) + 1e-7
    # special token last: Hardy's bound, independent of n
    Jl = fd_jacobian(np.roll(X, -1, axis=0), A)
    assert np.linalg.svd(Jl, compute_uv=False)[0] <= masked_lipschitz.special_last_upper_bound(
        A, R) + 1e-7


def test_weights_are_the_attention_to_the_first_token():
    A = key_query_matrices()["psd"]
    n, R = 7, 1.3
    X, gamma = lipschitz.adversarial_configuration(A, n, R)
    q = masked_lipschitz.special_first_weights(n, R, gamma)
    for i in range(1, n):
        logits = np.array([X[i] @ A.T @ X[j] for j in range(i + 1)])
        w = np.exp(logits - logits.max())
        assert w[0] / w.sum() == pytest.approx(q[i - 1], rel=1e-12)


def test_gap_bound_vanishes_at_large_radius_and_arrays():
    A = key_query_matrices()["gaussian"]
    ns = np.array([2, 8, 64])
    gaps = [masked_lipschitz.special_first_sqrt_n_gap(A, ns, R) for R in (1.0, 3.0, 6.0)]
    assert np.all(np.diff(np.array(gaps), axis=0) < 0)  # decreasing in R for each n
    assert gaps[-1].max() < 1e-6
    np.testing.assert_allclose(gaps[0], [masked_lipschitz.special_first_sqrt_n_gap(A, int(m), 1.0)
                                         for m in ns])
    norms = masked_lipschitz.special_first_norm(ns, 6.0, 0.5)
    np.testing.assert_allclose(norms, np.sqrt(ns), rtol=1e-6)  # hardmax limit


def test_bad_inputs_raise():
    A = key_query_matrices()["psd"]
    with pytest.raises(ValueError, match="n must"):
        masked_lipschitz.special_first_norm(1, 1.0, 0.5)
    with pytest.raises(ValueError, match="n must"):
        masked_lipschitz.special_first_sqrt_n_gap(A, 2.5, 1.0)
    with pytest.raises(ValueError, match="R must"):
        masked_lipschitz.special_first_weights(3, -1.0, 0.5)
    with pytest.raises(ValueError, match="gamma must"):
        masked_lipschitz.special_first_norm(3, 1.0, 0.0)
    with pytest.raises(ValueError, match="A must"):
        masked_lipschitz.special_last_upper_bound(np.ones((2, 3)), 1.0)
    with pytest.raises(ValueError, match="real eigenvalue"):
        masked_lipschitz.special_last_upper_bound(np.array([[0.0, -1.0], [1.0, 0.0]]), 1.0)
