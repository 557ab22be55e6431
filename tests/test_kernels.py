"""The compiled exponential and the fused softmax rows against NumPy references."""

import numpy as np
import pytest
from transformer_pde import attention
from transformer_pde._kernels import exp_shifted_rows, exp_shifted_rows_summed, fused_rows


def test_exp_shifted_rows_matches_numpy_to_a_few_ulp():
    rng = np.random.default_rng(0)
    L = rng.normal(scale=50.0, size=(64, 1001))
    L[0, :5] = [0.0, -707.9, -708.1, -np.inf, 3.0]
    ref = np.exp(L - L.max(axis=1, keepdims=True))
    ref[ref < np.exp(-708.0)] = 0.0  # the kernel's documented cut below e^-708
    out, mx = L.copy(), np.empty(64)
    exp_shifted_rows(out, mx)
    np.testing.assert_array_equal(mx, L.max(axis=1))
    big = ref > 0
    # a few units in the last place: range reduction, degree-12 polynomial, one product
    assert np.max(np.abs(out[big] - ref[big]) / ref[big]) < 1e-15
    np.testing.assert_array_equal(out[~big], 0.0)


def test_exp_shifted_rows_marks_rows_without_a_finite_maximum():
    L = np.array([[1.0, np.nan, 0.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, 1.0]])
    mx = np.empty(3)
    exp_shifted_rows(L.copy(), mx)
    assert np.isnan(mx[0]) and mx[1] == -np.inf and mx[2] == np.inf


def test_exp_shifted_rows_summed_gives_the_same_exponentials_and_their_row_sums():
    rng = np.random.default_rng(1)
    L = rng.normal(scale=20.0, size=(37, 1003))  # odd lengths: vector body and tail
    L[5] = np.nan
    L[6] = -np.inf
    plain, mx = L.copy(), np.empty(37)
    exp_shifted_rows(plain, mx)
    summed, mx2, sums = L.copy(), np.empty(37), np.empty(37)
    exp_shifted_rows_summed(summed, mx2, sums)
    np.testing.assert_array_equal(summed, plain)
    np.testing.assert_array_equal(mx2, mx)
    ok = np.isfinite(mx)
    # reassociated sums of positive terms: a few units in the last place of each sum
    np.testing.assert_allclose(sums[ok], plain[ok].sum(axis=1), rtol=1e-14)
    assert np.all(sums[ok] >= 1.0)  # the row maximum contributes exactly 1
    assert np.all(np.isnan(sums[~ok]))


@pytest.mark.parametrize("where", range(11))
def test_row_max_sees_a_nan_in_every_position(where):
    # the maximum runs over four interleaved partial maxima and a tail: a NaN in any lane
    # of any of them makes the row's maximum NaN
    L = np.linspace(-1.0, 1.0, 11)[None, :].copy()
    L[0, where] = np.nan
    mx = np.empty(1)
    exp_shifted_rows(L, mx)
    assert np.isnan(mx[0])
    mx_clean = np.empty(1)
    exp_shifted_rows(np.linspace(-1.0, 1.0, 11)[None, :].copy(), mx_clean)
    assert mx_clean[0] == 1.0


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_fused_rows_match_the_chunked_path(causal, weighted):
    # the fused pass (default chunk_size, small d) against the blocked matrix-product path
    # (an explicit chunk_size): the same sums in another order, so equal to rounding
    rng = np.random.default_rng(1)
    n, d = 300, 3
    X = rng.normal(size=(n, d))
    A, V = rng.normal(size=(d, d)), rng.normal(size=(2, d))
    w = rng.random(n) if weighted else None
    w = None if w is None else w / w.sum()
    fused = attention.softmax(X, A, V, weights=w, causal=causal)
    chunked = attention.softmax(X, A, V, weights=w, causal=causal, chunk_size=64)
    np.testing.assert_allclose(fused, chunked, rtol=0, atol=1e-13 * np.abs(chunked).max())
    Q, K = rng.normal(size=(2, d)), rng.normal(size=(2, d))
    np.testing.assert_allclose(attention.l2(X, Q, K, V, weights=w, causal=causal),
                               attention.l2(X, Q, K, V, weights=w, causal=causal,
                                            chunk_size=64), rtol=0, atol=1e-12)


def test_fused_rows_direct_call_on_one_row():
    q = np.array([[0.5, -1.0]])
    keys_t = np.array([[1.0, 2.0, -1.0], [0.0, 1.0, 3.0]])
    values_t = np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])  # one value coordinate, ones
    out, mx = np.empty((1, 1)), np.empty(1)
    logits = q @ keys_t
    p = np.exp(logits - logits.max())
    for tile in (1, 2, 3, 64):  # one column per tile, two tiles, one
        fused_rows(q, keys_t, values_t, np.empty(0), False, 0, 1, out, mx, tile)
        assert out[0, 0] == pytest.approx((p @ values_t[0]) / p.sum(), rel=1e-15)
        assert mx[0] == logits.max()


@pytest.mark.parametrize("causal", [False, True])
def test_fused_rows_in_tiles_match_one_tile(causal):
    # the online softmax over tiles: the running maximum rises in a later tile (rows whose
    # largest logit is at the end), the first tiles are masked by zero weights (log-weight
    # -inf), and rows with a NaN or an infinite logit in any tile are marked for the caller
    rng = np.random.default_rng(3)
    m, n, k, p = 120, 333, 3, 2
    queries = rng.normal(size=(m, k))
    keys_t = np.ascontiguousarray(rng.normal(size=(k, n)) * np.linspace(0.1, 3.0, n))
    values_t = np.vstack([rng.normal(size=(p, n)), np.ones(n)])
    logw = np.log(rng.random(n))
    logw[:70] = -np.inf
    queries[75, 0] = np.nan
    queries[76] = 1e308  # logits +-inf (or NaN)
    outs = {}
    for tile in (7, 64, 100, n):
        out, mx = np.full((m, p), -1.0), np.empty(m)
        fused_rows(queries, keys_t, values_t, logw, causal, 0, m, out, mx, tile)
        outs[tile] = out, mx
    one_tile, mx_one = outs[n]
    ok = np.isfinite(mx_one)
    assert np.isnan(mx_one[75]) and not ok[76] and ok.sum() == (48 if causal else 118)
    if causal:  # the first 70 queries see only tokens of zero weight
        assert np.all(mx_one[:70] == -np.inf)
    for out, mx in outs.values():
        np.testing.assert_array_equal(mx[ok], mx_one[ok])
        assert np.all(~np.isfinite(mx[~ok]))
        np.testing.assert_allclose(out[ok], one_tile[ok], rtol=1e-14, atol=1e-15)
    # against NumPy on the rows that have one
    with np.errstate(over="ignore", invalid="ignore"):
        L = queries @ keys_t + logw
    for i in np.flatnonzero(ok):
        cols = slice(0, i + 1) if causal else slice(0, n)
        e = np.exp(L[i, cols] - L[i, cols].max())
        np.testing.assert_allclose(one_tile[i], values_t[:p, cols] @ e / e.sum(), rtol=1e-13)


def test_fused_path_errors_are_clear():
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="zero weight"):
        attention.softmax(X, np.eye(2), np.eye(2), weights=[0.0, 1.0], causal=True)
    with pytest.raises(ValueError, match="overflow"):
        attention.softmax(1e200 * X, np.eye(2), np.eye(2))
