"""Packaging as users install it (issue 18, item 9): the package declares ranges, the lock file pins.

`pip install airflow-provider-bellamy[spark]` must not force a Spark version onto a user's
workers; the versions the tests run on are pinned in requirements.lock / lock-constraints.txt.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")
ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _locked(name: str) -> str:
    match = re.search(rf"^{re.escape(name)}==(\S+)$", (ROOT / "requirements.lock").read_text(), re.M)
    assert match, f"{name} is not pinned in requirements.lock"
    return match.group(1)


def test_no_requirement_of_the_package_pins_an_exact_version() -> None:
    project = _project()
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    pinned = [r for r in requirements if "==" in r]
    assert pinned == [], f"exact pins belong in lock-constraints.txt, not the package: {pinned}"
    assert not any(r.startswith("pyspark") for r in project["optional-dependencies"]["spark"])


def test_the_tests_spark_is_pinned_by_the_lock() -> None:
    constraints = (ROOT / "lock-constraints.txt").read_text().splitlines()
    assert "pyspark==4.2.0" in constraints
    assert _locked("pyspark") == "4.2.0"


def test_plotting_has_its_own_extra() -> None:
    extras = _project()["optional-dependencies"]
    assert any(r.startswith("matplotlib") for r in extras["plot"])
    assert any(r.startswith("matplotlib") for r in extras["bench"])


def test_the_airflow_floor_is_the_tested_version() -> None:
    (airflow,) = [r for r in _project()["dependencies"] if re.match(r"apache-airflow\b(?!-)", r)]
    assert airflow == f"apache-airflow>={_locked('apache-airflow')}"


# What a module may import beyond the base install: the extra that brings it (the other modules
# import only what ``pip install airflow-provider-bellamy`` installs).
_EXTRA_OF = {"benchmarks": "bench", "plotting.py": "plot"}


def _third_party_imports(path: Path) -> set[str]:
    """Top-level names of the modules ``path`` imports (function-level imports included), less
    the standard library and the package itself."""
    import ast
    import sys

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in {"airflow_provider_bellamy"}}


def _installed_with(requirements: list[str]) -> set[str]:
    """The distributions (normalised names) ``requirements`` install, dependencies of dependencies
    included, with each requirement's extras and markers as this interpreter reads them."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: set[str] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in found:
            continue
        found.add(key)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for wanted in ["", *req.extras]:
            todo += [(Requirement(r), wanted) for r in requires]
    return {key.split("[")[0] for key in found}


def test_every_module_imports_only_what_its_install_brings() -> None:
    """A module imported by the provider's runtime (operators, model, store, CLI) must not lean on
    a package only an extra or the tests bring: the Ernest fallback imported scipy, which only
    scikit-learn (the ``bench`` extra) installed, so a plain install failed the first sizing of a
    job type without a general model (until session 30)."""
    from importlib import metadata

    from packaging.utils import canonicalize_name

    project = _project()
    base = list(project["dependencies"])
    distributions = {
        name: {canonicalize_name(d) for d in dists}
        for name, dists in metadata.packages_distributions().items()
    }
    missing = []
    package = ROOT / "airflow_provider_bellamy"
    for path in sorted(package.rglob("*.py")):
        part = path.relative_to(package).parts[0]
        extra = _EXTRA_OF.get(part)
        requirements = base + (project["optional-dependencies"][extra] if extra else [])
        if part in {"operators", "hooks", "sensors", "triggers"}:
            requirements += project["optional-dependencies"]["spark"]  # spark.py modules: the [spark] extra
        installed = _installed_with(requirements)
        for name in sorted(_third_party_imports(path)):
            if not distributions.get(name, set()) & installed:
                missing.append(
                    f"{path.relative_to(ROOT)} imports {name} ({sorted(distributions.get(name, []))})"
                )
    assert missing == [], "imports no declared dependency installs:\n" + "\n".join(missing)
