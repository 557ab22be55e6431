r"""The kernels' size rules against their alternatives, on several CPU kernels and CPU counts.

The library sizes its work from the machine it runs on (``transformer_pde._kernels``):
chunks of queries from the second-level cache and the products' arithmetic intensity
(:func:`~transformer_pde._kernels.default_rows`), the tiles of the fused rows from the
first-level cache (:func:`~transformer_pde._kernels.fused_tile`), and it shares rows between
threads only when its own timing says that pays. Two rules are dimension thresholds: the
fused pass for logits of inner dimension ``k`` and ``p`` value coordinates with
``k + p <= 8``, and the float32 phase of ``local_lipschitz`` from 128 tokens on. This
script checks each choice against alternatives at the same sizes, each configuration **in
its own process**, under

- ``native``: the CPU's own kernels;
- ``haswell``: ``OPENBLAS_CORETYPE=Haswell`` (OpenBLAS's AVX2 kernels) and
  ``NUMBA_CPU_NAME=generic`` (the compiled kernels for a baseline x86-64, SSE2);
- ``sandybridge``: ``OPENBLAS_CORETYPE=Sandybridge`` (AVX without FMA) and
  ``NUMBA_CPU_NAME=generic``,

each on 1 CPU (``taskset -c 0``) and on 2 (``taskset -c 0,1``). (The cache sizes stay those
of the host: these settings change the instructions, not the memory hierarchy.)

Experiments (times: the median of interleaved calls, alternatives taking turns; with
``--clock cpu``, for a machine shared with other work, the least processor time of the
process over the calls instead, on 1 CPU only: the work done, not the time waited):

1. ``chunks``: ``attention.softmax`` at d = 64 and 384 with ``chunk_size`` the default
   and 1/4, 1/2, 2 and 4 times it; reported as default time / best time.
2. ``fused``: logits and values of dimension k = 2 to 16 at n = 4000, through the fused pass
   and through chunks; reported as fused time / chunked time (below 1: the fused pass is
   faster).
3. ``tile``: the fused pass at n = 16000, d = 2 and 4 with tiles of 1/4 to 4 times the
   default and whole rows; default time / best time.
4. ``float32``: ``local_lipschitz`` (``tol=1e-6``, d = 384, Gaussian and clustered tokens of
   ``bench_lipschitz.py``) at n = 64 to 256 with the float32 phase and without; time with /
   time without, and the products of each.

Writes ``book/generated/bench_tuning.md`` and ``.json`` (the performance appendix includes
them); ``--quick``: fewer sizes and calls, no files.

Usage::

    python benchmarks/check_tuning.py
    python benchmarks/check_tuning.py --settings native --cpus 2 --experiments chunks
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import _common  # noqa: E402

SETTINGS = {
    "native": {},
    "haswell": {"OPENBLAS_CORETYPE": "Haswell", "NUMBA_CPU_NAME": "generic"},
    "sandybridge": {"OPENBLAS_CORETYPE": "Sandybridge", "NUMBA_CPU_NAME": "generic"},
}
CPU_LISTS = {1: "0", 2: "0,1"}
EXPERIMENTS = ("chunks", "fused", "tile", "float32")
MULTIPLES = (0.25, 0.5, 1, 2, 4)


def _problem(n, d, p=None, seed=0):
    rng = np.random.default_rng(seed)
    p = d if p is None else p
    return (rng.normal(size=(n, d)), rng.normal(size=(d, d)) / d,
            rng.normal(size=(p, d)) / np.sqrt(d))


#: ``"wall"``: median wall-clock time; ``"cpu"``: least processor time of the process.
CLOCK = "wall"


def _interleaved(fns, calls):
    """Time of each of ``fns`` (a dict), called in turn ``calls`` times after one untimed
    call each (see :data:`CLOCK`)."""
    clock = time.process_time if CLOCK == "cpu" else time.perf_counter
    for fn in fns.values():
        fn()
    times = {key: [] for key in fns}
    for _ in range(calls):
        for key, fn in fns.items():
            start = clock()
            fn()
            times[key].append(clock() - start)
    pick = np.min if CLOCK == "cpu" else np.median
    return {key: float(pick(ts)) for key, ts in times.items()}


def chunks(quick):
    from transformer_pde import _kernels, attention

    sizes = [(1000, 64), (4000, 64)] if quick else [(1000, 64), (4000, 64), (16000, 64),
                                                   (1000, 384), (4000, 384)]
    rows = []
    for n, d in sizes:
        X, A, V = _problem(n, d)
        default = _kernels.default_rows(n, d, d)
        sizes_ = sorted({max(1, round(f * default)) for f in MULTIPLES})
        calls = max(3, min(15, int(2e9 / (n * n * d))))
        med = _interleaved({c: (lambda c=c, X=X, A=A, V=V:
                                attention.softmax(X, A, V, chunk_size=c))
                            for c in sizes_}, 2 if quick else calls)
        best = min(med, key=med.get)
        rows.append(dict(n=n, d=d, default=default, best=best, times=med,
                         ratio=med[default] / med[best]))
    return rows


def fused(quick):
    from transformer_pde import _kernels

    n = 2000 if quick else 4000
    rows = []
    for k in ((2, 8) if quick else (2, 3, 4, 5, 6, 8, 12, 16)):
        X, A, V = _problem(n, k, seed=k)
        AY, VX = X @ A.T, X @ V.T

        def run(fused, AY=AY, VX=VX, X=X, k=k):
            plan = _kernels.Plan(n, n, k, k, None)
            plan.fused = fused
            block = _block(AY, X)
            return plan.average(block, VX, None, False)

        med = _interleaved({"fused": lambda run=run: run(True),
                            "chunks": lambda run=run: run(False)}, 3 if quick else 9)
        rows.append(dict(n=n, k=k, times=med, ratio=med["fused"] / med["chunks"],
                         default="fused" if 2 * k <= _kernels._FUSED_MAX_TERMS
                         else "chunks"))
    return rows


def _block(AY, X):
    def block(start, stop, ncols, out=None):
        return np.matmul(AY[start:stop], X[:ncols].T, out=out)

    block.factors = (AY, X.T)
    return block


def tile(quick):
    from transformer_pde import _kernels, attention

    n = 4000 if quick else 16000
    original = _kernels.fused_tile
    rows = []
    for d in (2, 4):
        X, A, V = _problem(n, d)
        default = _kernels.fused_tile(d, d)
        tiles = sorted({max(8, round(f * default)) for f in MULTIPLES} | {n})

        def run(t, X=X, A=A, V=V):
            _kernels.fused_tile = lambda inner, p: t
            try:
                return attention.softmax(X, A, V)
            finally:
                _kernels.fused_tile = original

        med = _interleaved({t: (lambda t=t, run=run: run(t)) for t in tiles},
                           2 if quick else 7)
        best = min(med, key=med.get)
        rows.append(dict(n=n, d=d, default=default, best=best, times=med,
                         ratio=med[default] / med[best]))
    return rows


def float32(quick):
    import bench_lipschitz as bl
    from transformer_pde import _lanczos, lipschitz

    rows = []
    for name, build in (("Gaussian", bl.gaussian), ("clustered", bl.clustered)):
        for n in ((64, 128) if quick else (64, 96, 128, 192, 256)):
            X, A, V = build(n)
            products, fns = {}, {}
            for mode, threshold in (("mixed", 0), ("float64", 10**9)):
                def call(threshold=threshold, mode=mode, X=X, A=A, V=V, products=products):
                    saved = _lanczos._MIXED_PRECISION_MIN_TOKENS
                    _lanczos._MIXED_PRECISION_MIN_TOKENS = threshold
                    try:
                        res = lipschitz.local_lipschitz(X, A, V, tol=bl.TOL,
                                                        return_vectors=True)
                    finally:
                        _lanczos._MIXED_PRECISION_MIN_TOKENS = saved
                    products[mode] = res.matvecs
                    return res

                fns[mode] = call
            med = _interleaved(fns, 2 if quick else 7)
            rows.append(dict(workload=name, n=n, times=med, products=products,
                             ratio=med["mixed"] / med["float64"],
                             default="mixed" if n >= _lanczos._MIXED_PRECISION_MIN_TOKENS
                             else "float64"))
    return rows


def side(experiment, quick):
    from transformer_pde import _kernels

    rows = globals()[experiment](quick)
    return dict(rows=rows, cpus=_common.cpus(), threads=_kernels.thread_count(),
                caches=_kernels.cache_sizes())


def run(experiment, setting, cpus, quick, clock):
    env = dict(os.environ, **SETTINGS[setting])
    command = ["taskset", "-c", CPU_LISTS[cpus], sys.executable, __file__, "--side",
               experiment, "--clock", clock] + (["--quick"] if quick else [])
    res = subprocess.run(command, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{res.stderr}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out.update(setting=setting, cpus=cpus, experiment=experiment, clock=clock,
               load=os.getloadavg()[0])
    return out


def _fmt_ratio(r):
    return f"{r:.2f}"


def report(results, machine, clock):
    timing = ("times are medians of interleaved calls" if clock == "wall" else
              "times are the least processor time of the process over interleaved calls")
    text = [f"{machine} Each configuration in its own process; {timing}. "
            f"Settings: native kernels; `haswell`: "
            f"`OPENBLAS_CORETYPE=Haswell NUMBA_CPU_NAME=generic`; `sandybridge`: "
            f"`OPENBLAS_CORETYPE=Sandybridge NUMBA_CPU_NAME=generic`. The load average "
            f"when each process ended is in the last column.\n"]
    by = {}
    for r in results:
        by.setdefault(r["experiment"], []).append(r)
    if "chunks" in by:
        text.append("**Chunks of queries** (`attention.softmax`): the default number of rows, "
                    "the fastest of 1/4 to 4 times it, and default time / fastest time.\n")
        rows = [[r["setting"], r["cpus"], f"{x['n']}, {x['d']}", x["default"], x["best"],
                 _fmt_ratio(x["ratio"]), f"{r['load']:.1f}"]
                for r in by["chunks"] for x in r["rows"]]
        text.append(_common.markdown_table(["setting", "CPUs", "n, d", "default rows",
                                            "fastest rows", "default / fastest", "load"],
                                           rows))
    if "fused" in by:
        text.append("\n**Fused rows or chunks** (n = 4000, logits and values of dimension "
                    "k): fused time / chunked time; the library takes the fused pass for "
                    "k + k ≤ 8.\n")
        rows = [[r["setting"], r["cpus"], x["k"], x["default"], _fmt_ratio(x["ratio"]),
                 f"{r['load']:.1f}"] for r in by["fused"] for x in r["rows"]]
        text.append(_common.markdown_table(["setting", "CPUs", "k", "library's choice",
                                            "fused / chunks", "load"], rows))
    if "tile" in by:
        text.append("\n**Tiles of the fused rows** (n = 16000): the default tile "
                    "(columns), the fastest of 1/4 to 4 times it or a whole row, default "
                    "time / fastest time.\n")
        rows = [[r["setting"], r["cpus"], x["d"], x["default"], x["best"],
                 _fmt_ratio(x["ratio"]), f"{r['load']:.1f}"]
                for r in by["tile"] for x in r["rows"]]
        text.append(_common.markdown_table(["setting", "CPUs", "d", "default tile",
                                            "fastest", "default / fastest", "load"], rows))
    if "float32" in by:
        text.append("\n**The float32 phase of `local_lipschitz`** (d = 384, `tol=1e-6`): time "
                    "with the phase / time without, and the products of each; the library "
                    "uses it from n = 128 on.\n")
        rows = [[r["setting"], r["cpus"], x["workload"], x["n"], x["default"],
                 _fmt_ratio(x["ratio"]),
                 f"{x['products']['mixed']} / {x['products']['float64']}",
                 f"{r['load']:.1f}"] for r in by["float32"] for x in r["rows"]]
        text.append(_common.markdown_table(["setting", "CPUs", "tokens", "n",
                                            "library's choice", "with / without",
                                            "products with / without", "load"], rows))
    return "\n".join(text) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--cpus", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    parser.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS),
                        choices=EXPERIMENTS)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: least processor time, on 1 CPU (for a loaded machine)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--side", choices=EXPERIMENTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    global CLOCK
    CLOCK = args.clock
    if args.side:
        print(json.dumps(side(args.side, args.quick)))
        return
    if args.clock == "cpu" and args.cpus != [1]:
        parser.error("--clock cpu measures one CPU: add --cpus 1")
    machine = _common.machine_line()
    print(machine, flush=True)
    results = []
    for experiment in args.experiments:
        for setting in args.settings:
            for cpus in args.cpus:
                res = run(experiment, setting, cpus, args.quick, args.clock)
                results.append(res)
                print(json.dumps(res), flush=True)
    text = report(results, machine, args.clock)
    print(text)
    if not (args.quick or args.no_write):
        _common.write_result("tuning", text)
        (_common.GENERATED / "bench_tuning.json").write_text(
            json.dumps({"machine": machine, "results": results}, indent=1))


if __name__ == "__main__":
    main()
