r"""Local Lipschitz constant of self-attention: the library against the published method.

``transformer_pde.lipschitz.local_lipschitz`` (Lanczos on the normal operator
:math:`(D_X f)^\top D_X f`, float32 first phase, float64 certification; ``tol`` is the relative
error of the constant) is timed against **the published method**, implemented here in
PyTorch: power iteration on :math:`J^\top J` with ``torch.func.jvp`` and ``torch.func.vjp`` on
the attention map (with the tangent output of ``jvp``, i.e. the released index bug fixed),
stopping when the relative change of the eigenvalue estimate is at most ``1e-6``. Both run in
float64, **each in its own process** (this script with ``--side``) bound to the CPUs 0 and 1
(``taskset -c 0,1``), with threads following that affinity (NumPy's BLAS reads it; PyTorch
gets ``torch.set_num_threads(len(os.sched_getaffinity(0)))``). The library is timed as a
user calls it for the constant alone (``local_lipschitz(X, A, V, tol=1e-6)``); its value and
number of products come from an untimed first call with ``return_vectors=True``.

Workloads at ``d = 384``: Gaussian tokens; tokens in 4 tight clusters of large norm (sharp
attention, small spectral gap); the adversarial configuration of chapter 5 (symmetric ``A``,
``V = I``); real MiniLM hidden states (input of layer 3, head 0 in factored form, and all
12 heads). Before timing, both methods' constants are compared with a tight reference
(``local_lipschitz`` at ``tol = 1e-12``; ARPACK at ``tol = 1e-12`` as well for ``n = 128``,
an independent algorithm) and their relative errors are reported, with the library's product
counts against the stored results. Times are min and median over timed calls: at least
``--repeats``, and more where the published method's untimed first call was short, up to
:data:`TIMED_SECONDS` of its calls and at most :data:`MAX_REPEATS` calls (short calls vary
more from run to run); the library makes as many calls in its own process.

Writes ``book/generated/bench_lipschitz.md`` and ``.png`` (the performance appendix of the
book includes them).

Usage::

    python benchmarks/bench_lipschitz.py                  # n in {128, 512, 2048}
    python benchmarks/bench_lipschitz.py --sizes 128 512  # what fits a loaded machine
    python benchmarks/bench_lipschitz.py --quick          # n = 128, Gaussian and clustered
    python benchmarks/bench_lipschitz.py --sizes 2048 --merge  # add one size to the results
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import _common  # noqa: E402
from transformer_pde import lipschitz, pretrained  # noqa: E402

D = 384
TOL = 1e-6
PEER_RTOL = 1e-6
#: Interleaved runs: enough for about this many seconds of the published method's calls...
TIMED_SECONDS = 5.0
#: ...but no more than this many.
MAX_REPEATS = 11
#: The CPUs each side's process is bound to.
CPU_LIST = "0,1"


# ------------------------------------------------------------------ workloads
def gaussian(n, seed=0):
    rng = np.random.default_rng(seed)
    A = 2 * rng.normal(size=(D, D)) / np.sqrt(D)
    V = rng.normal(size=(D, D)) / np.sqrt(D)
    return rng.normal(size=(n, D)) / np.sqrt(D), A, V


def clustered(n, seed=0, radius=6.0, spread=0.05):
    rng = np.random.default_rng(seed)
    A = 2 * rng.normal(size=(D, D)) / np.sqrt(D)
    V = rng.normal(size=(D, D)) / np.sqrt(D)
    C = rng.normal(size=(4, D))
    C *= radius / np.linalg.norm(C, axis=1, keepdims=True)
    X = C[rng.integers(0, 4, n)] + spread * rng.normal(size=(n, D)) / np.sqrt(D)
    return X, A, V


def adversarial(n, seed=0, R=1.0):
    rng = np.random.default_rng(seed)
    G = rng.normal(size=(D, D))
    A = (G + G.T) / np.sqrt(2 * D)
    X, _ = lipschitz.adversarial_configuration(A, n, R)
    return X, A, np.eye(D)


def minilm_hidden(n, layer=3):
    """Hidden states entering ``layer`` for n tokens of real text (windows of <= 512)."""
    model = pretrained.load_minilm()
    text = " ".join(pretrained.__doc__.split()) * 8
    ids = pretrained.tokenize(text)
    blocks, start = [], 0
    while sum(b.shape[0] for b in blocks) < n:
        m = min(512, n - sum(b.shape[0] for b in blocks))
        blocks.append(pretrained.forward(model, ids[start:start + m], n_layers=layer).hidden[layer])
        start += m
    return np.vstack(blocks), pretrained.attention_head_factors(model, layer)


def minilm_head(n):
    X, ((Q, K), (Vo, Vi)) = minilm_hidden(n)
    return X, (Q[0], K[0]), (Vo[0], Vi[0])


def minilm_all(n):
    X, heads = minilm_hidden(n)
    return (X, *heads)


WORKLOADS = {  # name: (builder, multi-head)
    "Gaussian": (gaussian, False),
    "clustered": (clustered, False),
    "adversarial (ch. 5)": (adversarial, False),
    "MiniLM layer 3, head 0": (minilm_head, False),
    "MiniLM layer 3, 12 heads": (minilm_all, True),
}


# ------------------------------------------------------------------ the published method
def torch_map(torch, A, V, multi):
    """The attention map f(X) in PyTorch, for dense or factored (stacked) heads."""
    def t(M):
        return torch.tensor(np.array(M), dtype=torch.float64)

    if isinstance(A, tuple):
        Q, K = (t(M) for M in A)
        Vo, Vi = (t(M) for M in V)
        if not multi:
            Q, K, Vo, Vi = Q[None], K[None], Vo[None], Vi[None]

        def f(X):
            out = 0
            for h in range(Q.shape[0]):
                S = (X @ Q[h].T) @ (X @ K[h].T).T
                out = out + (torch.softmax(S, dim=-1) @ (X @ Vi[h].T)) @ Vo[h].T
            return out
    else:
        At, Vt = t(A), t(V)

        def f(X):
            return (torch.softmax((X @ At.T) @ X.T, dim=-1) @ X) @ Vt.T
    return f


def power_iteration(torch, f, X, rtol=PEER_RTOL, max_steps=20_000, seed=0):
    """Power iteration on J^T J with jvp / vjp; stops on the relative change of lambda."""
    from torch.func import jvp, vjp

    X = torch.as_tensor(X, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(X.shape, generator=g, dtype=torch.float64)
    u /= torch.linalg.norm(u)
    _, pullback = vjp(f, X)
    lam_old = None
    for step in range(1, max_steps + 1):
        _, Ju = jvp(f, (X,), (u,))  # the tangent output
        (w,) = pullback(Ju)
        lam = float(torch.sum(u * w))
        if lam_old is not None and abs(lam - lam_old) <= rtol * abs(lam):
            return lam ** 0.5, step
        lam_old = lam
        u = w / torch.linalg.norm(w)
    return lam ** 0.5, max_steps


# ------------------------------------------------------------------ measurement
def ours(X, A, V, multi, vectors=True, **kw):
    fn = lipschitz.local_lipschitz_multihead if multi else lipschitz.local_lipschitz
    return fn(X, A, V, return_vectors=vectors, **kw)


def side(which, name, n, repeats):
    """In the side's own process: an untimed first call, then the timed calls."""
    build, multi = WORKLOADS[name]
    X, A, V = build(n)
    if which == "library":
        res = ours(X, A, V, multi, tol=TOL)
        times = _common.timed(lambda: ours(X, A, V, multi, vectors=False, tol=TOL), repeats)
        return dict(value=res.value, products=res.matvecs, times=times)
    import torch

    torch.set_num_threads(_common.cpus())
    f = torch_map(torch, A, V, multi)
    start = time.perf_counter()
    value, steps = power_iteration(torch, f, X)
    first = time.perf_counter() - start
    repeats = max(repeats, min(MAX_REPEATS, int(TIMED_SECONDS / first)))
    times = _common.timed(lambda: power_iteration(torch, f, X), repeats)
    return dict(value=value, steps=steps, times=times, threads=torch.get_num_threads())


