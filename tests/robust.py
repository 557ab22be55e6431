"""Re-execute the chapter notebooks with other seeds, and with their scale switches on.

A chapter's assertions state what holds for every draw (theorems, bounds, rates with error
bands derived from the number of draws), so they must hold whatever the seed. This runner
checks it: for each notebook and each seed it replaces the line ``SEED = <int>`` of the first
code cell, executes the notebook from the top without comparing outputs, and reports the
first failing cell with its error. ``--scale`` adds one run per notebook with every scale
switch of its first code cell (a line ``NAME = False`` in capitals, such as ``PAPER_SCALE``)
set to ``True``, at the stored seed. The "first code cell" is the first one after the cell
that installs the library where it is missing (``book/colab_cell.py``), if there is one.

The runs are independent tasks of :class:`joblib.Parallel`; each takes the notebook's text,
not its path, so they also run on a Dask cluster (``--dask tcp://scheduler:8786``) whose
workers have the book's environment installed.

Usage (``make robust`` and ``make test`` call it)::

    python tests/robust.py --seeds "1 2 3" [--scale] [--jobs N] notebooks/*.ipynb
"""

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from joblib import Parallel, delayed, parallel_config

SEED_LINE = re.compile(r"^SEED = (\d+)[ \t]*$", re.M)
SWITCH_LINE = re.compile(r"^([A-Z][A-Z0-9_]*) = False\b", re.M)
# a kernel's share of the CPUs reaches BLAS, OpenMP, Numba and joblib (whose cpu_count() reads
# LOKY_MAX_CPU_COUNT), so that the notebooks' own sweeps do not start a worker per CPU each
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS", "LOKY_MAX_CPU_COUNT")


#: the tag of the cell that installs the library where it is missing (book/colab_cell.py); it
#: comes before the cell with ``SEED = <int>``, which is the first code cell after it
INSTALL_TAG = "install-library"


def is_install_cell(cell):
    """Whether ``cell`` is the install cell of book/colab_cell.py (tagged INSTALL_TAG)."""
    return cell["cell_type"] == "code" and INSTALL_TAG in cell.get("metadata", {}).get("tags", [])


def _first_code_cell(notebook):
    """The first code cell other than the install cell: the one with ``SEED = <int>``."""
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code" and not is_install_cell(cell):
            return cell
    raise ValueError("notebook has no code cell")


def stored_seed(notebook):
    """The seed of the notebook's first code cell (its ``SEED = <int>`` line)."""
    found = SEED_LINE.findall("".join(_first_code_cell(notebook)["source"]))
    if len(found) != 1:
        raise ValueError("the first code cell must hold exactly one line `SEED = <int>`")
    return int(found[0])


def scale_switches(notebook):
    """Names of the scale switches: lines ``NAME = False`` of the first code cell."""
    return SWITCH_LINE.findall("".join(_first_code_cell(notebook)["source"]))


def variant(notebook, seed=None, scale=False):
    """A copy of ``notebook`` with ``SEED = seed`` and, if ``scale``, every switch True."""
    stored_seed(notebook)  # validates the SEED line
    copy = json.loads(json.dumps(notebook))
    cell = _first_code_cell(copy)
    source = "".join(cell["source"])
    if seed is not None:
        source = SEED_LINE.sub(f"SEED = {int(seed)}", source)
    if scale:
        source = SWITCH_LINE.sub(lambda m: f"{m.group(1)} = True", source)
    cell["source"] = source
    return copy


@dataclass
class Run:
    notebook: str
    label: str
    ok: bool
    seconds: float
    cell: int | None = None
    message: str = ""

    def line(self, width):
        head = f"{'ok' if self.ok else 'FAIL':<4} {self.notebook:<{width}} {self.label:<24}"
        if self.ok:
            return f"{head} {self.seconds:6.0f} s"
        where = f"cell {self.cell}: " if self.cell is not None else ""
        return f"{head} {self.seconds:6.0f} s  {where}{self.message}"


