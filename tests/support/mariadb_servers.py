"""A test-owned MariaDB server on loopback, for the tests that set server-wide variables.

The erasure scan reads InnoDB's FULLTEXT index through `innodb_ft_aux_table` and the service's
deletes want `innodb_optimize_fulltext_only` on (docs/privacy.md): both are global variables,
so the tests that need them run on a server of their own, started from Debian's package in a
private directory on a free port; the shared server on 3306 keeps its settings.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.support.server import free_port
from tests.support.waiting import wait_for

MARIADBD = os.environ.get("TEST_MARIADBD", "/usr/sbin/mariadbd")
# The character set and collation Debian's configuration gives the shared server, so that a
# test sees the same defaults on either.
SERVER_OPTIONS = (
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_general_ci",
    "--innodb-buffer-pool-size=32M",
    "--skip-log-bin",
)


def _answers(admin_url: str) -> bool:
    engine = create_engine(admin_url)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        return True
    except Exception:  # noqa: BLE001 - not up yet, whatever the driver says
        return False
    finally:
        engine.dispose()


@contextmanager
def private_mariadb() -> Iterator[str]:
    """A fresh MariaDB server of its own; yields an admin URL (root)."""
    folder = Path(tempfile.mkdtemp(prefix="mariadb-own-"))
    port = free_port()
    data = folder / "data"
    installed = subprocess.run(
        [
            "mariadb-install-db",
            "--no-defaults",
            f"--datadir={data}",
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if installed.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"mariadb-install-db failed: {installed.stderr or installed.stdout}")
    log = (folder / "server.log").open("w")
    server = subprocess.Popen(
        [
            MARIADBD,
            "--no-defaults",
            f"--datadir={data}",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--socket={folder / 'mysqld.sock'}",
            f"--pid-file={folder / 'mysqld.pid'}",
            "--user=root",
            *SERVER_OPTIONS,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    admin = f"mysql+pymysql://root@127.0.0.1:{port}/mysql"
    try:
        wait_for(lambda: _answers(admin), "the private MariaDB server to answer", seconds=120)
        yield admin
    finally:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=60)
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
