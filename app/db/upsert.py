"""Adding to a counter row that may not exist yet, in one statement on every tested dialect.

An UPDATE followed by an INSERT when no row matched races with a concurrent first writer, and
the losing INSERT's integrity error would end the caller's whole transaction on PostgreSQL
(a turn's transcript, for usage). The dialects' own upserts add atomically instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Table, insert, update
from sqlalchemy.dialects import mysql, postgresql, sqlite


def add_to_row(
    connection: Connection, table: Table, key: Mapping[str, Any], amounts: Mapping[str, int]
) -> None:
    """Add `amounts` to the row named by `key` (its primary key), creating it with `amounts`."""
    row = {**key, **amounts}
    dialect = connection.dialect.name
    if dialect in ("postgresql", "sqlite"):
        module: Any = postgresql if dialect == "postgresql" else sqlite
        statement = module.insert(table).values(row)
        statement = statement.on_conflict_do_update(
            index_elements=list(key),
            set_={name: table.c[name] + statement.excluded[name] for name in amounts},
        )
        connection.execute(statement)
        return
    if dialect in ("mysql", "mariadb"):
        upsert = mysql.insert(table).values(row)
        connection.execute(
            upsert.on_duplicate_key_update(
                {name: table.c[name] + upsert.inserted[name] for name in amounts}
            )
        )
        return
    # Other dialects (SQL Server): update, else insert; a concurrent first insert surfaces as an
    # integrity error for the caller to retry.
    matched = connection.execute(
        update(table)
        .where(*(table.c[name] == value for name, value in key.items()))
        .values({name: table.c[name] + value for name, value in amounts.items()})
    )
    if not matched.rowcount:
        connection.execute(insert(table).values(row))
