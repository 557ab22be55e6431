r"""Velocity fields :math:`\Gamma_\mu` of the attention variants.

A sequence of tokens is a weighted empirical measure :math:`\mu = \sum_j w_j \delta_{x_j}`:
an array ``X`` of shape ``(n, d)`` (tokens are rows) and optional ``weights`` of shape
``(n,)`` (default uniform, non-negative, summing to one). Every function returns the
velocity field evaluated at the tokens themselves (row ``i`` is :math:`\Gamma_\mu(x_i)`,
i.e. self-attention :math:`f(X)_i`) or, with ``queries=Y`` of shape ``(m, d)``, at other
points of :math:`\mathbb{R}^d`.

``causal=True`` is masked attention :math:`f^m(X)_i = f(x_1, \dots, x_i)_i`: query ``i``
attends to the tokens ``j <= i`` only, through the restriction of :math:`\mu` to them,
renormalised (for uniform weights, the uniform measure on the first ``i`` tokens).

Numerics: logits go through log-sum-exp (finite and correct at logits of size :math:`10^4`
and beyond), Sinkhorn runs in the log domain, and queries are processed in chunks so that
memory stays :math:`O(\text{chunk} \times n)` instead of :math:`O(n^2)`.
Exponentials are computed by a compiled, vectorised kernel (:mod:`._exp_kernel`); for
logits and values of small dimension (at most 16) each query row is one fused pass (logits,
exponentials and sums in cache) on all cores. Otherwise, with at least 2 tokens per
dimension of the logits and enough work (see :data:`_CONCURRENT_MIN_TOKENS_PER_INNER`),
chunks of queries run concurrently, one per core, with NumPy's BLAS held on the calling
thread for the duration of the call (``threadpoolctl``); with fewer, the matrix products use
the BLAS threads, chunk after chunk. The pool's workers are bound one to each core when the
process may use exactly two (see :func:`_worker_cpus`). Work arrays of up to 4 MiB are kept
by each thread between calls (see :func:`_scratch`).

References: Vaswani et al. (2017) for softmax attention, Kim et al. (2021) for L2 attention,
Sander et al. (2022) for Sinkhorn attention, Ramapuram et al. (2025) for sigmoid attention;
the measure-theoretic formulation follows Castin, Ablin, Carrillo and Peyré (2025).
"""

import contextlib
import contextvars
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.special import expit
from threadpoolctl import ThreadpoolController

from . import _checks
from ._exp_kernel import exp_shifted_rows, exp_shifted_rows_summed, fused_rows

__all__ = [
    "softmax",
    "softmax_matrix",
    "l2",
    "l2_matrix",
    "sinkhorn",
    "sinkhorn_kernel",
    "sigmoid",
    "multihead",
    "DEFAULT_BLOCK_ELEMENTS",
]

#: Default number of float64 entries of one ``(chunk, n)`` block of logits (2 MiB): a block
#: stays in cache while it is shifted, exponentiated and multiplied. Chunks have at least
#: ``min(256, 2 k)`` rows for logits of inner dimension ``k`` (efficient matrix products at
#: large ``k``) and at least 8 (fewer in the concurrent chunks below); at n = 10^5 and d = 2
#: a block is then at most 6.4 MB.
DEFAULT_BLOCK_ELEMENTS = 2**18

_MIN_CHUNK_ROWS = 8
_MAX_GEMM_ROWS = 256

#: For many tokens, chunks of logits of inner dimension above :data:`_SMALL_INNER` have at
#: least ``min(n // _TOKENS_PER_ROW, _LARGE_BLOCK_ELEMENTS // n)`` rows: each matrix product
#: of a chunk first copies (packs) its ``n x inner`` factor, a cost that only more rows
#: amortise. Measured at n = 16000, d = 64 (chunks in parallel): 500 rows instead of 128
#: take 10 % less time; at n = 4000, larger chunks than the default were slower.
_TOKENS_PER_ROW = 32
_LARGE_BLOCK_ELEMENTS = 2**23

#: Logits of inner dimension up to this are bound by the exponential, not by the matrix
#: products: their chunks have at most ``_SINGLE_THREAD_PRODUCT // (n * max(inner, p + 1))``
#: rows (many small chunks, evenly shared between the cores).
_SMALL_INNER = 16
_SINGLE_THREAD_PRODUCT = 2**17

#: Chunks run concurrently, one per core with its own products and exponentials, when there
#: are at least this many tokens per dimension of the logits (``n >= 2 inner``) and the
#: logits' products have at least :data:`_CONCURRENT_MIN_WORK` multiply-adds; the
#: projections of the tokens then run on the cores too, in blocks of rows. Otherwise the
#: chunks run in turn with the products on all cores. Measured on the machine of the
#: performance appendix, with the pool's workers bound to the cores (see
#: :func:`_worker_cpus`), against chunks in turn (min / median of 12 to 15 interleaved
#: runs): 2-9 % / 7-30 % faster at n = 1000 and d = 64, 192 and 384, at n = 800, d = 384
#: and at n = 2000 and 4000, d = 384; slower by 9-20 % in the minimum, though faster in the
#: median, at n = 300 and 500, d = 64 and n = 200, d = 384 (calls of 1 to 3 ms, where
#: handing chunks to the pool costs more than it saves).
_CONCURRENT_MIN_TOKENS_PER_INNER = 2