def measure(name, n, repeats, stored):
    build, multi = WORKLOADS[name]
    X, A, V = build(n)
    ref = ours(X, A, V, multi, tol=1e-12).value
    check = ""
    if n <= 128:
        arpack = ours(X, A, V, multi, tol=1e-12, method="arpack", ncv=30).value
        assert abs(arpack - ref) <= 1e-10 * ref, (arpack, ref)
        check = "ARPACK agrees"
    args = ["--workload", name, "--n", n]
    peer = _common.run_side(Path(__file__), ["--side", "published", *args, "--repeats", repeats],
                            CPU_LIST)
    lib = _common.run_side(Path(__file__), ["--side", "library", *args, "--repeats",
                                            len(peer["times"])], CPU_LIST)
    err_ours, err_peer = abs(lib["value"] - ref) / ref, abs(peer["value"] - ref) / ref
    assert err_ours <= TOL, (name, n, err_ours)
    row = dict(name=name, n=n, repeats=len(peer["times"]), ours=_common.stats(lib["times"]),
               peer=_common.stats(peer["times"]), value=lib["value"],
               products=lib["products"], steps=peer["steps"], err_ours=err_ours,
               err_peer=err_peer)
    old = stored.get((name, n))
    same = "" if old is None else (
        f"products {'unchanged' if old['products'] == row['products'] else 'CHANGED'} "
        f"({old['products']}), error {'unchanged' if old['err_ours'] == err_ours else 'CHANGED'}")
    print(f"{name:26s} n={n:5d}  ours {row['ours'][0]:8.3f} s ({lib['products']:3d} products, "
          f"value {lib['value']:.10g}, err {err_ours:.1e})  peer {row['peer'][0]:8.3f} s "
          f"({peer['steps']:4d} steps, err {err_peer:.1e})  speed-up min "
          f"{row['peer'][0] / row['ours'][0]:5.1f}  median {row['peer'][1] / row['ours'][1]:5.1f}"
          f"  {check}  {same}", flush=True)
    return row


