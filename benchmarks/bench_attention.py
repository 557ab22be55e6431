r"""Softmax attention: the library against PyTorch and against the BLAS floor, on 1 and 2 CPUs.

``transformer_pde.attention.softmax`` (log-sum-exp, queries processed in chunks) is timed at
the same sizes as

- **PyTorch**: ``torch.nn.functional.scaled_dot_product_attention`` in float64 with
  ``scale=1``, queries :math:`A x_i`, keys :math:`x_j` and values :math:`V x_j` (the
  projections are computed inside the timed call, as the library computes them);
- **the BLAS floor**: the products no implementation can avoid, in NumPy: the projections
  ``X A^T`` and ``X V^T``, the logits ``(n, d) x (d, n)`` and the weighted values
  ``(n, n) x (n, d)``, in chunks of 512 queries (an ``n x n`` matrix would not fit at
  ``n = 16000``), with no exponential or normalisation.

**Each side runs in its own process** (this script with ``--side``), so that no other
library's idle threads (OpenBLAS and OpenMP keep theirs spinning for a while after a call)
take its cores. The process is bound with ``taskset -c 0`` (1 CPU) or ``taskset -c 0,1``
(2 CPUs), and every side's threads follow that affinity: NumPy's OpenBLAS and the library
(:func:`transformer_pde._kernels.thread_count`) read it, and PyTorch is given
``torch.set_num_threads(len(os.sched_getaffinity(0)))``. In each process, one untimed call
(whose output is checked afterwards on 256 query rows against a direct float64 evaluation:
full logits of those rows, ``exp`` after subtracting the row maximum, normalisation; both
sides must agree to ``1e-10`` relative to the largest output), then ``--repeats`` timed calls
(more at small ``n``, see :func:`repeats_at`); the processes of the three sides run in turn,
``--rounds`` times. Times are min and median over all timed calls. Then the peak memory of the
library at ``n = 10^5``, ``d = 2`` (the fused rows) and ``d = 64`` (chunks of queries)
(``tracemalloc`` for NumPy's allocations; the peak resident set of a fresh process), against
the 1 GiB budget.

Writes ``book/generated/bench_attention.md``, ``.json`` and ``.png`` (the performance appendix
of the book includes them).

Usage::

    python benchmarks/bench_attention.py           # n in {1000, 4000, 16000}, d in {2, 64, 384}
    python benchmarks/bench_attention.py --quick   # smaller sizes, no files written
"""

import argparse
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import _common  # noqa: E402

GIB = 2.0**30
MIB = 2.0**20
RTOL = 1e-10
CHECK_ROWS = 256
FLOOR_ROWS = 512
SIDES = ("library", "PyTorch", "floor")
#: The CPUs a side's process is bound to, by number of CPUs.
CPU_LISTS = {1: "0", 2: "0,1"}
#: The targets the report checks (medians): library / PyTorch, library / floor at d >= 64,
#: speed-up of the library from 1 to 2 CPUs at n >= 4000.
PEER_TARGET = 1.5
FLOOR_TARGET = 1.15
SCALING_TARGET = 1.7
#: Dimensions of the memory measurement at n = 10^5: the fused rows and chunks of queries.
MEMORY_DS = (2, 64)


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
    """Timed calls at ``n``: ``repeats`` times the square root of ``n_max / n``, rounded
    (6, 3 and 2 at n = 1000, 4000 and 16000 for the default 2)."""
    return max(repeats, round(repeats * (n_max / n) ** 0.5 * 0.75))