def available_cpus():
    """The CPUs this process may run on (its affinity where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _failure(notebook):
    """Number of the first code cell holding an error output, and the error's message.

    Code cells are numbered from 0 and markdown cells are not counted, as nbval does, so that
    ``cell 18`` here and ``Cell 18`` in nbval's report are the same cell.
    """
    code_cells = (c for c in notebook["cells"] if c["cell_type"] == "code")
    for number, cell in enumerate(code_cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                value = str(out.get("evalue", "")).strip().splitlines()
                return number, f"{out.get('ename')}: {value[0][:300] if value else ''}"
    return None, ""


def execute(text, name, label, timeout, threads, workdir=None):
    """Execute one notebook (given as JSON text) and return a :class:`Run`."""
    import asyncio

    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.reads(text, as_version=4)
    env = dict(os.environ)
    if threads:
        env.update({variable: str(threads) for variable in THREAD_VARIABLES})
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        path = workdir if workdir and os.path.isdir(workdir) else scratch
        client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": path}})
        try:
            # the kernel's own log (transport warnings) would drown the report
            # a fresh event loop per run: Dask runs tasks in worker threads, where the
            # synchronous wrapper of nbclient leaves a coroutine un-awaited
            asyncio.run(client.async_execute(env=env, stderr=subprocess.DEVNULL))
        except Exception as error:  # any error of the run fails it
            cell, message = _failure(notebook)
            if not message:
                message = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}"
            return Run(name, label, False, time.perf_counter() - start, cell, message)
    return Run(name, label, True, time.perf_counter() - start)


def _refused(name, label, message):
    return Run(name, label, False, 0.0, None, message)


def tasks(paths, seeds, scale, timeout, threads, scale_timeout=None):
    """One task per notebook and seed, plus one per notebook with switches when ``scale``.

    A notebook that cannot be varied (no single ``SEED = <int>`` line, not valid JSON) gives
    failed runs with the reason, and the other notebooks still run.
    """
    jobs = []
    for path in paths:
        name, workdir = Path(path).stem, str(Path(path).parent.resolve())
        labels = [f"seed {seed}" for seed in seeds]
        try:
            notebook = json.loads(Path(path).read_text())
            switches = scale_switches(notebook)
            variants = [variant(notebook, seed=seed) for seed in seeds]
        except (ValueError, OSError) as error:
            labels += ["scale"] if scale else []
            jobs += [delayed(_refused)(name, label, f"{type(error).__name__}: {error}")
                     for label in labels]
            continue
        if scale and switches:
            label = "scale " + ",".join(switches)
            jobs.append(delayed(execute)(json.dumps(variant(notebook, scale=True)), name,
                                         label, scale_timeout or timeout, threads, workdir))
        for label, copy in zip(labels, variants, strict=True):
            jobs.append(delayed(execute)(json.dumps(copy), name, label, timeout, threads,
                                         workdir))
    return jobs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--seeds", default="", help='seeds separated by spaces: "1 2 3"')
    parser.add_argument("--scale", action="store_true",
                        help="also one run per notebook with its scale switches set to True")
    parser.add_argument("--jobs", type=int, default=0,
                        help="concurrent runs (default: the CPUs this process may use)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument("--scale-timeout", type=int, default=7200,
                        help="seconds per cell in the runs with the scale switches on")
    parser.add_argument("--dask", default="", help="address of a Dask scheduler to run on")
    parser.add_argument("--report", default="", help="also write the report to this file")
    args = parser.parse_args(argv)

    cpus = available_cpus()
    jobs = args.jobs or cpus
    # Each kernel gets its share of the CPUs, so that concurrent runs do not oversubscribe.
    threads = 0 if args.dask else max(1, cpus // jobs)
    seeds = [int(s) for s in args.seeds.replace(",", " ").split()]
    work = tasks(args.notebooks, seeds, args.scale, args.timeout, threads, args.scale_timeout)
    width = max(len(Path(p).stem) for p in args.notebooks)
    print(f"robust: {len(work)} runs, {jobs if not args.dask else 'Dask'} at a time", flush=True)

    with contextlib.ExitStack() as stack:
        if args.dask:
            from distributed import Client

            stack.enter_context(Client(args.dask))  # joblib's Dask backend finds it
            stack.enter_context(parallel_config(backend="dask"))
        else:
            # threads suffice (each run is a kernel process); `prefer="threads"` would not do:
            # with it, parallel_config falls back to one sequential job
            stack.enter_context(parallel_config(backend="threading", n_jobs=jobs))
        runs = []
        for run in Parallel(return_as="generator_unordered")(work):
            runs.append(run)
            print(run.line(width), flush=True)
    failed = [r for r in runs if not r.ok]
    lines = [r.line(width) for r in sorted(runs, key=lambda r: (r.notebook, r.label))]
    summary = f"robust: {len(runs) - len(failed)} of {len(runs)} runs passed"
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text("\n".join(lines + [summary]) + "\n")
    if failed:
        print("\nFailed runs:\n" + "\n".join(r.line(width) for r in failed))
    print(summary)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
