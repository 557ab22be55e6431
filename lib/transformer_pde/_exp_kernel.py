r"""Row-shifted exponentials of a block of logits, compiled (Numba) and vectorised.

NumPy's float64 ``exp`` is vectorised only on CPUs with AVX-512; without it, it is a scalar
loop (about 8 ns per value on an AVX2 machine), and softmax attention at small ``d`` spends
most of its time in it. This kernel computes :math:`e^{L_{ij} - \max_k L_{ik}}` in place,
the row maximum included, with a polynomial the compiler vectorises for the machine it runs
on:

* range reduction :math:`x = k\ln 2 + r`, :math:`|r| \le \tfrac12\ln 2`, with :math:`k` the
  nearest integer to :math:`x/\ln 2` (added to :math:`1.5\cdot 2^{52}`, whose last bits then
  hold :math:`k`) and :math:`\ln 2` split in two parts so that :math:`r` is exact to rounding;
* :math:`e^r` by its Taylor polynomial of degree 12 in Estrin's scheme (the remainder
  :math:`(\ln 2/2)^{13}/13! < 2.2\cdot 10^{-17}` relative), then multiplication by
  :math:`2^k`, whose bits are built from those of :math:`k` in the same vectorised loop
  (a bit cast, :func:`_bits_as_double`, which Numba does not offer on scalars);
* :math:`x < -708` (including :math:`-\infty`, masked entries) gives exactly 0: the true
  value is below :math:`3\cdot 10^{-308}` while the row maximum contributes 1.

The row maximum is taken over four interleaved partial maxima, so that the comparisons do
not wait for one another.

Relative error about :math:`4\cdot 10^{-16}` against ``numpy.exp`` (tested). On one core
of the machine of the performance appendix (AVX-512), about 1.0 ns per value with the row
maximum, where NumPy's ``exp`` alone takes 0.8 ns; on an AVX2 machine (Zen 1) it took
4.6 ns. The functions release the GIL, so chunks of a block can run on several threads.
"""

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_LN2_HI = 6.93147180369123816490e-01  # ln 2 to 33 bits: k * _LN2_HI is exact for |k| < 2^20
_LN2_LO = 1.90821492927058770002e-10  # ln 2 - _LN2_HI
_INV_LN2 = 1.44269504088896338700e00
_SHIFT = 6755399441055744.0  # 1.5 * 2^52: adding it rounds to an integer kept in the low bits
_SHIFT_BITS = int(np.array([_SHIFT]).view(np.int64)[0])
_C = tuple(1.0 / math.factorial(k) for k in range(13))
_C2, _C3, _C4, _C5, _C6, _C7, _C8, _C9, _C10, _C11, _C12 = _C[2:]
_UNDERFLOW = -708.0


@intrinsic
def _bits_as_double(typingctx, bits):
    """The float64 whose IEEE-754 bits are the int64 ``bits`` (a bit cast, no conversion)."""
    if isinstance(bits, types.Integer) and bits.bitwidth == 64:
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.DoubleType())
        return types.float64(bits), codegen
    return None


@intrinsic
def _double_bits(typingctx, x):
    """The IEEE-754 bits of the float64 ``x`` as an int64 (a bit cast, no conversion)."""
    if isinstance(x, types.Float) and x.bitwidth == 64:
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.IntType(64))
        return types.int64(x), codegen
    return None


@numba.njit(nogil=True, cache=True, boundscheck=False, error_model="numpy",
            fastmath={"contract"})
