"""Tests of transformer_pde.symbolic: the derivations hold exactly, agree with the numerical
right-hand sides of transformer_pde.gaussian at random numbers, and detect wrong formulas."""

import numpy as np
import pytest
import sympy as sp
from transformer_pde import gaussian as G
from transformer_pde import symbolic as S


@pytest.fixture(scope="module")
def softmax():
    return S.softmax_moment_odes(2)


@pytest.fixture(scope="module")
def l2():
    return S.l2_moment_odes(2, 2)


@pytest.fixture(scope="module")
def multihead():
    return S.multihead_moment_odes(2, 2)


def _random(seed, d=2):
    rng = np.random.default_rng(seed)
    L = rng.normal(size=(d, d))
    return rng, rng.normal(size=d), L @ L.T + 0.2 * np.eye(d)


def test_softmax_derivation_is_exact(softmax):
    rw = softmax["reweighting"]
    assert S.is_zero(rw["residual_mean"]) and S.is_zero(rw["residual_cov"])
    assert S.is_zero(softmax["residual_alpha"]) and S.is_zero(softmax["residual_Sigma"])


def test_l2_derivation_is_exact(l2):
    rw = l2["reweighting"]
    for key in ("residual_precision", "residual_mean", "residual_cov"):
        assert S.is_zero(rw[key]), key
    assert S.is_zero(l2["residual_alpha"]) and S.is_zero(l2["residual_Sigma"])


def test_multihead_derivation_is_exact(multihead):
    assert S.is_zero(multihead["residual_alpha"]) and S.is_zero(multihead["residual_Sigma"])


def test_general_d_identities():
    for name, res in S.general_identities().items():
        assert res == 0 or isinstance(res, sp.ZeroMatrix), (name, res)


def test_wrong_formulas_are_detected(softmax):
    s = softmax["symbols"]
    V, Sigma, A, alpha = s["V"], s["Sigma"], s["A"], s["alpha"]
    assert not S.is_zero(softmax["dalpha"] - V * Sigma * A * alpha)  # missing V alpha
    assert not S.is_zero(softmax["dSigma"] - (V * Sigma * A.T * Sigma + Sigma * A * Sigma * V.T))


def test_complete_the_square_one_dimensional():
    y, m, p = sp.symbols("y m p", real=True)
    mean, cov, prec = S.complete_the_square(-p * (y - m) ** 2 / 2 + 3 * y, sp.Matrix([y]))
    assert sp.simplify(mean[0] - (m + 3 / p)) == 0
    assert sp.simplify(cov[0] - 1 / p) == 0 and prec[0] == p


def test_sympy_expressions_match_library_softmax(softmax):
    rng, alpha, Sigma = _random(0)
    A, V = rng.normal(size=(2, 2)), rng.normal(size=(2, 2))
    s = softmax["symbols"]
    vals = [(s["Sigma"], Sigma), (s["A"], A), (s["V"], V), (s["alpha"], alpha)]
    da, dS = G.softmax_rhs(alpha, Sigma, A, V)
    np.testing.assert_allclose(np.array(S.evaluate(softmax["dalpha"], vals))[:, 0], da,
                               rtol=1e-12)
    np.testing.assert_allclose(np.array(S.evaluate(softmax["dSigma"], vals)), dS, rtol=1e-12)


def test_sympy_expressions_match_library_l2(l2):
    rng, alpha, Sigma = _random(1)
    Q, K, V = (rng.normal(size=(2, 2)) for _ in range(3))
    s = l2["symbols"]
    vals = [(s["Sigma"], Sigma), (s["Q"], Q), (s["K"], K), (s["V"], V), (s["alpha"], alpha)]
    da, dS = G.l2_rhs(alpha, Sigma, Q, K, V)
    np.testing.assert_allclose(np.array(S.evaluate(l2["dalpha"], vals))[:, 0], da, rtol=1e-10)
    np.testing.assert_allclose(np.array(S.evaluate(l2["dSigma"], vals)), dS, rtol=1e-10)


def test_sympy_expressions_match_library_multihead(multihead):
    rng, alpha, Sigma = _random(2)
    As, Vs = rng.normal(size=(2, 2, 2)), rng.normal(size=(2, 2, 2))
    s = multihead["symbols"]
    vals = [(s["Sigma"], Sigma), (s["alpha"], alpha)]
    for h in range(2):
        vals += [(s["As"][h], As[h]), (s["Vs"][h], Vs[h])]
    da, dS = G.multihead_rhs(alpha, Sigma, As, Vs)
    np.testing.assert_allclose(np.array(S.evaluate(multihead["dalpha"], vals))[:, 0], da,
                               rtol=1e-12)
    np.testing.assert_allclose(np.array(S.evaluate(multihead["dSigma"], vals)), dS, rtol=1e-12)


def test_sinkhorn_scalar_derivation_and_published_formula():
    res = S.sinkhorn_scalar()
    assert res["residual_library"] == 0
    assert res["residual_published_eps2"] == 0
    assert res["residual_published_eps1"] != 0
    sym = res["symbols"]
    a, v, s2 = 0.7, 1.3, 0.8
    for eps in (1.0, 2.0, 0.5):
        derived = float(res["dsigma2"].subs({sym["a"]: a, sym["v"]: v, sym["sigma2"]: s2,
                                              sym["epsilon"]: eps}))
        _, dS = G.sinkhorn_rhs(np.zeros(1), [[s2]], [[a]], [[1.0]], [[v]], epsilon=eps)
        assert dS[0, 0] == pytest.approx(derived, rel=1e-12)
    published = float(res["dsigma2_published"].subs({sym["a"]: a, sym["v"]: v,
                                                     sym["sigma2"]: s2}))
    assert G.sinkhorn_rhs_published([[s2]], [[a]], [[1.0]], [[v]])[0, 0] == pytest.approx(
        published, rel=1e-12)


def test_sinkhorn_scalar_published_ratio_limits():
    # epsilon = 1 rhs / published: 2 for weak interaction (linear response, kappa = 2 vs 1),
    # 1 for strong interaction (both tend to the unregularised plan)
    res = S.sinkhorn_scalar()
    sym = res["symbols"]
    ratio = res["dsigma2"].subs(sym["epsilon"], 1) / res["dsigma2_published"]
    assert sp.limit(ratio, sym["a"], 0) == 2
    assert sp.limit(ratio, sym["a"], sp.oo) == 1
    vals = {sym["v"]: 1.3, sym["sigma2"]: 0.8}
    assert float(ratio.subs({**vals, sym["a"]: 1e-4})) == pytest.approx(2, rel=1e-6)
    assert float(ratio.subs({**vals, sym["a"]: 1e4})) == pytest.approx(1, rel=1e-3)
