"""Tests of transformer_pde.softmax_jacobian against independent references (central
differences of the attention map, dense eigensolvers, the local constants of lipschitz)."""

import math

import numpy as np
import pytest
from transformer_pde import attention, lipschitz
from transformer_pde import softmax_jacobian as sj


def equiangular(n, rho, d=None):
    d = n + 1 if d is None else d
    X = np.zeros((n, d))
    X[:, 0] = math.sqrt(rho)
    X[:, 1:n + 1] = math.sqrt(1 - rho) * np.eye(n)
    return X


def fd_jacobian(X, beta, h=1e-6):
    n, d = X.shape
    A, V = beta * np.eye(d), np.eye(d)
    cols = []
    for c in range(n * d):
        E = np.zeros(n * d)
        E[c] = h
        E = E.reshape(n, d)
        cols.append((attention.softmax(X + E, A, V) - attention.softmax(X - E, A, V)).ravel()
                    / (2 * h))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("n,rho,ratio", [(5, 0.3, 0.5), (7, 0.5, 1.0), (9, 0.0, 1.0),
                                         (6, 0.8, 2.5)])
def test_lipschitz_and_eta_against_differences(n, rho, ratio):
    beta = ratio / (1 - rho) * math.log(n)
    X = equiangular(n, rho, d=n + 3)  # two directions orthogonal to every token
    J = fd_jacobian(X, beta)
    lip = sj.equiangular_lipschitz(n, beta, rho)
    assert abs(lip - np.linalg.norm(J, 2)) < 1e-7 * lip
    d = n + 3
    Pi = np.zeros((n * d, n * d))
    for i in range(n):
        Pi[i * d:(i + 1) * d, i * d:(i + 1) * d] = np.eye(d) - np.outer(X[i], X[i])
    eta_fd = np.sum((J @ Pi) ** 2) / (n * d)
    assert abs(sj.equiangular_gradient_eta(n, beta, rho, d=d) - eta_fd) < 1e-7


def test_blocks_against_lanczos_at_moderate_n():
    n, rho = 60, 0.4
    beta = 1 / (1 - rho) * math.log(n)
    X = equiangular(n, rho)
    lan = lipschitz.local_lipschitz(X, beta * np.eye(n + 1), np.eye(n + 1), tol=1e-12)
    assert abs(sj.equiangular_lipschitz(n, beta, rho) - lan) < 1e-9 * lan


def test_limits_of_the_proposition():
    rho = 0.5
    gc = 1 / (1 - rho)
    n = 10**12
    for ratio in (0.5, 2.0):
        assert abs(sj.equiangular_lipschitz(n, ratio * gc * math.log(n), rho) - 1) < 1e-3
    crit = sj.equiangular_lipschitz(n, gc * math.log(n), rho) / math.log(n)
    limit = math.sqrt((4 - 3 * rho) / (1 - rho)) / 4
    assert abs(crit - limit) < 0.03  # remainder O(1) over log n = 27.6
    # a wrong block (kappa halved) would give a limit of about 0.28 * sqrt(5) / ...
    assert crit > 0.9 * limit


def test_eta_limits_of_chen_et_al():
    rho, n = 0.5, 10**6
    gc = 1 / (1 - rho)
    d = n + 1
    values = [sj.equiangular_gradient_eta(n, r * gc * math.log(n), rho) for r in (0.5, 1, 2)]
    assert values[0] < 1e-4
    assert abs(values[1] - (1 - 1 / d) / 4) < 1e-4
    assert abs(values[2] - (1 - 1 / d)) < 1e-4


def test_finite_for_huge_beta_and_n():
    assert math.isfinite(sj.equiangular_lipschitz(10**18, 1e4, 0.5))
    assert math.isfinite(sj.equiangular_gradient_eta(10**5, 1e6, 0.2))


def test_softmax_jacobian_norm():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(7) * 0.3, size=20)
    got = sj.softmax_jacobian_norm(p)
    for row, g in zip(p, got, strict=True):
        dense = np.linalg.eigvalsh(np.diag(row) - np.outer(row, row))[-1]
        assert abs(g - dense) < 1e-14
        top = np.sort(row)[::-1]
        assert top[1] - 1e-14 <= g <= top[0] + 1e-14
        assert g <= 0.5 + 1e-14
    assert sj.softmax_jacobian_norm([1.0]) == pytest.approx(0.0, abs=1e-15)


