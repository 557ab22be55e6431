r"""Kernels of softmax attention: the compiled exponential, fused rows, chunks and threads.

This module holds the machinery behind :mod:`.attention` and :mod:`.lipschitz`; the formulas
live there.

**The exponential.** NumPy's float64 ``exp`` is vectorised only on CPUs with AVX-512;
without it, it is a scalar loop (about 8 ns per value on an AVX2 machine), and softmax
attention at small ``d`` spends most of its time in it. :func:`exp_shifted_rows` computes
:math:`e^{L_{ij} - \max_k L_{ik}}` in place, the row maximum included, with a polynomial
the compiler vectorises for the machine it runs on:

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
not wait for one another. Relative error about :math:`4\cdot 10^{-16}` against ``numpy.exp``
(tested). The compiled functions release the GIL, so blocks of rows run on several threads.

**Threads** (:func:`thread_count`): as many as the CPUs the calling thread may run on
(``os.sched_getaffinity``), lowered by the limit of NumPy's BLAS in force, which follows the
standard variables (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``) and
:func:`threadpoolctl.threadpool_limits`. So ``with threadpool_limits(1): ...`` runs a call
on one thread, and ``taskset -c 0,1`` on two. Matrix products use the BLAS threads, except
where a measurement showed the library's own threads (a pool without CPU pinning,
:func:`on_threads`) do better: the compiled rows of small dimension (:func:`_fused_average`),
and, with enough work, whole chunks of queries, each with its logits, exponentials and
products on one thread (:class:`Plan`); the measurements are in their docstrings.
"""

import contextvars
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic
from threadpoolctl import ThreadpoolController

from . import _checks

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


# --------------------------------------------------------------------------------------
# threads
# --------------------------------------------------------------------------------------

_blas = None
_pool = None
_pool_size = 0
_pool_lock = threading.Lock()


def _blas_libraries():
    """NumPy's BLAS libraries, through :mod:`threadpoolctl` (looked up once)."""
    global _blas
    if _blas is None:
        _blas = ThreadpoolController().select(user_api="blas")
    return _blas