def side(name, n, d, repeats, clock="wall"):
    """In the side's own process: an untimed call, ``repeats`` timed calls, then the check
    of the untimed call's output; returns the times, the threads used and the error."""
    X, A, V = problem(n, d)
    cpus = _common.cpus()
    if name == "library":
        from transformer_pde import _kernels, attention

        def fn():
            return attention.softmax(X, A, V)

        threads = _kernels.thread_count()
    elif name == "PyTorch":
        import torch

        torch.set_num_threads(cpus)
        peer = torch_attention(torch, X, A, V)

        def fn():
            return peer().numpy()

        threads = torch.get_num_threads()
    else:
        from threadpoolctl import threadpool_info

        fn = floor_products(X, A, V)
        threads = max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
    out = fn()
    times = _common.timed(fn, repeats, clock)
    error = None
    if out is not None:  # checked after timing: the reference's products would compete
        rows = np.random.default_rng(2).choice(n, size=min(CHECK_ROWS, n), replace=False)
        ref = reference_rows(X, A, V, rows)
        error = float(np.abs(out[rows] - ref).max() / np.abs(ref).max())
    return dict(times=times, cpus=cpus, threads=threads, error=error)


def measure(n, d, cpus, repeats, rounds, clock="wall"):
    """The three sides at ``(n, d)`` on ``cpus`` CPUs, each in its own process."""
    row = dict(n=n, d=d, cpus=cpus, repeats=repeats * rounds)
    times = {name: [] for name in SIDES}
    for _ in range(rounds):
        for name in SIDES:
            res = _common.run_side(Path(__file__), ["--side", name, "--n", n, "--d", d,
                                                    "--repeats", repeats, "--clock", clock],
                                   CPU_LISTS[cpus])
            assert res["cpus"] == cpus, (name, res)
            times[name] += res["times"]
            row[f"threads_{name}"] = res["threads"]
            if res["error"] is not None:
                assert res["error"] <= RTOL, (name, n, d, res["error"])
                row[f"error_{name}"] = res["error"]
    for name in SIDES:
        row[name] = _common.stats(times[name])
    lib, peer, floor = (row[name] for name in SIDES)
    print(f"{cpus} CPU n={n:6d} d={d:4d}  library {1e3 * lib[0]:9.2f} ms  PyTorch "
          f"{1e3 * peer[0]:9.2f} ms  floor {1e3 * floor[0]:9.2f} ms  library/PyTorch "
          f"{lib[0] / peer[0]:5.2f} (median {lib[1] / peer[1]:5.2f})  library/floor "
          f"{lib[0] / floor[0]:5.2f} (median {lib[1] / floor[1]:5.2f})  threads "
          f"{row['threads_library']}/{row['threads_PyTorch']}/{row['threads_floor']}",
          flush=True)
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
    """Peak memory of one call: the tracemalloc peak, and the resident set of a fresh process
    on 1 and on 2 CPUs (before and after the call), in bytes."""
    from transformer_pde import attention

    X, A, V = problem(n, d)
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    attention.softmax(X, A, V)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    rss = {}
    for cpus, cpu_list in CPU_LISTS.items():
        res = subprocess.run(["taskset", "-c", cpu_list, sys.executable, "-c", CHILD, str(n),
                              str(d)], capture_output=True, text=True, check=True)
        rss[cpus] = tuple(int(v) * 1024 for v in res.stdout.split())  # KiB on Linux
        print(f"memory n={n} d={d}: tracemalloc peak {peak / MIB:.1f} MiB, fresh-process peak "
              f"RSS on {cpus} CPU {rss[cpus][1] / MIB:.1f} MiB ({rss[cpus][0] / MIB:.1f} MiB "
              f"before the call)", flush=True)
        assert rss[cpus][1] < GIB, "softmax exceeded the 1 GiB memory budget"
    return peak, rss


def _ms(t):
    """Milliseconds, 3 significant digits without exponents."""
    t = 1e3 * t
    return f"{t:.0f}" if t >= 100 else f"{t:.3g}"


def _pair(a, b):
    return f"{a[0] / b[0]:.2f} / {a[1] / b[1]:.2f}"


def _table(rows):
    header = ["n", "d", "library ms", "PyTorch ms", "floor ms", "library / PyTorch",
              "library / floor", "threads", "errors: library / PyTorch"]
    body = [[r["n"], r["d"], *(f"{_ms(r[k][0])} / {_ms(r[k][1])}" for k in SIDES),
             _pair(r["library"], r["PyTorch"]), _pair(r["library"], r["floor"]),
             f"{r['threads_library']} / {r['threads_PyTorch']} / {r['threads_floor']}",
             f"{r['error_library']:.1e} / {r['error_PyTorch']:.1e}"] for r in rows]
    return _common.markdown_table(header, body)


