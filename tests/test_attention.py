"""Tests of transformer_pde.attention against plain loop-based references.

The references below are written for clarity, not speed: explicit loops over queries i and
tokens j with ``math.exp``, shifted by the largest logit only where overflow would otherwise
occur. Causal (masked) attention is referenced through its definition
:math:`f^m(X)_i = f(x_1, \\dots, x_i)_i`: the non-causal reference is called on the prefix
``x_1..x_i`` with the prefix weights renormalised.
"""

import math

import numpy as np
import ot
import pytest
import threadpoolctl
from hypothesis import given, settings
from hypothesis import strategies as st
from transformer_pde import _kernels, attention

# --------------------------------------------------------------------------------------
# loop references
# --------------------------------------------------------------------------------------


def _matvec(M, x):
    return [sum(M[a][b] * x[b] for b in range(len(x))) for a in range(len(M))]


def _dot(u, v):
    return sum(a * b for a, b in zip(u, v, strict=True))


def _uniform(n):
    return [1.0 / n] * n


def _weighted_average(scores, w, vals):
    """sum_j w_j e^{s_j} v_j / sum_j w_j e^{s_j}, shifted by the top logit of positive weight."""
    top = max(s for s, wj in zip(scores, w, strict=True) if wj > 0)
    num = [0.0] * len(vals[0])
    den = 0.0
    for s, wj, v in zip(scores, w, vals, strict=True):
        if wj == 0:
            continue
        e = wj * math.exp(s - top)
        den += e
        num = [a + e * b for a, b in zip(num, v, strict=True)]
    return [a / den for a in num]


def ref_softmax_matrix(X, A, w=None, queries=None):
    X = np.asarray(X).tolist()
    Y = X if queries is None else np.asarray(queries).tolist()
    w = _uniform(len(X)) if w is None else list(w)
    P = []
    for y in Y:
        Ay = _matvec(A, y)
        scores = [_dot(Ay, x) for x in X]
        top = max(s for s, wj in zip(scores, w, strict=True) if wj > 0)
        row = [wj * math.exp(s - top) if wj > 0 else 0.0 for s, wj in zip(scores, w, strict=True)]
        total = sum(row)
        P.append([r / total for r in row])
    return np.array(P)


def ref_softmax(X, A, V, w=None, queries=None):
    X = np.asarray(X).tolist()
    Y = X if queries is None else np.asarray(queries).tolist()
    w = _uniform(len(X)) if w is None else list(w)
    vals = [_matvec(V, x) for x in X]
    out = []
    for y in Y:
        Ay = _matvec(A, y)
        out.append(_weighted_average([_dot(Ay, x) for x in X], w, vals))
    return np.array(out)


def _l2_scores(y, X, Q, K):
    Qy = _matvec(Q, y)
    scores = []
    for x in X:
        Kx = _matvec(K, x)
        scores.append(-sum((a - b) ** 2 for a, b in zip(Qy, Kx, strict=True)))
    return scores


def ref_l2(X, Q, K, V, w=None, queries=None):
    X = np.asarray(X).tolist()
    Y = X if queries is None else np.asarray(queries).tolist()
    w = _uniform(len(X)) if w is None else list(w)
    vals = [_matvec(V, x) for x in X]
    return np.array([_weighted_average(_l2_scores(y, X, Q, K), w, vals) for y in Y])


def ref_l2_matrix(X, Q, K, w=None, queries=None):
    X = np.asarray(X).tolist()
    Y = X if queries is None else np.asarray(queries).tolist()
    w = _uniform(len(X)) if w is None else list(w)
    P = []
    for y in Y:
        scores = _l2_scores(y, X, Q, K)
        top = max(scores)
        row = [wj * math.exp(s - top) for s, wj in zip(scores, w, strict=True)]
        P.append([r / sum(row) for r in row])
    return np.array(P)


def _sigma(z):
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    return math.exp(z) / (1.0 + math.exp(z))


def ref_sigmoid(X, A, V, w=None, queries=None, bias=0.0):
    X = np.asarray(X).tolist()
    Y = X if queries is None else np.asarray(queries).tolist()
    w = _uniform(len(X)) if w is None else list(w)
    out = []
    for y in Y:
        Ay = _matvec(A, y)
        acc = [0.0] * len(V)
        for x, wj in zip(X, w, strict=True):
            s = wj * _sigma(_dot(Ay, x) + bias)
            acc = [a + s * b for a, b in zip(acc, _matvec(V, x), strict=True)]
        out.append(acc)
    return np.array(out)


def ref_causal(ref, X, *params, w=None, queries=None, **kwargs):
    """f^m(X)_i = f(x_1..x_i)_i: the reference on the prefix, prefix weights renormalised."""
    X = np.asarray(X)
    n = X.shape[0]
    Y = X if queries is None else np.asarray(queries)
    w = np.full(n, 1.0 / n) if w is None else np.asarray(w)
    rows = []
    for i in range(n):
        prefix_mass = float(sum(w[: i + 1]))
        assert prefix_mass > 0
        wp = [float(v) / prefix_mass for v in w[: i + 1]]
        rows.append(ref(X[: i + 1], *params, w=wp, queries=Y[i : i + 1], **kwargs)[0])
    return np.array(rows)


