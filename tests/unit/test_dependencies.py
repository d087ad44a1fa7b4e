"""pyproject.toml declares every package the application imports, and the installed versions
satisfy the bounds it states: an import that only works because another package happens to
pull its dependency in, or a lower bound the code has outgrown, fails here."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
REQUIREMENTS = [Requirement(line) for line in PROJECT["dependencies"]]
DECLARED = {canonicalize_name(requirement.name) for requirement in REQUIREMENTS}
# Imported, deliberately not declared, each for its reason.
UNDECLARED = {
    # The openai SDK's own HTTP stack: imported only to name its exception class, and only
    # when the installed SDK has it (app/agent/llm.py).
    "httpx2": "optional",
}


def imported_modules() -> dict[str, str]:
    """Every top-level module the application imports outside the standard library, with one
    file that imports it."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top != "app" and top not in sys.stdlib_module_names:
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_the_scan_finds_the_imports_it_guards() -> None:
    """A check that found nothing would pass whatever pyproject says."""
    assert {"anyio", "starlette", "fastapi", "sqlalchemy", "uvicorn"} <= imported_modules().keys()


@pytest.mark.parametrize("module", sorted(imported_modules()))
def test_every_imported_package_is_declared(module: str) -> None:
    if module in UNDECLARED:
        return
    distributions = {canonicalize_name(d) for d in packages_distributions().get(module, [])}
    assert distributions, f"{module} ({imported_modules()[module]}) is not installed"
    assert distributions & DECLARED, (
        f"{module}, imported by {imported_modules()[module]}, comes from {sorted(distributions)}, "
        "none of which pyproject.toml declares"
    )


@pytest.mark.parametrize("requirement", REQUIREMENTS, ids=str)
def test_the_installed_version_satisfies_the_declared_bound(requirement: Requirement) -> None:
    installed = version(requirement.name)
    assert requirement.specifier.contains(installed, prereleases=True), (
        f"{requirement.name} {installed} is outside {requirement.specifier}"
    )
