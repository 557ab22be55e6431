"""Tests of the NumPy BERT (all-MiniLM-L6-v2) in transformer_pde.pretrained."""

import math

import numpy as np
import pytest
from _references import fd_jacobian
from transformer_pde import pretrained as pt
from transformer_pde.attention import multihead, softmax_matrix


@pytest.fixture(scope="module")
def model():
    return pt.load_minilm()


@pytest.fixture(scope="module")
def run(model):
    ids = pt.tokenize("The quick brown fox jumps over the lazy dog, and then it rests "
                      "under the old oak tree near the river bank.")
    return ids, pt.forward(model, ids)


def _normalised_rows(Y, gamma, beta):
    return (Y - beta) / gamma


def test_model_shapes_and_config(model):
    assert (model.d, model.n_heads, model.d_head, model.n_layers) == (384, 12, 32, 6)
    assert model.eps == 1e-12
    assert model.word.dtype == np.float64


def test_tokenizer_has_no_padding_or_truncation():
    tok = pt.load_tokenizer()
    assert tok.padding is None and tok.truncation is None
    assert pt.tokenize("hello world").size == 2
    assert pt.tokenize("word " * 300).size == 300  # longer than the shipped max_length 128
    ids = pt.tokenize("hello world", special_tokens=True)
    assert ids[0] == tok.token_to_id("[CLS]") and ids[-1] == tok.token_to_id("[SEP]")


def test_gelu_is_the_erf_form():
    xs = np.array([-3.0, -1.0, 0.0, 0.5, 2.0])
    expected = [0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in xs]
    np.testing.assert_allclose(pt.gelu(xs), expected, rtol=1e-15)
    assert pt.gelu(1.0) == pytest.approx(0.8413447460685429, rel=1e-15)


def test_layer_norm_invariants(model, run):
    _, fp = run
    # embeddings and every layer output: (Y - beta) / gamma has zero-mean, unit-variance rows
    pairs = [(fp.hidden[0], model.emb_ln_g, model.emb_ln_b)]
    pairs += [(fp.hidden[i + 1], model.layers[i]["ln2_g"], model.layers[i]["ln2_b"])
              for i in range(model.n_layers)]
    for Y, g, b in pairs:
        Z = _normalised_rows(Y, g, b)
        np.testing.assert_allclose(Z.mean(axis=1), 0, atol=1e-10)
        np.testing.assert_allclose(Z.var(axis=1), 1, rtol=1e-9)


def test_attention_rows_sum_to_one_and_match_heads(model, run):
    _, fp = run
    for layer in (0, 3):
        X = fp.hidden[layer]
        P = fp.attentions[layer]
        assert P.shape == (12, X.shape[0], X.shape[0])
        np.testing.assert_allclose(P.sum(axis=2), 1, rtol=1e-12)
        As, _ = pt.attention_heads(model, layer)
        c = pt.query_bias_directions(model, layer)
        for h in (0, 7):
            # logits <A_h x_i, x_j> + <c_h, x_j>: the key bias cancels, the query bias does not
            w = np.exp(X @ c[h] - (X @ c[h]).max())
            w /= w.sum()
            np.testing.assert_allclose(P[h], softmax_matrix(X, As[h], weights=w), atol=1e-12)


def test_attention_decomposition_into_book_heads(model, run):
    _, fp = run
    layer = 2
    X = fp.hidden[layer]
    As, Vs = pt.attention_heads(model, layer)
    c = pt.query_bias_directions(model, layer)
    beta = pt.value_output_constant(model, layer)
    # loop reference of MHA = sum_h softmax(<A_h x_i, x_j> + <c_h, x_j>) V_h x_j + beta
    ref = np.zeros_like(X)
    for h in range(model.n_heads):
        for i in range(X.shape[0]):
            logits = np.array([X[i] @ As[h].T @ x + c[h] @ x for x in X])
            p = np.exp(logits - logits.max())
            p /= p.sum()
            ref[i] += sum(p[j] * (Vs[h] @ X[j]) for j in range(X.shape[0]))
    np.testing.assert_allclose(fp.attention_outputs[layer], ref + beta, atol=1e-10)
    # without the query bias the layer's attention is the book's multi-head map plus beta
    no_qbias = dict(model.layers[layer], bq=np.zeros(model.d))
    m2 = model._replace(layers=model.layers[:layer] + (no_qbias,) + model.layers[layer + 1:])
    out, _ = pt.self_attention(m2, layer, X)
    np.testing.assert_allclose(out, multihead(X, As, Vs) + beta, atol=1e-10)


