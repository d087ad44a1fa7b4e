"""Memory state (documents, history, proposals, preferences, projects and their documents, the
entries' expiries) has one way in: the unit of work.

Structurally: only the storage modules build statements that write those tables and only
app/memory/writes.py runs them, inside a unit of work opened by MemoryService (or the readiness
probe). By type: every storage write function takes the `UnitOfWork`, so a call with a bare
connection fails `mypy --strict` (tests/unit/test_write_types.py runs mypy on such a call), and
only app/memory/unit_of_work.py makes one. At run time, the second line for SQL no type sees:
the engine refuses such a statement on any connection that does not hold a user's writer lock,
whatever its form (Core or text), on every dialect.
"""

from __future__ import annotations

import ast
import inspect
from importlib import import_module
from pathlib import Path
from typing import get_type_hints

import pytest
from sqlalchemy import Connection, Engine, delete, insert, text, update

from app.db.writers import MEMORY_STATE_TABLES, WriterLockRequiredError, writes_memory_state
from app.memory.service import MemoryService
from app.memory.unit_of_work import UnitOfWork, unit_of_work

APP = Path(__file__).resolve().parents[2] / "app"
TABLE_NAMES = {
    "agent_memory",
    "memory_changes",
    "memory_proposals",
    "memory_preferences",
    "projects",
    "project_memory",
    "memory_expiries",
}
# Where the write statements are built (storage) and run (writes.py, the unit of work's body).
STATEMENT_MODULES = {
    "memory/repository.py",
    "memory/history.py",
    "memory/proposals.py",
    "memory/projects.py",
    "memory/expiries.py",
}
STORAGE_WRITERS = {
    "projects": {"create", "change", "forget", "remove", "forget_documents", "delete_all"},
    "repository": {"delete_all", "document_statement"},
    "history": {"delete_all", "trim", "delete_older_than", "ENTRY_INSERT", "TRIM_BEFORE_INSERT"},
    "proposals": {
        "add",
        "remove",
        "delete_all",
        "delete_preferences",
        "set_save_mode",
        "set_recall_chats",
    },
    "expiries": {"persist", "delete_all", "delete_document", "delete_due"},
}
# Build a statement for writes.py to run on the unit's connection; they run nothing themselves.
STATEMENT_BUILDERS = {"document_statement"}
UNIT_OPENERS = {"memory/service.py", "api/health.py"}


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (str(path.relative_to(APP)), ast.parse(path.read_text(), str(path)))
        for path in sorted(APP.rglob("*.py"))
    ]


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def test_only_the_storage_modules_build_memory_state_writes() -> None:
    """No `insert/update/delete(<memory table>)`, `<memory table>.insert()` or SQL text that
    writes a memory table anywhere in app/ but the three storage modules."""
    offenders = []
    for module, tree in _modules():
        if module in STATEMENT_MODULES:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = _name(node.func)
                if (
                    called in ("insert", "update", "delete")
                    and node.args
                    and _name(node.args[0]) in TABLE_NAMES
                ):
                    offenders.append(f"{module}:{node.lineno}")
                if (
                    isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("insert", "update", "delete")
                    and _name(node.func.value) in TABLE_NAMES
                ):
                    offenders.append(f"{module}:{node.lineno}")
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and module != "db/writers.py"
                and writes_memory_state(node.value)
            ):
                offenders.append(f"{module}:{node.lineno}")
    assert offenders == []


def test_only_the_unit_of_works_body_runs_the_storage_writes() -> None:
    """The storage modules' write functions and statements are used by app/memory/writes.py
    only, and a unit of work is opened by MemoryService (and the readiness probe) only."""
    offenders = []
    for module, tree in _modules():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.attr in STORAGE_WRITERS.get(node.value.id, ())
                and module not in ("memory/writes.py", *STATEMENT_MODULES)
            ):
                offenders.append(f"{module}:{node.lineno} {node.value.id}.{node.attr}")
            if (
                isinstance(node, ast.Call)
                and _name(node.func) == "unit_of_work"
                and module not in UNIT_OPENERS
            ):
                offenders.append(f"{module}:{node.lineno} unit_of_work")
    assert offenders == []


def _storage_writers() -> list[tuple[str, str]]:
    """Every storage write function (the rest are statements, or build one, for writes.py)."""
    return [
        (module, name)
        for module, names in sorted(STORAGE_WRITERS.items())
        for name in sorted(names)
        if callable(getattr(import_module(f"app.memory.{module}"), name))
        and name not in STATEMENT_BUILDERS
    ]


@pytest.mark.parametrize(("module", "name"), _storage_writers(), ids=lambda part: str(part))
def test_every_storage_write_takes_the_unit_of_work_first(module: str, name: str) -> None:
    """The type that makes a write outside the unit of work not type-check: the first
    parameter of each storage write function is a `UnitOfWork`, and none takes a connection."""
    function = getattr(import_module(f"app.memory.{module}"), name)
    hints = get_type_hints(function)
    first = next(iter(inspect.signature(function).parameters))
    assert hints[first] is UnitOfWork
    assert Connection not in hints.values()


def test_only_the_one_way_in_makes_a_unit_of_work() -> None:
    """`UnitOfWork(...)` is called in app/memory/unit_of_work.py alone (by `unit_of_work`, which
    takes the user's lock first): holding one proves the lock is held."""
    offenders = [
        f"{module}:{node.lineno}"
        for module, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and _name(node.func) == "UnitOfWork"
        and module != "memory/unit_of_work.py"
    ]
    assert offenders == []


@pytest.mark.parametrize("table", MEMORY_STATE_TABLES, ids=lambda table: table.name)
def test_the_engine_refuses_memory_state_writes_outside_a_unit_of_work(
    engine: Engine, table: object
) -> None:
    """Core and text forms of INSERT, UPDATE and DELETE on each memory table raise before
    reaching the database on a plain connection; nothing is written."""
    from sqlalchemy import Table

    assert isinstance(table, Table)
    # A value for each key column a table has besides the owner (projects, revision 0012; the
    # entries' expiries, revision 0017).
    keys = {
        name: "k"
        for name in ("id", "project_id", "document", "entry_digest")
        if name in table.primary_key.columns
    }
    statements = [
        insert(table).values(
            user_id="mallory",
            **({"memory_type": "user"} if "memory_type" in table.c else {}),
            **keys,
        ),
        text(f"INSERT INTO {table.name} (user_id) VALUES ('mallory')"),
        update(table).where(table.c.user_id == "mallory").values(user_id="eve"),
        delete(table).where(table.c.user_id == "mallory"),
        text(f"DELETE FROM {table.name} WHERE user_id = 'mallory'"),
        text(f"update {table.name} set user_id = 'eve'"),
    ]
    for statement in statements:
        with pytest.raises(WriterLockRequiredError), engine.begin() as connection:
            connection.execute(statement)


def test_inside_a_unit_of_work_the_same_statements_run(engine: Engine) -> None:
    """The guard does not refuse the unit of work's own writes (the control of the test above),
    and it is back in force once the unit of work has ended."""
    from app.db.schema import memory_preferences

    with unit_of_work(engine, "alice", "test") as unit:
        unit.connection.execute(
            delete(memory_preferences).where(memory_preferences.c.user_id == "alice")
        )
    with pytest.raises(WriterLockRequiredError), engine.begin() as connection:
        connection.execute(delete(memory_preferences).where(memory_preferences.c.user_id == "a"))
    MemoryService(engine).set_save_mode("alice", "ask")
