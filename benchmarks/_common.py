"""Shared pieces of the benchmarks: each side in its own process, machine line, result files."""

import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy

#: Where the benchmarks write what the book's performance appendix includes.
GENERATED = Path(__file__).resolve().parents[1] / "book" / "generated"


def cpus():
    """Number of CPUs this process may use (its affinity, as ``taskset`` sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def timed(fn, repeats, clock="wall"):
    """Times of ``repeats`` calls of ``fn`` in turn (after the caller's untimed first call):
    wall-clock, or with ``clock="cpu"`` the processor time of the process (on a machine
    shared with other work, the work a one-CPU process did rather than the time it waited;
    meaningless for several threads)."""
    now = time.process_time if clock == "cpu" else time.perf_counter
    times = []
    for _ in range(repeats):
        start = now()
        fn()
        times.append(now() - start)
    return times


def run_side(script, args, cpu_list=None):
    """Run ``script --side ...`` in its own process, bound to the CPUs ``cpu_list`` (e.g.
    ``"0"`` or ``"0,1"``, through ``taskset -c``; all CPUs when ``None``), and return the
    JSON object it prints on its last line. A side measured in its own process finds the
    cores free: run in one process, one library's idle threads keep spinning after a call
    (OpenBLAS, OpenMP) and take the cores from the other's next call."""
    command = [sys.executable, str(script), *map(str, args)]
    if cpu_list is not None:
        command = ["taskset", "-c", cpu_list, *command]
    res = subprocess.run(command, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def stats(ts):
    """(min, median) of a list of times."""
    return float(np.min(ts)), float(np.median(ts))


def cpu_model():
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags():
    """Whether the CPU has AVX-512 or AVX2 (NumPy's exponential and the BLAS kernels depend
    on it)."""
    try:
        with open("/proc/cpuinfo") as info:
            flags = next((line for line in info if line.startswith("flags")), "")
    except OSError:
        return "vector extensions unknown"
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"


def machine_line(torch=None):
    """One line naming the machine and the versions, for the result files."""
    cores = os.cpu_count()
    try:
        load = f", load average {os.getloadavg()[0]:.1f}"
    except OSError:
        load = ""
    torch_part = ""
    if torch is not None:
        torch_part = f", PyTorch {torch.__version__}"
    return (f"Measured on {cpu_model()} ({cpu_flags()}), {cores} CPUs{load}; "
            f"Python {platform.python_version()}, NumPy {np.__version__}, "
            f"SciPy {scipy.__version__}{torch_part}; "
            f"{datetime.date.today().isoformat()}.")


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_result(name, text):
    GENERATED.mkdir(parents=True, exist_ok=True)
    path = GENERATED / f"bench_{name}.md"
    path.write_text(text)
    print(f"wrote {path}")
    return path
