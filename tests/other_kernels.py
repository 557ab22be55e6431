"""Environment variables that make NumPy, SciPy and Numba compute with other kernels.

A stored output of the book must be the same on every CPU, BLAS and thread count. ``make test``
checks it on one machine by running nbval a second time with kernels other than the machine's
own (``make portability``):

- OpenBLAS forced to the previous generation of x86 kernels (``OPENBLAS_CORETYPE``): AVX-512
  machines (``SkylakeX``, ``Cooperlake``, ``SapphireRapids``) compute with ``Haswell``'s AVX2
  kernels, AVX2 machines (``Haswell``, ``Zen``) with ``Sandybridge``'s AVX kernels, AVX
  machines with ``Nehalem``'s SSE kernels; where NumPy's BLAS is not a multi-architecture
  OpenBLAS (ARM, macOS's Accelerate, MKL) the variable is not set and said so;
- Numba's generic target instead of the host CPU (``NUMBA_CPU_NAME=generic``: no AVX);
- one thread for BLAS, OpenMP, Numba and joblib instead of all the CPUs.

Each of these changes the last bits of floating-point results (another order of summation,
other fused multiply-adds), which is what a reader's machine does.

Usage: ``env $(python tests/other_kernels.py) command``; the assignments go to stdout, a line
saying which kernels were chosen (read back from a child process) goes to stderr.
"""

import json
import os
import subprocess
import sys

# the OpenBLAS core type one generation below each x86 core type with wider vectors
PREVIOUS_GENERATION = {
    "skylakex": "Haswell", "cooperlake": "Haswell", "sapphirerapids": "Haswell",
    "haswell": "Sandybridge", "zen": "Sandybridge",
    "sandybridge": "Nehalem",
}
ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "NUMBA_NUM_THREADS", "LOKY_MAX_CPU_COUNT")

_PROBE = ("import json, threadpoolctl, numpy, scipy.linalg\n"
          "print(json.dumps([[i['prefix'], i.get('architecture')] for i in "
          "threadpoolctl.threadpool_info() if i['user_api'] == 'blas']))")


def blas_architectures(env=None):
    """[prefix, architecture] of each BLAS that NumPy and SciPy load, read in a child process."""
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)


def other_kernels(native):
    """The variables for the kernels other than ``native`` (the BLAS architectures)."""
    env = {"NUMBA_CPU_NAME": "generic"}
    env.update({name: "1" for name in ONE_THREAD})
    choices = {PREVIOUS_GENERATION.get(str(arch).lower()) for _, arch in native}
    if len(choices) == 1 and None not in choices:
        env["OPENBLAS_CORETYPE"] = choices.pop()
    return env


def main():
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    native = blas_architectures(clean)
    env = other_kernels(native)
    chosen = blas_architectures({**clean, **env})
    before = ", ".join(sorted({str(a) for _, a in native}))
    after = ", ".join(sorted({str(a) for _, a in chosen}))
    blas = (f"OpenBLAS {after} instead of {before}" if "OPENBLAS_CORETYPE" in env
            else f"BLAS kernels unchanged ({before}: no other OpenBLAS core type to force)")
    print(f"other kernels: {blas}; Numba generic target; one thread", file=sys.stderr)
    print(" ".join(f"{k}={v}" for k, v in sorted(env.items())))


if __name__ == "__main__":
    main()