def test_head_factors(model):
    (Q, K), (Vo, Vi) = pt.attention_head_factors(model, 1)
    As, Vs = pt.attention_heads(model, 1)
    p = model.layers[1]
    h, s = 5, slice(5 * 32, 6 * 32)
    np.testing.assert_allclose(As[h], p["Wk"][s].T @ p["Wq"][s] / np.sqrt(32), rtol=1e-10,
                               atol=1e-14)
    np.testing.assert_allclose(Vs[h], p["Wo"][:, s] @ p["Wv"][s], rtol=1e-10, atol=1e-14)
    assert Q.shape == K.shape == Vi.shape == (12, 32, 384) and Vo.shape == (12, 384, 32)


def _tiny_model(rng):
    d, H, f = 4, 2, 6

    def lin(o, i):
        return rng.standard_normal((o, i)) * 0.7, rng.standard_normal(o) * 0.3

    layer = {}
    for name, (o, i) in {"q": (d, d), "k": (d, d), "v": (d, d), "o": (d, d), "1": (f, d),
                         "2": (d, f)}.items():
        layer["W" + name], layer["b" + name] = lin(o, i)
    for name in ("ln1", "ln2"):
        layer[name + "_g"] = 1 + 0.1 * rng.standard_normal(d)
        layer[name + "_b"] = 0.1 * rng.standard_normal(d)
    return pt.MiniLM(word=rng.standard_normal((10, d)), position=rng.standard_normal((8, d)),
                     token_type=rng.standard_normal((2, d)), emb_ln_g=np.ones(d),
                     emb_ln_b=np.zeros(d), layers=(layer,), n_heads=H, eps=1e-12)


def test_tiny_layer_by_hand():
    """One layer of a d = 4, two-head model against scalar loops."""
    rng = np.random.default_rng(0)
    m = _tiny_model(rng)
    ids = np.array([3, 1, 4, 1, 5])
    n, d, dk = 5, 4, 2
    p = m.layers[0]

    def ln(v, g, b):
        mu = sum(v) / d
        var = sum((a - mu) ** 2 for a in v) / d
        return [g[k] * (v[k] - mu) / math.sqrt(var + 1e-12) + b[k] for k in range(d)]

    def affine(W, b, v):
        return [sum(W[r][c] * v[c] for c in range(len(v))) + b[r] for r in range(len(b))]

    x = [ln([m.word[t][k] + m.position[i][k] + m.token_type[0][k] for k in range(d)],
            np.ones(d), np.zeros(d)) for i, t in enumerate(ids)]
    q = [affine(p["Wq"], p["bq"], v) for v in x]
    k_ = [affine(p["Wk"], p["bk"], v) for v in x]
    v_ = [affine(p["Wv"], p["bv"], v) for v in x]
    out = []
    for i in range(n):
        ctx = []
        for h in range(2):
            s = slice(h * dk, (h + 1) * dk)
            logits = [sum(a * b for a, b in zip(q[i][s], k_[j][s], strict=True)) / math.sqrt(dk)
                      for j in range(n)]
            z = [math.exp(val - max(logits)) for val in logits]
            w = [val / sum(z) for val in z]
            ctx += [sum(w[j] * v_[j][s][c] for j in range(n)) for c in range(dk)]
        att = affine(p["Wo"], p["bo"], ctx)
        y = ln([x[i][c] + att[c] for c in range(d)], p["ln1_g"], p["ln1_b"])
        hdn = [0.5 * a * (1 + math.erf(a / math.sqrt(2))) for a in affine(p["W1"], p["b1"], y)]
        ff = affine(p["W2"], p["b2"], hdn)
        out.append(ln([y[c] + ff[c] for c in range(d)], p["ln2_g"], p["ln2_b"]))
    fp = pt.forward(m, ids)
    np.testing.assert_allclose(fp.hidden[0], np.array(x), rtol=1e-10)
    np.testing.assert_allclose(fp.hidden[1], np.array(out), rtol=1e-9, atol=1e-12)


