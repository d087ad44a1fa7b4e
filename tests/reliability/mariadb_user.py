"""A dedicated MariaDB account for the service, so that faults can be injected on it alone.

The service connects as an ordinary account holding table-level DML rights on one private
database. The harness, as root, can then kill that account's connections, lock the account
(new connections are refused) or revoke a privilege on one table, and undo it, without
touching the server's global settings or anyone else's sessions on the shared server.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from app.db.migrate import VERSION_TABLE
from app.db.schema import metadata

HOST = "127.0.0.1"  # the account exists for loopback connections only
DML = "SELECT, INSERT, UPDATE, DELETE"
# The session or the statement ended between listing and KILL: nothing left to kill.
GONE = frozenset({1094, 1957})  # unknown thread id, unknown query id


@dataclass
class ServiceUser:
    name: str
    database: str
    url: str
    admin: Engine = field(repr=False)

    @property
    def account(self) -> str:
        return f"'{self.name}'@'{HOST}'"

    def execute(self, statement: str, **parameters: Any) -> list[Any]:
        with self.admin.connect() as connection:
            result = connection.execute(text(statement), parameters)
            return list(result.all()) if result.returns_rows else []

    def grant(self, privileges: str, table: str) -> None:
        self.execute(f"GRANT {privileges} ON `{self.database}`.`{table}` TO {self.account}")

    def revoke(self, privileges: str, table: str) -> None:
        self.execute(f"REVOKE {privileges} ON `{self.database}`.`{table}` FROM {self.account}")

    def kill_statements(self) -> int:
        """KILL QUERY ID on each statement the account is running, COMMIT excepted.

        A query id names one statement: if that statement has finished by the time the KILL
        arrives, the KILL does nothing, so it can never land on the COMMIT that follows (which
        would leave the commit's outcome unknown to the client). The service sees its
        statement fail inside an open transaction.
        """
        rows = self.execute(
            "SELECT QUERY_ID FROM information_schema.PROCESSLIST WHERE USER = :user "
            "AND COMMAND = 'Query' AND COALESCE(INFO, '') NOT LIKE 'COMMIT%'",
            user=self.name,
        )
        return sum(self._kill(f"KILL QUERY ID {int(query_id)}") for (query_id,) in rows)

    def kill_connections(self) -> int:
        """KILL CONNECTION on every session of the account; returns how many were killed.

        Only for a quiet service: a connection killed while it commits leaves the commit's
        outcome unknown to the client (the in-doubt commit every database client has).
        """
        rows = self.execute(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = :user", user=self.name
        )
        return sum(self._kill(f"KILL CONNECTION {int(thread_id)}") for (thread_id,) in rows)

    def _kill(self, statement: str) -> bool:
        try:
            self.execute(statement)
        except OperationalError as error:
            if getattr(error.orig, "args", (None,))[0] not in GONE:
                raise
            return False
        return True


@contextmanager
def service_user(database_url: str) -> Iterator[ServiceUser]:
    """An account with DML on each table of the (migrated) database; dropped afterwards."""
    parsed = make_url(database_url)
    database = parsed.database or ""
    name = f"amt_{uuid.uuid4().hex[:12]}"
    password = secrets.token_hex(16)
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    user = ServiceUser(
        name=name,
        database=database,
        url=parsed.set(username=name, password=password).render_as_string(hide_password=False),
        admin=admin,
    )
    user.execute(f"CREATE USER {user.account} IDENTIFIED BY :password", password=password)
    try:
        # Table by table (not `db`.*), so that one table's privilege can be taken away.
        for table in [*metadata.tables, VERSION_TABLE]:
            user.grant(DML, table)
        yield user
    finally:
        user.execute(f"ALTER USER {user.account} ACCOUNT UNLOCK")
        user.kill_connections()
        user.execute(f"DROP USER IF EXISTS {user.account}")
        admin.dispose()
