"""Unit tests of transformer_pde.homogenized against Monte Carlo of the attention weights,
closed forms and the network written out directly."""

import numpy as np
import pytest
from transformer_pde import homogenized as hg


def _purity_monte_carlo(beta, n, d, N, rng):
    # the scores beta <Q e_i, K e_k> / sqrt(d) of orthonormal tokens, drawn from actual
    # Gaussian Q, K (one head per sample), and the purity sum_k p_k^2 of the softmax row
    Q = rng.standard_normal((N, d, d))
    K = rng.standard_normal((N, d, d))
    s = beta * np.einsum("na,nak->nk", Q[:, :, 0], K[:, :, :n]) / np.sqrt(d)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return np.sum(p**2, axis=1)


@pytest.mark.parametrize("beta,n,d", [(1.0, 8, 8), (2.0, 5, 12), (0.5, 4, 16)])
def test_self_overlap_against_monte_carlo(beta, n, d):
    x = _purity_monte_carlo(beta, n, d, 40_000, np.random.default_rng(3))
    se = x.std(ddof=1) / np.sqrt(x.size)
    assert abs(x.mean() - hg.attention_self_overlap(beta, n, d)) < 5 * se


def test_self_overlap_closed_forms_and_quadrature_convergence():
    assert hg.attention_self_overlap(0.0, 7, 3) == pytest.approx(1 / 7, abs=1e-15)
    # one token: the purity is 1 whatever the scores
    assert hg.attention_self_overlap(1.5, 1, 5) == pytest.approx(1.0, abs=1e-9)
    # the quadrature has converged: 64 and 96 nodes agree
    for beta in (0.5, 1.0, 2.0):
        a = hg.attention_self_overlap(beta, 32, 32, nodes=64)
        b = hg.attention_self_overlap(beta, 32, 32, nodes=96)
        assert abs(a - b) < 1e-8 * a
    # increasing in beta, between 1/n and 1
    vals = [hg.attention_self_overlap(b, 10, 6) for b in (0.0, 0.5, 1.0, 2.0)]
    assert np.all(np.diff(vals) > 0) and 0.1 <= vals[0] and vals[-1] < 1


def test_squared_distance_rate_is_the_purity_times_the_tangent_share():
    assert hg.squared_distance_rate(1.0, 8, 6) == pytest.approx(
        5 / 6 * hg.attention_self_overlap(1.0, 8, 6), rel=1e-14)


def _one_layer_direct(x, beta, eta, Q, K, V):
    # the layer written out head by head: x_i + (eta/H) sum_h V_h sum_k softmax_k x_k
    H, d = Q.shape[0], x.shape[1]
    out = np.zeros_like(x)
    for h in range(H):
        s = beta * (x @ Q[h].T) @ (x @ K[h].T).T / np.sqrt(d)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        out += (p @ x) @ V[h].T
    y = x + eta / H * out
    return y / np.linalg.norm(y, axis=1, keepdims=True)


def test_simulation_is_the_network_written_out():
    n, d, H, L = 3, 4, 2, 3
    rng = np.random.default_rng(5)
    x0 = np.linalg.qr(rng.standard_normal((d, d)))[0][:n]
    got = hg.simulate_random_heads(x0, 1.3, 0.2, H, L, 2, np.random.default_rng(9))
    # replay the same draws: one array (3, networks, heads, d, d) per layer
    gen = np.random.default_rng(9)
    x = np.stack([x0, x0])
    for _ in range(L):
        w = gen.standard_normal((3, 2, H, d, d))
        x = np.stack([_one_layer_direct(x[r], 1.3, 0.2, w[0, r], w[1, r],
                                        w[2, r] / np.sqrt(d)) for r in range(2)])
    assert np.max(np.abs(got - x)) < 1e-12


def test_one_layer_moments_against_monte_carlo():
    # from orthonormal tokens, one layer: E|x' - x|^2 = (eta^2/H)((d-1)/d) F + O(eta^4/H^2)
    # and the mean of x' - x along x is -(eta^2/H)((d-1)/(2d)) F (the normalisation)
    n = d = 6
    beta, eta, H, N = 1.0, 0.05, 3, 40_000
    x0 = np.eye(n)
    x = hg.simulate_random_heads(x0, beta, eta, H, 1, N, np.random.default_rng(21))
    F = hg.attention_self_overlap(beta, n, d)
    sq = np.mean(np.sum((x - x0) ** 2, axis=-1), axis=-1) / (eta**2 / H)
    se = sq.std(ddof=1) / np.sqrt(N)
    assert abs(sq.mean() - (d - 1) / d * F) < 5 * se + 0.02 * F
    radial = np.mean(np.einsum("rij,ij->ri", x - x0, x0), axis=-1) / (eta**2 / H)
    se_r = radial.std(ddof=1) / np.sqrt(N)
    assert abs(radial.mean() + (d - 1) / (2 * d) * F) < 5 * se_r + 0.02 * F


def test_distance_over_many_layers_against_the_rate():
    # E D_L^2 L H / T^2 -> c_0: 400 networks, T = 0.25, L = 8, H = 2 (T^2/(LH) = 1/256)
    n = d = 8
    beta, T, L, H, N = 1.0, 0.25, 8, 2, 400
    x0 = np.eye(n)
    x = hg.simulate_random_heads(x0, beta, T / L, H, L, N, np.random.default_rng(8))
    v = np.mean(np.sum((x - x0) ** 2, axis=-1), axis=-1) * L * H / T**2
    c0 = hg.squared_distance_rate(beta, n, d)
    assert abs(v.mean() - c0) < 5 * v.std(ddof=1) / np.sqrt(N) + 0.02 * c0


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="x0"):
        hg.simulate_random_heads(2 * np.eye(3), 1.0, 0.1, 1, 1, 1, np.random.default_rng())
    with pytest.raises(ValueError, match="heads"):
        hg.simulate_random_heads(np.eye(3), 1.0, 0.1, 0, 1, 1, np.random.default_rng())
    with pytest.raises(ValueError, match="rng"):
        hg.simulate_random_heads(np.eye(3), 1.0, 0.1, 1, 1, 1, 0)
    with pytest.raises(ValueError, match="beta"):
        hg.attention_self_overlap(-1.0, 3, 3)
