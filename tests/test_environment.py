"""The ways to build the book's environment agree: one lock, the same versions everywhere.

- ``requirements.lock`` pins every package exactly (``name==version``, once each);
- ``environment.yml`` (conda, Binder) installs exactly the lock's versions: its pip section
  installs ``-r requirements.lock`` (or pins each package it names as the lock does), and any
  conda package that is also in the lock has the lock's version;
- the supported Pythons are the same everywhere: the Makefile's ``PYTHONS`` (which its version
  check accepts and ``make other-pythons`` tests), ``environment.yml``'s ``python`` spec,
  ``pyproject.toml``'s ``requires-python`` and the lock's header;
- ``postBuild`` installs ``requirements-nodeps.lock`` without dependencies, as the Makefile
  does;
- the lock is closed: since it is installed with ``--no-deps``, every dependency of a locked
  package (the type checker's among them) is itself locked, at a version it accepts.
"""

import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).parent.parent


def lock_pins(path):
    """``{canonical name: version}`` of a lock file; raises on a line that is not ``name==v``."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", line)
        if not match:
            raise ValueError(f"{path.name}: not an exact pin: {line!r}")
        name = canonicalize_name(match.group(1))
        if name in pins:
            raise ValueError(f"{path.name}: {name} pinned twice")
        pins[name] = match.group(2)
    return pins


def makefile_pythons():
    match = re.search(r"^PYTHONS\s*:?=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert match, "the Makefile defines no PYTHONS"
    return match.group(1).split()


def conda_spec(dep):
    """Name and version specifier of a conda dependency (``python>=3.11,<3.14``; conda's
    ``python=3.11`` or ``python 3.11.*`` mean that version and its patch releases)."""
    name, spec = re.fullmatch(r"([A-Za-z0-9._-]+)\s*(.*)", dep.strip()).groups()
    spec = spec.replace(" ", "")
    short = re.fullmatch(r"=?([0-9][0-9.]*?)(\.\*)?", spec)
    if short:
        spec = f"=={short.group(1)}.*"
    return canonicalize_name(name), SpecifierSet(spec)


def environment_problems(env, pins, pythons):
    """What makes an environment.yml (parsed) install other versions than the lock's."""
    problems, pip_lines = [], []
    python_spec = None
    for dep in env.get("dependencies", []):
        if isinstance(dep, dict):
            pip_lines += dep.get("pip", [])
            continue
        name, spec = conda_spec(str(dep))
        if name == "python":
            python_spec = spec
        elif name in pins and pins[name] not in spec:
            problems.append(f"conda {dep!r} is not the lock's {name}=={pins[name]}")
        elif name not in pins and name != "pip" and str(spec):
            problems.append(f"conda {dep!r} is not in the lock")
    if python_spec is None:
        problems.append("no python in the conda dependencies")
    else:
        allowed = [v for v in ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15")
                   if python_spec.contains(v + ".0")]
        if allowed != pythons:
            problems.append(f"python spec {python_spec} admits {allowed}, not {pythons}")
    installs_lock = any(re.fullmatch(r"-r\s+requirements\.lock", line.strip())
                        for line in pip_lines)
    named = {}
    for line in pip_lines:
        line = line.strip()
        if line.startswith(("-r", "-e", "--")):
            continue
        req = Requirement(line)
        named[canonicalize_name(req.name)] = req
    for name, req in named.items():
        if name not in pins:
            problems.append(f"pip {req} is not in the lock")
        elif str(req.specifier) != f"=={pins[name]}":
            problems.append(f"pip {req} is not the lock's =={pins[name]}")
    if not installs_lock and set(pins) - set(named):
        problems.append(f"the pip section neither installs -r requirements.lock nor pins "
                        f"{sorted(set(pins) - set(named))[:5]}...")
    return problems


def test_the_lock_pins_every_package_exactly():
    pins = lock_pins(ROOT / "requirements.lock")
    assert len(pins) > 100
    nodeps = lock_pins(ROOT / "requirements-nodeps.lock")
    assert not set(pins) & set(nodeps), "a package in both locks"


