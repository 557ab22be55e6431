r"""Kernels of softmax attention: the compiled exponential, fused rows, chunks of queries and
the library's worker threads.

This module holds the machinery behind :mod:`.attention` and :mod:`.lipschitz`; the formulas
live there.

**The exponential.** :func:`exp_shifted_rows` computes :math:`e^{L_{ij} - \max_k L_{ik}}`
in place, the row maximum included (and, in :func:`exp_shifted_rows_summed`, the row sum
while the row is in cache), with a polynomial that the compiler (Numba, LLVM) vectorises for
the CPU it runs on, whatever its vector units (SSE, AVX2, AVX-512, NEON). NumPy's float64
``exp`` is vectorised only on x86 CPUs with AVX-512 and is a scalar loop elsewhere (about
8 ns per value on an AVX2 CPU, where this kernel takes under 5 ns); on an AVX-512 CPU the
two take about 1 ns per value, and the kernel also saves the passes of the maximum and the
sum. The kernel:

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
(tested). The compiled functions release the GIL, so rows run on several threads at once.

**No process-wide state.** A call changes nothing that the other threads of the program see:
it never sets the thread count of NumPy's BLAS (:mod:`threadpoolctl` only reads it), and the
library's worker threads (:func:`run_blocks`) are started once, on demand, never stopped and
never bound to CPUs; a call hands work only to workers that are idle and runs it on its own
thread otherwise. Calls from any number of threads at once therefore give the results of the
same calls made one at a time: the fused rows are computed row by row whatever thread takes
them, and the chunks of queries have sizes that depend only on the problem and the cache
sizes (:func:`cache_sizes`), never on the threads.

**Threads** (:func:`thread_count`): a call uses at most as many threads as the CPUs the
calling thread may run on, lowered by the limit of NumPy's BLAS in force, which follows the
standard variables (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``) and
:func:`threadpoolctl.threadpool_limits`. So ``with threadpool_limits(1): ...`` runs a call on
one thread, and ``taskset -c 0,1`` on two. Matrix products run on BLAS's threads; the
compiled rows of small dimension (:func:`fused_rows`) on the library's workers.

**Memory of a call** (beyond its inputs and output, whatever the number of threads): the
fused path holds contiguous copies of its factors, :math:`8(k + p + 2)n + 8mk` bytes for
logits of inner dimension :math:`k`, :math:`p` value coordinates, :math:`m` queries and
:math:`n` tokens, plus one tile of :func:`fused_tile` logits and :math:`p + 1` sums per
thread taking part (a few KiB each); the chunked path holds one block of logits of
:func:`default_rows` rows, at most :math:`\max(L_2, 16\,q\,n)` bytes with
:math:`q = \max(k, p)` (twice the size of an :math:`n \times q` array of tokens, see
:func:`default_rows`), and the projected tokens.
"""

