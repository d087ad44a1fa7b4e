"""Test-owned PostgreSQL servers on loopback: a PgBouncer in transaction mode, a throwaway
server a test may stop and start, and a throwaway primary with a synchronous hot standby that a
test may crash and promote.

Both run Debian's packages (`scripts/services` installs them) as the `postgres` user, in a
private temporary directory, on free ports, and are stopped by the pid they wrote: the shared
server on 5432 is never touched. docs/operations-deployment.md shows the same configurations.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from app.db.engine import Pooler
from tests.support.server import free_port
from tests.support.waiting import wait_for

POSTGRES_USER = "postgres"
# Debian's PostgreSQL 15 binaries (`pg_ctl`, `initdb`, `pg_basebackup` are not on its PATH).
PG_BIN = Path(os.environ.get("TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def as_postgres(args: list[str]) -> list[str]:
    """Run as the `postgres` user (the servers refuse to run as root)."""
    if os.geteuid() == 0:
        return ["runuser", "-u", POSTGRES_USER, "--", *args]
    return args


def run(args: list[str], *, timeout: float = 120) -> str:
    done = subprocess.run(
        as_postgres(args), capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr or done.stdout}")
    return done.stdout


@contextmanager
def private_directory(prefix: str) -> Iterator[Path]:
    """A temporary directory owned by the `postgres` user, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        if os.geteuid() == 0:
            shutil.chown(path, POSTGRES_USER, POSTGRES_USER)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def psql(port: int, sql: str, *, database: str = "postgres") -> str:
    return run(
        [
            "psql",
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-U",
            POSTGRES_USER,
            "-d",
            database,
            "-c",
            sql,
        ]
    ).strip()


# -- PgBouncer ------------------------------------------------------------------------------

_POOLED_PORTS: set[int] = set()  # the ports of the PgBouncers running now


def pooler_for(database_url: str) -> Pooler:
    """DB_POOLER for a test URL: "transaction" when it leads to one of these PgBouncers."""
    return "transaction" if make_url(database_url).port in _POOLED_PORTS else "none"


@dataclass
class PgBouncer:
    """A PgBouncer serving every database of one upstream server; `repoint` moves it."""

    port: int
    folder: Path
    upstream: tuple[str, int]
    settings: dict[str, str]

    @property
    def ini(self) -> Path:
        return self.folder / "pgbouncer.ini"

    def url_for(self, database_url: str) -> str:
        """`database_url` (any host) with PgBouncer's host and port."""
        url = make_url(database_url).set(host="127.0.0.1", port=self.port, query={})
        return url.render_as_string(hide_password=False)

    def write_config(self) -> None:
        ini = pgbouncer_ini(self.port, self.folder, *self.upstream)
        self.ini.write_text(ini + "".join(f"{k} = {v}\n" for k, v in self.settings.items()))

    def repoint(self, host: str, port: int) -> None:
        """What an operator does after a failover: re-point `[databases]`, then RELOAD."""
        self.upstream = (host, port)
        self.write_config()
        self.admin("RELOAD")

    def admin(self, command: str) -> str:
        return psql(self.port, command, database="pgbouncer")


def pgbouncer_ini(port: int, folder: Path, upstream_host: str, upstream_port: int) -> str:
    """Debian's pgbouncer.ini with `pool_mode = transaction`; everything else that differs
    only says where to listen (loopback), how clients log in (trust, on loopback), and where
    this private instance keeps its files. No pool size, timeout or startup-parameter
    setting is changed: the service must work with PgBouncer's defaults."""
    return f"""\
[databases]
* = host={upstream_host} port={upstream_port}

[pgbouncer]
pool_mode = transaction
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder}/userlist.txt
admin_users = {POSTGRES_USER}
logfile = {folder}/pgbouncer.log
pidfile = {folder}/pgbouncer.pid
"""


@contextmanager
def pgbouncer(upstream_host: str, upstream_port: int, **settings: str) -> Iterator[PgBouncer]:
    """A private PgBouncer in front of `upstream`, stopped (by its pid) afterwards; `settings`
    are added to its [pgbouncer] section (only the failover test adds one)."""
    if shutil.which("pgbouncer") is None:
        raise RuntimeError("pgbouncer is not installed: run scripts/services")
    with private_directory("pgbouncer-") as folder:
        bouncer = PgBouncer(free_port(), folder, (upstream_host, upstream_port), settings)
        (folder / "userlist.txt").write_text(f'"{POSTGRES_USER}" ""\n')
        bouncer.write_config()
        if os.geteuid() == 0:
            for name in ("userlist.txt", "pgbouncer.ini"):
                shutil.chown(folder / name, POSTGRES_USER, POSTGRES_USER)
        run(["pgbouncer", "-d", str(bouncer.ini)])
        pidfile = folder / "pgbouncer.pid"
        _POOLED_PORTS.add(bouncer.port)
        try:
            wait_for(pidfile.exists, "PgBouncer to write its pid file")
            wait_for(lambda: _answers(bouncer), "PgBouncer to answer")
            yield bouncer
        finally:
            _POOLED_PORTS.discard(bouncer.port)
            if pidfile.exists():
                pid = int(pidfile.read_text().split()[0])
                os.kill(pid, 15)
                wait_for(lambda: not _alive(pid), "PgBouncer to stop")