def multihead_with_bias(X, Q, K, V_out, V_in, bias):
    q = np.einsum("hkd,nd->hnk", Q, X) + bias[:, None, :]
    k = np.einsum("hkd,nd->hnk", K, X)
    S = q @ k.transpose(0, 2, 1)
    P = np.exp(S - S.max(axis=2, keepdims=True))
    P /= P.sum(axis=2, keepdims=True)
    return np.einsum("hpr,hij,hrd,jd->ip", V_out, P, V_in, X)


def test_map_dependent_bound_is_an_upper_bound():
    rng = np.random.default_rng(1)
    H, k, d, n = 3, 2, 5, 12
    Q, K = rng.normal(size=(2, H, k, d))
    V_out, V_in = rng.normal(size=(H, 4, 3)), rng.normal(size=(H, 3, d))
    for bias in (np.zeros((H, k)), rng.normal(size=(H, k))):
        for scale in (0.5, 1.0, 3.0):
            X = scale * rng.normal(size=(n, d))
            bound = sj.map_dependent_bound(X, Q, K, V_out, V_in, bias)
            h = 1e-6
            cols = []
            for c in range(n * d):
                E = np.zeros(n * d)
                E[c] = h
                E = E.reshape(n, d)
                cols.append((multihead_with_bias(X + E, Q, K, V_out, V_in, bias)
                             - multihead_with_bias(X - E, Q, K, V_out, V_in, bias)).ravel()
                            / (2 * h))
            exact = np.linalg.norm(np.stack(cols, axis=1), 2)
            assert exact <= bound * (1 + 1e-6)
            if not bias.any():  # the reference map is the library's attention
                lip = lipschitz.local_lipschitz_multihead(X, (Q, K), (V_out, V_in), tol=1e-10)
                assert abs(lip - exact) < 1e-6 * lip


def test_long_context_tokens_and_eta_estimate():
    rng = np.random.default_rng(2)
    X = sj.long_context_tokens(40, 4000, 0.5, rng)
    G = X @ X.T
    assert np.allclose(np.diag(G), 1.0)
    off = G[~np.eye(40, dtype=bool)]
    assert abs(off.mean() - 0.5) < 0.02
    n, rho = 30, 0.5
    beta = 2 * math.log(n)
    eta, se = sj.pre_ln_eta(equiangular(n, rho), beta, 40, rng)
    exact = sj.equiangular_gradient_eta(n, beta, rho)
    assert abs(eta - exact) < 5 * se


@pytest.mark.parametrize("call", [
    lambda: sj.equiangular_blocks(3, 1.0, 0.5),
    lambda: sj.equiangular_blocks(10, -1.0, 0.5),
    lambda: sj.equiangular_blocks(10, 1.0, 1.0),
    lambda: sj.equiangular_gradient_eta(10, 1.0, 0.5, d=10),
    lambda: sj.softmax_jacobian_norm([0.5, 0.6]),
    lambda: sj.softmax_jacobian_norm([np.nan, 1.0]),
    lambda: sj.map_dependent_bound(np.ones((3, 2)), np.ones((1, 1, 3)), np.ones((1, 1, 3)),
                                   np.ones((1, 1, 1)), np.ones((1, 1, 2))),
    lambda: sj.long_context_tokens(5, 3, 1.5, np.random.default_rng(0)),
    lambda: sj.pre_ln_eta(2 * np.eye(3), 1.0, 4, np.random.default_rng(0)),
    lambda: sj.pre_ln_eta(np.eye(3), 1.0, 1, np.random.default_rng(0)),
])
def test_bad_input_raises(call):
    with pytest.raises(ValueError):
        call()


def test_pretrained_map_bound_above_the_constant():
    from transformer_pde import pretrained
    model = pretrained.load_minilm()
    rng = np.random.default_rng(3)
    ids = rng.integers(1000, 5000, size=12)
    X = pretrained.forward(model, ids, n_layers=2).hidden[2]
    for bias in (True, False):
        lip = pretrained.attention_lipschitz(model, 2, X, query_bias=bias, tol=1e-8)
        assert lip <= sj.pretrained_map_bound(model, 2, X, query_bias=bias)
    with pytest.raises(ValueError):
        sj.pretrained_map_bound(model, 0, X, query_bias="yes")
