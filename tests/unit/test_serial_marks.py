"""A test that changes what the whole database server shares runs alone: every test file that
stops the PostgreSQL server or sets a MariaDB global variable (directly, or through the erasure
helpers that do) carries the `serial` mark, which keeps it out of scripts/test's parallel part
(tests/conftest.py)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# What changes the server for everyone: the server stopped, a global variable set, or the
# erasure helpers that set `innodb_ft_aux_table` and `innodb_optimize_fulltext_only`.
SERVER_WIDE = re.compile(
    r"pg_ctlcluster|SET GLOBAL"
    r"|from tests\.support\.erasure import [^\n]*\b(scan|fulltext_optimizable)\b"
)


def _server_wide_files() -> list[Path]:
    return [
        path
        for path in sorted(TESTS.rglob("test_*.py"))
        if path != Path(__file__).resolve() and SERVER_WIDE.search(path.read_text())
    ]


def test_the_files_that_change_the_whole_server_are_found() -> None:
    names = {path.name for path in _server_wide_files()}
    assert {"test_erasure.py", "test_database_faults.py"} <= names, names


def test_every_file_that_changes_the_whole_server_is_marked_serial() -> None:
    unmarked = [
        str(path.relative_to(TESTS))
        for path in _server_wide_files()
        if "pytest.mark.serial" not in path.read_text()
    ]
    assert unmarked == [], "mark them `serial` (tests/conftest.py)"