def lock_closure_problems(pins, requires):
    """Dependencies of the locked packages that the lock lacks or pins outside their range.

    ``requires(name)`` gives a package's requirement strings (``importlib.metadata.requires``);
    markers are evaluated for this interpreter with no extra requested.
    """
    problems = []
    for name in sorted(pins):
        for line in requires(name) or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            dep = canonicalize_name(req.name)
            if dep not in pins:
                problems.append(f"{name} needs {line!r}, which the lock does not pin")
            elif not req.specifier.contains(pins[dep], prereleases=True):
                problems.append(f"{name} needs {line!r}; the lock pins {dep}=={pins[dep]}")
    return problems


def test_the_lock_holds_every_dependency_of_its_packages():
    import importlib.metadata

    pins = lock_pins(ROOT / "requirements.lock")
    assert {"mypy", "mypy-extensions", "librt", "pathspec"} <= set(pins)  # make lint's mypy
    assert lock_closure_problems(pins, importlib.metadata.requires) == []


def test_the_lock_closure_check_finds_missing_and_out_of_range_pins():
    pins = {"a": "1.0", "b": "2.0"}
    requires = {"a": ["b>=3", "c", "d; extra == 'test'", "e; python_version < '3'"],
                "b": None}.get
    problems = lock_closure_problems(pins, requires)
    assert len(problems) == 2
    assert "'b>=3'; the lock pins b==2.0" in problems[0]
    assert "'c', which the lock does not pin" in problems[1]


def test_environment_yml_installs_the_locked_versions():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    problems = environment_problems(env, lock_pins(ROOT / "requirements.lock"),
                                    makefile_pythons())
    assert not problems, problems


def test_the_supported_pythons_agree():
    pythons = makefile_pythons()
    assert pythons == ["3.11", "3.12", "3.13"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    requires = SpecifierSet(re.search(r'requires-python\s*=\s*"([^"]+)"', pyproject).group(1))
    assert all(requires.contains(v + ".0") for v in pythons), requires
    header = (ROOT / "requirements.lock").read_text().splitlines()[0]
    assert all(v in header for v in pythons), header
    readme = (ROOT / "README.md").read_text()
    assert all(v in readme for v in pythons)


def test_postbuild_installs_the_nodeps_lock_without_dependencies():
    text = (ROOT / "postBuild").read_text()
    assert re.search(r"pip install --no-deps -r requirements-nodeps\.lock", text)


@pytest.mark.parametrize("env, expected", [
    ({"dependencies": ["python>=3.11,<3.14", "pip", {"pip": ["-r requirements.lock"]}]}, None),
    ({"dependencies": ["python=3.11", "pip", {"pip": ["-r requirements.lock"]}]}, "admits"),
    ({"dependencies": ["python>=3.11,<3.14", {"pip": ["-r requirements.lock",
                                                      "numpy==2.0.0"]}]}, "not the lock's"),
    ({"dependencies": ["python>=3.11,<3.14", "numpy=2.0.0",
                       {"pip": ["-r requirements.lock"]}]}, "not the lock's"),
    ({"dependencies": ["python>=3.11,<3.14", {"pip": ["numpy==2.4.6"]}]}, "neither"),
    ({"dependencies": ["python>=3.11,<3.14", {"pip": ["numpy==2.4.6", "scipy==1.17.1"]}]},
     None),
])
def test_the_environment_check_rejects_what_it_should(env, expected):
    pins = {"numpy": "2.4.6", "scipy": "1.17.1"}
    problems = environment_problems(env, pins, ["3.11", "3.12", "3.13"])
    if expected is None:
        assert problems == []
    else:
        assert len(problems) == 1 and expected in problems[0], problems


def test_make_lint_runs_the_type_checker_on_the_library_without_blanket_ignores():
    import tomllib

    makefile = (ROOT / "Makefile").read_text()
    lint = re.search(r"^lint:.*?(?=^\S)", makefile, re.M | re.S).group(0)
    assert "$(BIN)/mypy" in lint
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["files"] == ["lib"]
    # no module may be exempted from the check, and no error code silenced globally
    assert "disable_error_code" not in config and "ignore_errors" not in config
    assert not any(o.get("ignore_errors") for o in config.get("overrides", []))
