"""The memory rules and the threat scanner stay pure: no storage, web, model, log or I/O imports."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE_MODULES = ["app/memory/rules.py", "app/memory/scanning.py"]

# Top-level packages that do I/O or belong to an I/O edge of the application.
FORBIDDEN_ROOTS = frozenset(
    {
        "sqlalchemy",
        "fastapi",
        "openai",
        "logging",
        "structlog",
        "httpx",
        "starlette",
        "alembic",
        "psycopg",
        "psycopg2",
        "pymysql",
        "pyodbc",
        "sqlite3",
        "socket",
        "ssl",
        "asyncio",
        "threading",
        "multiprocessing",
        "subprocess",
        "requests",
        "urllib3",
        "http",
        "io",
        "os",
        "pathlib",
        "shutil",
        "tempfile",
        "opentelemetry",
        "uvicorn",
        "sse_starlette",
        "jwt",
        "jinja2",
        "time",
        "random",
        "selectors",
        "select",
    }
)
# Inside the application, a pure module may only lean on other pure modules.
ALLOWED_APP_MODULES = frozenset({"app.memory.rules", "app.memory.scanning"})
FORBIDDEN_BUILTINS = frozenset({"open", "print", "input", "__import__", "exec", "eval"})


def import_violations(source: str) -> list[str]:
    """Every import (at any depth, even inside functions) or I/O builtin call that breaks purity."""
    violations: list[str] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                violations.append(f"relative import from {node.module!r}")
                continue
            module = node.module or ""
            names = [
                f"{module}.{alias.name}" if module == "app.memory" else module
                for alias in node.names
            ]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FORBIDDEN_BUILTINS
        ):
            violations.append(f"calls {node.func.id}()")
        for name in names:
            root = name.split(".")[0]
            app_module = root == "app" and name not in ALLOWED_APP_MODULES
            if root in FORBIDDEN_ROOTS or name.startswith("importlib") or app_module:
                violations.append(f"imports {name}")
    return violations


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param("import sqlalchemy", "imports sqlalchemy", id="import"),
        pytest.param("from fastapi import FastAPI", "imports fastapi", id="from-import"),
        pytest.param("import logging.handlers", "imports logging.handlers", id="submodule"),
        pytest.param("def f():\n    import openai\n", "imports openai", id="nested-import"),
        pytest.param("from app.db import engine", "imports app.db", id="app-io-module"),
        pytest.param(
            "from app.memory import repository", "imports app.memory.repository", id="app-sibling"
        ),
        pytest.param("x = open('f')", "calls open()", id="open-builtin"),
    ],
)
def test_the_checker_catches_each_kind_of_violation(source: str, expected: str) -> None:
    """Guard the guard: each way an I/O dependency could creep in is reported."""
    assert expected in import_violations(source)


@pytest.mark.parametrize("path", PURE_MODULES)
def test_pure_module_imports_no_io(path: str) -> None:
    """rules.py and scanning.py import nothing that touches storage, the web, a model or logs."""
    assert import_violations((ROOT / path).read_text(encoding="utf-8")) == []


def test_importing_the_pure_modules_loads_no_io_package() -> None:
    """In a fresh interpreter, importing the rules and the scanner pulls in no I/O package
    (catches indirect imports through package __init__ files too)."""
    probe = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "import app.memory.rules, app.memory.scanning\n"
        "print(json.dumps([sorted(set(sys.modules) - before), sorted(sys.modules)]))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded, everything = json.loads(completed.stdout)
    named = {"sqlalchemy", "fastapi", "openai", "logging", "structlog", "httpx", "starlette"}
    assert sorted(name for name in everything if name.split(".")[0] in named) == []
    offending = [
        name
        for name in loaded
        if name.split(".")[0] in FORBIDDEN_ROOTS - {"io", "os", "time"}
        or (name.startswith("app.") and name not in ALLOWED_APP_MODULES | {"app.memory"})
    ]
    assert "app.memory.rules" in loaded
    assert offending == []