def _scaling(one, two):
    header = ["n", "d", "library", "PyTorch", "floor"]
    body = []
    for a, b in zip(one, two, strict=True):
        body.append([a["n"], a["d"], *(_pair(a[k], b[k]) for k in SIDES)])
    return _common.markdown_table(header, body)


def _sizes(pairs):
    return ", ".join(f"(n = {n}, d = {d})" for n, d in pairs) or "none"


def report(rows, mem, n_mem, machine):
    two = [r for r in rows if r["cpus"] == 2]
    one = [r for r in rows if r["cpus"] == 1]
    runs = ", ".join(f"{k} at n = {n}" for n, k in sorted({r["n"]: r["repeats"]
                                                              for r in rows}.items()))
    slower = [(r["n"], r["d"]) for r in two
              if r["library"][1] > PEER_TARGET * r["PyTorch"][1]]
    off_floor = [(r["n"], r["d"]) for r in two
                 if r["d"] >= 64 and r["library"][1] > FLOOR_TARGET * r["floor"][1]]
    text = (f"{machine} Float64. Each side in its own process, bound to 1 CPU "
            f"(`taskset -c 0`) or 2 (`taskset -c 0,1`), its threads following that affinity "
            f"(the threads column: library / PyTorch / NumPy's BLAS). Times are min / median "
            f"over the timed calls ({runs}: more at small n, whose short calls vary more), in "
            f"milliseconds; ratios are library time / other time (below 1: the library is "
            f"faster). Errors: largest deviation from a direct float64 evaluation on "
            f"{CHECK_ROWS} query rows, relative to the largest output.\n\n"
            f"**2 CPUs**\n\n{_table(two)}\n\n")
    if one:
        not_scaling = [(a["n"], a["d"]) for a, b in zip(one, two, strict=True)
                       if a["n"] >= 4000 and a["library"][1] / b["library"][1] < SCALING_TARGET]
        text += (f"**1 CPU**\n\n{_table(one)}\n\n"
                 f"**Speed-up from 1 to 2 CPUs** (time on 1 CPU / time on 2, min / median)\n\n"
                 f"{_scaling(one, two)}\n\n"
                 f"Sizes with n ≥ 4000 where the library's median speed-up is below "
                 f"{SCALING_TARGET}: {_sizes(not_scaling)}. ")
    text += (f"Sizes where the library's median time on 2 CPUs is above {PEER_TARGET}× "
             f"PyTorch's: {_sizes(slower)}. Sizes with d ≥ 64 where it is above "
             f"{FLOOR_TARGET}× the floor: {_sizes(off_floor)}.\n\n")
    text += (f"Memory at n = {n_mem:,} (one dense n × n float64 matrix would take "
             f"{8 * n_mem**2 / GIB:.0f} GiB): ")
    parts = []
    for d, (peak, rss) in mem.items():
        resident = " and ".join(f"{rss[c][1] / MIB:.0f} MiB on {c} CPU{'s' if c > 1 else ''}"
                                for c in sorted(rss))
        before = max(r[0] for r in rss.values())
        parts.append(f"at d = {d}, NumPy allocations during the call peak at {peak / MIB:.0f} "
                     f"MiB (tracemalloc; the input X takes {8 * n_mem * d / MIB:.1f} MiB) and "
                     f"a fresh process running the call peaks at {resident} resident (at most "
                     f"{before / MIB:.0f} MiB before it: interpreter, NumPy, SciPy, data)")
    text += "; ".join(parts) + ".\n"
    return text


