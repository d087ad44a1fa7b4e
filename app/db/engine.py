"""Engine construction per dialect: SQLite gets WAL and up-front write locks on request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

# Execution option a caller sets on a SQLite connection to take the write lock at BEGIN.
SQLITE_IMMEDIATE = "sqlite_immediate"


def build_engine(url: str, *, echo: bool = False) -> Engine:
    parsed = make_url(url)
    kwargs: dict[str, Any] = {"echo": echo, "pool_pre_ping": True}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 15}
        if database in ("", ":memory:"):
            kwargs["poolclass"] = StaticPool
        engine = create_engine(parsed, **kwargs)
        _configure_sqlite(engine)
        return engine
    if parsed.get_backend_name() in ("mysql", "mariadb"):
        kwargs["pool_recycle"] = 3600
    return create_engine(parsed, **kwargs)


def _configure_sqlite(engine: Engine) -> None:
    """Take control of BEGIN (pysqlite's own handling defers it) so writers can lock up front."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL still never corrupts the database and keeps every commit across an
        # application crash; only an OS crash or power loss can drop the latest commits. FULL
        # fsyncs on every commit and dominated the embedded turn's time.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=15000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        immediate = connection.get_execution_options().get(SQLITE_IMMEDIATE, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
