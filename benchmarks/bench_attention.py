r"""Softmax attention: the library against PyTorch and against its two-GEMM floor.

``transformer_pde.attention.softmax`` (log-sum-exp, queries processed in chunks) is timed, in
the same run and at the same sizes, against

- **PyTorch**: ``torch.nn.functional.scaled_dot_product_attention`` in float64 with
  ``scale=1``, queries :math:`A x_i`, keys :math:`x_j` and values :math:`V x_j` (the
  projections are computed inside the timed call, as the library computes them);
- **floor**: the two matrix products no implementation can avoid, the logits
  ``(n, d) x (d, n)`` and the values ``(n, n) x (n, d)``, in chunks of 512 queries (large
  enough for efficient products, and an ``n x n`` matrix would not fit at ``n = 16000``),
  with no exponential or normalisation.

Both NumPy's BLAS and PyTorch use 2 threads (``OPENBLAS_NUM_THREADS=2``,
``torch.set_num_threads(2)``). Before timing, the library's and PyTorch's outputs are
compared on 256 query rows with a direct float64 evaluation (full logits of those rows,
``exp`` after subtracting the row maximum, normalisation); both must agree to ``1e-10``
relative to the largest output. Times are min and median over interleaved runs (library,
PyTorch and floor alternate): ``--repeats`` at the largest ``n``, more at smaller ones (see
:func:`repeats_at`), whose short calls vary more from run to run. Then the peak memory of
the library at ``n = 10^5``, ``d = 2`` (``tracemalloc`` for NumPy's allocations; the peak
resident set of a fresh process), against the 1 GiB budget.

Writes ``book/generated/bench_attention.md`` and ``.png`` (the performance appendix of
the book includes them).

Usage::

    python benchmarks/bench_attention.py           # n in {1000, 4000, 16000}, d in {2, 64, 384}
    python benchmarks/bench_attention.py --quick   # smaller sizes, no files written
"""

import os

THREADS = 2
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(THREADS))
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))

import argparse  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import _common  # noqa: E402
from transformer_pde import attention  # noqa: E402

GIB = 2.0**30
MIB = 2.0**20
RTOL = 1e-10
CHECK_ROWS = 256
FLOOR_TARGET = 1.3
FLOOR_ROWS = 512