def figure(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from transformer_pde.plotting import use_house_style

    use_house_style()
    rows = [r for r in rows if r["cpus"] == 2]
    ns = sorted({r["n"] for r in rows})
    ds = sorted({r["d"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(6.8, 2.8), sharey=False)
    width = 0.8 / len(ns)
    x = np.arange(len(ds))
    for ax, key, title, target in ((axes[0], "PyTorch", "library / PyTorch", PEER_TARGET),
                                   (axes[1], "floor", "library / BLAS floor", FLOOR_TARGET)):
        for k, n in enumerate(ns):
            sel = {r["d"]: r for r in rows if r["n"] == n}
            med = [sel[d]["library"][1] / sel[d][key][1] if d in sel else np.nan for d in ds]
            ax.bar(x + (k - (len(ns) - 1) / 2) * width, med, width=width, label=f"n = {n}")
        ax.axhline(target, color="k", ls="--", lw=1)
        ax.set_xticks(x, [f"d = {d}" for d in ds])
        ax.set_ylabel(f"{title}\n(median time ratio, 2 CPUs)")
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
    parser.add_argument("--repeats", type=int, default=2,
                        help="timed calls per process at the largest n (more at smaller n)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="processes per side, size and number of CPUs, run in turn")
    parser.add_argument("--cpus", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    parser.add_argument("--ns", type=int, nargs="+", default=[1000, 4000, 16000])
    parser.add_argument("--ds", type=int, nargs="+", default=[2, 64, 384])
    parser.add_argument("--merge", action="store_true",
                        help="re-measure only --ns x --ds (both CPU counts) and keep the other "
                             "rows of book/generated/bench_attention.json")
    parser.add_argument("--no-write", action="store_true", help="do not write book/generated")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: processor time, with --cpus 1 and --no-write only (a "
                             "machine shared with other work)")
    parser.add_argument("--figure-only", action="store_true",
                        help="redraw the figure from the stored JSON, no timing")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--d", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # a side's own process
        print(json.dumps(side(args.side, args.n, args.d, args.repeats, args.clock)))
        return
    if args.figure_only:
        stored = json.loads((_common.GENERATED / "bench_attention.json").read_text())
        figure(stored["rows"], _common.GENERATED / "bench_attention.png")
        return
    if len(os.sched_getaffinity(0)) < max(args.cpus):
        sys.exit(f"bench_attention: {max(args.cpus)} CPUs needed, this process may use "
                 f"{len(os.sched_getaffinity(0))}")
    import torch

    if args.quick:
        ns, ds, n_mem = (500, 2000), (2, 64), 20_000
    else:
        ns, ds, n_mem = args.ns, args.ds, 100_000
    machine = _common.machine_line(torch)
    print(machine)
    if args.clock == "cpu" and (args.cpus != [1] or not args.no_write):
        parser.error("--clock cpu needs --cpus 1 and --no-write")
    rows = [measure(n, d, cpus, repeats_at(n, args.repeats, 16000), args.rounds, args.clock)
            for cpus in sorted(args.cpus) for n in ns for d in ds]
    saved = _common.GENERATED / "bench_attention.json"
    if args.merge and saved.exists():
        stored = json.loads(saved.read_text())
        new = {(r["cpus"], r["n"], r["d"]) for r in rows}
        rows = sorted(rows + [r for r in stored["rows"] if (r["cpus"], r["n"], r["d"]) not in new],
                      key=lambda r: (r["cpus"], r["n"], r["d"]))
        machine = (stored["machine"] + " The rows for "
                   + ", ".join(f"(n = {n}, d = {d})" for n in ns for d in ds)
                   + f" come from a later run (load average {os.getloadavg()[0]:.1f}).")
    mem = {d: memory(n_mem, d) for d in MEMORY_DS}
    text = report(rows, mem, n_mem, machine)
    print(text)
    if not args.no_write and not args.quick:
        _common.write_result("attention", text)
        (_common.GENERATED / "bench_attention.json").write_text(
            json.dumps({"machine": machine, "rows": rows}, indent=1))
        figure(rows, _common.GENERATED / "bench_attention.png")


if __name__ == "__main__":
    main()
