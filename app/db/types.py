"""Column types that keep identity exact and text whole on every supported database.

Equality on a subject or an id must mean "the same characters", never "the same under some
collation": otherwise `alice`, `ALICE`, `álice` and `alice ` share one memory. Each dialect gets
the type that compares code point for code point, trailing spaces included, so repositories
keep writing `column == value`. docs/operations-databases.md explains the choices.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import VARBINARY, DateTime, String, TypeDecorator, Unicode, UnicodeText
from sqlalchemy.dialects import mssql, mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

# MariaDB's `utf8mb4_bin` is PAD SPACE ('alice' = 'alice ' there); these two are NO PAD.
MARIADB_EXACT_COLLATION = "utf8mb4_nopad_bin"
MYSQL_EXACT_COLLATION = "utf8mb4_0900_bin"
POSTGRES_EXACT_COLLATION = "C"
# SQL Server compares strings with trailing spaces ignored, whatever the collation (and its
# keys do too), so ids are stored as their UTF-16LE bytes: binary comparison there pads only
# with 0x00, and a code unit of zero is U+0000, which no id may contain.
MSSQL_ENCODING = "utf-16-le"
MSSQL_BYTES_PER_CHARACTER = 4  # a character outside the BMP is a surrogate pair


def mysql_exact_collation(dialect: Dialect) -> str:
    return (
        MARIADB_EXACT_COLLATION
        if getattr(dialect, "is_mariadb", False)
        else (MYSQL_EXACT_COLLATION)
    )


class Identifier(TypeDecorator[str]):
    """A subject or a resource id of at most `length` characters, compared exactly.

    SQLite: VARCHAR (its default BINARY collation is exact). PostgreSQL: VARCHAR COLLATE "C".
    MariaDB/MySQL: VARCHAR in utf8mb4 with a binary NO PAD collation (chosen per server: the
    dialect knows which one it is connected to). SQL Server: VARBINARY holding UTF-16LE.
    """

    impl = String
    cache_ok = True

    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(String(self.length, collation=POSTGRES_EXACT_COLLATION))
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(
                mysql.VARCHAR(
                    self.length, charset="utf8mb4", collation=mysql_exact_collation(dialect)
                )
            )
        if dialect.name == "mssql":
            return dialect.type_descriptor(VARBINARY(self.length * MSSQL_BYTES_PER_CHARACTER))
        return dialect.type_descriptor(String(self.length))

    def process_bind_param(self, value: str | None, dialect: Dialect) -> Any:
        if value is not None and dialect.name == "mssql":
            return value.encode(MSSQL_ENCODING)
        return value

    def literal_processor(self, dialect: Dialect) -> Callable[[Any], str] | None:
        if dialect.name == "mssql":
            # A binary literal, as SQL Server writes one (used by offline SQL and debugging).
            return lambda value: "0x" + str(value).encode(MSSQL_ENCODING).hex()
        return super().literal_processor(dialect)

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value).decode(MSSQL_ENCODING)
        return value  # type: ignore[no-any-return]


def short_text(length: int) -> TypeEngine[str]:
    """Human text of at most `length` characters: NVARCHAR on SQL Server (its VARCHAR is not
    Unicode); utf8mb4 on MariaDB through the table's character set."""
    return Unicode(length)


def document_text() -> TypeEngine[str]:
    """A bounded document (a memory row): TEXT; NVARCHAR(max) on SQL Server (spelled out: its
    dialect would otherwise say NTEXT until it has met a server).

    MariaDB's TEXT holds 65,535 bytes, over seven times the largest memory document (2,200
    characters of at most 4 bytes each)."""
    return UnicodeText().with_variant(mssql.NVARCHAR(), "mssql")


def long_text() -> TypeEngine[str]:
    """A message of up to MAX_MESSAGE_CHARS characters: MariaDB/MySQL TEXT stops at 65,535
    bytes (16,383 emoji), so MEDIUMTEXT there (16 MiB); NVARCHAR(max) on SQL Server."""
    return (
        UnicodeText()
        .with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
        .with_variant(mssql.NVARCHAR(), "mssql")
    )


def precise_timestamp() -> TypeEngine[Any]:
    """A UTC moment to the microsecond, which the application writes (no server default:
    MySQL refuses `DEFAULT CURRENT_TIMESTAMP` on a fractional column). MariaDB/MySQL DATETIME
    and SQL Server DATETIME would round to the second or to 3 ms, and transcripts order by it."""
    return (
        DateTime()
        .with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
        .with_variant(mssql.DATETIME2(precision=6), "mssql")  # type: ignore[no-untyped-call]
    )