def report(rows, machine):
    header = ["workload", "n", "library s", "published s", "products / power steps",
              "speed-up", "rel. errors: library / published", "runs"]
    def times(x):  # a speed-up, 3 significant digits (4 above 1000)
        return f"{x:.1f}×" if x < 100 else f"{x:.0f}×"

    body = []
    for r in rows:
        body.append([r["name"], r["n"], f"{r['ours'][0]:.3g} / {r['ours'][1]:.3g}",
                     f"{r['peer'][0]:.3g} / {r['peer'][1]:.3g}",
                     f"{r['products']} / {r['steps']}",
                     f"{times(r['peer'][0] / r['ours'][0])} / "
                     f"{times(r['peer'][1] / r['ours'][1])}",
                     f"{r['err_ours']:.1e} / {r['err_peer']:.1e}", r["repeats"]])
    n_ch5 = 512 if any(r["n"] == 512 for r in rows) else rows[0]["n"]
    small = [[r["name"], r["products"], r["steps"],
              f"{r['peer'][1] / r['ours'][1]:.2f}×", f"{r['err_ours']:.1e}", f"{r['err_peer']:.1e}"]
             for r in rows if r["n"] == n_ch5]
    text = (f"{machine} Float64 results; both methods target a relative error of 1e-6 "
            f"(library: `tol=1e-6`; published method: power iteration on $J^\\top J$ with "
            f"`torch.func.jvp`/`vjp`, stopping when the eigenvalue estimate changes by at most "
            f"1e-6, relative). Times in seconds over "
            f"timed calls (their number in the last column), as min / median; speed-up = "
            f"published time / library time (min / median); errors against a tight reference "
            f"(`tol=1e-12`).\n\n" + _common.markdown_table(header, body) + "\n\n"
            f"Chapter 5 summary (n = {n_ch5}, d = {D}; median speed-up):\n\n"
            + _common.markdown_table(["input", "library products", "power-iteration steps",
                                      "speed-up", "library error", "published error"], small)
            + "\n")
    return text


