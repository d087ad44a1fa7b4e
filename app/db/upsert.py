"""Adding to a counter row that may not exist yet, in one statement on every tested dialect.

An UPDATE followed by an INSERT when no row matched races with a concurrent first writer, and
the losing INSERT's integrity error would end the caller's whole transaction on PostgreSQL
(a turn's transcript, for usage). The dialects' own upserts add atomically instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from sqlalchemy import Connection, Insert, Table, bindparam, insert, update
from sqlalchemy.dialects import mysql, postgresql, sqlite


@cache
def upsert(
    dialect: str, table: Table, key: tuple[str, ...], amounts: tuple[str, ...], prefix: str = ""
) -> Insert | None:
    """The dialect's statement adding `amounts` to the row named by `key`, creating it, built
    once per shape with each column's value bound as `prefix + column` at execution (a turn
    records usage on every answer: building it per call cost more than running it). None
    where the dialect has no upsert."""
    values = {
        column: bindparam(prefix + column, type_=table.c[column].type)
        for column in (*key, *amounts)
    }
    if dialect in ("postgresql", "sqlite"):
        module: Any = postgresql if dialect == "postgresql" else sqlite
        statement = module.insert(table).values(values)
        return statement.on_conflict_do_update(  # type: ignore[no-any-return]
            index_elements=list(key),
            set_={name: table.c[name] + statement.excluded[name] for name in amounts},
        )
    if dialect in ("mysql", "mariadb"):
        statement = mysql.insert(table).values(values)
        return statement.on_duplicate_key_update(
            {name: table.c[name] + statement.inserted[name] for name in amounts}
        )
    return None


def add_to_row(
    connection: Connection, table: Table, key: Mapping[str, Any], amounts: Mapping[str, int]
) -> None:
    """Add `amounts` to the row named by `key` (its primary key), creating it with `amounts`."""
    statement = upsert(connection.dialect.name, table, tuple(key), tuple(amounts))
    if statement is not None:
        connection.execute(statement, {**key, **amounts})
        return
    # Other dialects (SQL Server): update, else insert; a concurrent first insert surfaces as an
    # integrity error for the caller to retry.
    matched = connection.execute(
        update(table)
        .where(*(table.c[name] == value for name, value in key.items()))
        .values({name: table.c[name] + value for name, value in amounts.items()})
    )
    if not matched.rowcount:
        connection.execute(insert(table).values({**key, **amounts}))
