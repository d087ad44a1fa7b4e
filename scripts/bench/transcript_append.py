"""A proposal measured, not adopted: one transcript append on PostgreSQL as the service writes
it (INSERT the message, then UPDATE the conversation's `updated_at`, two round trips) against one
statement (the INSERT as a data-modifying CTE of the UPDATE, one round trip), each in its own
transaction committed as `ConversationService` commits it.

Alternating blocks of `--appends` appends each way, the order swapped every block, on a private
PostgreSQL database; reports the median over blocks of wall and client CPU time per append.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, bindparam, func, insert, select, update

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.conversations import repository  # noqa: E402
from app.db.schema import conversation_messages, conversations  # noqa: E402
from scripts.bench._common import write_results  # noqa: E402
from tests.support.databases import migrated_engine, postgres_database  # noqa: E402

CONTENT = "hello there " * 20
_ADDED = (
    insert(conversation_messages)
    .values(
        conversation_id=bindparam("m_conversation_id"),
        turn_id=bindparam("m_turn_id"),
        role=bindparam("m_role"),
        content=bindparam("m_content"),
        status=bindparam("m_status"),
        created_at=bindparam("m_created_at"),
    )
    .returning(conversation_messages.c.conversation_id)
    .cte("added")
)
ONE_STATEMENT = (
    update(conversations)
    .where(conversations.c.id == bindparam("touched_id"))
    .values(updated_at=bindparam("touched_at"))
    .add_cte(_ADDED)
)


def append(engine: Engine, conversation_id: str, *, one_statement: bool) -> None:
    with engine.begin() as connection:
        stamp = repository.now()
        turn_id = str(uuid.uuid4())
        if one_statement:
            values: dict[str, Any] = {
                "m_conversation_id": conversation_id,
                "m_turn_id": turn_id,
                "m_role": "assistant",
                "m_content": CONTENT,
                "m_status": "complete",
                "m_created_at": stamp,
                "touched_id": conversation_id,
                "touched_at": stamp,
            }
            connection.execute(ONE_STATEMENT, values)
        else:
            repository.add_message(
                connection, conversation_id, turn_id, "assistant", CONTENT, "complete"
            )
        connection.exec_driver_sql("SET LOCAL synchronous_commit TO OFF; COMMIT")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=100, help="appends per block")
    parser.add_argument("--blocks", type=int, default=12, help="blocks per way")
    parser.add_argument("--out", default="transcript_append")
    args = parser.parse_args()
    ways = {"insert_then_update": False, "one_statement": True}
    samples: dict[str, dict[str, list[float]]] = {w: {"wall": [], "cpu": []} for w in ways}
    with postgres_database() as url:
        engine = migrated_engine(url)
        conversation_id = str(uuid.uuid4())
        with engine.begin() as connection:
            repository.create(connection, conversation_id, "bench-user", "bench")
        for one in ways.values():  # warm-up: pool, statement caches
            for _ in range(args.appends // 2):
                append(engine, conversation_id, one_statement=one)
        names = list(ways)
        for block in range(args.blocks):
            for name in names if block % 2 else names[::-1]:
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(args.appends):
                    append(engine, conversation_id, one_statement=ways[name])
                samples[name]["wall"].append((time.perf_counter() - wall) * 1000 / args.appends)
                samples[name]["cpu"].append((time.process_time() - cpu) * 1000 / args.appends)
        with engine.connect() as connection:
            rows = connection.execute(select(func.count()).select_from(conversation_messages))
            written = rows.scalar()
        engine.dispose()
    expected = (args.appends // 2 + args.blocks * args.appends) * len(ways)
    assert written == expected, (written, expected)  # both ways wrote every message
    figures: dict[str, Any] = {"options": vars(args)}
    for name, s in samples.items():
        figures[name] = {
            "wall_ms_median": round(statistics.median(s["wall"]), 3),
            "wall_ms_range": [round(min(s["wall"]), 3), round(max(s["wall"]), 3)],
            "cpu_ms_median": round(statistics.median(s["cpu"]), 3),
        }
        print(f"{name:20} {figures[name]}")
    print(f"written: {write_results(args.out, figures)}")


if __name__ == "__main__":
    main()