def _exp_row(row, shift):
    """In place: ``row[j] <- exp(row[j] - shift)``, one vectorised pass."""
    for j in range(row.size):
        x = row[j] - shift
        xc = max(x, _UNDERFLOW)
        t = xc * _INV_LN2 + _SHIFT  # k in the low bits of t
        kf = t - _SHIFT
        r = (xc - kf * _LN2_HI) - kf * _LN2_LO
        r2 = r * r
        r4 = r2 * r2
        q0 = (1.0 + r) + (_C2 + _C3 * r) * r2
        q1 = (_C4 + _C5 * r) + (_C6 + _C7 * r) * r2
        q2 = (_C8 + _C9 * r) + (_C10 + _C11 * r) * r2
        p = (q0 + q1 * r4) + (q2 + _C12 * r4) * (r4 * r4)
        two_k = _bits_as_double((_double_bits(t) - _SHIFT_BITS + 1023) << 52)
        row[j] = p * two_k if x >= _UNDERFLOW else 0.0


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _row_max(row):
    """Largest entry of ``row``; NaN when the row holds a NaN."""
    m0 = m1 = m2 = m3 = -np.inf
    nan = False
    n = row.size
    j = 0
    while j + 4 <= n:  # four independent chains
        a, b, c, d = row[j], row[j + 1], row[j + 2], row[j + 3]
        nan |= (a != a) | (b != b) | (c != c) | (d != d)
        m0 = max(m0, a)
        m1 = max(m1, b)
        m2 = max(m2, c)
        m3 = max(m3, d)
        j += 4
    for k in range(j, n):
        v = row[k]
        nan |= v != v
        m0 = max(m0, v)
    return np.nan if nan else max(max(m0, m1), max(m2, m3))


@numba.njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def exp_shifted_rows(block, row_max):
    """In place: ``block[i] <- exp(block[i] - max(block[i]))``; ``row_max[i] <- max(block[i])``.

    ``block`` is a C-contiguous float64 array of shape ``(c, m)``. A row whose maximum is NaN,
    ``+inf`` or ``-inf`` is left as it is (the caller raises a clear error for it).
    """
    exp_shifted_rows_summed(block, row_max, np.empty(block.shape[0]))


@numba.njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def exp_shifted_rows_summed(block, row_max, row_sum):
    """:func:`exp_shifted_rows`, and ``row_sum[i] <- sum(block[i])`` after the exponential
    (summed while the row is still in cache; NaN for a row left as it is)."""
    for i in range(block.shape[0]):
        row = block[i]
        mx = _row_max(row)
        row_max[i] = mx
        if math.isfinite(mx):
            _exp_row(row, mx)
            row_sum[i] = _sum(row)
        else:
            row_sum[i] = np.nan


@numba.njit(nogil=True, cache=True, boundscheck=False, fastmath={"contract", "reassoc"})
def _sum(a):
    """Sum, vectorised (reassociated: several partial sums)."""
    acc = 0.0
    for j in range(a.size):
        acc += a[j]
    return acc


@numba.njit(nogil=True, cache=True, boundscheck=False, error_model="numpy",
            fastmath={"contract"})
def fused_rows(queries, keys_t, values_t, logw, causal, row0, row1, out, row_max):
    r"""Softmax averages of rows ``row0..row1-1``, fused: logits, exponential and sums per row.

    ``queries`` (m, k): the query side of the logits (e.g. :math:`A y_i`); ``keys_t`` (k, n):
    the key side, transposed (logit :math:`L_{ij} = \langle q_i, \text{keys\_t}[:, j]\rangle`);
    ``values_t`` (p + 1, n): the values transposed, with a last row of ones; ``logw`` (n,)
    the log-weights or an empty array for uniform weights; with ``causal``, row ``i`` uses
    the columns ``j <= i``. Writes ``out[i] = sum_j e^{L_ij - max} v_j / sum_j e^{L_ij - max}``
    and ``row_max[i]``; a row whose maximum is not finite is skipped (the caller raises).
    For small ``k`` and ``p``, where one row's logits, exponentials and sums stay in cache
    instead of passing through memory as a block.
    """
    k, n = keys_t.shape
    p1 = values_t.shape[0]
    buf = np.empty(n)
    for i in range(row0, row1):
        ncols = min(i + 1, n) if causal else n
        row = buf[:ncols]
        row[:] = 0.0
        for a in range(k):
            q = queries[i, a]
            kt = keys_t[a]
            for j in range(ncols):
                row[j] += q * kt[j]
        if logw.size:
            for j in range(ncols):
                row[j] += logw[j]
        mx = _row_max(row)
        row_max[i] = mx
        if not math.isfinite(mx):
            continue
        _exp_row(row, mx)
        den = _dot(row, values_t[p1 - 1, :ncols])
        for c in range(p1 - 1):
            out[i, c] = _dot(row, values_t[c, :ncols]) / den


@numba.njit(nogil=True, cache=True, boundscheck=False, fastmath={"contract", "reassoc"})
def _dot(a, b):
    """Dot product, vectorised (reassociated: several partial sums)."""
    acc = 0.0
    for j in range(a.size):
        acc += a[j] * b[j]
    return acc