def _answers(bouncer: PgBouncer) -> bool:
    try:
        bouncer.admin("SHOW VERSION")
    except RuntimeError:
        return False
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- a primary and its synchronous standby -------------------------------------------------

STANDBY_NAME = "standby1"


@dataclass
class Cluster:
    """One PostgreSQL server of the pair: its data directory and port."""

    name: str
    data: Path
    port: int
    log: Path

    def start(self) -> None:
        run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "start"])

    def crash(self) -> None:
        """`pg_ctl stop -m immediate`: every server process exits at once, as in a crash."""
        run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"])

    def promote(self) -> None:
        run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "promote"])

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def sql(self, statement: str, *, database: str = "postgres") -> str:
        return psql(self.port, statement, database=database)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{POSTGRES_USER}@127.0.0.1:{self.port}/{database}"


def _initdb(cluster: Cluster) -> None:
    run(
        [
            str(PG_BIN / "initdb"),
            "-D",
            str(cluster.data),
            "-U",
            POSTGRES_USER,
            "-A",
            "trust",
            "--no-sync",
            "--no-instructions",
        ]
    )


@contextmanager
def private_server(database: str) -> Iterator[Cluster]:
    """A fresh server of its own with `database` created, for a test that stops and starts a
    server: the shared one on 5432 serves every other test and client, and stays up."""
    with private_directory("pg-own-") as folder:
        cluster = Cluster("own", folder / "data", free_port(), folder / "server.log")
        _initdb(cluster)
        with (cluster.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {cluster.port}\n"
                f"unix_socket_directories = '{folder}'\nfsync = off\nshared_buffers = 16MB\n"
            )
        try:
            cluster.start()
            cluster.sql(f'CREATE DATABASE "{database}"')
            yield cluster
        finally:
            with contextlib.suppress(RuntimeError):
                cluster.stop()


def primary_settings(port: int, socket_dir: Path) -> str:
    """postgresql.conf additions of the primary (the standby's differ below). Once the
    standby streams, the primary also gets `synchronous_standby_names = 'standby1'`: a commit
    is acknowledged only once the standby has flushed it too."""
    return f"""
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{socket_dir}'
synchronous_commit = on
wal_level = replica
max_wal_senders = 5
hot_standby = on
# Test only: the test crashes server processes, not the machine, so the operating system keeps
# every write; production keeps fsync on.
fsync = off
shared_buffers = 16MB
"""


def standby_settings(port: int, primary_port: int) -> str:
    """What the standby changes from the primary's postgresql.conf (which it copied)."""
    return f"""
port = {port}
primary_conninfo = 'host=127.0.0.1 port={primary_port} user={POSTGRES_USER} \
application_name={STANDBY_NAME}'
# Once promoted it has no standby of its own: its commits must not wait for one. Until a new
# standby is attached, an acknowledged commit is on this server only.
synchronous_standby_names = ''
"""


@dataclass
class Pair:
    primary: Cluster
    standby: Cluster
    database: str

    @property
    def multi_host_url(self) -> str:
        """Both servers; libpq takes the first that accepts writes."""
        return (
            f"postgresql+psycopg://{POSTGRES_USER}@/{self.database}"
            f"?host=127.0.0.1:{self.primary.port}&host=127.0.0.1:{self.standby.port}"
            "&target_session_attrs=read-write"
        )

    def standby_is_synchronous(self) -> bool:
        return (
            self.primary.sql(
                "SELECT count(*) FROM pg_stat_replication "
                f"WHERE application_name = '{STANDBY_NAME}' AND sync_state = 'sync'"
            )
            == "1"
        )

    def accepts_writes(self, cluster: Cluster) -> bool:
        try:
            return cluster.sql("SELECT NOT pg_is_in_recovery()") == "t"
        except RuntimeError:
            return False


@contextmanager
def primary_and_standby(database: str) -> Iterator[Pair]:
    """A fresh primary with `database` created and a synchronous hot standby streaming from
    it; both stopped and removed afterwards."""
    with private_directory("pg-pair-") as folder:
        primary = Cluster("primary", folder / "primary", free_port(), folder / "primary.log")
        standby = Cluster("standby", folder / "standby", free_port(), folder / "standby.log")
        _initdb(primary)
        with (primary.data / "postgresql.conf").open("a") as conf:
            conf.write(primary_settings(primary.port, folder))
        try:
            primary.start()
            primary.sql(f'CREATE DATABASE "{database}"')
            run(
                [
                    str(PG_BIN / "pg_basebackup"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(primary.port),
                    "-U",
                    POSTGRES_USER,
                    "-D",
                    str(standby.data),
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                    "--no-sync",
                ]
            )
            (standby.data / "standby.signal").touch()
            with (standby.data / "postgresql.conf").open("a") as conf:
                conf.write(standby_settings(standby.port, primary.port))
            standby.start()
            # Only now: set before the standby exists, it would hold every commit (the
            # CREATE DATABASE above, the base backup's checkpoint) waiting for one.
            primary.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            primary.sql("SELECT pg_reload_conf()")
            pair = Pair(primary, standby, database)
            wait_for(pair.standby_is_synchronous, "the standby to stream synchronously")
            yield pair
        finally:
            for cluster in (standby, primary):
                with contextlib.suppress(RuntimeError):  # a crashed one is already stopped
                    cluster.stop()
