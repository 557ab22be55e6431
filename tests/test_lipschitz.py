"""Tests of transformer_pde.lipschitz against finite differences, dense linear algebra,
closed forms and a loop transcription of the released power iteration."""

import functools

import numpy as np
import pytest
from _references import fd_jacobian
from transformer_pde import _lanczos
from transformer_pde import lipschitz as L
from transformer_pde.attention import multihead, softmax


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def _single(rng, n=6, d=3, p=3):
    return (rng.standard_normal((n, d)), rng.standard_normal((d, d)),
            rng.standard_normal((p, d)))


def _factored(rng, H, k, d, p):
    return ((rng.standard_normal((H, k, d)), rng.standard_normal((H, k, d))),
            (rng.standard_normal((H, p, k)), rng.standard_normal((H, k, d))))


# ------------------------------------------------------------------ jvp / vjp
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_jvp_matches_finite_differences(rng, causal, weighted):
    X, A, V = _single(rng, p=2)
    w = rng.dirichlet(np.ones(X.shape[0])) if weighted else None
    J = fd_jacobian(lambda Y: softmax(Y, A, V, causal=causal, weights=w), X)
    E = rng.standard_normal(X.shape)
    expected = (J @ E.ravel()).reshape(X.shape[0], 2)
    np.testing.assert_allclose(L.jvp(X, A, V, E, causal=causal, weights=w), expected,
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(L.jacobian_matrix(X, A, V, causal=causal, weights=w), J,
                               rtol=1e-6, atol=1e-7)


def test_causal_jacobian_is_block_lower_triangular_and_differs(rng):
    X, A, V = _single(rng)
    n, d = X.shape
    J = L.jacobian_matrix(X, A, V, causal=True).reshape(n, d, n, d)
    for i in range(n):
        assert np.all(J[i, :, i + 1:, :] == 0)  # output i ignores later tokens
    assert not np.allclose(J, L.jacobian_matrix(X, A, V).reshape(n, d, n, d))


@pytest.mark.parametrize("causal", [False, True])
def test_adjoint_identity(rng, causal):
    X, A, V = _single(rng, n=7, d=4, p=5)
    E, G = rng.standard_normal((7, 4)), rng.standard_normal((7, 5))
    lhs = np.sum(L.jvp(X, A, V, E, causal=causal) * G)
    rhs = np.sum(E * L.vjp(X, A, V, G, causal=causal))
    assert lhs == pytest.approx(rhs, rel=1e-12)
    J = L.jacobian_matrix(X, A, V, causal=causal)
    np.testing.assert_allclose(L.vjp(X, A, V, G, causal=causal).ravel(), J.T @ G.ravel(),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_multihead_jvp_vjp(rng, causal):
    H, n, d = 3, 5, 4
    X = rng.standard_normal((n, d))
    As, Vs = rng.standard_normal((H, d, d)), rng.standard_normal((H, d, d))
    J = fd_jacobian(lambda Y: multihead(Y, As, Vs, causal=causal), X)
    np.testing.assert_allclose(L.jacobian_matrix_multihead(X, As, Vs, causal=causal), J,
                               rtol=1e-6, atol=1e-7)
    # the sum of the single-head Jacobians
    E, G = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    total = sum(L.jvp(X, As[h], Vs[h], E, causal=causal) for h in range(H))
    np.testing.assert_allclose(L.jvp_multihead(X, As, Vs, E, causal=causal), total, rtol=1e-12)
    lhs = np.sum(L.jvp_multihead(X, As, Vs, E, causal=causal) * G)
    assert lhs == pytest.approx(np.sum(E * L.vjp_multihead(X, As, Vs, G, causal=causal)),
                                rel=1e-12)


def test_factored_heads_equal_dense(rng):
    H, k, d, p, n = 2, 2, 5, 5, 6
    (Q, K), (Vo, Vi) = _factored(rng, H, k, d, p)
    As = np.einsum("hkd,hke->hde", K, Q)  # A_h = K_h^T Q_h
    Vs = Vo @ Vi
    X, E, G = (rng.standard_normal((n, d)), rng.standard_normal((n, d)),
               rng.standard_normal((n, p)))
    for causal in (False, True):
        np.testing.assert_allclose(L.jvp_multihead(X, (Q, K), (Vo, Vi), E, causal=causal),
                                   L.jvp_multihead(X, As, Vs, E, causal=causal), rtol=1e-10)
        np.testing.assert_allclose(L.vjp_multihead(X, (Q, K), (Vo, Vi), G, causal=causal),
                                   L.vjp_multihead(X, As, Vs, G, causal=causal), rtol=1e-10)
    np.testing.assert_allclose(L.jvp(X, (Q[0], K[0]), (Vo[0], Vi[0]), E),
                               L.jvp(X, As[0], Vs[0], E), rtol=1e-10)


# ------------------------------------------------------------------ local constant
@pytest.mark.parametrize("causal", [False, True])
def test_local_lipschitz_matches_dense_svd(rng, causal):
    n, d = 12, 8  # n d = 96 > 64: the ARPACK path
    X = rng.standard_normal((n, d))
    A, V = 0.5 * rng.standard_normal((d, d)), rng.standard_normal((d, d))
    J = fd_jacobian(lambda Y: softmax(Y, A, V, causal=causal), X)
    expected = np.linalg.norm(J, 2)
    res = L.local_lipschitz(X, A, V, causal=causal, tol=1e-10, return_vectors=True)
    assert res.value == pytest.approx(expected, rel=1e-6)
    np.testing.assert_allclose(J @ res.right.ravel(), res.value * res.left.ravel(), atol=1e-5)
    assert np.linalg.norm(res.right) == pytest.approx(1.0)


def test_local_lipschitz_compressed_and_multihead(rng):
    # a single low-rank head uses the exact subspace restriction; compare with the dense SVD
    H, k, d, p, n = 3, 2, 16, 16, 9
    (Q, K), (Vo, Vi) = _factored(rng, H, k, d, p)
    X = rng.standard_normal((n, d))
    J1 = L.jacobian_matrix(X, (Q[0], K[0]), (Vo[0], Vi[0]), causal=True)
    assert L.local_lipschitz(X, (Q[0], K[0]), (Vo[0], Vi[0]), causal=True, tol=1e-10) == \
        pytest.approx(np.linalg.norm(J1, 2), rel=1e-7)
    Jm = L.jacobian_matrix_multihead(X, (Q, K), (Vo, Vi))
    res = L.local_lipschitz_multihead(X, (Q, K), (Vo, Vi), tol=1e-10, return_vectors=True)
    assert res.value == pytest.approx(np.linalg.norm(Jm, 2), rel=1e-7)
    np.testing.assert_allclose(Jm @ res.right.ravel(), res.value * res.left.ravel(), atol=1e-6)


def test_local_lipschitz_deterministic_and_warm_start(rng):
    X, A, V = rng.standard_normal((20, 5)), rng.standard_normal((5, 5)), np.eye(5)
    a = L.local_lipschitz(X, A, V, tol=1e-8, seed=3)
    assert a == L.local_lipschitz(X, A, V, tol=1e-8, seed=3)
    res = L.local_lipschitz(X, A, V, tol=1e-8, return_vectors=True)
    warm = L.local_lipschitz(X, A, V, tol=1e-8, v0=res.right, return_vectors=True)
    assert warm.value == pytest.approx(a, rel=1e-7)
    assert warm.matvecs <= res.matvecs


@pytest.mark.parametrize("seed", range(3))
def test_arpack_loose_tolerance_is_far_more_accurate_than_tol(seed):
    # ARPACK stops on the Ritz residual |r| <= tol * theta; for a symmetric operator the
    # eigenvalue error is O(|r|^2 / gap), so tol = 1e-3 gives far better than 1e-3
    rng = np.random.default_rng(seed)
    n, d = 16, 6
    X, A, V = (rng.standard_normal((n, d)), rng.standard_normal((d, d)) / np.sqrt(d),
               rng.standard_normal((d, d)))
    exact = np.linalg.norm(L.jacobian_matrix(X, A, V), 2)
    loose = L.local_lipschitz(X, A, V, tol=1e-3, ncv=4, method="arpack")
    assert abs(loose - exact) < 1e-4 * exact


def _clustered(rng, n, d, radius, spread=0.05, clusters=4):
    """Tokens in tight clusters of large norm: sharp attention, small spectral gap."""
    C = rng.standard_normal((clusters, d))
    C *= radius / np.linalg.norm(C, axis=1, keepdims=True)
    return C[rng.integers(0, clusters, n)] + spread * rng.standard_normal((n, d))


def _workloads(rng, n, d):
    """Gaussian, clustered and adversarial (chapter 5) inputs with their A and V."""
    A = rng.standard_normal((d, d)) / np.sqrt(d)
    V = rng.standard_normal((d, d)) / np.sqrt(d)
    S = (A + A.T) / np.sqrt(2)
    return {"gaussian": (rng.standard_normal((n, d)), A, V),
            "clustered": (_clustered(rng, n, d, radius=3.0), A, V),
            "adversarial": (L.adversarial_configuration(S, n, 1.5)[0], S, np.eye(d))}


@pytest.mark.parametrize("tol", [1e-3, 1e-6, 1e-10])
@pytest.mark.parametrize("kind", ["gaussian", "clustered", "adversarial"])
@pytest.mark.parametrize("causal", [False, True])
def test_lanczos_honours_tol_against_dense_svd(kind, tol, causal):
    # the default method returns a Ritz value: never above the exact constant, and within
    # tol of it (relative); float64 products only (n < 256)
    rng = np.random.default_rng(7)
    X, A, V = _workloads(rng, 24, 5)[kind]
    exact = np.linalg.norm(L.jacobian_matrix(X, A, V, causal=causal), 2)
    res = L.local_lipschitz(X, A, V, causal=causal, tol=tol, return_vectors=True)
    assert res.value <= exact * (1 + 1e-13)
    assert (exact - res.value) / exact <= tol
    assert np.linalg.norm(res.right) == pytest.approx(1.0)


@functools.cache
def _mixed_precision_case(kind):
    """Workload of 256 tokens in d = 2 and the norm of its dense 512 x 512 Jacobian (computed
    once per kind, shared by the tolerances)."""
    rng = np.random.default_rng(11)
    X, A, V = _workloads(rng, 256, 2)[kind]
    X = 0.5 * X if kind == "gaussian" else X
    return X, A, V, np.linalg.norm(L.jacobian_matrix(X, A, V), 2)


@pytest.mark.parametrize("tol", [1e-4, 1e-6, 1e-9])
@pytest.mark.parametrize("kind", ["gaussian", "clustered", "adversarial"])
def test_mixed_precision_lanczos_honours_tol(kind, tol):
    # n >= 128: a float32 phase then a float64 phase; the dense Jacobian is still small at
    # d = 2 (512 x 512)
    X, A, V, exact = _mixed_precision_case(kind)
    value = L.local_lipschitz(X, A, V, tol=tol)
    assert value <= exact * (1 + 1e-13)
    assert (exact - value) / exact <= tol


def test_float32_operator_rounds_every_array_and_matches_float64_products(rng):
    # the float32 copy keeps its arrays in one allocation: each must be the float64 array
    # rounded to nearest, in no memory of the float64 operator, and its products must agree
    # with the float64 ones to float32 rounding (relative 1e-5 allows the ~40 roundings of
    # inner sums of length 30 at unit roundoff 6e-8)
    for H in (1, 3):
        if H == 1:
            X, A, V = _single(rng, n=30, d=5, p=4)
            heads = L._heads(A, V, 5, multi=False)
        else:
            X = rng.standard_normal((30, 5))
            (Q, K), (Vo, Vi) = _factored(rng, H, 2, 5, 4)
            heads = L._heads((Q, K), (Vo, Vi), 5, multi=True)
        clin, U = L._compressed(L._linearise(X, heads, False, None), 5)
        d_in = 5 if U is None else U.shape[1]
        op64 = _lanczos.NormalOperator(clin)
        op32 = op64.astype(np.float32)
        pairs = [(hd64[key], hd32[key]) for hd64, hd32 in zip(op64.heads, op32.heads,
                                                               strict=True)
                 for key in hd64 if hd64[key] is not None] + [(op64.gram, op32.gram)]
        for M64, M32 in pairs:
            assert M32.dtype == np.float32 and M32.shape == M64.shape
            np.testing.assert_array_equal(M32, M64.astype(np.float32))
            assert not np.shares_memory(M32, M64)
        v = rng.standard_normal(30 * d_in)
        exact = op64(v).copy()
        np.testing.assert_allclose(op32(v), exact, rtol=0, atol=1e-5 * np.abs(exact).max())


def test_lanczos_multihead_factored_honours_tol(rng):
    H, k, d, p, n = 3, 2, 16, 16, 20
    (Q, K), (Vo, Vi) = _factored(rng, H, k, d, p)
    X = rng.standard_normal((n, d))
    for causal in (False, True):
        exact = np.linalg.norm(L.jacobian_matrix_multihead(X, (Q, K), (Vo, Vi), causal=causal),
                               2)
        for tol in (1e-4, 1e-8):
            value = L.local_lipschitz_multihead(X, (Q, K), (Vo, Vi), causal=causal, tol=tol)
            assert value <= exact * (1 + 1e-13) and (exact - value) / exact <= tol


@pytest.mark.parametrize("causal", [False, True])
def test_low_rank_tokens_match_dense_svd(rng, causal):
    # small rank(X): the normal operator works in the factorisation X = U C (rank 2 with
    # n > d, rank 1 with n < d); weights and a rectangular V go through the same path
    d, p = 16, 5
    A, V = rng.standard_normal((d, d)) / np.sqrt(d), rng.standard_normal((p, d))
    rank2 = rng.standard_normal((30, 2)) @ rng.standard_normal((2, d))
    rank1 = rng.standard_normal((10, 1)) @ rng.standard_normal((1, d))
    for X in (rank2, rank1):
        w = rng.random(X.shape[0])
        w /= w.sum()
        exact = np.linalg.norm(L.jacobian_matrix(X, A, V, causal=causal, weights=w), 2)
        for tol in (1e-4, 1e-10):
            value = L.local_lipschitz(X, A, V, causal=causal, weights=w, tol=tol)
            assert value <= exact * (1 + 1e-13) and (exact - value) / exact <= tol
        dense_path = L.local_lipschitz(X, A, V, causal=causal, weights=w, tol=1e-10,
                                       method="arpack", ncv=20)
        assert dense_path == pytest.approx(exact, rel=1e-9)


def test_coinciding_tokens_match_dense_svd():
    # 10 tokens taking 4 distinct values (groups of 5, 2, 2, 1): the merged direct sum of
    # local_lipschitz against the SVD of the dense 30 x 30 Jacobian; over these draws the top
    # direction is sometimes constant on groups (the merged measure moves) and sometimes sums
    # to zero on every group (only queries move), and both kinds must occur
    rng = np.random.default_rng(3)
    kinds = set()
    for _ in range(120):
        d = 3
        base = (np.array([[0, 0, 0], [1, 0, 0], [-1, 0, 0], [0, 1, 0.]]) * rng.uniform(0.5, 3)
                + 0.1 * rng.standard_normal((4, d)))
        X = base[[0, 0, 0, 0, 0, 1, 2, 3, 1, 2]]
        A = rng.standard_normal((d, d)) + rng.uniform(0, 3) * np.eye(d)
        V = rng.standard_normal((d, d))
        s = np.linalg.svd(L.jacobian_matrix(X, A, V), compute_uv=False)
        res = L.local_lipschitz(X, A, V, tol=1e-12, return_vectors=True)
        assert res.value == pytest.approx(s[0], rel=1e-12)
        assert res.matvecs == 21  # dimension (4 + 3 repeated groups) x 3: the dense branch
        np.testing.assert_allclose(L.jvp(X, A, V, res.right), res.value * res.left,
                                   atol=1e-12 * s[0])
        sums = np.array([res.right[(X == b).all(axis=1)].sum(axis=0) for b in base])
        kinds.add("queries" if np.abs(sums).max() < 1e-12 else "merged")
    assert kinds == {"queries", "merged"}


def test_coinciding_tokens_lanczos_multihead_and_adversarial(rng):
    # larger merged problems go through Lanczos; factored multi-head against the dense SVD,
    # the adversarial configuration (two distinct tokens) against ARPACK on the full operator
    n, d, H, k = 24, 8, 2, 3
    X = rng.standard_normal((6, d))[rng.integers(0, 6, n)]
    Q, K = rng.standard_normal((H, k, d)), rng.standard_normal((H, k, d))
    Vo, Vi = rng.standard_normal((H, 5, k)), rng.standard_normal((H, k, d))
    exact = np.linalg.norm(L.jacobian_matrix_multihead(X, (Q, K), (Vo, Vi)), 2)
    for tol in (1e-4, 1e-10):
        value = L.local_lipschitz_multihead(X, (Q, K), (Vo, Vi), tol=tol)
        assert value <= exact * (1 + 1e-13) and (exact - value) / exact <= tol
    G = rng.standard_normal((20, 20))
    A = (G + G.T) / np.sqrt(40)
    X, _ = L.adversarial_configuration(A, 100, 2.0)
    res = L.local_lipschitz(X, A, np.eye(20), tol=1e-10, return_vectors=True)
    full = L.local_lipschitz(X, A, np.eye(20), tol=1e-12, method="arpack", ncv=20)
    assert res.value == pytest.approx(full, rel=1e-10)
    np.testing.assert_allclose(L.jvp(X, A, np.eye(20), res.right), res.value * res.left,
                               atol=1e-10 * full)


def test_value_alone_equals_value_with_vectors(rng):
    X, A, V = _workloads(rng, 40, 6)["clustered"]
    res = L.local_lipschitz(X, A, V, tol=1e-8, return_vectors=True)
    assert L.local_lipschitz(X, A, V, tol=1e-8) == res.value


def test_lanczos_and_arpack_agree(rng):
    X, A, V = _workloads(rng, 40, 6)["clustered"]
    lan = L.local_lipschitz(X, A, V, tol=1e-10)
    arp = L.local_lipschitz(X, A, V, tol=1e-10, method="arpack")
    assert lan == pytest.approx(arp, rel=1e-10)


def test_lanczos_maxiter_raises(rng):
    X, A, V = _workloads(rng, 40, 6)["gaussian"]
    with pytest.raises(RuntimeError, match="maxiter"):
        L.local_lipschitz(X, A, V, tol=1e-12, maxiter=2)


# ------------------------------------------------------------------ released estimator
def _released_power_iteration(X, A, V, iters=5, seed=0):
    """Loop transcription of the released iteration: its 'JVP' is the primal output f(X)."""
    J = L.jacobian_matrix(X, A, V)
    fX = softmax(X, A, V).ravel()
    u = np.random.default_rng(seed).standard_normal(X.size)
    u /= np.linalg.norm(u)
    mu = 0.0
    for _ in range(iters):
        v = fX            # torch.func.jvp(f, (Y,), (u,))[0] is f(Y), whatever u is
        v = J.T @ v       # the VJP
        mu = u @ v
        u = v / np.linalg.norm(v)
    return np.sqrt(mu)


def test_released_code_estimator(rng):
    X, A, V = _single(rng, n=5, d=3)
    est = L.released_code_estimator(X, A, V)
    assert est == pytest.approx(_released_power_iteration(X, A, V), rel=1e-12)
    lip = L.local_lipschitz(X, A, V, tol=1e-12)
    fnorm = np.linalg.norm(softmax(X, A, V))
    assert est <= np.sqrt(lip * fnorm) * (1 + 1e-12)
    assert abs(est - lip) > 1e-3 * lip  # it is a different quantity
    As, Vs = rng.standard_normal((2, 3, 3)), rng.standard_normal((2, 3, 3))
    Jm = L.jacobian_matrix_multihead(X, As, Vs)
    expected = np.sqrt(np.linalg.norm(Jm.T @ multihead(X, As, Vs).ravel()))
    assert L.released_code_estimator_multihead(X, As, Vs) == pytest.approx(expected, rel=1e-12)


# ------------------------------------------------------------------ bounds
def test_bound_formulas_closed_form():
    A = np.diag([2.0, -1.0])
    V = 3.0 * np.eye(2)
    assert L.theorem1_upper_bound(A, V, 1.5, 10) == pytest.approx(
        np.sqrt(3) * 3 * np.sqrt(4 * 1.5**4 * 41 + 10))
    assert L.geshkovski_upper_bound(A, V, 0.5) == pytest.approx(3 * (1 + 1.5) * np.exp(1.0))
    assert L.theorem1_lower_bound(5, 1.0, 0.25) == pytest.approx(2 / (1 + 4 * np.exp(-0.5)))
    gamma, kind, u = L.lower_bound_gamma(A)  # max(2/8, 1) = 1: the opposite configuration
    assert (gamma, kind) == (1.0, "opposite") and abs(u[1]) == pytest.approx(1.0)
    gamma, kind, _ = L.lower_bound_gamma(np.diag([16.0, -1.0]))
    assert (gamma, kind) == (2.0, "half")
    np.testing.assert_allclose(L.theorem1_upper_bound(A, V, [1.0, 2.0], 3),
                               [L.theorem1_upper_bound(A, V, r, 3) for r in (1.0, 2.0)])


@pytest.mark.parametrize("seed", range(4))
def test_random_inputs_below_upper_bounds(seed):
    rng = np.random.default_rng(seed)
    n, d, R = 15, 4, 1.3
    A, V = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    X = rng.standard_normal((n, d))
    X *= R * rng.uniform(0.2, 1.0, (n, 1)) / np.linalg.norm(X, axis=1, keepdims=True)
    for causal in (False, True):
        lip = L.local_lipschitz(X, A, V, causal=causal, tol=1e-10)
        assert lip <= L.theorem1_upper_bound(A, V, R, n)
        assert lip <= L.geshkovski_upper_bound(A, V, R)


@pytest.mark.parametrize("seed", range(4))
def test_adversarial_configurations_exceed_lower_bounds(seed):
    rng = np.random.default_rng(seed)
    d = 3
    A = rng.standard_normal((d, d))
    for n in (2, 7, 30):
        for R in (0.5, 1.0, 2.0):
            X, gamma = L.adversarial_configuration(A, n, R)
            assert np.linalg.norm(X, axis=1).max() == pytest.approx(R)
            lip = L.local_lipschitz(X, A, np.eye(d), tol=1e-10)
            low = L.theorem1_lower_bound(n, R, gamma)
            sharper = L.adversarial_lower_bound(n, R, gamma)
            assert low <= sharper * (1 + 1e-12)
            assert sharper <= lip * (1 + 1e-8)
            assert lip <= L.theorem1_upper_bound(A, np.eye(d), R, n)


def test_adversarial_directions_realise_derived_values():
    # symmetric A: the Jacobian applied to e_1 = (eps, 0, ..., 0) has the derived rows
    A = np.diag([8.0, -0.5, 0.3])  # gamma = max(1, 0.5) = 1, "half" configuration
    n, R = 6, 0.7
    X, gamma = L.adversarial_configuration(A, n, R)
    q = 1 / (1 + (n - 1) * np.exp(-2 * gamma * R**2))
    for eps, factor in ((np.array([0, 1.0, 0]), q),
                        (np.array([1.0, 0, 0]), q * (1 + 2 * gamma * R**2 * (1 - q)))):
        E = np.zeros_like(X)
        E[0] = eps
        out = L.jvp(X, A, np.eye(3), E)
        np.testing.assert_allclose(out[1:], factor * np.tile(eps, (n - 1, 1)), atol=1e-12)


# ------------------------------------------------------------------ hardmax limit
def test_hardmax_limit(rng):
    n, d = 6, 3
    X, A, V = _single(rng, n=n, d=d)
    E = rng.standard_normal((n, d))
    H = L.hardmax_jvp(X, A, V, E)
    m = L.hardmax_indices(X, A)
    np.testing.assert_allclose(H, E[m] @ V.T)
    S = np.sort((X @ A.T) @ X.T, axis=1)
    gap = np.min(S[:, -1] - S[:, -2])  # logit gaps scale like R^2 at the point R X
    radii = [np.sqrt(c / gap) for c in (3.0, 10.0, 60.0)]
    errs = [np.linalg.norm(L.jvp(R * X, A, V, E) - H) for R in radii]
    assert errs[2] < 1e-9 and errs[0] > errs[1] > errs[2]
    M = np.zeros((n, n))
    M[np.arange(n), m] = 1
    assert L.hardmax_jacobian_norm(X, A, V) == pytest.approx(np.linalg.norm(np.kron(M, V), 2))
    assert L.local_lipschitz(radii[2] * X, A, V) == pytest.approx(
        L.hardmax_jacobian_norm(X, A, V), rel=1e-6)
    mc = L.hardmax_indices(X, A, causal=True)
    assert mc[0] == 0 and np.all(mc <= np.arange(n))


# ------------------------------------------------------------------ bad inputs
def test_bad_inputs_raise(rng):
    X, A, V = _single(rng)
    with pytest.raises(ValueError, match="E"):
        L.jvp(X, A, V, np.ones((2, 2)))
    with pytest.raises(ValueError, match="G"):
        L.vjp(X, A, V, np.ones((X.shape[0], 7)))
    with pytest.raises(ValueError, match="X"):
        L.jvp(np.full_like(X, np.nan), A, V, X)
    with pytest.raises(ValueError, match="A"):
        L.jvp(X, np.ones((2, 2)), V, X)
    with pytest.raises(ValueError, match="heads"):
        L.jvp_multihead(X, np.ones((2, 3, 3)), np.ones((3, 3, 3)), X)
    with pytest.raises(ValueError, match="tol"):
        L.local_lipschitz(X, A, V, tol=-1)
    with pytest.raises(ValueError, match="method"):
        L.local_lipschitz(X, A, V, method="power")
    with pytest.raises(ValueError, match="v0"):
        L.local_lipschitz(np.ones((30, 3)), A, V, v0=np.ones((2, 2)))
    with pytest.raises(ValueError, match="real eigenvalue"):
        L.lower_bound_gamma(np.array([[0.0, -1.0], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="n"):
        L.theorem1_lower_bound(1, 1.0, 1.0)
    with pytest.raises(ValueError, match="R"):
        L.theorem1_upper_bound(A, V, -1.0, 3)


# ------------------------------------------------------------------ chapter 5's real-text band
def _real_text_check(ns, L):
    """Chapter 5's check at the middle layer: the exponent lies in (1/4, 1/2) by three
    jackknife standard errors."""
    from transformer_pde.fitting import jackknife_exponent
    e = jackknife_exponent(ns, L)
    return e.exponent - 3 * e.stderr > 0.25 and e.exponent + 3 * e.stderr < 0.5


@pytest.mark.parametrize("p, passes", [(0.25, False), (0.5, False), (0.30, True)])
def test_real_text_band_rejects_quarter_and_square_root_growth(p, passes):
    # Synthetic constants C n^p with the scatter of chapter 5's middle layer (10 sequences,
    # lengths 10 to 98, a sequence effect and independent noise of 6 % per record: jackknife
    # standard errors of about 0.01, as measured there). Under n^(1/4), the growth the paper
    # reports, or n^(1/2), the band fails in all but about 1 % of draws; at the measured
    # exponent 0.30 it holds in most.
    rng = np.random.default_rng(int(100 * p))
    ns = np.array([10, 16, 28, 50, 98])
    runs = 1000
    held = 0
    for _ in range(runs):
        log_L = (np.log(5.0) + p * np.log(ns) + 0.1 * rng.standard_normal((10, 1))
                 + 0.06 * rng.standard_normal((10, ns.size)))
        held += _real_text_check(ns, np.exp(log_L))
    if passes:
        assert held > 0.9 * runs, held
    else:
        assert held < 0.02 * runs, held


def test_near_equal_pairs_value_never_exceeds_the_top_singular_value():
    # Two tight clusters make the two largest singular values nearly equal; the stopping rule
    # can then stop below the top one (the Performance appendix shows such an input). What
    # holds on every input is that the value is a Ritz value: never above the top one.
    for k in range(20):
        rng = np.random.default_rng([7, k])
        centres = rng.normal(size=(2, 3))
        centres *= 3 / np.linalg.norm(centres, axis=1, keepdims=True)
        X = centres[rng.integers(0, 2, 40)] + 0.02 * rng.normal(size=(40, 3))
        A = rng.normal(size=(3, 3)) / np.sqrt(3) + np.eye(3)
        V = rng.normal(size=(3, 3))
        top = np.linalg.norm(L.jacobian_matrix(X, A, V), 2)
        for tol in (1e-4, 1e-10):
            assert L.local_lipschitz(X, A, V, tol=tol) <= top * (1 + 1e-12)
