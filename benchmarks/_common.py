"""Shared pieces of the benchmarks: interleaved timing, the machine line, result files."""

import datetime
import math
import os
import platform
import threading
import time
from pathlib import Path

import numba
import numpy as np
import scipy

#: Where the benchmarks write what the book's performance appendix includes.
GENERATED = Path(__file__).resolve().parents[1] / "book" / "generated"


#: Before each timed call, both cores are kept busy for this long (seconds, not timed).
#: OpenBLAS and PyTorch's OpenMP keep their threads spinning for a while after a call
#: (OpenBLAS up to 2^28 cycles by default), which would take the cores from the other
#: library's next call; a plain pause lets them stop, but on a virtual machine it also lets
#: the idle cores sleep, and the next call then waits for them (calls of 25 ms took up to
#: 45 ms after a pause of 0.3 s).
SETTLE = 0.3

_BURN_STEPS = 200_000


@numba.njit(nogil=True, cache=True)
def _burn(steps):
    """Busy arithmetic for ``steps`` steps, without the GIL."""
    acc = 0.0
    for i in range(steps):
        acc += math.sqrt(i + acc * 1e-9)
    return acc


def _busy_cores(seconds, cores=2):
    """Keep ``cores`` threads computing for ``seconds``."""
    def work():
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            _burn(_BURN_STEPS)

    threads = [threading.Thread(target=work) for _ in range(cores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def interleaved(fns, repeats):
    """Wall-clock times ``times[k][r]`` of ``fns[k]()`` in repeat ``r``, run in turn.

    The functions alternate within each repeat, so a change of machine load affects them
    alike; report the min (least disturbed run) and the median of each. Before each call,
    both cores compute for :data:`SETTLE` seconds (not timed), so that both libraries run
    with their default threading without the other's idle threads in the way, on cores that
    are awake.
    """
    times = [[] for _ in fns]
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            _busy_cores(SETTLE)
            start = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - start)
    return times


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


def machine_line(torch=None):
    """One line naming the machine and the versions, for the result files."""
    cores = os.cpu_count()
    try:
        load = f", load average {os.getloadavg()[0]:.1f}"
    except OSError:
        load = ""
    torch_part = ""
    if torch is not None:
        torch_part = f", PyTorch {torch.__version__} ({torch.get_num_threads()} threads)"
    return (f"Measured on {cpu_model()}, {cores} cores{load}; Python {platform.python_version()}, "
            f"NumPy {np.__version__}, SciPy {scipy.__version__}{torch_part}; "
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
