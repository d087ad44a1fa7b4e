"""Usage, audit and limit rows on SQLite, PostgreSQL and MariaDB: written in their action's
transaction and rolled back with it, added atomically by concurrent writers, and limits that
admit exactly their allowance to concurrent callers on separate connections."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import Engine, func, select

from app.conversations import repository
from app.conversations.service import ConversationService
from app.db.schema import audit_log, conversation_messages, feature_flags, stream_slots
from app.memory.flags import read_flag, write_flag
from app.operators import audit, subjects, usage
from app.operators.limits import Caller, Limits, LimitStore, RateLimited
from app.operators.usage import TurnUsage

DAY = date(2026, 12, 3)
NOW = datetime(2026, 12, 3, 12, 0, 20, tzinfo=UTC)


def count(engine: Engine, table: object) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(table)).scalar_one())  # type: ignore[arg-type]


def in_threads(work: Callable[[int], None], threads: int) -> None:
    """Run `work(n)` in `threads` threads started together (each on its own connection)."""
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        barrier.wait()
        try:
            work(n)
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    started = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join(timeout=120)
    assert not errors, errors


class Boom(Exception):
    pass


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "rolled-back"])
def test_usage_is_stored_and_rolled_back_with_the_transcript_row(
    engine: Engine, commit: bool
) -> None:
    """The assistant row and the turn's usage share one transaction: both stay, or neither."""
    conversations = ConversationService(engine)
    conversation_id = conversations._create("ada", "turn-1", "hello")  # noqa: SLF001
    try:
        with engine.begin() as connection:
            repository.add_message(
                connection, conversation_id, "turn-1", "assistant", "hi", "complete"
            )
            usage.record(connection, TurnUsage("ada", 120, 30), DAY)
            if not commit:
                raise Boom
    except Boom:
        pass
    with engine.connect() as connection:
        rows = usage.for_subject(connection, "ada")
    assert count(engine, conversation_messages) == (2 if commit else 1)
    assert [(row.turns, row.prompt_tokens, row.completion_tokens) for row in rows] == (
        [(1, 120, 30)] if commit else []
    )


async def test_the_transcript_append_carries_the_turns_usage(engine: Engine) -> None:
    """ConversationService.append stores the assistant row and adds the usage (twice: summed)."""
    conversations = ConversationService(engine)
    conversation_id = conversations._create("ada", "turn-1", "hello")  # noqa: SLF001
    for turn in ("turn-1", "turn-2"):
        stored = await conversations.append(
            conversation_id, turn, "assistant", "hi", usage=TurnUsage("ada", 100, 7)
        )
        assert stored
    with engine.connect() as connection:
        (row,) = usage.for_subject(connection, "ada")
        assert (row.turns, row.prompt_tokens, row.completion_tokens) == (2, 200, 14)
        assert usage.tokens_on(connection, "ada", row.day) == 214


def test_concurrent_usage_records_add_up(engine: Engine) -> None:
    """Eight writers on their own connections each add five turns to one user's day at once:
    the row holds all forty (the upsert never loses an addition or fails on the first row)."""

    def add(_n: int) -> None:
        for _ in range(5):
            with engine.begin() as connection:
                usage.record(connection, TurnUsage("busy", 10, 1), DAY)

    in_threads(add, 8)
    with engine.connect() as connection:
        totals = usage.day_totals(connection, DAY)
    assert (totals.turns, totals.prompt_tokens, totals.completion_tokens, totals.users) == (
        40,
        400,
        40,
        1,
    )


def test_usage_is_listed_per_day_exported_and_deleted_per_subject(engine: Engine) -> None:
    """Day totals and the heaviest users first; one subject's rows export and delete alone."""
    with engine.begin() as connection:
        usage.record(connection, TurnUsage("ada", 10, 5), DAY)
        usage.record(connection, TurnUsage("bob", 100, 50), DAY)
        usage.record(connection, TurnUsage("ada", 1, 1), DAY + timedelta(days=1))
    with engine.connect() as connection:
        assert [row.subject for row in usage.day_users(connection, DAY)] == ["bob", "ada"]
        assert usage.day_totals(connection, DAY, "ada").prompt_tokens == 10
        assert [row.day for row in usage.for_subject(connection, "ada")] == [
            DAY,
            DAY + timedelta(days=1),
        ]
    with engine.begin() as connection:
        assert usage.delete_for_subject(connection, "ada") == 2
    with engine.connect() as connection:
        assert usage.for_subject(connection, "ada") == []
        assert usage.day_totals(connection, DAY).users == 1