def ref_sinkhorn_kernel(X, Q, K, w=None, n_steps=None, log_k0=None, queries=None):
    """Sinkhorn-Knopp on k0(x, y) = e^{-|Qx-Ky|^2}, in the plain domain, loop by loop.

    Even steps divide each row i by sum_j w_j k_ij, odd steps each column j by
    sum_i w_i k_ij. ``n_steps=None`` iterates until the columns are normalised to 1e-14 after
    a row step. ``queries`` are appended to the atoms with weight zero: they do not change
    the normalisations of the measure, and their rows are the kernel at those points.
    """
    X = np.asarray(X).tolist()
    n = len(X)
    w = _uniform(n) if w is None else [float(v) for v in w]
    if queries is not None:
        X = X + np.asarray(queries).tolist()
        w = w + [0.0] * len(queries)
    N = len(X)
    if log_k0 is None:
        k = [[math.exp(s) for s in _l2_scores(x, X, Q, K)] for x in X]
    else:
        k = [[math.exp(log_k0(x, y)) for y in X] for x in X]
    step = 0
    while True:
        if step % 2 == 0:
            for i in range(N):
                r = sum(w[j] * k[i][j] for j in range(N))
                k[i] = [v / r for v in k[i]]
        else:
            for j in range(N):
                c = sum(w[i] * k[i][j] for i in range(N))
                for i in range(N):
                    k[i][j] /= c
        step += 1
        if n_steps is not None and step == n_steps:
            break
        if n_steps is None and step % 2 == 1:
            cols = [sum(w[i] * k[i][j] for i in range(N)) for j in range(N)]
            if max(abs(c - 1.0) for c, wj in zip(cols, w, strict=True) if wj > 0) < 1e-14:
                break
            assert step < 20_000
    return np.array(k), np.array(w), np.asarray(X)


def ref_sinkhorn(X, Q, K, V, w=None, n_steps=None, queries=None):
    k, w_all, X_all = ref_sinkhorn_kernel(X, Q, K, w=w, n_steps=n_steps, queries=queries)
    vals = [_matvec(V, x) for x in X_all.tolist()]
    rows = range(len(X), len(X_all)) if queries is not None else range(len(X))
    out = []
    for i in rows:
        acc = [0.0] * len(V)
        for j in range(len(X_all)):
            acc = [a + w_all[j] * k[i][j] * b for a, b in zip(acc, vals[j], strict=True)]
        out.append(acc)
    return np.array(out)


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------


def make_data(seed=0, n=7, d=3, p=None, k=None, scale=0.7):
    """Tokens, parameters, and non-uniform weights with two zeros (token 0 keeps mass)."""
    rng = np.random.default_rng(seed)
    p = d if p is None else p
    k = d if k is None else k
    X = rng.normal(size=(n, d))
    A = scale * rng.normal(size=(d, d))
    V = rng.normal(size=(p, d))
    Q = scale * rng.normal(size=(k, d))
    K = scale * rng.normal(size=(k, d))
    w = rng.random(n) + 0.1
    if n >= 5:
        w[[2, 4]] = 0.0
    w /= w.sum()
    Y = rng.normal(size=(n + 2, d))
    return dict(X=X, A=A, V=V, Q=Q, K=K, w=w, Y=Y, rng=rng)


D = make_data()
TOL = dict(rtol=1e-11, atol=1e-12)

# --------------------------------------------------------------------------------------
# each variant against its loop reference: uniform and weighted, at tokens and at queries
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("at_queries", [False, True])
def test_softmax_matches_loop_reference(weighted, at_queries):
    w = D["w"] if weighted else None
    Y = D["Y"] if at_queries else None
    got = attention.softmax(D["X"], D["A"], D["V"], weights=w, queries=Y)
    np.testing.assert_allclose(got, ref_softmax(D["X"], D["A"], D["V"], w=w, queries=Y), **TOL)


def test_softmax_rectangular_value_matrix():
    d = make_data(seed=1, p=2)
    got = attention.softmax(d["X"], d["A"], d["V"], weights=d["w"])
    assert got.shape == (7, 2)
    np.testing.assert_allclose(got, ref_softmax(d["X"], d["A"], d["V"], w=d["w"]), **TOL)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("at_queries", [False, True])
def test_l2_matches_loop_reference(weighted, at_queries):
    d = make_data(seed=2, k=2)  # Q, K of shape (2, 3): k != d
    w = d["w"] if weighted else None
    Y = d["Y"] if at_queries else None
    got = attention.l2(d["X"], d["Q"], d["K"], d["V"], weights=w, queries=Y)
    np.testing.assert_allclose(got, ref_l2(d["X"], d["Q"], d["K"], d["V"], w=w, queries=Y), **TOL)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("at_queries", [False, True])
@pytest.mark.parametrize("bias", [0.0, -1.7])
def test_sigmoid_matches_loop_reference(weighted, at_queries, bias):
    w = D["w"] if weighted else None
    Y = D["Y"] if at_queries else None
    got = attention.sigmoid(D["X"], D["A"], D["V"], weights=w, queries=Y, bias=bias)
    ref = ref_sigmoid(D["X"], D["A"], D["V"], w=w, queries=Y, bias=bias)
    np.testing.assert_allclose(got, ref, **TOL)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("at_queries", [False, True])