def test_sentence_embeddings_rank_paraphrase_first(model):
    a = pt.sentence_embedding(model, "A man is playing a guitar on the stage.")
    b = pt.sentence_embedding(model, "On stage, a guy plays the guitar.")
    c = pt.sentence_embedding(model, "The central bank raised interest rates again.")
    assert np.linalg.norm(a) == pytest.approx(1.0)
    assert a @ b > 0.6 > 0.2 > a @ c


def test_bad_inputs(model):
    with pytest.raises(ValueError, match="ids"):
        pt.embed(model, np.array([0, 10**6]))
    with pytest.raises(ValueError, match="ids"):
        pt.embed(model, np.zeros(600, dtype=int))
    with pytest.raises(ValueError, match="layer"):
        pt.attention_heads(model, 6)
    with pytest.raises(ValueError, match="n_layers"):
        pt.forward(model, np.array([101, 102]), n_layers=7)
    with pytest.raises(ValueError, match="text"):
        pt.tokenize(42)


def test_embeddings_are_per_token_but_layers_mix_tokens(model, run):
    # the input of layer 0 of a prefix is the prefix of the input of layer 0 (word + position
    # embeddings, normalised token by token); after one layer every state depends on all tokens
    ids, fp = run
    short = pt.forward(model, ids[:5], n_layers=1)
    np.testing.assert_allclose(short.hidden[0], fp.hidden[0][:5], rtol=0, atol=1e-13)
    assert np.max(np.abs(short.hidden[1] - fp.hidden[1][:5])) > 1e-3


# ---------------------------------------------------------------------------------------
# real text: sample_sequences, attention_lipschitz, attention_released_estimator
# ---------------------------------------------------------------------------------------

def test_sample_sequences_cuts_consecutive_blocks_and_wraps():
    ids = np.arange(100)
    seqs = pt.sample_sequences(ids, [2, 5, 10, 9], 4)
    assert [s.shape for s in seqs] == [(4, 2), (4, 5), (4, 10), (4, 9)]
    # loop reference: a cursor that restarts at 0 when a length's blocks do not fit
    cur, ref = 0, []
    for n in (2, 5, 10, 9):
        if cur + 4 * n > 100:
            cur = 0
        ref.append([list(range(cur + j * n, cur + (j + 1) * n)) for j in range(4)])
        cur += 4 * n
    for s, r in zip(seqs, ref, strict=True):
        np.testing.assert_array_equal(s, r)
        assert len(set(s.ravel())) == s.size  # one length: disjoint sequences
    # 8 + 20 + 40 = 68 tokens used, 4 blocks of 9 do not fit in the last 32: wrap to 0
    np.testing.assert_array_equal(seqs[3][0], np.arange(9))


@pytest.mark.parametrize(("args", "name"), [
    ((np.arange(10), [2], 0), "count"),
    ((np.arange(10), [0], 2), "lengths"),
    ((np.arange(10), [6], 2), "lengths"),
    ((np.arange(10.0), [2], 2), "ids"),
    ((np.zeros((2, 5), dtype=int), [2], 2), "ids"),
])
def test_sample_sequences_bad_inputs(args, name):
    with pytest.raises(ValueError, match=name):
        pt.sample_sequences(*args)


def test_attention_lipschitz_with_query_bias_is_the_norm_of_the_layer_jacobian():
    # a tiny two-head model (d = 4): the dense Jacobian by central differences is cheap
    m = _tiny_model(np.random.default_rng(1))
    X = pt.embed(m, np.array([3, 1, 4, 1, 5, 7]))

    def attn(Y):
        return pt.self_attention(m, 0, Y)[0]

    J = fd_jacobian(attn, X, h=1e-5)
    res = pt.attention_lipschitz(m, 0, X, tol=1e-12, return_vectors=True)
    # central differences, h = 1e-5: truncation of order h^2 = 1e-10 (relative)
    assert res.value == pytest.approx(np.linalg.norm(J, 2), rel=1e-7)
    np.testing.assert_allclose(J @ res.right.ravel(), res.value * res.left.ravel(),
                               atol=1e-6 * res.value)
    # the released estimator of the same map: sqrt(|J^T g(X)|), g with all its biases
    assert pt.attention_released_estimator(m, 0, X) == pytest.approx(
        np.sqrt(np.linalg.norm(J.T @ attn(X).ravel())), rel=1e-7)
    # without the query bias: the Jacobian of the layer with b_Q = 0
    m0 = m._replace(layers=(dict(m.layers[0], bq=np.zeros(4)),))
    J0 = fd_jacobian(lambda Y: pt.self_attention(m0, 0, Y)[0], X, h=1e-5)
    assert pt.attention_lipschitz(m, 0, X, query_bias=False, tol=1e-12) == pytest.approx(
        np.linalg.norm(J0, 2), rel=1e-7)
    assert abs(np.linalg.norm(J0, 2) / res.value - 1) > 1e-3