def test_a_flag_switch_is_audited_in_its_own_transaction(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each switch adds one audit row (who, what, from, to), newest first; a switch whose audit
    row cannot be written rolls back whole: the flag keeps its value and no row appears."""
    write_flag(engine, "memory", True, updated_by="cli:root")
    write_flag(engine, "memory", False, updated_by="operator-ann")
    with engine.connect() as connection:
        newest, oldest = audit.entries(connection, limit=10)
    assert (newest.actor, newest.action, newest.target) == ("operator-ann", "flag.set", "memory")
    assert (newest.before, newest.after) == ({"enabled": True}, {"enabled": False})
    assert (oldest.before, oldest.after) == (None, {"enabled": True})
    assert newest.created_at >= oldest.created_at

    def failing(*_args: object) -> None:
        raise Boom  # the audit insert fails after the flag's own UPDATE ran

    monkeypatch.setattr(audit, "record", failing)
    with pytest.raises(Boom):
        write_flag(engine, "memory", True, updated_by="operator-bo")
    assert read_flag(engine, "memory", True).enabled is False
    assert count(engine, audit_log) == 2
    with engine.connect() as connection:
        assert connection.execute(select(feature_flags.c.updated_by)).scalar_one() == "operator-ann"


def test_audit_rows_roll_back_with_their_action_and_page_newest_first(engine: Engine) -> None:
    """A recorded action whose transaction fails leaves no row; pages go newest first."""
    try:
        with engine.begin() as connection:
            audit.record(
                connection, "ops", "user.erase", audit.subject_key("ada", b"k"), None, None
            )
            raise Boom
    except Boom:
        pass
    assert count(engine, audit_log) == 0
    with engine.begin() as connection:
        for n in range(5):
            audit.record(connection, "ops", "flag.set", "memory", {"n": n}, {"n": n + 1})
    with engine.connect() as connection:
        first = audit.entries(connection, limit=2)
        second = audit.entries(connection, limit=2, before=first[-1].id)
    assert [entry.before["n"] for entry in first + second] == [4, 3, 2, 1]
    assert audit.subject_key("ada", b"k") == audit.subject_key("ada", b"k")
    assert audit.subject_key("ada", b"k") != audit.subject_key("ada", b"other")
    assert "ada" not in audit.subject_key("ada", b"k")


def test_concurrent_admissions_take_exactly_the_allowed_slots(engine: Engine) -> None:
    """Twelve admissions of one user at once, on separate connections, three streams allowed:
    exactly three get a slot and nine are refused (`streams`); a second caller is untouched."""
    store = LimitStore(engine, lease_seconds=60, timeout_seconds=30, clock=lambda: NOW)
    caller = Caller.user("racer")
    admitted: list[str] = []
    refused: list[str] = []

    def admit(_n: int) -> None:
        try:
            admission = store._admit(caller, Limits(max_streams=3))  # noqa: SLF001
        except RateLimited as error:
            refused.append(error.limit)
        else:
            assert admission.lease_id is not None
            admitted.append(admission.lease_id)

    in_threads(admit, 12)
    assert (len(admitted), refused) == (3, ["streams"] * 9)
    assert store.open_slots(caller) == 3
    assert store.open_slots(Caller.user("someone-else")) == 0


def test_concurrent_turns_per_minute_count_exactly(engine: Engine) -> None:
    """Ten turns at once with five allowed a minute: five admitted, five refused; the next
    minute starts again from zero."""
    moment = [NOW]
    store = LimitStore(engine, lease_seconds=60, timeout_seconds=30, clock=lambda: moment[0])
    caller, limits = Caller.user("counter"), Limits(turns_per_minute=5)
    outcomes: list[str] = []

    def admit(_n: int) -> None:
        try:
            store._admit(caller, limits)  # noqa: SLF001
        except RateLimited as error:
            outcomes.append(error.limit)
        else:
            outcomes.append("admitted")

    in_threads(admit, 10)
    assert sorted(outcomes) == ["admitted"] * 5 + ["turns_per_minute"] * 5
    moment[0] = NOW + timedelta(minutes=1)
    store._admit(caller, limits)  # noqa: SLF001


def test_an_expired_lease_frees_its_slot(engine: Engine) -> None:
    """A slot whose worker died (never released) stops counting when its lease expires, and
    the caller's next release deletes it."""
    moment = [NOW]
    store = LimitStore(engine, lease_seconds=60, timeout_seconds=30, clock=lambda: moment[0])
    caller, limits = Caller.user("crashed"), Limits(max_streams=1)
    store._admit(caller, limits)  # noqa: SLF001  (never released: its worker "died")
    with pytest.raises(RateLimited):
        store._admit(caller, limits)  # noqa: SLF001
    moment[0] = NOW + timedelta(seconds=61)
    fresh = store._admit(caller, limits)  # noqa: SLF001
    store._release(fresh)  # noqa: SLF001
    assert count(engine, stream_slots) == 0


def test_a_users_operator_records_export_and_erase_together(engine: Engine) -> None:
    """The export holds the user's usage days (no subject, no content); erasure deletes their
    usage and limit rows, leaves other users' alone, and pseudonymizes an erased operator in
    the audit log by the keyed hash."""
    store = LimitStore(engine, lease_seconds=60, timeout_seconds=30, clock=lambda: NOW)
    for user in ("gone", "kept"):
        store._admit(Caller.user(user), Limits(max_streams=2, turns_per_minute=9))  # noqa: SLF001
        with engine.begin() as connection:
            usage.record(connection, TurnUsage(user, 10, 2), DAY)
            audit.record(connection, user, "flag.set", "memory", None, {"enabled": True})
    with engine.connect() as connection:
        exported = subjects.export_for_subject(connection, "gone")
    assert exported == {
        "usage": [{"day": DAY.isoformat(), "turns": 1, "prompt_tokens": 10, "completion_tokens": 2}]
    }
    with engine.begin() as connection:
        assert subjects.delete_for_subject(connection, "gone") == 3
        assert audit.pseudonymize_actor(connection, "gone", b"key") == 1
    with engine.connect() as connection:
        assert usage.for_subject(connection, "gone") == []
        assert [entry.actor for entry in audit.entries(connection, limit=5)] == [
            "kept",
            audit.subject_key("gone", b"key"),
        ]
    assert store.open_slots(Caller.user("gone")) == 0
    assert store.open_slots(Caller.user("kept")) == 1