def test_multihead_is_sum_of_loop_reference_heads(weighted, at_queries):
    rng = np.random.default_rng(3)
    H, n, d, p = 3, 6, 3, 2
    X = rng.normal(size=(n, d))
    As = 0.8 * rng.normal(size=(H, d, d))
    Vs = rng.normal(size=(H, p, d))
    w = D["w"][:n] / D["w"][:n].sum() if weighted else None
    Y = rng.normal(size=(4, d)) if at_queries else None
    got = attention.multihead(X, As, Vs, weights=w, queries=Y)
    ref = sum(ref_softmax(X, As[h], Vs[h], w=w, queries=Y) for h in range(H))
    np.testing.assert_allclose(got, ref, **TOL)
    heads = sum(attention.softmax(X, As[h], Vs[h], weights=w, queries=Y) for h in range(H))
    np.testing.assert_allclose(got, heads, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("at_queries", [False, True])
def test_softmax_matrix_matches_loop_reference(weighted, at_queries):
    w = D["w"] if weighted else None
    Y = D["Y"] if at_queries else None
    P = attention.softmax_matrix(D["X"], D["A"], weights=w, queries=Y)
    np.testing.assert_allclose(P, ref_softmax_matrix(D["X"], D["A"], w=w, queries=Y), **TOL)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-14)
    if weighted:
        assert np.all(P[:, D["w"] == 0] == 0)
    field = attention.softmax(D["X"], D["A"], D["V"], weights=w, queries=Y)
    np.testing.assert_allclose(P @ D["X"] @ D["V"].T, field, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("at_queries", [False, True])
def test_l2_matrix_matches_loop_reference(weighted, at_queries):
    w = D["w"] if weighted else None
    Y = D["Y"] if at_queries else None
    P = attention.l2_matrix(D["X"], D["Q"], D["K"], weights=w, queries=Y)
    np.testing.assert_allclose(P, ref_l2_matrix(D["X"], D["Q"], D["K"], w=w, queries=Y), **TOL)
    field = attention.l2(D["X"], D["Q"], D["K"], D["V"], weights=w, queries=Y)
    np.testing.assert_allclose(P @ D["X"] @ D["V"].T, field, rtol=1e-12, atol=1e-13)


# --------------------------------------------------------------------------------------
# causal masking: f^m(X)_i = f(x_1..x_i)_i
# --------------------------------------------------------------------------------------

CAUSAL_CASES = {
    "softmax": (lambda X, w, Y: attention.softmax(X, D["A"], D["V"], weights=w, queries=Y,
                                                  causal=True),
                lambda X, w, Y: ref_causal(ref_softmax, X, D["A"], D["V"], w=w, queries=Y)),
    "l2": (lambda X, w, Y: attention.l2(X, D["Q"], D["K"], D["V"], weights=w, queries=Y,
                                        causal=True),
           lambda X, w, Y: ref_causal(ref_l2, X, D["Q"], D["K"], D["V"], w=w, queries=Y)),
    "sigmoid": (lambda X, w, Y: attention.sigmoid(X, D["A"], D["V"], weights=w, queries=Y,
                                                  causal=True, bias=0.3),
                lambda X, w, Y: ref_causal(ref_sigmoid, X, D["A"], D["V"], w=w, queries=Y,
                                           bias=0.3)),
    "multihead": (lambda X, w, Y: attention.multihead(X, np.stack([D["A"], -D["A"].T]),
                                                      np.stack([D["V"], 0.5 * D["V"]]),
                                                      weights=w, queries=Y, causal=True),
                  lambda X, w, Y: ref_causal(ref_softmax, X, D["A"], D["V"], w=w, queries=Y)
                  + ref_causal(ref_softmax, X, -D["A"].T, 0.5 * D["V"], w=w, queries=Y)),
}


@pytest.mark.parametrize("variant", sorted(CAUSAL_CASES))
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("at_queries", [False, True])
def test_causal_matches_prefix_reference(variant, weighted, at_queries):
    fn, ref = CAUSAL_CASES[variant]
    w = D["w"] if weighted else None
    Y = D["Y"][: D["X"].shape[0]] if at_queries else None
    np.testing.assert_allclose(fn(D["X"], w, Y), ref(D["X"], w, Y), **TOL)


def test_causal_first_token_attends_to_itself_and_last_is_full():
    X, A, V = D["X"], D["A"], D["V"]
    out = attention.softmax(X, A, V, causal=True)
    np.testing.assert_allclose(out[0], V @ X[0], rtol=1e-13)
    np.testing.assert_allclose(out[-1], attention.softmax(X, A, V)[-1], rtol=1e-13)


@pytest.mark.parametrize("weighted", [False, True])
def test_causal_matrices_are_prefix_references(weighted):
    w = D["w"] if weighted else None
    X = D["X"]
    n = X.shape[0]
    for fn, ref, params in ((attention.softmax_matrix, ref_softmax_matrix, (D["A"],)),
                            (attention.l2_matrix, ref_l2_matrix, (D["Q"], D["K"]))):
        P = fn(X, *params, weights=w, causal=True)
        assert np.all(np.triu(P, 1) == 0)
        wfull = np.full(n, 1.0 / n) if w is None else w
        for i in range(n):
            wp = wfull[: i + 1] / wfull[: i + 1].sum()
            np.testing.assert_allclose(P[i, : i + 1], ref(X[: i + 1], *params, w=wp,
                                                          queries=X[i : i + 1])[0], **TOL)


# --------------------------------------------------------------------------------------
# chunking never changes the result
# --------------------------------------------------------------------------------------

CHUNKED = {
    "softmax": lambda X, cs, causal, w: attention.softmax(X, D["A"], D["V"], weights=w,
                                                          causal=causal, chunk_size=cs),
    "l2": lambda X, cs, causal, w: attention.l2(X, D["Q"], D["K"], D["V"], weights=w,
                                                causal=causal, chunk_size=cs),
    "sigmoid": lambda X, cs, causal, w: attention.sigmoid(X, D["A"], D["V"], weights=w,
                                                          causal=causal, chunk_size=cs),
    "multihead": lambda X, cs, causal, w: attention.multihead(
        X, np.stack([D["A"], D["A"].T]), np.stack([D["V"], D["V"].T]), weights=w,
        causal=causal, chunk_size=cs),
    "sinkhorn": lambda X, cs, causal, w: attention.sinkhorn(X, D["Q"], D["K"], D["V"],
                                                            weights=w, chunk_size=cs),
}


@pytest.mark.parametrize(("variant", "causal"),
                         [(v, c) for v in sorted(CHUNKED) for c in (False, True)
                          if not (v == "sinkhorn" and c)])  # Sinkhorn has no causal variant
def test_chunk_size_does_not_change_result(variant, causal):
    rng = np.random.default_rng(5)
    n = 23
    X = rng.normal(size=(n, 3))
    w = rng.random(n)
    w[[3, 10]] = 0.0
    w /= w.sum()
    fn = CHUNKED[variant]
    reference = fn(X, n, causal, w)  # one chunk: all queries at once
    for cs in (1, 2, 5, 7, 22, 24, 1000, None):
        np.testing.assert_allclose(fn(X, cs, causal, w), reference, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("d", [2, 24])
@pytest.mark.parametrize("causal", [False, True])
def test_automatic_chunks_match_one_dense_block(causal, d, monkeypatch):
    # d = 2: the fused rows, in tiles of 100 columns (several per row); d = 24: chunks of
    # default_rows queries, 48 with a second-level cache of 64 KiB, so 23 chunks
    monkeypatch.setattr(_kernels, "cache_sizes", lambda: (4800, 2**16))
    assert _kernels.fused_tile(2, 2) == 100 and _kernels.default_rows(1100, 24, 24) == 48
    rng = np.random.default_rng(6)
    X = rng.normal(size=(1100, d))
    A = rng.normal(size=(d, d)) / np.sqrt(d)
    V = rng.normal(size=(2, d))
    auto = attention.softmax(X, A, V, causal=causal)
    dense = attention.softmax(X, A, V, causal=causal, chunk_size=1100)
    np.testing.assert_allclose(auto, dense, rtol=1e-13, atol=1e-14)
    P = attention.softmax_matrix(X, A, causal=causal)
    np.testing.assert_allclose(P @ X @ V.T, auto, rtol=1e-11, atol=1e-12)


def test_calls_of_other_sizes_in_between_change_no_result():
    # calls of other sizes in between must not change a result, and two calls must not
    # return the same array
    rng = np.random.default_rng(9)
    problems = []
    for n, d in ((700, 64), (300, 20), (1200, 48), (700, 64)):
        X = rng.normal(size=(n, d))
        A = rng.normal(size=(d, d)) / d
        V = rng.normal(size=(d, d))
        problems.append((X, A, V, attention.softmax_matrix(X, A) @ X @ V.T))
    outputs = [attention.softmax(X, A, V) for X, A, V, _ in problems]
    for out, (_, _, _, ref) in zip(outputs, problems, strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-11, atol=1e-12)
    assert not np.shares_memory(outputs[0], outputs[3])


# --------------------------------------------------------------------------------------
# large logits: radius-100 inputs with A = I
# --------------------------------------------------------------------------------------


def test_large_logits_each_token_attends_to_itself():
    # 12 tokens on the circle of radius 100, 30 degrees apart: <x_i, x_j> - |x_i|^2 <=
    # -1e4 (1 - cos 30deg) = -1340, so every other token's weight is below e^{-1340}.
    theta = np.arange(12) * np.pi / 6
    X = 100.0 * np.column_stack([np.cos(theta), np.sin(theta)])
    V = np.array([[1.0, 2.0], [-0.5, 3.0]])
    I2 = np.eye(2)
    for causal in (False, True):
        out = attention.softmax(X, I2, V, causal=causal)
        assert np.all(np.isfinite(out))
        np.testing.assert_allclose(out, X @ V.T, rtol=1e-13, atol=1e-10)
        P = attention.softmax_matrix(X, I2, causal=causal)
        np.testing.assert_allclose(P, np.eye(12), rtol=0, atol=1e-300)
    out = attention.multihead(X, np.stack([I2, I2]), np.stack([V, V]))
    np.testing.assert_allclose(out, 2 * X @ V.T, rtol=1e-13, atol=1e-10)
    out = attention.l2(X, I2, I2, V)
    np.testing.assert_allclose(out, X @ V.T, rtol=1e-13, atol=1e-10)
    # sigmoid: sigma(1e4 cos(theta_ij)) is 1, 1/2 (orthogonal pairs) or 0 up to e^{-1340}
    G = X @ X.T
    S = np.where(G > 1.0, 1.0, np.where(G < -1.0, 0.0, 0.5)) / 12
    np.testing.assert_allclose(attention.sigmoid(X, I2, V), S @ X @ V.T, rtol=1e-12, atol=1e-9)


def test_large_logits_closed_form_two_tokens():
    # x1 = (100, 0), x2 = (100, t) with t^2 = log 3: logits row 1 = (1e4, 1e4) -> (1/2, 1/2);
    # row 2 = (1e4, 1e4 + log 3) -> (1/4, 3/4). A naive exp(1e4) overflows.
    t = math.sqrt(math.log(3.0))
    X = np.array([[100.0, 0.0], [100.0, t]])
    V = np.array([[0.3, -1.0], [2.0, 0.5]])
    expected = np.array([V @ (X[0] + X[1]) / 2, V @ (X[0] / 4 + 3 * X[1] / 4)])
    out = attention.softmax(X, np.eye(2), V)
    np.testing.assert_allclose(out, expected, rtol=1e-11)
    np.testing.assert_allclose(attention.softmax_matrix(X, np.eye(2)),
                               [[0.5, 0.5], [0.25, 0.75]], rtol=1e-11)
    # the same with weights (1/4, 3/4): row 1 -> (1/4, 3/4), row 2 -> (1/10, 9/10)
    out = attention.softmax(X, np.eye(2), V, weights=np.array([0.25, 0.75]))
    expected = np.array([V @ (X[0] / 4 + 3 * X[1] / 4), V @ (X[0] / 10 + 9 * X[1] / 10)])
    np.testing.assert_allclose(out, expected, rtol=1e-11)


def test_large_logits_scaled_cloud_matches_stabilised_reference():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(7, 3))
    X = 100.0 * X / np.linalg.norm(X, axis=1, keepdims=True)
    V = rng.normal(size=(3, 3))
    A = np.eye(3)
    out = attention.softmax(X, A, V, weights=D["w"])
    assert np.all(np.isfinite(out))
    ref = ref_softmax(X, A, V, w=D["w"])
    np.testing.assert_allclose(out, ref, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------------------
# Sinkhorn
# --------------------------------------------------------------------------------------

SK = make_data(seed=11, n=8, d=2, scale=0.6)


@pytest.mark.parametrize("weighted", [False, True])
def test_sinkhorn_matches_loop_reference(weighted):
    w = SK["w"] if weighted else None
    got = attention.sinkhorn(SK["X"], SK["Q"], SK["K"], SK["V"], weights=w)
    ref = ref_sinkhorn(SK["X"], SK["Q"], SK["K"], SK["V"], w=w)
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-10)
    kernel = attention.sinkhorn_kernel(SK["X"], SK["Q"], SK["K"], weights=w)
    ref_k, _, _ = ref_sinkhorn_kernel(SK["X"], SK["Q"], SK["K"], w=w)
    np.testing.assert_allclose(kernel, ref_k, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("n_steps", [1, 3, 5])
def test_sinkhorn_fixed_steps_match_loop_reference(n_steps):
    X, Q, K, V, w = SK["X"], SK["Q"], SK["K"], SK["V"], SK["w"]
    kernel = attention.sinkhorn_kernel(X, Q, K, weights=w, n_steps=n_steps)
    ref_k, _, _ = ref_sinkhorn_kernel(X, Q, K, w=w, n_steps=n_steps)
    np.testing.assert_allclose(kernel, ref_k, rtol=1e-11, atol=1e-12)
    got = attention.sinkhorn(X, Q, K, V, weights=w, n_steps=n_steps)
    np.testing.assert_allclose(got, ref_sinkhorn(X, Q, K, V, w=w, n_steps=n_steps),
                               rtol=1e-11, atol=1e-12)


def test_sinkhorn_kernel_even_steps_match_loop_reference():
    # the kernel after an even number of steps ends on a column normalisation
    X, Q, K, w = SK["X"], SK["Q"], SK["K"], SK["w"]
    for n_steps in (2, 4):
        kernel = attention.sinkhorn_kernel(X, Q, K, weights=w, n_steps=n_steps)
        ref_k, _, _ = ref_sinkhorn_kernel(X, Q, K, w=w, n_steps=n_steps)
        np.testing.assert_allclose(kernel, ref_k, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(w @ kernel, 1.0, rtol=1e-12)


@pytest.mark.parametrize("n_steps", [2, 4])
def test_sinkhorn_field_even_steps_uses_the_kernel_of_that_many_steps(n_steps):
    # after an even number of steps the rows of the kernel do not sum to one
    X, Q, K, V, w = SK["X"], SK["Q"], SK["K"], SK["V"], SK["w"]
    for Y in (None, SK["Y"]):
        got = attention.sinkhorn(X, Q, K, V, weights=w, n_steps=n_steps, queries=Y)
        np.testing.assert_allclose(got, ref_sinkhorn(X, Q, K, V, w=w, n_steps=n_steps,
                                                     queries=Y), rtol=1e-10, atol=1e-11)
        for cs in (1, 3, 100):
            np.testing.assert_allclose(attention.sinkhorn(X, Q, K, V, weights=w, queries=Y,
                                                          n_steps=n_steps, chunk_size=cs),
                                       got, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("weighted", [False, True])
def test_sinkhorn_kernel_is_doubly_stochastic(weighted):
    X, Q, K = SK["X"], SK["Q"], SK["K"]
    n = X.shape[0]
    w = SK["w"] if weighted else np.full(n, 1.0 / n)
    kernel = attention.sinkhorn_kernel(X, Q, K, weights=w if weighted else None)
    assert np.all(kernel > 0)
    np.testing.assert_allclose(kernel @ w, 1.0, rtol=0, atol=1e-12)  # in y, every row
    np.testing.assert_allclose(w @ kernel, 1.0, rtol=0, atol=1e-9)  # in x, every column


@pytest.mark.parametrize("weighted", [False, True])
def test_sinkhorn_against_pot(weighted):
    X, Q, K, V = SK["X"], SK["Q"], SK["K"], SK["V"]
    n = X.shape[0]
    w = SK["w"] if weighted else np.full(n, 1.0 / n)
    keep = w > 0  # atoms of zero weight carry no mass in the plan: POT sees the support only
    M = ot.dist(X[keep] @ Q.T, X[keep] @ K.T)  # |Q x_i - K x_j|^2
    a = w[keep]
    plan = ot.sinkhorn(a, a, M, reg=1.0, method="sinkhorn_log", numItermax=100_000,
                       stopThr=1e-14)
    kernel = attention.sinkhorn_kernel(X, Q, K, weights=w if weighted else None)
    ours = (w[:, None] * kernel * w[None, :])[np.ix_(keep, keep)]
    np.testing.assert_allclose(ours, plan, rtol=1e-8, atol=1e-13)
    field = attention.sinkhorn(X, Q, K, V, weights=w if weighted else None)
    P = plan / a[:, None]  # the attention matrix on the support
    np.testing.assert_allclose(field[keep], P @ X[keep] @ V.T, rtol=1e-8, atol=1e-10)
    if not weighted:
        np.testing.assert_allclose(kernel / n, n * plan, rtol=1e-8)


def test_sinkhorn_one_step_is_l2_attention():
    X, Q, K, V, w = SK["X"], SK["Q"], SK["K"], SK["V"], SK["w"]
    for weights in (None, w):
        np.testing.assert_allclose(attention.sinkhorn(X, Q, K, V, weights=weights, n_steps=1),
                                   attention.l2(X, Q, K, V, weights=weights), rtol=1e-12)
        kernel = attention.sinkhorn_kernel(X, Q, K, weights=weights, n_steps=1)
        ww = np.full(8, 1 / 8) if weights is None else weights
        np.testing.assert_allclose(kernel * ww[None, :],
                                   attention.l2_matrix(X, Q, K, weights=weights),
                                   rtol=1e-12, atol=1e-15)


def test_sinkhorn_limit_same_for_inner_product_kernel():
    # e^{-|Qx-Ky|^2} = e^{-|Qx|^2} e^{-|Ky|^2} e^{2<Qx,Ky>}: separable factors are absorbed by
    # the normalisations, so e^{2<Qx,Ky>} has the same Sinkhorn limit.
    X, Q, K, w = SK["X"], SK["Q"], SK["K"], SK["w"]

    def log_k0(x, y):
        return 2.0 * _dot(_matvec(Q, x), _matvec(K, y))

    ref_k, _, _ = ref_sinkhorn_kernel(X, Q, K, w=w, log_k0=log_k0)
    np.testing.assert_allclose(attention.sinkhorn_kernel(X, Q, K, weights=w), ref_k,
                               rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("weighted", [False, True])
def test_sinkhorn_at_queries_off_the_support(weighted):
    # reference: the queries are atoms of weight zero of the same measure
    X, Q, K, V = SK["X"], SK["Q"], SK["K"], SK["V"]
    w = SK["w"] if weighted else None
    Y = SK["Y"]
    got = attention.sinkhorn(X, Q, K, V, weights=w, queries=Y)
    np.testing.assert_allclose(got, ref_sinkhorn(X, Q, K, V, w=w, queries=Y),
                               rtol=1e-9, atol=1e-10)
    on_support = attention.sinkhorn(X, Q, K, V, weights=w, queries=X)
    np.testing.assert_allclose(on_support, attention.sinkhorn(X, Q, K, V, weights=w),
                               rtol=1e-12, atol=1e-13)


# --------------------------------------------------------------------------------------
# invariances: permutation equivariance, duplication, weights = repeated atoms
# --------------------------------------------------------------------------------------


def _variants(d):
    rng = np.random.default_rng(100 + d)
    A = 0.7 * rng.normal(size=(d, d))
    V = rng.normal(size=(d, d))
    Q = 0.6 * rng.normal(size=(d, d))
    K = 0.6 * rng.normal(size=(d, d))
    As = 0.7 * rng.normal(size=(2, d, d))
    Vs = rng.normal(size=(2, d, d))
    # Sinkhorn converges at the rate tanh(D/4)^2, D = max (c_ik + c_jl - c_il - c_jk) the
    # spread of the cost: keep D moderate so that the iteration converges in max_steps.
    Qs, Ks = 0.5 * Q, 0.5 * K
    return {
        "softmax": lambda X, **kw: attention.softmax(X, A, V, **kw),
        "l2": lambda X, **kw: attention.l2(X, Q, K, V, **kw),
        "sigmoid": lambda X, **kw: attention.sigmoid(X, A, V, bias=-0.4, **kw),
        "multihead": lambda X, **kw: attention.multihead(X, As, Vs, **kw),
        "sinkhorn": lambda X, **kw: attention.sinkhorn(X, Qs, Ks, V, **kw),
    }


VARIANTS = _variants(3)
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)
# derandomized: the same examples on every run, so a failure is reproducible and CI is stable
PROPERTY = dict(deadline=None, derandomize=True, database=None)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@settings(max_examples=15, **PROPERTY)
@given(seed=SEEDS, n=st.integers(min_value=2, max_value=9))
def test_permutation_equivariance(variant, seed, n):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    w = rng.random(n) + 0.05
    w /= w.sum()
    perm = rng.permutation(n)
    fn = VARIANTS[variant]
    np.testing.assert_allclose(fn(X[perm]), fn(X)[perm], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fn(X[perm], weights=w[perm]), fn(X, weights=w)[perm],
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("variant", ["softmax", "l2", "sigmoid", "multihead"])
def test_causal_is_not_permutation_equivariant(variant):
    rng = np.random.default_rng(12)
    X = rng.normal(size=(6, 3))
    perm = np.array([5, 0, 1, 2, 3, 4])
    fn = VARIANTS[variant]
    gap = np.abs(fn(X[perm], causal=True) - fn(X, causal=True)[perm]).max()
    assert gap > 1e-2
    # ... while the last token (which sees everyone) is still the non-causal value
    np.testing.assert_allclose(fn(X, causal=True)[-1], fn(X)[-1], rtol=1e-12)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@settings(max_examples=10, **PROPERTY)
@given(seed=SEEDS, n=st.integers(min_value=1, max_value=6), k=st.integers(min_value=2, max_value=4))
def test_duplicating_every_token_leaves_field_unchanged(variant, seed, n, k):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    Y = rng.normal(size=(3, 3))
    fn = VARIANTS[variant]
    Xk = np.repeat(X, k, axis=0)
    np.testing.assert_allclose(fn(Xk), np.repeat(fn(X), k, axis=0), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(fn(Xk, queries=Y), fn(X, queries=Y), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@settings(max_examples=10, **PROPERTY)
@given(seed=SEEDS, counts=st.lists(st.integers(min_value=0, max_value=3), min_size=2,
                                   max_size=5).filter(lambda c: sum(c) > 0))
def test_weighted_measure_equals_repeated_atoms(variant, seed, counts):
    rng = np.random.default_rng(seed)
    counts = np.array(counts)
    X = rng.normal(size=(counts.size, 3))
    Y = rng.normal(size=(4, 3))
    w = counts / counts.sum()
    fn = VARIANTS[variant]
    repeated = np.repeat(X, counts, axis=0)
    np.testing.assert_allclose(fn(X, weights=w, queries=Y), fn(repeated, queries=Y),
                               rtol=1e-9, atol=1e-11)
    on_atoms = fn(X, weights=w)[counts > 0]
    np.testing.assert_allclose(on_atoms, fn(repeated)[np.cumsum(counts)[counts > 0] - 1],
                               rtol=1e-9, atol=1e-11)


# --------------------------------------------------------------------------------------
# bad inputs raise ValueError naming the argument
# --------------------------------------------------------------------------------------

X3, A3, V3, Q3, K3 = D["X"], D["A"], D["V"], D["Q"], D["K"]
NAN_X = X3.copy()
NAN_X[1, 1] = np.nan
INF_A = A3.copy()
INF_A[0, 0] = np.inf
W_ZERO_FIRST = np.array([0.0, 0.0, 0.2, 0.2, 0.2, 0.2, 0.2])

BAD_INPUTS = [
    # X
    (attention.softmax, (X3[0], A3, V3), {}, "X"),
    (attention.softmax, (X3[None], A3, V3), {}, "X"),
    (attention.softmax, (np.zeros((0, 3)), A3, V3), {}, "X"),
    (attention.softmax, (NAN_X, A3, V3), {}, "X"),
    (attention.l2, (NAN_X, Q3, K3, V3), {}, "X"),
    (attention.sigmoid, (NAN_X, A3, V3), {}, "X"),
    (attention.sinkhorn, (NAN_X, Q3, K3, V3), {}, "X"),
    (attention.sinkhorn_kernel, (X3[0], Q3, K3), {}, "X"),
    (attention.multihead, (NAN_X, A3[None], V3[None]), {}, "X"),
    (attention.softmax_matrix, (np.full((7, 3), np.inf), A3), {}, "X"),
    (attention.l2_matrix, (X3[0], Q3, K3), {}, "X"),
    # A, V
    (attention.softmax, (X3, A3[:2], V3), {}, "A"),
    (attention.softmax, (X3, A3[:, :2], V3), {}, "A"),
    (attention.softmax, (X3, INF_A, V3), {}, "A"),
    (attention.softmax_matrix, (X3, A3[0]), {}, "A"),
    (attention.sigmoid, (X3, np.eye(2), V3), {}, "A"),
    (attention.softmax, (X3, A3, V3[:, :2]), {}, "V"),
    (attention.softmax, (X3, A3, V3[0]), {}, "V"),
    (attention.softmax, (X3, A3, V3 * np.nan), {}, "V"),
    (attention.l2, (X3, Q3, K3, V3[:, :2]), {}, "V"),
    (attention.sigmoid, (X3, A3, np.full((3, 3), -np.inf)), {}, "V"),
    (attention.sinkhorn, (X3, Q3, K3, V3[:, 1:]), {}, "V"),
    # Q, K
    (attention.l2, (X3, Q3[:, :2], K3, V3), {}, "Q"),
    (attention.l2, (X3, Q3, K3[:, :2], V3), {}, "K"),
    (attention.l2, (X3, Q3[:2], K3, V3), {}, "Q"),
    (attention.l2, (X3, Q3, INF_A, V3), {}, "K"),
    (attention.l2_matrix, (X3, Q3[0], K3), {}, "Q"),
    (attention.sinkhorn, (X3, Q3, K3[:, :1], V3), {}, "K"),
    (attention.sinkhorn_kernel, (X3, INF_A, K3), {}, "Q"),
    # As, Vs
    (attention.multihead, (X3, A3, V3[None]), {}, "As"),
    (attention.multihead, (X3, np.stack([A3[:2]]), V3[None]), {}, "As"),
    (attention.multihead, (X3, np.stack([A3, INF_A]), np.stack([V3, V3])), {}, "As"),
    (attention.multihead, (X3, A3[None], V3), {}, "Vs"),
    (attention.multihead, (X3, A3[None], V3[None, :, :2]), {}, "Vs"),
    (attention.multihead, (X3, np.stack([A3, A3]), V3[None]), {}, "Vs"),
    (attention.multihead, (X3, np.zeros((0, 3, 3)), np.zeros((0, 3, 3))), {}, "As"),
    # queries
    (attention.softmax, (X3, A3, V3), {"queries": np.ones((2, 2))}, "queries"),
    (attention.softmax, (X3, A3, V3), {"queries": np.ones(3)}, "queries"),
    (attention.softmax, (X3, A3, V3), {"queries": np.full((2, 3), np.nan)}, "queries"),
    (attention.l2, (X3, Q3, K3, V3), {"queries": np.ones((2, 4))}, "queries"),
    (attention.sigmoid, (X3, A3, V3), {"queries": np.ones((2, 2))}, "queries"),
    (attention.sinkhorn, (X3, Q3, K3, V3), {"queries": np.ones((2, 2))}, "queries"),
    (attention.sinkhorn, (X3, Q3, K3, V3), {"queries": np.full((2, 3), np.inf)}, "queries"),
    (attention.multihead, (X3, A3[None], V3[None]), {"queries": np.ones((2, 2))}, "queries"),
    (attention.softmax_matrix, (X3, A3), {"queries": np.ones((2, 2))}, "queries"),
    (attention.l2_matrix, (X3, Q3, K3), {"queries": np.ones((2, 2))}, "queries"),
    # causal queries must have one row per token
    (attention.softmax, (X3, A3, V3), {"queries": np.ones((3, 3)), "causal": True}, "queries"),
    (attention.l2, (X3, Q3, K3, V3), {"queries": np.ones((8, 3)), "causal": True}, "queries"),
    (attention.sigmoid, (X3, A3, V3), {"queries": np.ones((3, 3)), "causal": True}, "queries"),
    (attention.softmax_matrix, (X3, A3), {"queries": np.ones((3, 3)), "causal": True},
     "queries"),
    # weights
    (attention.softmax, (X3, A3, V3), {"weights": np.full(6, 1 / 6)}, "weights"),
    (attention.softmax, (X3, A3, V3), {"weights": np.full(7, 0.2)}, "weights"),
    (attention.softmax, (X3, A3, V3),
     {"weights": np.array([0.5, -0.1, 0.2, 0.1, 0.1, 0.1, 0.1])}, "weights"),
    (attention.softmax, (X3, A3, V3), {"weights": np.array([np.nan] * 7)}, "weights"),
    (attention.softmax, (X3, A3, V3), {"weights": np.full((7, 1), 1 / 7)}, "weights"),
    (attention.l2, (X3, Q3, K3, V3), {"weights": np.full(7, 0.1)}, "weights"),
    (attention.sigmoid, (X3, A3, V3), {"weights": np.full(8, 1 / 8)}, "weights"),
    (attention.sinkhorn, (X3, Q3, K3, V3), {"weights": np.full(7, 0.1)}, "weights"),
    (attention.sinkhorn_kernel, (X3, Q3, K3), {"weights": -np.full(7, 1 / 7)}, "weights"),
    (attention.multihead, (X3, A3[None], V3[None]), {"weights": np.full(7, 0.2)}, "weights"),
    (attention.softmax_matrix, (X3, A3), {"weights": np.full(7, 0.2)}, "weights"),
    (attention.l2_matrix, (X3, Q3, K3), {"weights": np.full(7, 0.2)}, "weights"),
    # a causal query whose prefix has zero weight
    (attention.softmax, (X3, A3, V3), {"weights": W_ZERO_FIRST, "causal": True}, "weights"),
    (attention.l2, (X3, Q3, K3, V3), {"weights": W_ZERO_FIRST, "causal": True}, "weights"),
    (attention.sigmoid, (X3, A3, V3), {"weights": W_ZERO_FIRST, "causal": True}, "weights"),
    (attention.multihead, (X3, A3[None], V3[None]), {"weights": W_ZERO_FIRST, "causal": True},
     "weights"),
    (attention.softmax_matrix, (X3, A3), {"weights": W_ZERO_FIRST, "causal": True}, "weights"),
    (attention.l2_matrix, (X3, Q3, K3), {"weights": W_ZERO_FIRST, "causal": True}, "weights"),
    # chunk_size
    (attention.softmax, (X3, A3, V3), {"chunk_size": 0}, "chunk_size"),
    (attention.softmax, (X3, A3, V3), {"chunk_size": -3}, "chunk_size"),
    (attention.softmax, (X3, A3, V3), {"chunk_size": 2.5}, "chunk_size"),
    (attention.l2, (X3, Q3, K3, V3), {"chunk_size": 0}, "chunk_size"),
    (attention.sigmoid, (X3, A3, V3), {"chunk_size": 0}, "chunk_size"),
    (attention.sinkhorn, (X3, Q3, K3, V3), {"chunk_size": 0}, "chunk_size"),
    (attention.multihead, (X3, A3[None], V3[None]), {"chunk_size": 0}, "chunk_size"),
    # complex or non-numeric input is refused, not cut to its real part
    (attention.softmax, (X3 + 1j, A3, V3), {}, "X"),
    (attention.softmax, (X3.astype(complex), A3, V3), {}, "X"),
    (attention.softmax, (X3, A3 * (1 + 0j), V3), {}, "A"),
    (attention.l2, (X3, Q3, K3 * 1j, V3), {}, "K"),
    (attention.softmax, (X3, A3, V3), {"weights": D["w"] + 0j}, "weights"),
    (attention.softmax, (X3, A3, V3), {"queries": X3 * 1j}, "queries"),
    (attention.multihead, (X3, A3[None], V3[None] * 1j), {}, "Vs"),
    (attention.softmax, ([["a", "b", "c"]], A3, V3), {}, "X"),
    (attention.sigmoid, (X3, A3, V3), {"bias": 1j}, "bias"),
    (attention.sigmoid, (X3, A3, V3), {"bias": "large"}, "bias"),
    # causal is a bool, not something with a truth value
    (attention.softmax, (X3, A3, V3), {"causal": "no"}, "causal"),
    (attention.softmax, (X3, A3, V3), {"causal": 1}, "causal"),
    (attention.l2, (X3, Q3, K3, V3), {"causal": None}, "causal"),
    (attention.sigmoid, (X3, A3, V3), {"causal": "False"}, "causal"),
    (attention.multihead, (X3, A3[None], V3[None]), {"causal": "yes"}, "causal"),
    (attention.softmax_matrix, (X3, A3), {"causal": 0}, "causal"),
    (attention.l2_matrix, (X3, Q3, K3), {"causal": [True]}, "causal"),
    # other options
    (attention.sigmoid, (X3, A3, V3), {"bias": np.inf}, "bias"),
    (attention.sinkhorn, (X3, Q3, K3, V3), {"n_steps": 0}, "n_steps"),
    (attention.sinkhorn_kernel, (X3, Q3, K3), {"tol": -1.0}, "tol"),
    (attention.sinkhorn_kernel, (X3, Q3, K3), {"max_steps": 0}, "max_steps"),
]


@pytest.mark.parametrize(
    ("fn", "args", "kwargs", "name"), BAD_INPUTS,
    ids=[f"{case[0].__name__}-{case[3]}-{i}" for i, case in enumerate(BAD_INPUTS)])
def test_bad_inputs_raise_naming_the_argument(fn, args, kwargs, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        fn(*args, **kwargs)


def test_causal_accepts_numpy_bools():
    np.testing.assert_array_equal(attention.softmax(X3, A3, V3, causal=np.bool_(True)),
                                  attention.softmax(X3, A3, V3, causal=True))
    np.testing.assert_array_equal(attention.softmax(X3, A3, V3, causal=np.False_),
                                  attention.softmax(X3, A3, V3))


def test_non_causal_zero_weight_prefix_is_fine():
    # the same weights are valid without the mask: every query sees tokens of positive weight
    out = attention.softmax(X3, A3, V3, weights=W_ZERO_FIRST)
    np.testing.assert_allclose(out, ref_softmax(X3, A3, V3, w=W_ZERO_FIRST), **TOL)


def test_sinkhorn_not_converging_raises():
    with pytest.raises(RuntimeError, match="max_steps"):
        attention.sinkhorn_kernel(SK["X"], SK["Q"], SK["K"], max_steps=2, tol=1e-15)


def test_overflowing_logits_raise_a_clear_error():
    X = np.array([[1e160, 0.0], [0.0, 1e160]])
    with pytest.raises(ValueError, match="overflow"):
        with np.errstate(over="ignore"):
            attention.softmax(X, np.eye(2), np.eye(2))


@pytest.mark.parametrize("d", [2, 32])
def test_the_error_of_a_query_names_it_whichever_thread_computed_it(d, monkeypatch):
    # d = 2: the fused rows, shared between 4 threads (a free hand-off makes every call
    # parallel); d = 32: chunks of queries. The last query's logits overflow: the error names
    # it, the caller's np.errstate applies on every thread, and BLAS's setting is unchanged
    monkeypatch.setattr(_kernels._workers, "handoff", lambda: 0.0)
    monkeypatch.setattr(_kernels, "thread_count", lambda: 4)
    rng = np.random.default_rng(12)
    X = rng.normal(size=(1100, d))
    queries = X.copy()
    queries[-1] = 1e300  # its logits overflow to inf
    before = threadpoolctl.threadpool_info()
    assert _kernels.Plan(1100, 1100, d, d, None).fused == (d == 2)
    with pytest.raises(ValueError, match="query 1099 overflow"):
        with np.errstate(over="ignore", invalid="ignore"):
            attention.softmax(X, 1e10 * np.eye(d), np.eye(d), queries=queries)
    assert threadpoolctl.threadpool_info() == before