def test_attention_lipschitz_directional_derivative_on_minilm(model):
    from transformer_pde.lipschitz import LipschitzResult

    ids = pt.tokenize("Attention is all you need, or is it?")[:6]
    X = pt.forward(model, ids, n_layers=2).hidden[2]
    res = pt.attention_lipschitz(model, 2, X, tol=1e-10, return_vectors=True)
    assert isinstance(res, LipschitzResult) and res.matvecs > 0
    h = 1e-5
    secant = (pt.self_attention(model, 2, X + h * res.right)[0]
              - pt.self_attention(model, 2, X - h * res.right)[0]) / (2 * h)
    # along the top right singular vector the derivative is value * left (to O(h^2))
    np.testing.assert_allclose(secant, res.value * res.left, atol=1e-6 * res.value)
    E = np.random.default_rng(2).standard_normal(X.shape)
    E /= np.linalg.norm(E)
    dE = (pt.self_attention(model, 2, X + h * E)[0]
          - pt.self_attention(model, 2, X - h * E)[0]) / (2 * h)
    assert np.linalg.norm(dE) < res.value


def test_attention_lipschitz_without_query_bias_is_the_books_multihead_map(model):
    from transformer_pde import lipschitz

    ids = pt.tokenize("The quick brown fox jumps over the lazy dog again and again.")
    X = pt.forward(model, ids, n_layers=1).hidden[1]
    As, Vs = pt.attention_heads(model, 1)
    ref = lipschitz.local_lipschitz_multihead(X, *pt.attention_head_factors(model, 1), tol=1e-12)
    assert pt.attention_lipschitz(model, 1, X, query_bias=False, tol=1e-12) == pytest.approx(
        ref, rel=1e-9)
    # the query bias changes the attention weights, hence the constant
    assert abs(pt.attention_lipschitz(model, 1, X, tol=1e-12) / ref - 1) > 1e-3
    beta = pt.value_output_constant(model, 1)
    G = multihead(X, As, Vs) + beta
    grad = lipschitz.vjp_multihead(X, *pt.attention_head_factors(model, 1), G)
    assert pt.attention_released_estimator(model, 1, X, query_bias=False) == pytest.approx(
        np.sqrt(np.linalg.norm(grad)), rel=1e-10)


def test_attention_lipschitz_bad_inputs(model):
    X = pt.embed(model, np.array([101, 2000, 102]))
    with pytest.raises(ValueError, match="X"):
        pt.attention_lipschitz(model, 0, X[:, :10])
    with pytest.raises(ValueError, match="layer"):
        pt.attention_lipschitz(model, 9, X)
    with pytest.raises(ValueError, match="tol"):
        pt.attention_lipschitz(model, 0, X, tol=0)
    with pytest.raises(ValueError, match="v0"):
        pt.attention_lipschitz(model, 0, X, v0=np.zeros_like(X))
    with pytest.raises(ValueError, match="X"):
        pt.attention_released_estimator(model, 0, X[:, :10])


def test_attention_lipschitz_refuses_non_bools_and_bad_seeds_naming_them():
    model = pt.load_minilm()
    X = np.random.default_rng(0).normal(size=(3, model.d))
    for kw, name in ((dict(query_bias="no"), "query_bias"), (dict(return_vectors="no"),
                                                             "return_vectors"),
                     (dict(seed=None), "seed"), (dict(seed=-1), "seed"),
                     (dict(seed=1.5), "seed"), (dict(v0=1j * X), "v0")):
        with pytest.raises(ValueError, match=name):
            pt.attention_lipschitz(model, 0, X, **kw)
    with pytest.raises(ValueError, match="query_bias"):
        pt.attention_released_estimator(model, 0, X, query_bias=1)