def problem(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    A = rng.normal(size=(d, d)) / d  # logits of order one
    V = rng.normal(size=(d, d)) / np.sqrt(d)
    return X, A, V


def reference_rows(X, A, V, rows):
    """Direct float64 softmax attention of the query rows ``rows`` (full logits of each)."""
    L = (X[rows] @ A.T) @ X.T
    L -= L.max(axis=1, keepdims=True)
    E = np.exp(L)
    return (E / E.sum(axis=1, keepdims=True)) @ (X @ V.T)


def floor_products(X, A, V):
    """A closure doing only the unavoidable products, chunked over queries."""
    n, d = X.shape
    chunk = min(n, FLOOR_ROWS)
    block = np.random.default_rng(1).random((chunk, n))  # stands for the exponentials

    def run():
        AX = X @ A.T
        values = X @ V.T
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            AX[start:stop] @ X.T  # (c, d) x (d, n): logits
            block[: stop - start] @ values  # (c, n) x (n, d): weighted values

    return run


def torch_attention(torch, X, A, V):
    """``scaled_dot_product_attention`` with queries A x_i, keys x_j, values V x_j."""
    F = torch.nn.functional
    Xt, At, Vt = (torch.from_numpy(np.ascontiguousarray(M)) for M in (X, A, V))

    def run():
        q = (Xt @ At.T)[None, None]
        v = (Xt @ Vt.T)[None, None]
        return F.scaled_dot_product_attention(q, Xt[None, None], v, scale=1.0)[0, 0]

    return run


def repeats_at(n, repeats, n_max):
    """Interleaved runs at ``n``: ``repeats`` times the square root of ``n_max / n``,
    rounded (20, 10 and 5 at n = 1000, 4000 and 16000 for the default 5)."""
    return max(repeats, round(repeats * (n_max / n) ** 0.5))


def measure(torch, n, d, repeats):
    X, A, V = problem(n, d)
    ours = lambda: attention.softmax(X, A, V)  # noqa: E731
    peer = torch_attention(torch, X, A, V)
    floor = floor_products(X, A, V)
    rows = np.random.default_rng(2).choice(n, size=min(CHECK_ROWS, n), replace=False)
    ref = reference_rows(X, A, V, rows)
    scale = np.abs(ref).max()
    err_ours = np.abs(ours()[rows] - ref).max() / scale
    err_peer = np.abs(peer().numpy()[rows] - ref).max() / scale
    assert err_ours <= RTOL, ("library", n, d, err_ours)
    assert err_peer <= RTOL, ("PyTorch", n, d, err_peer)
    t_ours, t_peer, t_floor = _common.interleaved([ours, peer, floor], repeats)
    row = dict(n=n, d=d, repeats=repeats, ours=_common.stats(t_ours), peer=_common.stats(t_peer),
               floor=_common.stats(t_floor), err_ours=err_ours, err_peer=err_peer)
    vs_peer = [row["ours"][k] / row["peer"][k] for k in range(2)]
    vs_floor = [row["ours"][k] / row["floor"][k] for k in range(2)]
    print(f"n={n:6d} d={d:4d}  library {1e3 * row['ours'][0]:9.2f} ms  PyTorch "
          f"{1e3 * row['peer'][0]:9.2f} ms  floor {1e3 * row['floor'][0]:9.2f} ms  "
          f"library/PyTorch {vs_peer[0]:5.2f} (median {vs_peer[1]:5.2f})  library/floor "
          f"{vs_floor[0]:5.2f} (median {vs_floor[1]:5.2f})  errors {err_ours:.1e}, "
          f"{err_peer:.1e}", flush=True)
    return row


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


def memory(n, d):
    """Peak memory of one call: (tracemalloc peak, RSS before, RSS after), in bytes."""
    X, A, V = problem(n, d)
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    attention.softmax(X, A, V)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    res = subprocess.run([sys.executable, "-c", CHILD, str(n), str(d)], capture_output=True,
                         text=True, check=True)
    before, after = (int(v) * 1024 for v in res.stdout.split())  # KiB on Linux
    print(f"memory n={n} d={d}: tracemalloc peak {peak / MIB:.1f} MiB, fresh-process peak RSS "
          f"{after / MIB:.1f} MiB ({before / MIB:.1f} MiB before the call)", flush=True)
    assert after < GIB, "softmax exceeded the 1 GiB memory budget"
    return peak, before, after


def report(rows, mem, n_mem, machine):
    header = ["n", "d", "library ms", "PyTorch ms", "floor ms", "library / PyTorch",
              "library / floor", "errors: library / PyTorch"]

    def ms(t):  # milliseconds, 3 significant digits without exponents
        t = 1e3 * t
        return f"{t:.0f}" if t >= 100 else f"{t:.3g}"

    body = []
    for r in rows:
        body.append([r["n"], r["d"],
                     f"{ms(r['ours'][0])} / {ms(r['ours'][1])}",
                     f"{ms(r['peer'][0])} / {ms(r['peer'][1])}",
                     f"{ms(r['floor'][0])} / {ms(r['floor'][1])}",
                     f"{r['ours'][0] / r['peer'][0]:.2f} / {r['ours'][1] / r['peer'][1]:.2f}",
                     f"{r['ours'][0] / r['floor'][0]:.2f} / {r['ours'][1] / r['floor'][1]:.2f}",
                     f"{r['err_ours']:.1e} / {r['err_peer']:.1e}"])
    peak, before, after = mem
    slower = [(r["n"], r["d"]) for r in rows if r["ours"][1] > r["peer"][1]]
    off_floor = [(r["n"], r["d"]) for r in rows
                 if r["d"] >= 64 and r["ours"][1] > FLOOR_TARGET * r["floor"][1]]

    def sizes(lst):
        return ", ".join(f"(n = {n}, d = {d})" for n, d in lst) or "none"

    def runs(rows):
        per_n = {r["n"]: r["repeats"] for r in rows}
        return ", ".join(f"{k} at n = {n}" for n, k in sorted(per_n.items()))

    return (f"{machine} Float64; NumPy's BLAS and PyTorch on {THREADS} threads. Every "
            f"time and ratio is min / median over interleaved runs ({runs(rows)}: more at "
            f"small n, whose short calls vary more); times in "
            f"milliseconds, ratios are library time / peer time (below 1: the library is "
            f"faster). Errors: largest deviation from a direct float64 evaluation on "
            f"{CHECK_ROWS} query rows, relative to the largest output.\n\n"
            + _common.markdown_table(header, body) + "\n\n"
            f"Sizes where the library's median time is above PyTorch's: {sizes(slower)}. "
            f"Sizes with d ≥ 64 where it is above {FLOOR_TARGET}× the floor (median): "
            f"{sizes(off_floor)}.\n\n"
            f"Memory at n = {n_mem:,}, d = 2 (one dense n × n float64 matrix would take "
            f"{8 * n_mem**2 / GIB:.0f} GiB): NumPy allocations during the call peak at "
            f"{peak / MIB:.0f} MiB (tracemalloc); a fresh process running the call peaks at "
            f"{after / MIB:.0f} MiB resident ({before / MIB:.0f} MiB before it: interpreter, "
            f"NumPy, SciPy, data).\n")


def figure(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from transformer_pde.plotting import use_house_style

    use_house_style()
    ns = sorted({r["n"] for r in rows})
    ds = sorted({r["d"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(6.8, 2.8), sharey=False)
    width = 0.8 / len(ns)
    x = np.arange(len(ds))
    for ax, key, title, target in ((axes[0], "peer", "library / PyTorch", 1.0),
                                   (axes[1], "floor", "library / two-GEMM floor", FLOOR_TARGET)):
        for k, n in enumerate(ns):
            sel = {r["d"]: r for r in rows if r["n"] == n}
            med = [sel[d]["ours"][1] / sel[d][key][1] if d in sel else np.nan for d in ds]
            ax.bar(x + (k - (len(ns) - 1) / 2) * width, med, width=width, label=f"n = {n}")
        ax.axhline(target, color="k", ls="--", lw=1)
        ax.set_xticks(x, [f"d = {d}" for d in ds])
        ax.set_ylabel(f"{title}\n(median time ratio)")
    top = max(ax.get_ylim()[1] for ax in axes)
    for ax in axes:  # room above the bars for the legend, clear of the target line
        ax.set_ylim(0, 1.3 * top)
    axes[0].legend(fontsize=9, ncols=len(ns), loc="upper left", columnspacing=0.8,
                   handlelength=1.2, handletextpad=0.4, borderaxespad=0.3)
    fig.savefig(path)
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="n in {500, 2000}, d in {2, 64}, memory at n = 20000; no files")
    parser.add_argument("--repeats", type=int, default=5,
                        help="interleaved runs at the largest n (more at smaller n)")
    parser.add_argument("--no-write", action="store_true", help="do not write book/generated")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(THREADS)
    if args.quick:
        ns, ds, n_mem = (500, 2000), (2, 64), 20_000
    else:
        ns, ds, n_mem = (1000, 4000, 16000), (2, 64, 384), 100_000
    machine = _common.machine_line(torch)
    print(machine)
    rows = [measure(torch, n, d, repeats_at(n, args.repeats, max(ns))) for n in ns for d in ds]
    mem = memory(n_mem, 2)
    text = report(rows, mem, n_mem, machine)
    print(text)
    if not args.no_write and not args.quick:
        _common.write_result("attention", text)
        figure(rows, _common.GENERATED / "bench_attention.png")


if __name__ == "__main__":
    main()