#: Smallest ``m n inner`` (multiply-adds of the logits of ``m`` queries against ``n``
#: tokens) for concurrent chunks: ``n = 1000`` queries and tokens at ``inner = 34``.
_CONCURRENT_MIN_WORK = 2**25

#: Logits of inner dimension up to this, with values of dimension up to
#: ``_FUSED_MAX_VALUES``, go through one compiled pass per query row (logits, exponential and
#: sums in cache) instead of blocks of logits and matrix products, when ``chunk_size`` is not
#: given.
_FUSED_MAX_INNER = 16
_FUSED_MAX_VALUES = 16

_THREADS = max(1, min(2, os.cpu_count() or 1))
_pool = None


def _caller_cpus():
    """The CPUs the calling thread may run on (threads it starts inherit them), sorted, or
    ``None`` on a platform without an affinity interface."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _worker_cpus():
    """The CPUs the pool's workers are bound to, one each: those the thread creating the pool
    may run on (:func:`_caller_cpus`), when they are exactly as many as the workers;
    otherwise ``None`` (workers unbound).

    Unbound, the scheduler often wakes both workers on the CPU of the thread that submits
    their tasks and moves one of them to the idle CPU only milliseconds later: on the machine
    of the performance appendix (2 cores), a call at ``n = 1000``, ``d = 64`` took 4.4 to
    10 ms (chunk tasks sharing a core for up to 2 ms), and 4.4 to 5.4 ms with bound workers.
    When the process has more CPUs than workers, binding could tie several processes to the
    same cores, so the workers are left to the scheduler."""
    cpus = _caller_cpus()
    return cpus if cpus is not None and len(cpus) == _THREADS else None


def _pool_pays():
    """Whether work can be shared with the pool: more than one worker, and a calling thread
    that may use more than one CPU. A thread bound to one CPU (by ``taskset``, or by OpenMP
    with ``OMP_PROC_BIND`` for the thread that started it, as PyTorch does when that
    variable is set) keeps its work to itself: workers started from it would share its CPU
    (measured: twice as slow)."""
    if _THREADS < 2:
        return False
    cpus = _caller_cpus()
    return (os.cpu_count() or 1) > 1 if cpus is None else len(cpus) > 1


def _bind_worker(cpus, counter):
    """Pool initialiser: bind the new worker to the next CPU of ``cpus`` (best effort: a
    refusal by the system leaves it unbound)."""
    try:
        os.sched_setaffinity(0, {cpus[next(counter) % len(cpus)]})
    except OSError:
        pass


def _get_pool():
    global _pool
    if _pool is None:
        cpus = _worker_cpus()
        if cpus is None:
            _pool = ThreadPoolExecutor(_THREADS)
        else:
            _pool = ThreadPoolExecutor(_THREADS, initializer=_bind_worker,
                                       initargs=(cpus, itertools.count()))
    return _pool


_blas = None


def _chunks_on_cores(m, n, inner, p, chunk_size):
    """Whether the chunks of ``m`` queries against ``n`` tokens run concurrently, one per
    core (see :func:`_normalised_average`): not the fused path, a pool that pays
    (:func:`_pool_pays`), more than one chunk,
    at least :data:`_CONCURRENT_MIN_TOKENS_PER_INNER` tokens per dimension ``inner`` of the
    logits, and at least :data:`_CONCURRENT_MIN_WORK` multiply-adds in them."""
    if (not _pool_pays() or m < 2 or _fused(inner, p, chunk_size)
            or n < _CONCURRENT_MIN_TOKENS_PER_INNER * inner
            or m * n * inner < _CONCURRENT_MIN_WORK):
        return False
    return len(_bounds(m, n, chunk_size, inner, p, True)) > 1


def _blas_on_calling_thread(active):
    """While ``active``: NumPy's BLAS runs every product on the thread that calls it
    (``threadpoolctl``), so that concurrent chunks each keep one core. Entered before the
    projections of the tokens too: a BLAS product on its own threads leaves them spinning
    for a while after it returns (OpenBLAS: up to :math:`2^{28}` cycles), and they would
    take the cores from the chunks. The setting is process-wide for the duration of the
    call (another thread's products run on one core meanwhile)."""
    global _blas
    if not active:
        return contextlib.nullcontext()
    if _blas is None:
        _blas = ThreadpoolController().select(user_api="blas")
    return _blas.limit(limits=1)


#: Largest scratch array (float64 entries, 4 MiB) that a thread keeps for its next call,
#: for each use (see :func:`_scratch`).
_SCRATCH_KEEP = 2**19
_scratch_arrays = threading.local()


def _scratch(use, shape):
    """A float64 array of ``shape`` for use within one call (never returned to the caller),
    kept by this thread for its next call with the same ``use`` when it has at most
    :data:`_SCRATCH_KEEP` entries. Memory the process has not touched yet costs a page fault
    per 4 KiB page when first written (about 1.5 microseconds each on the machine of the
    performance appendix), which is a fifth of a call at ``n = 1000``, ``d = 384``; memory
    freed by one call is often returned to the system before the next."""
    size = int(np.prod(shape))
    kept = getattr(_scratch_arrays, use, None)
    if kept is not None and kept.size >= size:
        return kept[:size].reshape(shape)
    array = np.empty(size)
    if size <= _SCRATCH_KEEP:
        setattr(_scratch_arrays, use, array)
    return array.reshape(shape)


def _product(M, W_T, concurrent, use=None):
    """``M @ W_T`` (float64, in the scratch array ``use`` if given); with ``concurrent``
    (BLAS held on the calling thread, see :func:`_blas_on_calling_thread`), in blocks of
    rows, one per core."""
    m = M.shape[0]
    shape = (m, W_T.shape[1])
    out = np.empty(shape) if use is None else _scratch(use, shape)
    if not concurrent or m < 2 * _THREADS:
        return np.matmul(M, W_T, out=out)
    edges = [m * k // _THREADS for k in range(_THREADS + 1)]

    def part(k):
        np.matmul(M[edges[k]:edges[k + 1]], W_T, out=out[edges[k]:edges[k + 1]])

    _on_threads(part, range(_THREADS))
    return out


def _on_threads(fn, parts):
    """``fn(part)`` for every part on the thread pool, each in a copy of the caller's context
    (so that ``np.errstate`` applies there too); re-raises the first error."""
    pool = _get_pool()
    futures = [pool.submit(contextvars.copy_context().run, fn, part) for part in parts]
    return [f.result() for f in futures]


# --------------------------------------------------------------------------------------
# shared machinery
# --------------------------------------------------------------------------------------

def _setup(X, weights, queries, causal):
    """Validate the measure and the query points; return ``(X, w, Y, logw)``.

    ``logw`` is ``None`` for uniform weights (a constant shift of the logits cancels).
    """
    X = _checks.points(X, "X")
    n, d = X.shape
    w = _checks.weights(weights, n)
    if queries is None:
        Y = X
    else:
        Y = _checks.points(queries, "queries")
        if Y.shape[1] != d:
            raise ValueError(f"queries must have d = {d} columns like X, got shape {Y.shape}")
        if causal and Y.shape[0] != n:
            raise ValueError("with causal=True, queries must have one row per token "
                             f"(query i attends to tokens j <= i), got {Y.shape[0]} rows "
                             f"for {n} tokens")
    return X, w, Y, _log_weights(weights, w)


def _log_weights(weights, w):
    if weights is None:
        return None
    with np.errstate(divide="ignore"):
        return np.log(w)


def _default_rows(n, inner):
    """Queries per chunk against ``n`` tokens for logits of inner dimension ``inner`` (see
    :data:`DEFAULT_BLOCK_ELEMENTS` and :data:`_TOKENS_PER_ROW`)."""
    rows = max(_MIN_CHUNK_ROWS, DEFAULT_BLOCK_ELEMENTS // max(n, 1),
               min(_MAX_GEMM_ROWS, 2 * inner))
    if inner > _SMALL_INNER:
        rows = max(rows, min(n // _TOKENS_PER_ROW, _LARGE_BLOCK_ELEMENTS // max(n, 1)))
    return rows


def _chunk_bounds(m, n, chunk_size, inner=0):
    """Row ranges ``[start, stop)`` covering ``m`` queries against ``n`` tokens.

    ``inner`` is the inner dimension of the logits' matrix product (see
    :data:`DEFAULT_BLOCK_ELEMENTS`).
    """
    if chunk_size is None:
        chunk_size = _default_rows(n, inner)
    else:
        chunk_size = _checks.positive_int(chunk_size, "chunk_size")
    for start in range(0, m, chunk_size):
        yield start, min(start + chunk_size, m)


def _masked_logits(logits, logw, start, causal):
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


def _exp_shifted(logits, start):
    """``exp(logits - rowmax)`` in place, with a clear error on a row without mass.

    The exponential is :func:`transformer_pde._exp_kernel.exp_shifted_rows` (vectorised,
    releases the GIL; its module says what it costs against NumPy's).
    """
    if not (logits.flags.c_contiguous and logits.dtype == np.float64):
        logits = np.ascontiguousarray(logits, dtype=np.float64)
    row_max = np.empty(logits.shape[0])
    exp_shifted_rows(logits, row_max)
    _check_row_max(row_max, start)
    return logits


def _check_row_max(row_max, start):
    """Clear errors for rows whose largest logit is not finite."""
    if not np.all(np.isfinite(row_max)):
        i = int(np.flatnonzero(~np.isfinite(row_max))[0])
        if np.isnan(row_max[i]) or row_max[i] > 0:
            raise ValueError(f"X: the logits of query {start + i} overflow float64; the tokens "
                             "or the parameter matrices are too large for attention to be "
                             "computed")
        raise ValueError(f"weights: query {start + i} attends only to tokens of zero weight, "
                         "so its attention is undefined")


def _row_softmax(logits, start):
    """Row-wise normalised exponentials (each row sums to one)."""
    E = _exp_shifted(logits, start)
    E /= E.sum(axis=1, keepdims=True)  # in place: no second (m, n) array
    return E


def _fused(inner, p, chunk_size):
    """Whether logits of inner dimension ``inner`` and values of dimension ``p`` take the
    fused path (one compiled pass per query row)."""
    return chunk_size is None and inner <= _FUSED_MAX_INNER and p <= _FUSED_MAX_VALUES


def _bounds(m, n, chunk_size, inner, p, concurrent):
    """The chunks of :func:`_normalised_average`. Concurrent chunks chosen automatically are
    small for small ``inner`` (see :data:`_SMALL_INNER`), and of equal sizes in a number
    that is a multiple of the number of cores (each core gets the same work)."""
    if not concurrent or chunk_size is not None:
        return list(_chunk_bounds(m, n, chunk_size, inner))
    if inner <= _SMALL_INNER:
        size = max(1, min(DEFAULT_BLOCK_ELEMENTS // max(n, 1),
                          _SINGLE_THREAD_PRODUCT // (n * max(inner, p + 1))))
    else:
        size = _default_rows(n, inner)
    count = -(-m // size)
    count = -(-count // _THREADS) * _THREADS
    edges = [m * k // count for k in range(count + 1)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def _normalised_average(logit_block, values, logw, m, causal, chunk_size, inner, concurrent):
    r"""Rows :math:`\sum_j P_{ij} v_j` with :math:`P_{ij} \propto w_j e^{L_{ij}}`, chunked.

    ``logit_block(start, stop, ncols, out)`` writes the logits of queries ``start..stop-1``
    against tokens ``0..ncols-1`` (a matrix product of inner dimension ``inner``) into
    ``out``. Each task fills one buffer of logits, chunk after chunk, and writes the
    matrix product of the exponentials with ``values`` straight into the output, divided
    by the row sums of the exponentials (taken by the exponential kernel while each row is
    in cache): no other array per chunk, since fresh memory costs a page fault per page. With
    ``concurrent`` (the caller's :func:`_chunks_on_cores`: more than one core, more than one
    chunk, ``n >= 2 inner`` and enough work), the chunks run concurrently, one task per
    core, each with its logits, exponentials and products on its own core; the caller has
    entered :func:`_blas_on_calling_thread` with the same flag before it projected the
    tokens.
    Against chunks in turn with the products on all cores, this also spreads the
    exponentials over the cores (at ``d = 64`` they cost about a third of the products).
    """
    n, p = values.shape
    out = np.empty((m, p))
    factors = getattr(logit_block, "factors", None)
    if _fused(factors[0].shape[1] if factors is not None else np.inf, p, chunk_size):
        values1 = np.hstack([values, np.ones((n, 1))])
        return _fused_average(*factors, values1, logw, m, causal, out)
    bounds = _bounds(m, n, chunk_size, inner, p, concurrent)
    rows = max(stop - start for start, stop in bounds)

    def chunks(part):
        buffer = _scratch("logits", (rows * n,))  # the logits of a chunk, then the next
        row_max = np.empty(rows)
        row_sum = np.empty(rows)
        for start, stop in part:
            c = stop - start
            ncols = min(stop, n) if causal else n
            logits = buffer[:c * ncols].reshape(c, ncols)  # C-contiguous
            logit_block(start, stop, ncols, logits)
            _masked_logits(logits, logw, start, causal)
            exp_shifted_rows_summed(logits, row_max[:c], row_sum[:c])
            _check_row_max(row_max[:c], start)
            np.matmul(logits, values[:ncols], out=out[start:stop])
            out[start:stop] /= row_sum[:c, None]

    if concurrent:  # one task per core
        _on_threads(chunks, [bounds[k::_THREADS] for k in range(_THREADS)])
    else:
        chunks(bounds)
    return out


def _fused_average(queries, keys_t, values1, logw, m, causal, out):
    """:func:`_normalised_average` with logits ``queries @ keys_t`` of small inner dimension:
    one compiled pass per query row (:func:`transformer_pde._exp_kernel.fused_rows`), rows
    shared between the cores in blocks of 32 taken in turn (causal rows grow with ``i``)."""
    keys_t = np.ascontiguousarray(keys_t, dtype=np.float64)
    values_t = np.ascontiguousarray(values1.T)
    lw = np.empty(0) if logw is None else np.ascontiguousarray(logw, dtype=np.float64)
    queries = np.ascontiguousarray(queries, dtype=np.float64)
    row_max = np.empty(m)
    blocks = [(s, min(s + 32, m)) for s in range(0, m, 32)]

    def rows(part):
        for start, stop in part:
            fused_rows(queries, keys_t, values_t, lw, causal, start, stop, out, row_max)

    if len(blocks) > 1 and _pool_pays():
        _on_threads(rows, [blocks[k::_THREADS] for k in range(_THREADS)])
    else:
        rows(blocks)
    _check_row_max(row_max, 0)
    return out


def _dense_matrix(logit_block, logw, m, n, causal):
    """The full ``(m, n)`` row-stochastic attention matrix (dense, O(mn) memory)."""
    return _row_softmax(_masked_logits(logit_block(0, m, n, np.empty((m, n))), logw, 0,
                                       causal), 0)


def _softmax_logits(X, Y, A, concurrent=False):
    AY = _product(Y, A.T, concurrent, "queries")  # row i is A y_i

    def block(start, stop, ncols, out=None):
        return np.matmul(AY[start:stop], X[:ncols].T, out=out)

    block.factors = (AY, X.T)  # logits = AY @ X.T, for the fused path
    return block


def _softmax_matrix_of_factors(QY, KX, weights, causal):
    r""":func:`softmax_matrix` with logits :math:`\langle Q y_i, K x_j\rangle` from the
    projected queries ``QY`` (m, k) and keys ``KX`` (n, k), without forming
    :math:`A = K^\top Q` (for :mod:`.lipschitz`, which has both projections already)."""
    n = KX.shape[0]
    logw = _log_weights(weights, _checks.weights(weights, n))

    def block(start, stop, ncols, out=None):
        return np.matmul(QY[start:stop], KX[:ncols].T, out=out)

    return _dense_matrix(block, logw, QY.shape[0], n, causal)


def _l2_logits(X, Y, Q, K, concurrent=False):
    """Logits :math:`-|Qy - Kx_j|^2` up to the row constant :math:`-|Qy|^2` (which cancels)."""
    QY = _product(Y, Q.T, concurrent)
    KX = _product(X, K.T, concurrent)
    sq = np.einsum("ij,ij->i", KX, KX)

    def block(start, stop, ncols, out=None):
        out = np.matmul(QY[start:stop], KX[:ncols].T, out=out)
        out *= 2.0
        out -= sq[:ncols]
        return out

    # the same logits as one product, for the fused path
    block.factors = (np.hstack([2.0 * QY, -np.ones((QY.shape[0], 1))]),
                     np.vstack([KX.T, sq]))
    return block


def softmax(X, A, V, *, weights=None, causal=False, queries=None, chunk_size=None):
    r"""Softmax (traditional) attention :math:`\Gamma_\mu(x)`.

    .. math::

        \Gamma_\mu(x) = \frac{\int V y \, e^{\langle A x, y\rangle} \, d\mu(y)}
                             {\int e^{\langle A x, y\rangle} \, d\mu(y)},
        \qquad A = K^\top Q,

    Vaswani et al. (2017); measure form of Castin et al. (2025).

    Parameters
    ----------
    X : array (n, d)
        Tokens, the atoms of :math:`\mu`.
    A : array (d, d)
        Key-query matrix :math:`K^\top Q`.
    V : array (p, d)
        Value matrix.
    weights : array (n,), optional
        Weights of the atoms (non-negative, summing to one); uniform by default.
    causal : bool
        Masked attention: query ``i`` attends to tokens ``j <= i`` only.
    queries : array (m, d), optional
        Points where :math:`\Gamma_\mu` is evaluated; the tokens themselves by default.
    chunk_size : int, optional
        Queries processed at once (memory ``O(chunk_size * n)``); chosen automatically.

    Returns
    -------
    array (m, p)
        Row ``i`` is :math:`\Gamma_\mu(y_i)`.
    """
    X, _, Y, logw = _setup(X, weights, queries, causal)
    d = X.shape[1]
    A = _checks.matrix(A, "A", shape=(d, d))
    V = _checks.matrix(V, "V", cols=d)
    concurrent = _chunks_on_cores(Y.shape[0], X.shape[0], d, V.shape[0], chunk_size)
    with _blas_on_calling_thread(concurrent):
        return _normalised_average(_softmax_logits(X, Y, A, concurrent),
                                   _product(X, V.T, concurrent, "values"), logw, Y.shape[0], causal,
                                   chunk_size, d, concurrent)


def softmax_matrix(X, A, *, weights=None, causal=False, queries=None):
    r"""The softmax attention matrix, row-stochastic, shape ``(m, n)``.

    .. math::

        P_{ij} = \frac{w_j e^{\langle A y_i, x_j\rangle}}{\sum_k w_k e^{\langle A y_i, x_k\rangle}}

    Dense (use for moderate sizes); with it, ``softmax(X, A, V) == P @ X @ V.T``.
    """
    X, _, Y, logw = _setup(X, weights, queries, causal)
    d = X.shape[1]
    A = _checks.matrix(A, "A", shape=(d, d))
    return _dense_matrix(_softmax_logits(X, Y, A), logw, Y.shape[0], X.shape[0], causal)


# --------------------------------------------------------------------------------------
# L2 attention
# --------------------------------------------------------------------------------------

def l2(X, Q, K, V, *, weights=None, causal=False, queries=None, chunk_size=None):
    r"""L2 attention (Kim, Papamakarios and Mnih, 2021).

    .. math::

        \Gamma_\mu(x) = \frac{\int V y \, e^{-|Q x - K y|^2} \, d\mu(y)}
                             {\int e^{-|Q x - K y|^2} \, d\mu(y)}.

    ``Q`` and ``K`` have shape ``(k, d)``, ``V`` shape ``(p, d)``; the other arguments are
    those of :func:`softmax`.
    """
    X, _, Y, logw = _setup(X, weights, queries, causal)
    d = X.shape[1]
    Q, K = _checks.query_key(Q, K, d)
    V = _checks.matrix(V, "V", cols=d)
    concurrent = _chunks_on_cores(Y.shape[0], X.shape[0], Q.shape[0], V.shape[0],
                                  chunk_size)
    with _blas_on_calling_thread(concurrent):
        return _normalised_average(_l2_logits(X, Y, Q, K, concurrent),
                                   _product(X, V.T, concurrent), logw, Y.shape[0], causal,
                                   chunk_size, Q.shape[0], concurrent)


def l2_matrix(X, Q, K, *, weights=None, causal=False, queries=None):
    r"""The L2 attention matrix :math:`P_{ij} \propto w_j e^{-|Q y_i - K x_j|^2}`, row-stochastic.

    Dense ``(m, n)``; with it, ``l2(X, Q, K, V) == P @ X @ V.T``.
    """
    X, _, Y, logw = _setup(X, weights, queries, causal)
    Q, K = _checks.query_key(Q, K, X.shape[1])
    return _dense_matrix(_l2_logits(X, Y, Q, K), logw, Y.shape[0], X.shape[0], causal)


# --------------------------------------------------------------------------------------
# Sinkhorn attention
# --------------------------------------------------------------------------------------

def _sq_cost(QX, KX):
    """Cost matrix :math:`|Q x_i - K x_j|^2`, shape (n, n)."""
    a = np.einsum("ij,ij->i", QX, QX)
    b = np.einsum("ij,ij->i", KX, KX)
    return np.maximum(a[:, None] + b[None, :] - 2.0 * (QX @ KX.T), 0.0)


def _logsumexp(M, axis):
    mx = M.max(axis=axis, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(mx, axis=axis) + np.log(np.exp(M - mx).sum(axis=axis))


def _sinkhorn_potentials(X, w, Q, K, n_steps, tol, max_steps):
    r"""Log-domain Sinkhorn-Knopp on :math:`k^0 = e^{-|Qx - Ky|^2}` against :math:`\mu`.

    Returns ``(f, g, g_row, steps, err)`` with :math:`k = e^{f_i + g_j - |Qx_i - Kx_j|^2}`
    and ``g_row`` the column potential the last row normalisation used (``f`` is
    :math:`-\log \int e^{g_{row}(y) - |Qx - Ky|^2} d\mu(y)`; ``g_row == g`` unless the last
    step normalised columns). Steps
    alternate: even steps normalise in :math:`y` (rows, updating ``f``), odd steps in
    :math:`x` (columns, updating ``g``). With ``n_steps=None`` the iteration runs until the
    column marginal error after a row step is below ``tol``, and always ends on a row step.
    """
    n = X.shape[0]
    with np.errstate(divide="ignore"):
        logw = np.log(w)
    logk0 = -_sq_cost(X @ Q.T, X @ K.T)
    f = np.zeros(n)
    g = np.zeros(n)
    g_row = g
    err = np.inf
    limit = max_steps if n_steps is None else n_steps
    step = 0
    while step < limit:
        if step % 2 == 0:  # normalise in y: sum_j w_j k_ij = 1
            f = -_logsumexp(logk0 + g[None, :] + logw[None, :], axis=1)
            g_row = g
            cols = np.exp(_logsumexp(logk0 + f[:, None] + logw[:, None], axis=0) + g)
            err = np.max(np.abs(cols - 1.0)[w > 0])
            step += 1
            if n_steps is None and err <= tol:
                break
        else:  # normalise in x: sum_i w_i k_ij = 1
            g = -_logsumexp(logk0 + f[:, None] + logw[:, None], axis=0)
            step += 1
    if n_steps is None and err > tol:
        raise RuntimeError(f"Sinkhorn did not converge in max_steps={max_steps} steps: "
                           f"marginal error {err:.3g} > tol={tol:.3g}")
    return f, g, g_row, step, err


def _sinkhorn_setup(X, Q, K, weights, n_steps, tol, max_steps):
    X = _checks.points(X, "X")
    w = _checks.weights(weights, X.shape[0])
    Q, K = _checks.query_key(Q, K, X.shape[1])
    if n_steps is not None:
        n_steps = _checks.positive_int(n_steps, "n_steps")
    tol = _checks.positive_float(tol, "tol")
    max_steps = _checks.positive_int(max_steps, "max_steps")
    return X, w, Q, K, _sinkhorn_potentials(X, w, Q, K, n_steps, tol, max_steps)


def sinkhorn_kernel(X, Q, K, *, weights=None, n_steps=None, tol=1e-10, max_steps=10_000):
    r"""The Sinkhorn kernel :math:`k^\infty(x_i, x_j)` of Sinkhorn attention, shape ``(n, n)``.

    :math:`k^0(x, y) = e^{-|Qx - Ky|^2}` is normalised alternately in :math:`y` (even steps,
    :math:`k^{j+1}(x,y) = k^j(x,y) / \int k^j(x,y') d\mu(y')`) and in :math:`x` (odd steps)
    (Sander et al., 2022; Castin et al., 2025). The limit is doubly stochastic against
    :math:`\mu`: :math:`\sum_j w_j k_{ij} = 1` and :math:`\sum_i w_i k_{ij} = 1`, and
    :math:`w_i w_j k_{ij}` is the entropic optimal transport plan (:math:`\varepsilon = 1`,
    cost :math:`|Qx - Ky|^2`) from :math:`\mu` to itself.

    ``n_steps=None`` iterates to convergence (column marginal error <= ``tol`` after a row
    normalisation; ``RuntimeError`` after ``max_steps``); an integer performs exactly that
    many normalisation steps (``n_steps=1``: L2 attention's kernel, normalised in y).
    Computed in the log domain on the dense ``(n, n)`` cost.
    """
    X, w, Q, K, (f, g, _, _, _) = _sinkhorn_setup(X, Q, K, weights, n_steps, tol, max_steps)
    logk0 = -_sq_cost(X @ Q.T, X @ K.T)
    return np.exp(logk0 + f[:, None] + g[None, :])


def sinkhorn(X, Q, K, V, *, weights=None, queries=None, n_steps=None, tol=1e-10,
             max_steps=10_000, chunk_size=None):
    r"""Sinkhorn attention (Sander, Ablin, Blondel and Peyré, 2022).

    .. math::

        \Gamma_\mu(x) = \int V y \, k^\infty(x, y) \, d\mu(y),

    with :math:`k^\infty` the Sinkhorn limit of :math:`e^{-|Qx-Ky|^2}` against :math:`\mu`
    (see :func:`sinkhorn_kernel`). At a query point :math:`x` outside the support,
    :math:`k^\infty(x, \cdot)` is the kernel normalised in :math:`y` with the converged
    column potential :math:`g`: :math:`k^\infty(x,y) \propto e^{g(y) - |Qx - Ky|^2}`, which on
    the tokens coincides with the limit. With an integer ``n_steps``, the field uses exactly
    the kernel of :func:`sinkhorn_kernel` after that many steps (for an even number, its rows
    do not sum to one). The potentials need the dense ``(n, n)`` cost.
    There is no causal variant: the column normalisation couples all tokens.
    """
    X, w, Q, K, (_, g, g_row, _, _) = _sinkhorn_setup(X, Q, K, weights, n_steps, tol,
                                                       max_steps)
    d = X.shape[1]
    V = _checks.matrix(V, "V", cols=d)
    Y = X if queries is None else _checks.points(queries, "queries")
    if Y.shape[1] != d:
        raise ValueError(f"queries must have d = {d} columns like X, got shape {Y.shape}")
    with np.errstate(divide="ignore"):
        logw = np.log(w)
    if g_row is g:  # the last step normalised rows: a plain normalised average
        concurrent = _chunks_on_cores(Y.shape[0], X.shape[0], Q.shape[0], V.shape[0],
                                      chunk_size)
        with _blas_on_calling_thread(concurrent):
            return _normalised_average(_l2_logits(X, Y, Q, K, concurrent),
                                       _product(X, V.T, concurrent), logw + g, Y.shape[0],
                                       False, chunk_size, Q.shape[0], concurrent)
    block = _l2_logits(X, Y, Q, K)
    values = X @ V.T
    # an even number of steps ends on a column normalisation: the rows of the kernel do not
    # sum to one. k(x, y) = e^{f(x) + g(y) - c(x, y)} with f from the previous row step.
    out = np.empty((Y.shape[0], values.shape[1]))
    for start, stop in _chunk_bounds(Y.shape[0], X.shape[0], chunk_size):
        logits = block(start, stop, X.shape[0]) + logw
        num = logits + g
        den = logits + g_row
        m_num = num.max(axis=1, keepdims=True)
        m_den = den.max(axis=1, keepdims=True)
        log_den = m_den[:, 0] + np.log(np.exp(den - m_den).sum(axis=1))
        scale = np.exp(m_num[:, 0] - log_den)
        out[start:stop] = (np.exp(num - m_num) @ values) * scale[:, None]
    return out


# --------------------------------------------------------------------------------------
# sigmoid attention
# --------------------------------------------------------------------------------------

def sigmoid(X, A, V, *, weights=None, causal=False, queries=None, bias=0.0, chunk_size=None):
    r"""Sigmoid attention (Ramapuram et al., 2025), with no normalisation over tokens.

    .. math::

        \Gamma_\mu(x) = \int \sigma(\langle A x, y\rangle + b) \, V y \, d\mu(y),
        \qquad \sigma(z) = \frac{1}{1 + e^{-z}}.

    Convention: the sum is against the probability measure :math:`\mu` (so for uniform
    weights it carries a factor :math:`1/n`) and ``bias`` is :math:`b`. Ramapuram et al.
    sum without :math:`1/n` and recommend :math:`b = -\log n`; since
    :math:`\sigma(z - \log n) \approx e^{z}/n` for :math:`e^z \ll n`, their layer is close to
    this one with ``bias=0`` only in that regime; pass ``bias`` and rescale ``V`` by ``n`` to
    reproduce theirs exactly. With ``causal=True``, query ``i`` uses the restriction of
    :math:`\mu` to tokens ``j <= i`` renormalised to a probability measure (the masked
    convention :math:`f^m(X)_i = f(x_1, \dots, x_i)_i`).
    """
    X, w, Y, _ = _setup(X, weights, queries, causal)
    n, d = X.shape
    A = _checks.matrix(A, "A", shape=(d, d))
    V = _checks.matrix(V, "V", cols=d)
    b = float(bias)
    if not np.isfinite(b):
        raise ValueError(f"bias must be finite, got {bias!r}")
    values = X @ V.T
    block = _softmax_logits(X, Y, A)
    m = Y.shape[0]
    out = np.empty((m, values.shape[1]))
    cumw = np.cumsum(w)
    for start, stop in _chunk_bounds(m, n, chunk_size):
        ncols = min(stop, n) if causal else n
        S = expit(block(start, stop, ncols) + b) * w[:ncols]
        if causal:
            rows = np.arange(start, stop)[:, None]
            S[np.arange(ncols)[None, :] > rows] = 0.0
            mass = cumw[start:stop]
            if np.any(mass <= 0):
                bad = start + int(np.flatnonzero(mass <= 0)[0])
                raise ValueError(f"weights: query {bad} attends only to tokens of zero weight, "
                                 "so its masked attention is undefined")
            S /= mass[:, None]
        out[start:stop] = S @ values[:ncols]
    return out


# --------------------------------------------------------------------------------------
# multi-head attention
# --------------------------------------------------------------------------------------

def multihead(X, As, Vs, *, weights=None, causal=False, queries=None, chunk_size=None):
    r"""Multi-head softmax attention :math:`\Gamma_\mu(x) = \sum_{h=1}^H \Gamma^{(h)}_\mu(x)`.

    Head ``h`` is :func:`softmax` attention with key-query matrix ``As[h]`` and value matrix
    ``Vs[h]``, the output projection :math:`W_h` folded in (:math:`V_h \leftarrow W_h V_h`),
    as in Castin et al. (2024, 2025). ``As`` has shape ``(H, d, d)``, ``Vs`` shape
    ``(H, p, d)``.
    """
    X = _checks.points(X, "X")
    d = X.shape[1]
    As = _checks.stack(As, "As", cols=d)
    Vs = _checks.stack(Vs, "Vs", cols=d)
    if As.shape[1] != d:
        raise ValueError(f"As must have shape (H, {d}, {d}), got {As.shape}")
    if Vs.shape[0] != As.shape[0]:
        raise ValueError(f"As and Vs must have the same number of heads, got {As.shape[0]} "
                         f"and {Vs.shape[0]}")
    out = 0.0
    for A, V in zip(As, Vs, strict=True):
        out = out + softmax(X, A, V, weights=weights, causal=causal, queries=queries,
                            chunk_size=chunk_size)
    return out