import contextvars
import functools
import math
import os
import queue
import threading
import time

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
def fused_rows(queries, keys_t, values_t, logw, causal, row0, row1, out, row_max, tile):
    r"""Softmax averages of rows ``row0..row1-1``, fused: logits, exponential and sums per row.

    ``queries`` (m, k): the query side of the logits (e.g. :math:`A y_i`); ``keys_t`` (k, n):
    the key side, transposed (logit :math:`L_{ij} = \langle q_i, \text{keys\_t}[:, j]\rangle`);
    ``values_t`` (p + 1, n): the values transposed, with a last row of ones; ``logw`` (n,)
    the log-weights or an empty array for uniform weights; with ``causal``, row ``i`` uses
    the columns ``j <= i``. Writes ``out[i] = sum_j e^{L_ij - M} v_j / sum_j e^{L_ij - M}``
    and ``row_max[i]`` (the row's largest logit; NaN if one is NaN); a row whose maximum is
    not finite is skipped (the caller raises).

    A row is processed in tiles of ``tile`` columns (:func:`fused_tile`), each held in the
    core's first-level cache through its logits, maximum, exponentials and sums (an online
    softmax: when a tile raises the running maximum :math:`M`, the sums so far are
    multiplied by :math:`e^{M_{old} - M}`). For a row of at most ``tile`` columns this is
    the two-pass computation (maximum, then exponentials) exactly. Memory: one tile and
    :math:`p + 1` sums, whatever ``n``. The result of a row depends only on its data and
    ``tile``, not on which thread computes it.
    """
    k, n = keys_t.shape
    p1 = values_t.shape[0]
    buf = np.empty(min(tile, n))
    acc = np.empty(p1)
    for i in range(row0, row1):
        ncols = min(i + 1, n) if causal else n
        mx = -np.inf
        acc[:] = 0.0
        for j0 in range(0, ncols, tile):
            j1 = min(j0 + tile, ncols)
            row = buf[:j1 - j0]
            row[:] = 0.0
            for a in range(k):
                q = queries[i, a]
                kt = keys_t[a, j0:j1]
                for j in range(j1 - j0):
                    row[j] += q * kt[j]
            if logw.size:
                lw = logw[j0:j1]
                for j in range(j1 - j0):
                    row[j] += lw[j]
            tmx = _row_max(row)
            if not tmx <= mx:  # a larger maximum, +inf or NaN
                if not math.isfinite(tmx):
                    mx = tmx
                    break
                scale = math.exp(mx - tmx)  # 0 while nothing was summed (mx = -inf)
                for c in range(p1):
                    acc[c] *= scale
                mx = tmx
            if mx == -np.inf:  # every column so far masked or of zero weight
                continue
            _exp_row(row, mx)
            for c in range(p1):
                acc[c] += _dot(row, values_t[c, j0:j1])
        row_max[i] = mx
        if not math.isfinite(mx):
            continue
        for c in range(p1 - 1):
            out[i, c] = acc[c] / acc[p1 - 1]


@numba.njit(nogil=True, cache=True, boundscheck=False, fastmath={"contract", "reassoc"})
def _dot(a, b):
    """Dot product, vectorised (reassociated: several partial sums)."""
    acc = 0.0
    for j in range(a.size):
        acc += a[j] * b[j]
    return acc


# --------------------------------------------------------------------------------------
# the machine: caches and threads
# --------------------------------------------------------------------------------------

#: Cache sizes assumed where the system does not report them (not Linux): a first-level
#: data cache of 32 KiB and a second level of 1 MiB per core, at or below those of the x86
#: and ARM cores of the last decade, so that blocks sized for them stay in cache there.
_DEFAULT_L1D = 2**15
_DEFAULT_L2 = 2**20


def _sysfs_caches(cpu):
    """``{level: bytes per CPU}`` of the data and unified caches of ``cpu``, from Linux's
    ``/sys/devices/system/cpu/cpuN/cache`` (a cache shared by k CPUs counts 1/k)."""
    base = f"/sys/devices/system/cpu/cpu{cpu}/cache"
    sizes = {}
    for entry in sorted(os.listdir(base)):
        if not entry.startswith("index"):
            continue

        def read(name, entry=entry):
            with open(os.path.join(base, entry, name)) as f:
                return f.read().strip()

        if read("type") not in ("Data", "Unified"):
            continue
        size = read("size").upper()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        size = int(size.rstrip("KMG")) * scale
        shared = 0
        for part in read("shared_cpu_list").split(","):
            lo, _, hi = part.partition("-")
            shared += int(hi or lo) - int(lo) + 1
        sizes[int(read("level"))] = size // max(shared, 1)
    return sizes


@functools.cache
def cache_sizes():
    """``(L1d, L2)``: bytes of the first-level data cache and of the second-level cache of
    one core (its share, where the cache is shared), as the system reports them for the
    first CPU this process may run on; :data:`_DEFAULT_L1D` and :data:`_DEFAULT_L2` where it
    does not. Read once per process."""
    try:
        cpu = min(os.sched_getaffinity(0))
        sizes = _sysfs_caches(cpu)
    except (AttributeError, OSError, ValueError):
        sizes = {}
    l1 = sizes.get(1) or _DEFAULT_L1D
    l2 = sizes.get(2) or max(_DEFAULT_L2, l1)
    return l1, l2