def figure(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from transformer_pde.plotting import use_house_style

    use_house_style()
    names = list(dict.fromkeys(r["name"] for r in rows))
    ns = sorted({r["n"] for r in rows})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(6.8, 3.4))
    width = 0.8 / len(ns)
    y = np.arange(len(names))
    for k, n in enumerate(ns):
        sel = {r["name"]: r for r in rows if r["n"] == n}
        med = [sel[m]["peer"][1] / sel[m]["ours"][1] if m in sel else np.nan for m in names]
        mins = [sel[m]["peer"][0] / sel[m]["ours"][0] if m in sel else np.nan for m in names]
        ax1.barh(y + k * width, np.array(med) - 1, left=1, height=width, color=f"C{k}",
                 label=f"n = {n}")
        ax1.plot(mins, y + k * width, "k|", ms=6)
        errs = [(sel[m]["err_ours"], sel[m]["err_peer"]) if m in sel else (np.nan, np.nan)
                for m in names]
        ax2.plot([e[0] for e in errs], y + k * width, "o", color=f"C{k}", ms=4)
        ax2.plot([e[1] for e in errs], y + k * width, "x", color=f"C{k}", ms=5)
    ax1.axvline(5, color="k", ls="--", lw=1)
    ax1.set_xscale("log")
    ax1.set_xlim(left=1)
    ax1.set_yticks(y + 0.4 - width / 2, [m.replace(", ", "\n") for m in names], fontsize=9)
    ax1.set_xlabel("speed-up over published method")
    ax1.legend(fontsize=9, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(ns),
               frameon=False)
    ax2.axvline(TOL, color="k", ls="--", lw=1)
    ax2.set_xscale("log")
    ax2.set_yticks(y + 0.4 - width / 2, [""] * len(names))
    ax2.set_xlabel("relative error\n(o library, x published)")
    fig.savefig(path)
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 128, two workloads")
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 512, 2048])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS),
                        choices=list(WORKLOADS), metavar="NAME")
    parser.add_argument("--repeats", type=int, default=3,
                        help="fewest timed calls (more where calls are short)")
    parser.add_argument("--no-write", action="store_true", help="do not write book/generated")
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite the table and figure from the stored JSON, no timing")
    parser.add_argument("--merge", action="store_true",
                        help="keep the other sizes' rows of book/generated/bench_lipschitz.json")
    parser.add_argument("--side", choices=["library", "published"], help=argparse.SUPPRESS)
    parser.add_argument("--workload", choices=list(WORKLOADS), help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # a side's own process
        print(json.dumps(side(args.side, args.workload, args.n, args.repeats)))
        return
    saved = _common.GENERATED / "bench_lipschitz.json"
    if args.report_only:
        stored = json.loads(saved.read_text())
        _common.write_result("lipschitz", report(stored["rows"], stored["machine"]))
        figure(stored["rows"], _common.GENERATED / "bench_lipschitz.png")
        return
    sizes, names = args.sizes, args.workloads
    if args.quick:
        sizes, names = [128], ["Gaussian", "clustered"]
    import torch

    machine = _common.machine_line(torch)
    print(machine)
    previous = json.loads(saved.read_text()) if saved.exists() else {"rows": []}
    stored = {(r["name"], r["n"]): r for r in previous["rows"]}
    kept = []
    if args.merge and previous["rows"]:
        kept = [r for r in previous["rows"] if r["n"] not in sizes]
        machine = (previous["machine"].split(" The rows for n = ")[0]
                   + f" The rows for n = {', '.join(map(str, sizes))} come from a second run "
                   f"(load average {os.getloadavg()[0]:.1f}).")
    rows = []
    for n, name in ((n, name) for n in sizes for name in names):  # files rewritten each time
        rows.append(measure(name, n, args.repeats, stored))
        everything = sorted(kept + rows, key=lambda r: r["n"])
        text = report(everything, machine)
        if not args.no_write and not args.quick:
            _common.write_result("lipschitz", text)
            saved.write_text(json.dumps({"machine": machine, "rows": everything}, indent=1))
            figure(everything, _common.GENERATED / "bench_lipschitz.png")
    print(text)


if __name__ == "__main__":
    main()
