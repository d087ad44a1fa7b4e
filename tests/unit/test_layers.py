"""The application's packages stand in layers: every import (at any depth, type-only ones too)
reaches a lower layer, so the import graph between packages has no cycle and no arrow back up.

A package (a folder under app/, or a module directly in it) is one unit; imports inside a unit
are its own business. A new package must be placed in `LAYERS` before it can import anything.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

# Bottom first. A unit may import only from units of the layers below its own.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"settings", "names", "errors", "cpu"}),  # shared ground: settings and constants
    frozenset({"db", "telemetry", "offline", "http_protocol", "policy"}),
    frozenset({"concurrency"}),
    frozenset({"identity", "operators"}),
    frozenset({"conversations", "sessions"}),
    frozenset({"memory", "embeddings"}),
    frozenset({"agent", "erasure"}),
    frozenset({"runtime"}),  # the composition root
    frozenset({"api", "cli"}),
    frozenset({"mcp", "__main__"}),
    frozenset({"main"}),
)
WITHOUT_IMPORTS = frozenset({"app", "web"})  # app/__init__.py; the browser's files


def unit_of(module: str) -> str:
    """`app.api.chat` -> `api`; `app.runtime` -> `runtime`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def imports_between_units(sources: Mapping[str, str]) -> set[tuple[str, str, str]]:
    """(importing unit, imported unit, importing module) for every import of another unit."""
    found: set[tuple[str, str, str]] = set()
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            names: Iterable[str] = ()
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                if name.startswith("app.") and unit_of(name) != unit_of(module):
                    found.add((unit_of(module), unit_of(name), module))
    return found


def violations(sources: Mapping[str, str], layers: tuple[frozenset[str], ...]) -> list[str]:
    rank = {unit: index for index, layer in enumerate(layers) for unit in layer}
    problems = sorted(
        f"{module} ({importer}) imports {imported}, which is not below it"
        for importer, imported, module in imports_between_units(sources)
        if rank.get(imported, len(layers)) >= rank.get(importer, -1)
    )
    units = {unit_of(module) for module in sources}
    problems += sorted(f"{unit} has no layer" for unit in units - rank.keys())
    return problems


def app_sources() -> dict[str, str]:
    sources = {}
    for path in sorted(APP.rglob("*.py")):
        relative = path.relative_to(APP.parent).with_suffix("")
        module = ".".join(relative.parts).removesuffix(".__init__")
        if unit_of(module) not in WITHOUT_IMPORTS:
            sources[module] = path.read_text(encoding="utf-8")
    return sources


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        pytest.param(
            {"app.db.engine": "from app.api.chat import x"},
            "app.db.engine (db) imports api, which is not below it",
            id="arrow-back-up",
        ),
        pytest.param(
            {"app.memory.a": "import app.embeddings.store"},
            "app.memory.a (memory) imports embeddings, which is not below it",
            id="same-layer",
        ),
        pytest.param(
            {"app.db.a": "def f():\n    from app.runtime import Runtime\n"},
            "app.db.a (db) imports runtime, which is not below it",
            id="nested-import",
        ),
        pytest.param({"app.newthing": "x = 1"}, "newthing has no layer", id="unplaced-unit"),
    ],
)
def test_the_checker_catches_each_kind_of_violation(sources: dict[str, str], expected: str) -> None:
    """Guard the guard: an import up, sideways, hidden in a function, or an unplaced package."""
    assert expected in violations(sources, LAYERS)


def test_every_import_reaches_a_lower_layer() -> None:
    """No package imports one on its own layer or above: no cycle, no arrow back up."""
    assert violations(app_sources(), LAYERS) == []