def fused_tile(inner, p):
    r"""Columns of one tile of :func:`fused_rows` for logits of inner dimension ``inner`` and
    ``p`` value coordinates: the tile's logits and the ``inner`` key rows and ``p + 1``
    value rows it meets, :math:`8(\text{inner} + p + 2)` bytes a column, fill the core's
    first-level data cache (:func:`cache_sizes`), so that the logits stay there through the
    passes over them (``inner`` multiply-adds, the maximum, the exponential, ``p + 1`` sums).
    At least 8 columns (a 64-byte cache line)."""
    return max(8, cache_sizes()[0] // (8 * (inner + p + 2)))


_blas = None


def _blas_libraries():
    """NumPy's BLAS libraries, through :mod:`threadpoolctl` (looked up once; only read)."""
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


class _Job:
    """Blocks ``0..count-1`` of one call, taken in turn by the calling thread and the workers
    it woke; :meth:`wait` returns once every block taken has finished and no block is left
    (a worker that wakes later finds nothing to do and touches none of the call's data)."""

    def __init__(self, fn, count):
        self.fn, self.count = fn, count
        self.context = contextvars.copy_context()  # the caller's np.errstate, for instance
        self._lock = threading.Lock()
        self._next = 0
        self._running = 0
        self._finished = threading.Event()
        self.error = None  # (block, exception) of the lowest block that raised

    def _take(self):
        with self._lock:
            if self._next >= self.count or self.error is not None:
                return None
            self._next += 1
            self._running += 1
            return self._next - 1

    def _release(self, block, exc):
        with self._lock:
            if exc is not None and (self.error is None or block < self.error[0]):
                self.error = (block, exc)
            self._running -= 1
            if self._running == 0 and (self._next >= self.count or self.error is not None):
                self._finished.set()

    def work(self):
        """Take blocks until none is left (on the calling thread or a worker)."""
        while (block := self._take()) is not None:
            exc = None
            try:
                self.fn(block)
            except BaseException as e:  # re-raised on the calling thread by wait()
                exc = e
            self._release(block, exc)

    def wait(self):
        self._finished.wait()
        if self.error is not None:
            raise self.error[1]


class _Workers:
    """The library's worker threads: started on demand, up to the most any call asked for
    (:func:`thread_count` minus one), never stopped, never bound to CPUs. A call takes only
    idle workers (:meth:`claim`), so concurrent calls never queue behind each other: when
    every worker is busy, a call runs its blocks on its own thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._idle = []
        self._started = 0
        self._handoff = None

    def _serve(self, inbox):
        while True:
            job = inbox.get()
            try:
                job.context.copy().run(job.work)
            finally:
                with self._lock:
                    self._idle.append(inbox)

    def claim(self, wanted):
        """Inboxes of up to ``wanted`` idle workers, starting new ones while fewer than
        ``wanted`` exist."""
        with self._lock:
            take = self._idle[max(0, len(self._idle) - wanted):]
            del self._idle[len(self._idle) - len(take):]
            while len(take) < wanted and self._started < wanted:
                inbox = queue.SimpleQueue()
                threading.Thread(target=self._serve, args=(inbox,), daemon=True,
                                 name=f"transformer_pde-{self._started}").start()
                self._started += 1
                take.append(inbox)
        return take

    def measured(self):
        """The hand-off time if it was measured already, else ``None``."""
        return self._handoff

    def handoff(self):
        """Seconds from handing a block to an idle worker to its completion (an empty block:
        the time to wake a thread), median of 5, measured once per process."""
        if self._handoff is None:
            times = []
            for _ in range(6):
                inboxes = self.claim(1)
                if not inboxes:  # every worker busy: another call is measuring or running
                    return 0.0 if self._handoff is None else self._handoff
                job = _Job(lambda block: None, 1)
                start = time.perf_counter()
                inboxes[0].put(job)
                job.wait()
                times.append(time.perf_counter() - start)
            self._handoff = float(np.median(times[1:]))  # the first includes the start
        return self._handoff


_workers = _Workers()


def _reset_workers():
    global _workers
    _workers = _Workers()  # a forked child has none of its parent's threads


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_workers)


def run_blocks(fn, count, threads):
    """``fn(b)`` for the blocks ``b = 0..count-1``, on the calling thread and on up to
    ``threads - 1`` idle workers, each block taken by whichever thread is free; returns when
    all are done and re-raises the error of the lowest block that raised. The workers run
    in a copy of the caller's context (so that ``np.errstate`` applies there too)."""
    job = _Job(fn, count)
    if count > 1 and threads > 1:
        for inbox in _workers.claim(min(threads, count) - 1):
            inbox.put(job)
    job.work()
    job.wait()


def _spread_rows(rows, m, entries, threads=None):
    """``rows(start, stop)`` over the queries ``0..m-1``, on several threads when that
    pays: the calling thread first computes blocks of 1, 2, 4, ... rows and times them;
    once the rows left would take, at that rate, more than twice the time to wake a worker
    (:meth:`_Workers.handoff`, measured by the library), the rest is shared between
    :func:`thread_count` threads in blocks taken in turn (four per thread; the last rows
    first, the heaviest when causal). ``entries(i)`` is the number of logits of the rows
    ``0..i-1``. Which thread computes a row does not change its result."""
    done, size, start = 0, 1, time.perf_counter()
    total = entries(m)
    while done < m:
        stop = min(m, done + size)
        rows(done, stop)
        done, size = stop, 2 * size
        if done < m:
            left = (time.perf_counter() - start) * (total - entries(done)) / entries(done)
            if _workers.measured() is None:  # no worker started yet: only if one may help
                threads = thread_count() if threads is None else threads
                if threads == 1:
                    break
            if left > 2 * _workers.handoff():
                break
    if done == m:
        return
    threads = thread_count() if threads is None else threads
    if threads == 1:
        rows(done, m)
        return
    count = min(m - done, 4 * threads)
    edges = [m - (m - done) * b // count for b in range(count + 1)]  # from the last rows

    def block(b):
        rows(edges[b + 1], edges[b])

    run_blocks(block, count, threads)


# --------------------------------------------------------------------------------------
# chunks
# --------------------------------------------------------------------------------------

#: The fused pass (:func:`fused_rows`) serves logits of inner dimension ``k`` with ``p`` value
#: coordinates when ``k + p`` is at most this. Per logit it does ``k + p + 1`` multiply-adds
#: in loops that the compiler vectorises but does not block, each operand read from the
#: first-level cache; the chunked path does them in the BLAS's blocked products, 3 to 5
#: times faster each, but moves every logit through a block in memory three more times
#: (written by the product, exponentiated, read by the second product). The two costs
#: cross where ``k + p`` is 8 to 11 on all three kernel settings measured on one CPU (the
#: native AVX-512 kernels, and OpenBLAS's Haswell and Sandybridge kernels with Numba's
#: generic target; ``benchmarks/check_tuning.py``): the lowest is kept.
_FUSED_MAX_TERMS = 8


def default_rows(n, inner, p=0):
    r"""Queries per chunk against ``n`` tokens, for logits of inner dimension ``inner`` and
    ``p`` value coordinates: the most of

    * :math:`L_2 / (8n)`: the chunk's float64 logits fit in the second-level cache of a core
      (:func:`cache_sizes`) between the product that writes them, the exponential and the
      product that reads them;
    * :math:`2q`, :math:`q = \max(\text{inner}, p)`: the two products of a chunk,
      :math:`(c \times k)(k \times n)` and :math:`(c \times n)(n \times p)`, then do
      :math:`2cqn` operations for :math:`8(c + q)n` bytes of their large operands, two
      thirds of the arithmetic intensity :math:`q/4` that no number of rows exceeds;
    * 1.

    So the buffer of logits holds at most :math:`\max(L_2, 16qn)` bytes: twice an
    :math:`n \times q` float64 array, whatever the number of threads.
    """
    q = max(inner, p)
    return max(1, cache_sizes()[1] // (8 * max(n, 1)), 2 * q)


def chunk_bounds(m, n, chunk_size, inner=0, p=0):
    """Row ranges ``[start, stop)`` covering ``m`` queries against ``n`` tokens, of
    ``chunk_size`` rows (default :func:`default_rows`)."""
    if chunk_size is None:
        chunk_size = default_rows(n, inner, p)
    else:
        chunk_size = _checks.positive_int(chunk_size, "chunk_size")
    return [(start, min(start + chunk_size, m)) for start in range(0, m, chunk_size)]


class Plan:
    r"""How one call computes softmax averages of ``m`` queries against ``n`` tokens.

    ``inner`` is the inner dimension of the logits' product, ``p`` that of the values.
    Two ways:

    * **fused** (``inner + p <= 8``, see :data:`_FUSED_MAX_TERMS`, and ``chunk_size`` not
      given): one compiled pass per query row (:func:`fused_rows`), the rows shared
      between threads when that pays (:func:`_spread_rows`);
    * **chunks** of :func:`default_rows` queries (or ``chunk_size``) in turn, the products
      on BLAS's threads, the exponentials in place (:func:`_chunks_average`).

    A plan holds no resource and changes no setting.
    """

    def __init__(self, m, n, inner, p, chunk_size):
        if chunk_size is not None:
            chunk_size = _checks.positive_int(chunk_size, "chunk_size")
        self.m, self.n, self.inner, self.p, self.chunk_size = m, n, inner, p, chunk_size
        self.fused = chunk_size is None and inner + p <= _FUSED_MAX_TERMS

    def bounds(self):
        """The chunks ``[start, stop)`` of the queries."""
        return chunk_bounds(self.m, self.n, self.chunk_size, self.inner, self.p)

    def average(self, logit_block, values, logw, causal):
        r"""Rows :math:`\sum_j P_{ij} v_j` with :math:`P_{ij} \propto w_j e^{L_{ij}}`.

        ``logit_block(start, stop, ncols, out)`` writes the logits of queries
        ``start..stop-1`` against tokens ``0..ncols-1`` into ``out`` (C-contiguous); its
        attribute ``factors`` holds ``(queries, keys_t)`` with ``L = queries @ keys_t``,
        for the fused path. ``logw``: log-weights or ``None`` (uniform).
        """
        out = np.empty((self.m, values.shape[1]))
        if self.fused:
            return _fused_average(*logit_block.factors, values, logw, causal, out)
        bounds = self.bounds()
        rows = max(stop - start for start, stop in bounds)
        _chunks_average(logit_block, values, logw, causal, bounds, rows, out)
        return out


_SPREAD_EXP = True


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
        if _SPREAD_EXP:
            mx, sm = row_max[:c], row_sum[:c]

            def exp_rows(a, b, logits=logits, mx=mx, sm=sm):
                exp_shifted_rows_summed(logits[a:b], mx[a:b], sm[a:b])

            _spread_rows(exp_rows, c, lambda i, ncols=ncols: i * ncols)
        else:
            exp_shifted_rows_summed(logits, row_max[:c], row_sum[:c])
        check_row_max(row_max[:c], start)
        np.matmul(logits, values[:ncols], out=out[start:stop])
        out[start:stop] /= row_sum[:c, None]


def _logits_before(m, n, causal):
    """``entries(i)``: the number of logits of the query rows ``0..i-1``."""
    if not causal:
        return lambda i: i * n
    return lambda i: (i * (i + 1) // 2 if i <= n else n * (n + 1) // 2 + (i - n) * n)


def _fused_average(queries, keys_t, values, logw, causal, out, threads=None):
    """:meth:`Plan.average` by :func:`fused_rows`, the rows spread over the threads by
    :func:`_spread_rows` (``threads``: default :func:`thread_count`).

    Why the library's own workers and not Numba's ``prange``: OpenMP's idle threads keep
    spinning after a call and take the cores from the BLAS products that follow (measured
    in the performance appendix); Numba's workqueue layer does not spin, but terminates the
    process when two threads of the caller enter it at once ("Nested parallel kernel launch
    detected"), as a joblib sweep with the threading backend does; TBB is not always
    installed. The workers have neither problem, and a call never waits for them: it hands
    blocks only to idle ones.
    """
    m, n = queries.shape[0], values.shape[0]
    keys_t = np.ascontiguousarray(keys_t, dtype=np.float64)
    values_t = np.empty((values.shape[1] + 1, n))
    values_t[:-1] = values.T
    values_t[-1] = 1.0
    lw = np.empty(0) if logw is None else np.ascontiguousarray(logw, dtype=np.float64)
    queries = np.ascontiguousarray(queries, dtype=np.float64)
    row_max = np.empty(m)
    tile = fused_tile(keys_t.shape[0], values.shape[1])

    def rows(start, stop):
        fused_rows(queries, keys_t, values_t, lw, causal, start, stop, out, row_max, tile)

    _spread_rows(rows, m, _logits_before(m, n, causal), threads)
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
