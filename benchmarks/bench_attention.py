"""Speed and memory of softmax attention, against its floor and a naive dense implementation.

Softmax attention ``transformer_pde.attention.softmax`` costs ``O(n^2 d)`` work. This script
measures, in the same run and at the same sizes:

- **softmax**: the library function (log-sum-exp, queries processed in chunks);
- **floor**: the two matrix products no implementation can avoid, the logits
  ``(n, d) x (d, n)`` and the values ``(n, n) x (n, d)``, chunked over queries exactly like
  the library (so the same BLAS shapes), with no exponential or normalisation;
- **naive**: a dense NumPy implementation (full ``n x n`` logits, ``exp``, row normalisation,
  one product), skipped where its arrays would exceed ``--dense-limit-gib``.

It prints the best of ``--repeats`` wall-clock times (``time.perf_counter``) and the ratios
softmax/floor and softmax/naive, then the peak memory of softmax at ``n = 10^5``, ``d = 2``
(``tracemalloc`` for NumPy's allocations, and the peak resident set size of a fresh
subprocess: ``VmHWM`` of ``/proc/self/status`` on Linux, else ``resource.getrusage``)
against the 1 GiB budget and the ``8 n^2`` bytes of one dense ``n x n`` float64 matrix.

Usage::

    python benchmarks/bench_attention.py           # n in {1000, 4000, 16000}, d in {2, 64, 384}
    python benchmarks/bench_attention.py --quick   # smaller sizes, seconds

Timings depend on the machine, its load and its BLAS threads: compare the ratios, which are
measured in the same run. On a shared machine, ``OPENBLAS_NUM_THREADS=1`` gives steadier numbers.
"""

import argparse
import os
import subprocess
import sys
import time
import tracemalloc

import numpy as np
from transformer_pde import attention

GIB = 2.0**30
MIB = 2.0**20


def best_times(fns, repeats):
    """Best of ``repeats`` wall-clock times of each ``fn()``, in seconds.

    The functions run in turn within each repeat, so a change of machine load affects them
    alike and their ratios stay meaningful.
    """
    best = [np.inf] * len(fns)
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - start)
    return best


def problem(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    A = rng.normal(size=(d, d)) / d  # logits of order one
    V = rng.normal(size=(d, d)) / np.sqrt(d)
    return X, A, V


def floor_products(X, A, V):
    """A closure doing only the unavoidable products, chunked over queries like the library."""
    n, d = X.shape
    chunk = max(1, attention.DEFAULT_BLOCK_ELEMENTS // n)
    AX = X @ A.T
    values = X @ V.T
    block = np.random.default_rng(1).random((chunk, n))  # stands for the exponentiated logits

    def run():
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            AX[start:stop] @ X.T  # (c, d) x (d, n): logits
            block[: stop - start] @ values  # (c, n) x (n, d): weighted values

    return run


def naive_softmax(X, A, V):
    """Dense softmax attention: full (n, n) logits, no chunking."""
    L = (X @ A.T) @ X.T
    L -= L.max(axis=1, keepdims=True)
    E = np.exp(L)
    return (E / E.sum(axis=1, keepdims=True)) @ (X @ V.T)


def naive_bytes(n):
    """Peak of :func:`naive_softmax`: the logits, their exponential and the normalised copy."""
    return 3 * 8 * n * n


def time_table(ns, ds, repeats, dense_limit_gib):
    print(f"Softmax attention: best of {repeats} runs, times in milliseconds")
    header = (f"{'n':>6} {'d':>4} {'softmax':>9} {'floor':>9} {'naive':>9} "
              f"{'softmax/floor':>14} {'softmax/naive':>14}")
    print(header)
    print("-" * len(header))
    skipped = []
    for n in ns:
        for d in ds:
            X, A, V = problem(n, d)
            fns = [lambda X=X, A=A, V=V: attention.softmax(X, A, V), floor_products(X, A, V)]
            dense = naive_bytes(n) <= dense_limit_gib * GIB
            if dense:
                ref = naive_softmax(X, A, V)
                err = np.abs(ref - attention.softmax(X, A, V)).max()
                assert err < 1e-10 * max(1.0, np.abs(ref).max()), err
                del ref
                fns.append(lambda X=X, A=A, V=V: naive_softmax(X, A, V))
            t_att, t_floor, *t_naive = best_times(fns, repeats)
            if dense:
                naive_col = f"{1e3 * t_naive[0]:9.2f}"
                ratio_naive = f"{t_att / t_naive[0]:14.2f}"
            else:
                skipped.append(n)
                naive_col = f"{'skipped':>9}"
                ratio_naive = f"{'-':>14}"
            print(f"{n:6d} {d:4d} {1e3 * t_att:9.2f} {1e3 * t_floor:9.2f} {naive_col} "
                  f"{t_att / t_floor:14.2f} {ratio_naive}")
    for n in sorted(set(skipped)):
        print(f"naive skipped at n = {n}: its dense arrays need {naive_bytes(n) / GIB:.1f} GiB "
              f"> {dense_limit_gib:g} GiB")


CHILD = """
import resource, sys
import numpy as np
from transformer_pde import attention


def peak_rss_kib():
    # VmHWM: peak resident set of this process image (reset by exec, unlike ru_maxrss, which
    # Linux carries over from the parent that spawned us)
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


n, d = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
X = rng.normal(size=(n, d)); A = rng.normal(size=(d, d)) / d; V = rng.normal(size=(d, d))
before = peak_rss_kib()
out = attention.softmax(X, A, V)
after = peak_rss_kib()
print(before, after)
"""


def memory_report(n, d):
    X, A, V = problem(n, d)
    dense = 8 * n * n
    print(f"\nPeak memory of softmax attention at n = {n}, d = {d} "
          f"(budget 1024 MiB; one dense n x n float64 matrix: {dense / MIB:,.0f} MiB)")
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    elapsed = best_times([lambda: attention.softmax(X, A, V)], 1)[0]
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    print(f"  tracemalloc peak of NumPy allocations during the call: {peak / MIB:8.1f} MiB "
          f"({peak / GIB:.3f} of the 1 GiB budget, {peak / dense:.2e} of dense) [{elapsed:.1f} s]")
    # resident set size of a fresh process: includes the interpreter, NumPy and SciPy
    res = subprocess.run([sys.executable, "-c", CHILD, str(n), str(d)], capture_output=True,
                         text=True, check=True)
    before, after = (int(v) * 1024 for v in res.stdout.split())  # both are in KiB on Linux
    print(f"  peak RSS of a fresh process (interpreter, NumPy, SciPy, data, call): "
          f"{after / MIB:.1f} MiB ({before / MIB:.1f} MiB before the call)")
    assert after < GIB, "softmax exceeded the 1 GiB memory budget"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (n in {500, 1000, 2000}, d in {2, 64}; memory at "
                             "n = 20000)")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    parser.add_argument("--memory-only", action="store_true", help="skip the timing table")
    parser.add_argument("--dense-limit-gib", type=float, default=4.0,
                        help="skip the naive dense baseline above this memory")
    args = parser.parse_args()
    if args.quick:
        ns, ds, n_mem = (500, 1000, 2000), (2, 64), 20_000
    else:
        ns, ds, n_mem = (1000, 4000, 16000), (2, 64, 384), 100_000
    threads = os.environ.get("OPENBLAS_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "default"))
    print(f"NumPy {np.__version__}, BLAS threads: {threads}")
    if not args.memory_only:
        time_table(ns, ds, args.repeats, args.dense_limit_gib)
    memory_report(n_mem, 2)


if __name__ == "__main__":
    main()
