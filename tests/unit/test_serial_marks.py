"""Tests own their services: no test stops, restarts or reconfigures the machine's PostgreSQL or
MariaDB, which other tests and clients use at the same time. A test that restarts a server
starts its own (tests/support/postgres_servers.py); one that sets a MariaDB global variable
runs its MariaDB variant on a server the session started (the `own_mariadb` mark)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import make_url

from tests.support.erasure import refuse_shared_server

TESTS = Path(__file__).resolve().parents[1]
# The machine's own PostgreSQL is driven by pg_ctlcluster; a private one by pg_ctl on its own
# data directory (tests/support/postgres_servers.py).
SERVER_WIDE = re.compile(r"pg_ctlcluster|SET GLOBAL")
GLOBAL_HELPERS = re.compile(
    r"from tests\.support\.erasure import [^\n]*\b(scan|fulltext_optimizable)\b"
)


def _test_files() -> list[Path]:
    return [path for path in sorted(TESTS.rglob("test_*.py")) if path != Path(__file__).resolve()]


def test_no_test_file_stops_a_server_or_sets_a_global_itself() -> None:
    found = [str(p.relative_to(TESTS)) for p in _test_files() if SERVER_WIDE.search(p.read_text())]
    assert found == [], "start a server of the test's own (tests/support/*_servers.py)"


def test_every_file_using_the_global_setting_helpers_runs_them_on_its_own_mariadb() -> None:
    users = [p for p in _test_files() if GLOBAL_HELPERS.search(p.read_text())]
    assert {p.name for p in users} >= {"test_erasure.py", "test_erasure_scan.py"}
    unmarked = [str(p.relative_to(TESTS)) for p in users if "mark.own_mariadb" not in p.read_text()]
    assert unmarked == [], "mark them `own_mariadb` (tests/conftest.py)"


def test_the_helpers_refuse_the_shared_server() -> None:
    with pytest.raises(AssertionError, match="own_mariadb"):
        refuse_shared_server(make_url("mysql+pymysql://root@127.0.0.1:3306/amt_x"))
    refuse_shared_server(make_url("mysql+pymysql://root@127.0.0.1:41234/amt_x"))
