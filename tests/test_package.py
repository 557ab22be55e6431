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
    # dir() shows what a reader can use: the modules and the version, no import helpers
    # (importlib, pkgutil, ModuleType) and no private module
    assert set(dir(tp)) == set(public) | {"__version__"}
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
    assert {"numba", "llvmlite", "numpy", "threadpoolctl", "tqdm"} <= declared


def test_public_names_of_attention_are_typed_and_tuning_constants_private():
    import inspect

    from transformer_pde import attention

    assert "DEFAULT_BLOCK_ELEMENTS" not in attention.__all__
    for name in attention.__all__:
        sig = inspect.signature(getattr(attention, name))
        assert sig.return_annotation is not inspect.Signature.empty, name
        for p in sig.parameters.values():
            assert p.annotation is not inspect.Parameter.empty, (name, p.name)


PACKAGE = ROOT / "lib" / "transformer_pde"


def _module_name(path):
    """``transformer_pde.a.b`` of a file under the package (``__init__`` names the package)."""
    parts = ("transformer_pde", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_public(module):
    return not any(part.startswith("_") for part in module.split("."))


def _is_module(module):
    path = PACKAGE.joinpath(*module.split(".")[1:])
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def private_imports(source, module, is_package=False):
    """``(line, text)`` of every private name that ``module`` imports from another public
    module of the package: ``from .x import _y``, ``from . import x`` then ``x._y``, also
    inside functions."""
    import ast

    tree = ast.parse(source)
    package = module if is_package else module.rpartition(".")[0]
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if not target.startswith("transformer_pde"):
                continue
            for a in node.names:
                full = f"{target}.{a.name}"
                if _is_module(full):
                    if _is_public(full):
                        aliases[a.asname or a.name] = full
                elif a.name.startswith("_") and _is_public(target) and target != module:
                    found.append((node.lineno, f"from {target} import {a.name}"))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("transformer_pde.") and _is_public(a.name):
                    aliases[a.asname or a.name] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and node.attr.startswith("_")
                and not node.attr.startswith("__") and aliases[node.value.id] != module):
            found.append((node.lineno, f"{aliases[node.value.id]}.{node.attr}"))
    return found


def test_the_private_import_check_finds_each_form():
    src = ("from .sphere import _beta, normalise\n"
           "from . import draws as _draws, _checks\n"
           "def f(seed):\n"
           "    from .meanfield import _gaussian\n"
           "    from .. import _linalg\n"
           "    return _draws._key(seed), _checks.points, _linalg.exponential\n")
    found = [text for _, text in private_imports(src, "transformer_pde.variants")]
    assert found == ["from transformer_pde.sphere import _beta",
                     "from transformer_pde.meanfield import _gaussian",
                     "transformer_pde.draws._key"]
    # a module of a subpackage: '..' is the package; a private module is fine
    assert private_imports("from .. import _checks\nfrom ..sphere import _model\n",
                           "transformer_pde.gaussian.formulas") == [
        (2, "from transformer_pde.sphere import _model")]


def test_no_public_module_imports_a_private_name_of_another():
    files = [p for p in PACKAGE.rglob("*.py")
             if _is_public(_module_name(p)) and "__pycache__" not in p.parts]
    assert len(files) > 30
    bad = {str(p.relative_to(PACKAGE)): found for p in files
           if (found := private_imports(p.read_text(), _module_name(p),
                                        p.name == "__init__.py"))}
    assert not bad, bad


def test_the_package_docstring_lists_every_public_module():
    import re

    listed = set(re.findall(r":mod:`~transformer_pde\.(\w+)`", tp.__doc__))
    assert listed == set(tp.__all__)
    for name in tp.__all__:  # and the lazy loader imports each of them
        assert getattr(tp, name).__name__ == f"transformer_pde.{name}"


def test_public_functions_of_every_public_module_are_typed():
    import inspect
    import typing

    import tokenizers

    local = {"Tokenizer": tokenizers.Tokenizer}  # imported by pretrained for type checkers only
    checked = 0
    for name in tp.__all__:
        module = getattr(tp, name)
        for attr in module.__all__:
            f = getattr(module, attr)
            if not inspect.isfunction(f):
                continue
            sig = inspect.signature(f)
            assert sig.return_annotation is not inspect.Signature.empty, (name, attr)
            for p in sig.parameters.values():
                assert p.annotation is not inspect.Parameter.empty, (name, attr, p.name)
            typing.get_type_hints(f, localns=local)  # every annotation names a real type
            checked += 1
    assert checked > 200


# the docstring Examples of every module run as doctests (make test runs this file): module
# names are collected without importing anything heavy; each module's examples run in its own
# namespace, with RuntimeWarnings as errors (pyproject.toml) like every other test
_ALL_MODULES = ["transformer_pde"] + sorted(
    m.name for m in pkgutil.walk_packages(tp.__path__, "transformer_pde."))


@pytest.mark.parametrize("name", _ALL_MODULES)
def test_docstring_examples_run(name):
    import doctest
    import importlib

    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = []
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(report)


def test_docstring_examples_are_found_and_failures_reported():
    import doctest
    import types

    module = types.ModuleType("example_module")
    exec('def f():\n    """\n    >>> 1 + 1\n    3\n    """\n', module.__dict__)
    runner = doctest.DocTestRunner()
    report = []
    for test in doctest.DocTestFinder().find(module, "example_module"):
        runner.run(test, out=report.append)
    assert runner.summarize(verbose=False) == (1, 1)
    assert "Expected:\n    3\nGot:\n    2" in "".join(report)
