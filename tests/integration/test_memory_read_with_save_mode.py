"""A turn's start reads the memory documents and the save mode in one statement: it returns what
the two separate reads return, for a person with nothing stored, with documents, with a stored
mode, and never another person's mode, on every dialect."""

from __future__ import annotations

from sqlalchemy import Engine

from app.memory import proposals
from app.memory.rules import Operation, Snapshot
from app.memory.service import MemoryService


def separate_reads(engine: Engine, user_id: str) -> tuple[Snapshot, str]:
    with engine.connect() as connection:
        mode = proposals.save_mode(connection, user_id)
    return MemoryService(engine).read(user_id), mode


def test_the_combined_read_returns_what_the_separate_reads_return(engine: Engine) -> None:
    """Invariant: read_with_save_mode(user) == (read(user), save_mode(user)) in every state a
    person's memory and preferences can be in; another person's mode never leaks in."""
    service = MemoryService(engine)
    assert service.read_with_save_mode("alice") == (Snapshot(), "auto")
    service.set_save_mode("bob", "ask")  # another person's stored mode
    assert service.read_with_save_mode("alice") == separate_reads(engine, "alice")
    service.commit_operations(
        "alice",
        [
            [
                Operation("memory", "add", content="prefers short answers"),
                Operation("user", "add", content="lives in Lisbon"),
            ]
        ],
    )
    assert service.read_with_save_mode("alice") == separate_reads(engine, "alice")
    assert service.read_with_save_mode("alice")[1] == "auto"
    service.set_save_mode("alice", "ask")
    combined = service.read_with_save_mode("alice")
    assert combined == separate_reads(engine, "alice")
    assert combined[1] == "ask"
    assert combined[0].entries("memory") == ("prefers short answers",)
    assert combined[0].entries("user") == ("lives in Lisbon",)
