"""The kernels called from several threads at once: no process-wide state, the results of
single calls, the workers' hand-off, memory independent of the number of threads."""

import multiprocessing
import os
import threading
import time
import tracemalloc

import numpy as np
import pytest
import threadpoolctl
from transformer_pde import _kernels, attention, lipschitz


def _blas_threads():
    return tuple(lib["num_threads"] for lib in threadpoolctl.threadpool_info()
                 if lib["user_api"] == "blas")


def _problem(n, d, seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.normal(size=(d, d)) / d, rng.normal(size=(d, d))


# the fused path (d = 2, rows spread over the workers), chunks (d = 40), causal chunks
SOFTMAX_CALLS = [
    (_problem(2000, 2, 1), dict(causal=False)),
    (_problem(1500, 2, 2), dict(causal=True)),
    (_problem(700, 40, 3), dict(causal=False)),
    (_problem(500, 40, 4), dict(causal=True)),
]


class _BlasWatcher(threading.Thread):
    """Reads BLAS's thread count from its own thread, as often as it can, until stopped."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen = set()
        self.reads = 0
        self._stop_event = threading.Event()

    def run(self):
        while not self._stop_event.wait(0.0005):  # leaves the GIL to the callers
            self.seen.add(_blas_threads())
            self.reads += 1

    def stop(self):
        self._stop_event.set()
        self.join()


def _at_once(threads, work):
    """``work(k)`` on ``threads`` threads released together; errors re-raised here."""
    barrier = threading.Barrier(threads)
    errors = []

    def run(k):
        try:
            barrier.wait()
            work(k)
        except BaseException as e:  # noqa: BLE001 (re-raised below)
            errors.append(e)

    pool = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.parametrize("threads", [2, 4])
def test_softmax_from_several_threads_at_once_gives_the_single_call_results(threads):
    # each thread runs every call, in a different order, at the same time as the others:
    # the outputs are those of the calls made alone, bit for bit, and BLAS's thread count,
    # read from another thread throughout, never changes
    alone = [attention.softmax(*args, **kw) for args, kw in SOFTMAX_CALLS]
    before = _blas_threads()
    watcher = _BlasWatcher()
    watcher.start()
    results = {}

    def work(k):
        for r in range(2):
            for j in range(len(SOFTMAX_CALLS)):
                i = (j + k) % len(SOFTMAX_CALLS)
                args, kw = SOFTMAX_CALLS[i]
                results[k, r, i] = attention.softmax(*args, **kw)

    _at_once(threads, work)
    watcher.stop()
    assert watcher.reads > 0 and watcher.seen == {before}
    assert _blas_threads() == before
    assert len(results) == 2 * threads * len(SOFTMAX_CALLS)
    for (_, _, i), out in results.items():
        np.testing.assert_array_equal(out, alone[i])


@pytest.mark.parametrize("threads", [2, 4])
def test_local_lipschitz_from_several_threads_at_once_gives_the_single_call_results(threads):
    # n = 160 >= 128: the float32 phase and the float64 phase, each with its own work arrays
    problems = [_problem(160, 6, 10 + k) for k in range(threads)]
    alone = [lipschitz.local_lipschitz(X, A, V, return_vectors=True) for X, A, V in problems]
    before = _blas_threads()
    watcher = _BlasWatcher()
    watcher.start()
    results = {}

    def work(k):
        for j in range(threads):
            i = (j + k) % threads
            results[k, i] = lipschitz.local_lipschitz(*problems[i], return_vectors=True)

    _at_once(threads, work)
    watcher.stop()
    assert watcher.seen == {before} and _blas_threads() == before
    for (_, i), res in results.items():
        assert res.value == alone[i].value and res.matvecs == alone[i].matvecs
        np.testing.assert_array_equal(res.right, alone[i].right)


def test_a_call_under_threadpool_limits_one_runs_on_one_thread():
    (X, A, V), kw = SOFTMAX_CALLS[0]
    default = attention.softmax(X, A, V, **kw)
    before = _blas_threads()
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        assert _kernels.thread_count() == 1
        used = set()
        rows = _kernels.fused_rows

        def recording(*args):
            used.add(threading.get_ident())
            rows(*args)

        _kernels.fused_rows = recording
        try:
            one = attention.softmax(X, A, V, **kw)
        finally:
            _kernels.fused_rows = rows
        assert used == {threading.get_ident()}
        (Xc, Ac, Vc), kwc = SOFTMAX_CALLS[2]
        chunks_one = attention.softmax(Xc, Ac, Vc, **kwc)
    assert _blas_threads() == before
    # the fused rows are computed row by row whatever the threads: the same bits
    np.testing.assert_array_equal(one, default)
    # the chunks' products ran on one BLAS thread instead of several: equal to rounding
    np.testing.assert_allclose(chunks_one, attention.softmax(Xc, Ac, Vc, **kwc),
                               rtol=1e-13, atol=1e-14)


def test_concurrent_callers_of_the_workers_never_fail_nor_wait_for_each_other():
    # the race of a pool replaced while another caller was about to submit to it: callers
    # asking for different numbers of threads at once; every block runs exactly once
    counts = {}
    lock = threading.Lock()
    started = _kernels._workers._started

    def work(k):
        for r in range(30):
            threads = 2 + (k + r) % 15
            done = []

            def block(b, done=done):
                time.sleep(0)  # let the other threads interleave
                with lock:
                    done.append(b)

            _kernels.run_blocks(block, 3 * threads, threads)
            with lock:
                counts[k, r] = sorted(done)

    _at_once(8, work)
    for (k, r), done in counts.items():
        assert done == list(range(3 * (2 + (k + r) % 15)))
    # workers are only started up to the most one call asked for (16 threads: 15 workers)
    assert _kernels._workers._started <= max(started, 15)


def test_a_call_finding_every_worker_busy_runs_on_its_own_thread():
    # a call of 64 threads whose every thread holds a block until released: all workers
    # (at most 63) are busy, and a second call runs its blocks on its own thread at once
    release = threading.Event()
    holding = []

    def hold(b):
        holding.append(b)
        release.wait(60)

    holder = threading.Thread(target=_kernels.run_blocks, args=(hold, 1000, 64))
    holder.start()
    try:
        where = []
        start = time.perf_counter()
        _kernels.run_blocks(lambda b: where.append(threading.get_ident()), 8, 64)
        assert time.perf_counter() - start < 30
        assert where == [threading.get_ident()] * 8
        assert not release.is_set() and holding
    finally:
        release.set()
        holder.join()


def test_an_error_in_a_block_reaches_the_caller_with_its_errstate():
    seen = []

    def block(b):
        seen.append(np.geterr()["divide"])
        time.sleep(0.002)  # the GIL released: workers take blocks too
        if b in (5, 9):
            raise ValueError(f"block {b}")

    with np.errstate(divide="raise"):
        with pytest.raises(ValueError, match="block 5"):
            _kernels.run_blocks(block, 12, 4)
    assert seen and set(seen) == {"raise"}


@pytest.mark.parametrize("handoff", [0.0, np.inf])
def test_rows_are_spread_over_threads_only_when_that_pays(handoff, monkeypatch):
    # with a free hand-off every call is shared between threads; with an infinite one, none;
    # either way each row is computed exactly once
    monkeypatch.setattr(_kernels._workers, "handoff", lambda: handoff)
    for causal in (False, True):
        seen = []

        def rows(start, stop, seen=seen):
            time.sleep(0.001)
            seen.append((start, stop, threading.get_ident()))

        m = 500
        _kernels._spread_rows(rows, m, _kernels._logits_before(m, 700, causal), threads=4)
        covered = sorted(r for start, stop, _ in seen for r in range(start, stop))
        assert covered == list(range(m))
        threads = {ident for _, _, ident in seen}
        if handoff == 0.0:
            assert len(threads) > 1
        else:
            assert threads == {threading.get_ident()}


def test_the_fused_path_gives_the_same_bits_on_one_thread_and_on_several(monkeypatch):
    (X, A, V), _ = SOFTMAX_CALLS[1]
    monkeypatch.setattr(_kernels._workers, "handoff", lambda: 0.0)
    for threads in (1, 3, 16):
        monkeypatch.setattr(_kernels, "thread_count", lambda threads=threads: threads)
        out = attention.softmax(X, A, V, causal=True)
        if threads == 1:
            ref = out
        np.testing.assert_array_equal(out, ref)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no affinity interface")
def test_the_workers_are_not_bound_to_a_cpu(monkeypatch):
    # a worker may run on every CPU the process may run on
    monkeypatch.setattr(_kernels._workers, "handoff", lambda: 0.0)
    monkeypatch.setattr(_kernels, "thread_count", lambda: 2)
    (X, A, V), kw = SOFTMAX_CALLS[0]
    attention.softmax(X, A, V, **kw)
    workers = [t for t in threading.enumerate() if t.name.startswith("transformer_pde-")]
    assert workers
    for t in workers:
        assert os.sched_getaffinity(t.native_id) == os.sched_getaffinity(0)


def test_a_calling_thread_bound_to_one_cpu_uses_one_thread_and_starts_no_worker(monkeypatch):
    monkeypatch.setattr(_kernels.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert _kernels.thread_count() == 1
    fresh = _kernels._Workers()
    monkeypatch.setattr(_kernels, "_workers", fresh)
    for (X, A, V), kw in SOFTMAX_CALLS[:2]:
        attention.softmax(X, A, V, **kw)
    assert fresh._started == 0 and fresh.measured() is None


def test_thread_count_follows_the_cpus_and_the_blas_limit(monkeypatch):
    # a machine with 16 CPUs: 16 threads when BLAS may use 16, fewer under a lower limit
    # (threadpoolctl, or OMP_NUM_THREADS and the like, which set BLAS's limit), no constant cap
    monkeypatch.setattr(_kernels.os, "sched_getaffinity", lambda pid: set(range(16)),
                        raising=False)
    with threadpoolctl.threadpool_limits(limits=16, user_api="blas"):
        assert _kernels.thread_count() == 16
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
        assert _kernels.thread_count() == 3
    monkeypatch.setattr(_kernels.os, "sched_getaffinity", lambda pid: {3, 5}, raising=False)
    with threadpoolctl.threadpool_limits(limits=16, user_api="blas"):
        assert _kernels.thread_count() == 2


def _child_call(conn):
    (X, A, V), kw = SOFTMAX_CALLS[0]
    conn.send(attention.softmax(X, A, V, **kw))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork")
def test_a_forked_child_starts_its_own_workers(monkeypatch):
    # the parent's workers do not exist in a child made by fork: the child must not hand
    # blocks to them (it would wait forever)
    monkeypatch.setattr(_kernels._workers, "handoff", lambda: 0.0)
    (X, A, V), kw = SOFTMAX_CALLS[0]
    ref = attention.softmax(X, A, V, **kw)  # the parent's workers exist now
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child_call, args=(child,))
    proc.start()
    assert parent.poll(120), "the forked child did not finish"
    np.testing.assert_array_equal(parent.recv(), ref)
    proc.join(30)


def test_memory_of_a_call_does_not_grow_with_the_threads(monkeypatch):
    # chunks (d = 24): one buffer of logits on the calling thread, within the stated bound
    n, d = 2000, 24
    X, A, V = _problem(n, d, 20)
    peaks = []
    for threads in (1, 8):
        monkeypatch.setattr(_kernels, "thread_count", lambda threads=threads: threads)
        tracemalloc.start()
        attention.softmax(X, A, V)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] <= peaks[0] + 2**16
    rows = _kernels.default_rows(n, d, d)
    assert 8 * rows * n <= max(_kernels.cache_sizes()[1], 16 * d * n)
    # the block of logits, the projections A y_i and V x_j, the output, and little else
    assert peaks[0] <= 8 * (rows * n + 3 * n * d) + 2**20


def test_chunk_sizes_follow_the_caches_and_not_the_threads(monkeypatch):
    n, inner = 5000, 64
    sizes = []
    for threads in (1, 2, 16):
        monkeypatch.setattr(_kernels, "thread_count", lambda threads=threads: threads)
        sizes.append(_kernels.Plan(n, n, inner, inner, None).bounds())
    assert sizes[0] == sizes[1] == sizes[2]
    monkeypatch.setattr(_kernels, "cache_sizes", lambda: (2**15, 2**26))
    assert _kernels.default_rows(n, inner) == 2**26 // (8 * n)
    monkeypatch.setattr(_kernels, "cache_sizes", lambda: (2**15, 2**16))
    assert _kernels.default_rows(n, inner) == 2 * inner
    assert _kernels.default_rows(n, 8, 100) == 200
    assert _kernels.default_rows(10, 0) == 2**16 // 80


def test_cache_sizes_are_read_from_the_system_or_assumed():
    l1, l2 = _kernels.cache_sizes()
    assert 2**12 <= l1 <= l2
    assert _kernels.fused_tile(2, 2) == l1 // 48 and _kernels.fused_tile(16, 16) == l1 // 272
