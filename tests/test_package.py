"""The package as a pip user sees it: modules as attributes, one version, type information."""

import importlib.metadata
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import transformer_pde as tp

ROOT = Path(__file__).resolve().parents[1]


def test_modules_are_attributes_of_the_package():
    # in a fresh interpreter, where nothing imported the module before (a light one)
    code = ("import transformer_pde as tp; import sys; "
            "assert 'transformer_pde.rates' not in sys.modules; "
            "print(tp.rates.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["transformer_pde.rates"]
    assert tp.attention.softmax.__module__ == "transformer_pde.attention"
    public = sorted(m.name for m in pkgutil.iter_modules(tp.__path__)
                    if not m.name.startswith("_"))
    assert tp.__all__ == public and "attention" in public
    assert set(public) <= set(dir(tp))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        tp.nothing  # noqa: B018
    with pytest.raises(AttributeError):
        tp._kernels_typo  # noqa: B018


def test_one_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "transformer_pde.__version__"
    assert importlib.metadata.version("transformer-pde") == tp.__version__


def test_type_information_and_declared_imports():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert (ROOT / "lib" / "transformer_pde" / "py.typed").exists()
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["transformer_pde"]
    declared = {dep.split(">")[0].split("=")[0].strip().lower()
                for dep in project["project"]["dependencies"]}
    assert {"numba", "llvmlite", "numpy", "threadpoolctl"} <= declared


def test_public_names_of_attention_are_typed_and_tuning_constants_private():
    import inspect

    from transformer_pde import attention

    assert "DEFAULT_BLOCK_ELEMENTS" not in attention.__all__
    for name in attention.__all__:
        sig = inspect.signature(getattr(attention, name))
        assert sig.return_annotation is not inspect.Signature.empty, name
        for p in sig.parameters.values():
            assert p.annotation is not inspect.Parameter.empty, (name, p.name)