def thread_count():
    r"""Threads one call may use: :math:`\min(\#\text{CPUs}, \text{BLAS threads})`.

    ``#CPUs`` is the number of CPUs the calling thread may run on
    (``len(os.sched_getaffinity(0))``; ``os.cpu_count()`` where the platform has no affinity
    interface); the BLAS limit is the number of threads NumPy's BLAS uses now, which follows
    ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS`` and
    :func:`threadpoolctl.threadpool_limits`. No constant caps it: on a machine with 16 CPUs
    and default settings, a call uses 16 threads.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    limits = [lib["num_threads"] for lib in _blas_libraries().info()]
    return max(1, min([cpus, *limits]))


def _get_pool(workers):
    """The library's thread pool, with at least ``workers`` threads (grown when a call needs
    more). No CPU pinning: the system schedules the threads."""
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < workers:
            old = _pool
            _pool = ThreadPoolExecutor(workers, thread_name_prefix="transformer_pde")
            _pool_size = workers
            if old is not None:
                old.shutdown(wait=False)  # its queued tasks still run
        return _pool


def on_threads(fn, parts):
    """``[fn(part) for part in parts]``, the first part on the calling thread and the others
    on the pool, each in a copy of the caller's context (so that ``np.errstate`` applies
    there too); waits for every part, then re-raises the first error."""
    if len(parts) == 1:
        return [fn(parts[0])]
    pool = _get_pool(len(parts) - 1)
    futures = [pool.submit(contextvars.copy_context().run, fn, part) for part in parts[1:]]
    try:
        first = fn(parts[0])
    finally:
        for f in futures:
            f.exception()  # wait: the other parts write into the caller's arrays
    return [first] + [f.result() for f in futures]


# --------------------------------------------------------------------------------------
# chunks
# --------------------------------------------------------------------------------------

#: Default number of float64 entries of one ``(chunk, n)`` block of logits (2 MiB): a block
#: stays in cache while it is shifted, exponentiated and multiplied. Chunks have at least
#: ``min(256, 2 k)`` rows for logits of inner dimension ``k`` (efficient matrix products at
#: large ``k``) and at least 8; at n = 10^5 and d = 2 a block is then at most 6.4 MB.
DEFAULT_BLOCK_ELEMENTS = 2**18

_MIN_CHUNK_ROWS = 8
_MAX_GEMM_ROWS = 256

#: For many tokens, chunks of logits of inner dimension above :data:`_SMALL_INNER` have at
#: least ``min(n // _TOKENS_PER_ROW, _LARGE_BLOCK_ELEMENTS // n)`` rows: each matrix product
#: of a chunk first copies (packs) its ``n x inner`` factor, a cost that only more rows
#: amortise (at n = 16000, d = 64: 500 rows instead of 128 took 10 % less time).
_TOKENS_PER_ROW = 32
_LARGE_BLOCK_ELEMENTS = 2**23

#: Logits of inner dimension up to this are bound by the exponential, not by the products.
_SMALL_INNER = 16

#: Logits of inner dimension up to this, with values of dimension up to
#: ``_FUSED_MAX_VALUES``, go through one compiled pass per query row (logits, exponential and
#: sums in cache, :func:`fused_rows`) instead of blocks of logits and matrix products, when
#: ``chunk_size`` is not given.
_FUSED_MAX_INNER = 16
_FUSED_MAX_VALUES = 16

#: Rows of one task of the fused path (tasks taken in turn by the threads).
_FUSED_BLOCK_ROWS = 32

#: Concurrent chunks (see :func:`normalised_average`) need at least this many tokens per
#: dimension of the logits and at least ``_CONCURRENT_MIN_WORK`` multiply-adds in the
#: logits' products (``n = 1000`` queries and tokens at ``inner = 34``): below, handing
#: chunks to threads costs more than it saves (calls of 1 to 3 ms).
_CONCURRENT_MIN_TOKENS_PER_INNER = 2
_CONCURRENT_MIN_WORK = 2**25


def default_rows(n, inner):
    """Queries per chunk against ``n`` tokens for logits of inner dimension ``inner``."""
    rows = max(_MIN_CHUNK_ROWS, DEFAULT_BLOCK_ELEMENTS // max(n, 1),
               min(_MAX_GEMM_ROWS, 2 * inner))
    if inner > _SMALL_INNER:
        rows = max(rows, min(n // _TOKENS_PER_ROW, _LARGE_BLOCK_ELEMENTS // max(n, 1)))
    return rows


def chunk_bounds(m, n, chunk_size, inner=0):
    """Row ranges ``[start, stop)`` covering ``m`` queries against ``n`` tokens, of
    ``chunk_size`` rows (default :func:`default_rows`)."""
    if chunk_size is None:
        chunk_size = default_rows(n, inner)
    else:
        chunk_size = _checks.positive_int(chunk_size, "chunk_size")
    return [(start, min(start + chunk_size, m)) for start in range(0, m, chunk_size)]


def _even_bounds(m, n, inner, threads):
    """Chunks of equal sizes (about :func:`default_rows`), in a number that is a multiple of
    ``threads``, so that each thread gets the same work."""
    count = -(-m // default_rows(n, inner))
    count = -(-count // threads) * threads
    edges = [m * k // count for k in range(count + 1)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


class Plan:
    r"""How one call computes softmax averages of ``m`` queries against ``n`` tokens.

    ``inner`` is the inner dimension of the logits' product, ``p`` that of the values.
    Three ways, chosen here:

    * **fused** (``inner <= 16``, ``p <= 16``, ``chunk_size`` not given): one compiled pass
      per query row (:func:`fused_rows`), blocks of rows shared between
      :func:`thread_count` threads;
    * **concurrent chunks** (several threads, ``n >= 2 inner`` and at least
      :data:`_CONCURRENT_MIN_WORK` multiply-adds): each thread computes the logits,
      exponentials and products of its chunks, with NumPy's BLAS held on the calling thread
      for the duration of the call (the projections of the tokens then run in blocks of
      rows on the threads too);
    * **chunks in turn**, the products on BLAS's threads.

    Used as a context manager around the whole call (it holds BLAS for concurrent chunks).

    Why concurrent chunks on the library's threads, and not the chunks in turn with the
    products on BLAS's threads (the standard tool): each chunk's exponential then runs on
    its own thread too, and no BLAS thread spins while another thread computes.
    Measured on 2026-11-26 on the 2-CPU AMD EPYC machine of the performance appendix, each
    way in its own process, the machine otherwise quiet (min / median of 30, 8, 15 and 4
    calls): concurrent against in turn, n = 1000, d = 64: 3.75 / 3.80 against 4.22 /
    4.28 ms; n = 4000, d = 64: 58.6 / 59.1 against 67.6 / 71.2 ms; n = 1000, d = 384:
    25.6 / 25.9 against 27.8 / 28.6 ms; n = 4000, d = 384: 284 / 284 against 301 / 304 ms.
    With the machine shared with other work (load average 5.4; the two ways interleaved in
    one process) the gap was far wider (at
    n = 4000, d = 384: 745 / 1214 against 3048 / 3578 ms): BLAS threads that wait for
    each other suffer most when a core is taken away.
    """

    def __init__(self, m, n, inner, p, chunk_size):
        if chunk_size is not None:
            chunk_size = _checks.positive_int(chunk_size, "chunk_size")
        self.m, self.n, self.inner, self.p, self.chunk_size = m, n, inner, p, chunk_size
        self.threads = thread_count()
        self.fused = (chunk_size is None and inner <= _FUSED_MAX_INNER
                      and p <= _FUSED_MAX_VALUES)
        self.concurrent = (self.threads > 1 and not self.fused and chunk_size is None
                           and m >= 2 and n >= _CONCURRENT_MIN_TOKENS_PER_INNER * inner
                           and m * n * inner >= _CONCURRENT_MIN_WORK
                           and len(_even_bounds(m, n, inner, self.threads)) > 1)
        self._limiter = None

    def bounds(self):
        """The chunks ``[start, stop)`` of the queries (for concurrent chunks, in a number
        that is a multiple of the threads)."""
        if self.concurrent:
            return _even_bounds(self.m, self.n, self.inner, self.threads)
        return chunk_bounds(self.m, self.n, self.chunk_size, self.inner)

    def __enter__(self):
        r"""With concurrent chunks, NumPy's BLAS runs every product on the thread that calls
        it (:mod:`threadpoolctl`), so that each thread keeps one core. Entered before the
        projections of the tokens too: a BLAS product on its own threads leaves them spinning
        for a while after it returns (OpenBLAS: up to :math:`2^{28}` cycles), and they would
        take the cores from the chunks. The setting is process-wide for the duration of the
        call."""
        if self.concurrent:
            self._limiter = _blas_libraries().limit(limits=1)
        return self

    def __exit__(self, *exc):
        if self._limiter is not None:
            self._limiter.restore_original_limits()
            self._limiter = None
        return False

    def product(self, M, W_T):
        """``M @ W_T`` in float64; with concurrent chunks, in blocks of rows, one per
        thread (BLAS being held on each)."""
        m = M.shape[0]
        out = np.empty((m, W_T.shape[1]))
        if not self.concurrent or m < 2 * self.threads:
            return np.matmul(M, W_T, out=out)
        edges = [m * k // self.threads for k in range(self.threads + 1)]

        def part(k):
            np.matmul(M[edges[k]:edges[k + 1]], W_T, out=out[edges[k]:edges[k + 1]])

        on_threads(part, list(range(self.threads)))
        return out

    def average(self, logit_block, values, logw, causal):
        r"""Rows :math:`\sum_j P_{ij} v_j` with :math:`P_{ij} \propto w_j e^{L_{ij}}`.

        ``logit_block(start, stop, ncols, out)`` writes the logits of queries
        ``start..stop-1`` against tokens ``0..ncols-1`` into ``out`` (C-contiguous); its
        attribute ``factors`` holds ``(queries, keys_t)`` with ``L = queries @ keys_t``,
        for the fused path. ``logw``: log-weights or ``None`` (uniform).
        """
        out = np.empty((self.m, values.shape[1]))
        if self.fused:
            return _fused_average(*logit_block.factors, values, logw, causal, out,
                                  self.threads)
        bounds = self.bounds()
        rows = max(stop - start for start, stop in bounds)

        def chunks(part):
            _chunks_average(logit_block, values, logw, causal, part, rows, out)

        if self.concurrent:  # one task per thread
            on_threads(chunks, [bounds[k::self.threads] for k in range(self.threads)])
        else:
            chunks(bounds)
        return out


def _chunks_average(logit_block, values, logw, causal, bounds, rows, out):
    """The chunks ``bounds`` of :meth:`Plan.average`, in turn: one buffer of logits, filled
    chunk after chunk, exponentiated in place with the row sums taken while each row is in
    cache, multiplied by ``values`` straight into ``out`` and divided by the sums."""
    n = values.shape[0]
    buffer = np.empty(rows * n)
    row_max = np.empty(rows)
    row_sum = np.empty(rows)
    for start, stop in bounds:
        c = stop - start
        ncols = min(stop, n) if causal else n
        logits = buffer[:c * ncols].reshape(c, ncols)  # C-contiguous
        logit_block(start, stop, ncols, logits)
        masked_logits(logits, logw, start, causal)
        exp_shifted_rows_summed(logits, row_max[:c], row_sum[:c])
        check_row_max(row_max[:c], start)
        np.matmul(logits, values[:ncols], out=out[start:stop])
        out[start:stop] /= row_sum[:c, None]


def _fused_average(queries, keys_t, values, logw, causal, out, threads):
    """:meth:`Plan.average` by :func:`fused_rows`, blocks of 32 rows taken in turn by the
    threads (causal rows grow with ``i``, so the blocks are interleaved).

    Why the library's pool and not Numba's ``prange`` (measured on 2026-11-26 on the 2-CPU
    AMD EPYC machine of the performance appendix, d = 2, the machine otherwise quiet):
    interleaved in one process (min / median of 40, 15 and 5 calls at n = 1000, 4000 and
    16000), the pool took 0.95 / 1.87, 26.3 / 28.5 and 278 / 281 ms, ``prange`` with the
    OpenMP threading layer 0.91 / 1.00, 22.0 / 28.9 and 272 / 279 ms (one thread: 1.66 /
    1.70, 28.4 / 31.9 and 455 / 455 ms): the same speed. But OpenMP's idle threads keep
    spinning after a call: at n = 4000 they burnt a median 11.2 ms of CPU time in the 100 ms
    that followed (the pool: 0.1 ms), and a BLAS product run right after took a median 6.0,
    7.9 and 6.6 ms after ``prange`` against 3.3, 4.2 and 4.3 ms after the pool. The
    workqueue layer does not spin, but it terminated the process when two threads of the
    caller entered it at once ("Nested parallel kernel launch detected"), as a joblib sweep
    with the threading backend does; TBB is not always installed. The pool (no CPU pinning,
    the calling thread taking the first share of the blocks) has neither problem.
    """
    m, n = queries.shape[0], values.shape[0]
    keys_t = np.ascontiguousarray(keys_t, dtype=np.float64)
    values_t = np.ascontiguousarray(np.hstack([values, np.ones((n, 1))]).T)
    lw = np.empty(0) if logw is None else np.ascontiguousarray(logw, dtype=np.float64)
    queries = np.ascontiguousarray(queries, dtype=np.float64)
    row_max = np.empty(m)
    blocks = [(s, min(s + _FUSED_BLOCK_ROWS, m)) for s in range(0, m, _FUSED_BLOCK_ROWS)]
    threads = min(threads, len(blocks))

    def rows(part):
        for start, stop in part:
            fused_rows(queries, keys_t, values_t, lw, causal, start, stop, out, row_max)

    on_threads(rows, [blocks[k::threads] for k in range(threads)])
    check_row_max(row_max, 0)
    return out


# --------------------------------------------------------------------------------------
# logits, masks and the dense attention matrix
# --------------------------------------------------------------------------------------

def masked_logits(logits, logw, start, causal):
    """Add log-weights, and ``-inf`` on the masked entries ``j > i`` when causal (in place).

    ``logits`` has shape ``(stop - start, ncols)``: rows are queries ``start..stop-1`` and,
    when causal, only the columns ``j < stop`` were computed.
    """
    c, ncols = logits.shape
    if logw is not None:
        logits += logw[:ncols]
    if causal:
        rows = np.arange(start, start + c)[:, None]
        cols = np.arange(ncols)[None, :]
        logits[cols > rows] = -np.inf
    return logits


def check_row_max(row_max, start):
    """Clear errors for rows whose largest logit is not finite."""
    if not np.all(np.isfinite(row_max)):
        i = int(np.flatnonzero(~np.isfinite(row_max))[0])
        if np.isnan(row_max[i]) or row_max[i] > 0:
            raise ValueError(f"X: the logits of query {start + i} overflow float64; the tokens "
                             "or the parameter matrices are too large for attention to be "
                             "computed")
        raise ValueError(f"weights: query {start + i} attends only to tokens of zero weight, "
                         "so its attention is undefined")


def row_softmax(logits, start):
    """Row-wise normalised exponentials in place (each row sums to one), with a clear error
    on a row without mass."""
    if not (logits.flags.c_contiguous and logits.dtype == np.float64):
        logits = np.ascontiguousarray(logits, dtype=np.float64)
    row_max = np.empty(logits.shape[0])
    exp_shifted_rows(logits, row_max)
    check_row_max(row_max, start)
    logits /= logits.sum(axis=1, keepdims=True)
    return logits


def dense_matrix(logit_block, logw, m, n, causal):
    """The full ``(m, n)`` row-stochastic attention matrix (dense, O(mn) memory)."""
    logits = logit_block(0, m, n, np.empty((m, n)))
    return row_softmax(masked_logits(logits, logw, 0, causal), 0)


def log_weights(weights, w):
    """``log w``, or ``None`` for uniform weights (a constant shift of the logits cancels)."""
    if weights is None:
        return None
    with np.errstate(divide="ignore"):
        return np.log(w)


def softmax_matrix_of_factors(QY, KX, weights, causal):
    r"""The softmax attention matrix with logits :math:`\langle Q y_i, K x_j\rangle`, from the
    projected queries ``QY`` (m, k) and keys ``KX`` (n, k), without forming
    :math:`A = K^\top Q` (shared by :mod:`.attention` and :mod:`.lipschitz`)."""
    n = KX.shape[0]
    logw = log_weights(weights, _checks.weights(weights, n))

    def block(start, stop, ncols, out=None):
        return np.matmul(QY[start:stop], KX[:ncols].T, out=out)

    return dense_matrix(block, logw, QY.shape[0], n, causal)
