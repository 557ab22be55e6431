"""The other kernels of ``make portability`` (tests/other_kernels.py)."""

import os
import platform

import pytest
from other_kernels import ONE_THREAD, blas_architectures, other_kernels


@pytest.mark.parametrize("native, forced", [
    ("SkylakeX", "Haswell"), ("Cooperlake", "Haswell"), ("SapphireRapids", "Haswell"),
    ("Haswell", "Sandybridge"), ("Zen", "Sandybridge"), ("Sandybridge", "Nehalem"),
])
def test_openblas_is_forced_one_generation_back(native, forced):
    env = other_kernels([["libscipy_openblas", native], ["libscipy_openblas", native]])
    assert env["OPENBLAS_CORETYPE"] == forced
    assert env["NUMBA_CPU_NAME"] == "generic"
    assert all(env[name] == "1" for name in ONE_THREAD)


@pytest.mark.parametrize("native", [
    [["libscipy_openblas", "NeoverseN1"]],          # ARM: no older x86 kernels to force
    [["mkl", None]],                                 # not OpenBLAS
    [["libscipy_openblas", "SkylakeX"], ["libscipy_openblas", "Haswell"]],  # two BLAS disagree
])
def test_no_core_type_is_forced_where_none_is_known(native):
    env = other_kernels(native)
    assert "OPENBLAS_CORETYPE" not in env
    assert env["NUMBA_CPU_NAME"] == "generic" and env["OMP_NUM_THREADS"] == "1"


def test_the_forced_core_type_is_the_one_numpy_and_scipy_load():
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    native = blas_architectures(clean)
    env = other_kernels(native)
    if "OPENBLAS_CORETYPE" not in env or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"no other OpenBLAS core type on this machine ({native})")
    forced = blas_architectures({**clean, **env})
    assert {arch for _, arch in forced} == {env["OPENBLAS_CORETYPE"]}
