"""A write to memory state outside the unit of work does not type-check: mypy --strict refuses
each storage write function called with a bare connection, and accepts the same call with the
unit of work (the control: the refusal is about the argument, not the snippet)."""

from __future__ import annotations

import inspect
from importlib import import_module
from pathlib import Path

from mypy import api

from tests.integration.test_one_way_in import STATEMENT_BUILDERS, STORAGE_WRITERS

ROOT = Path(__file__).resolve().parents[2]


def _calls(argument: str) -> tuple[str, list[str]]:
    """One function per storage write, calling it with `argument` first (every other argument
    is `Any`, so the first is the only one mypy can refuse); and the calls' names."""
    lines = [
        "from typing import Any",
        "from sqlalchemy import Connection",
        "from app.memory import expiries, history, projects, proposals, repository",
        "from app.memory.unit_of_work import UnitOfWork",
    ]
    names = []
    for module, functions in sorted(STORAGE_WRITERS.items()):
        imported = import_module(f"app.memory.{module}")
        for name in sorted(functions - STATEMENT_BUILDERS):
            function = getattr(imported, name)
            if not callable(function):
                continue  # a statement: only writes.py runs it (test_one_way_in.py)
            rest = list(inspect.signature(function).parameters.values())[1:]
            args = [
                f"{part.name}=anything" if part.kind is part.KEYWORD_ONLY else "anything"
                for part in rest
                if part.default is inspect.Parameter.empty
            ]
            names.append(f"{module}.{name}")
            lines += [
                "",
                f"def call_{module}_{name}(connection: Connection, unit: UnitOfWork, "
                "anything: Any) -> None:",
                f"    {module}.{name}({', '.join([argument, *args])})  # {module}.{name}",
            ]
    return "\n".join(lines) + "\n", names


def _mypy(tmp_path: Path, argument: str) -> tuple[str, list[str]]:
    source, names = _calls(argument)
    snippet = tmp_path / f"with_{argument}.py"
    snippet.write_text(source)
    stdout, stderr, _status = api.run(
        [
            "--strict",
            "--no-error-summary",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            str(snippet),
        ]
    )
    assert not stderr, stderr
    return stdout, names


def test_a_storage_write_with_a_bare_connection_does_not_type_check(tmp_path: Path) -> None:
    """Invariant: every storage write function refuses a `Connection` where it takes the unit
    of work; mypy names each call's line."""
    report, names = _mypy(tmp_path, "connection")
    assert names  # the storage writers were found
    source = (tmp_path / "with_connection.py").read_text().splitlines()
    refused = {
        source[int(line.split(":")[1]) - 1].rsplit("# ", 1)[1]
        for line in report.splitlines()
        if 'type "Connection"; expected "UnitOfWork"' in line
    }
    assert refused == set(names), report


def test_the_same_calls_with_the_unit_of_work_type_check(tmp_path: Path) -> None:
    report, names = _mypy(tmp_path, "unit")
    assert names
    assert report.strip() == "", report
