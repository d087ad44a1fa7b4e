"""Remember-until's pure rules: reading `until`, carrying an expiry through add, replace and
remove, and what expires at a moment (the entry leaves the document and frees its characters;
nothing else changes). Case tables for the contract, Hypothesis for the properties."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.memory.parsing import parse_operations
from app.memory.provenance import inverse
from app.memory.rules import (
    LIMITS,
    SEPARATOR,
    MemoryValidationError,
    Operation,
    Snapshot,
    apply_operations,
    resolve_operations,
)
from app.memory.until import MAX_AHEAD, expire, parse_until, visible
from app.offline.model import until_date

NOW = datetime(2026, 12, 7, 18, 30)
LATER = NOW + timedelta(days=13)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("2026-12-20", datetime(2026, 12, 21), id="date-is-through-that-day"),
        pytest.param("2026-12-20T18:00:00Z", datetime(2026, 12, 20, 18), id="utc-date-time"),
        pytest.param("2026-12-20T18:00:00+02:00", datetime(2026, 12, 20, 16), id="offset"),
        pytest.param("2026-12-20T18:00:00", datetime(2026, 12, 20, 18), id="naive-is-utc"),
        pytest.param("2026-12-07", datetime(2026, 12, 8), id="today-holds-until-midnight"),
        pytest.param(None, None, id="null-is-no-expiry"),
    ],
)
def test_until_reads_a_date_or_a_date_time(value: str | None, expected: datetime | None) -> None:
    assert parse_until(value, NOW) == expected


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("2026-12-06", id="past-date"),
        pytest.param("2026-12-07T18:00:00Z", id="past-moment"),
        pytest.param((NOW + MAX_AHEAD + timedelta(days=2)).date().isoformat(), id="too-far"),
        pytest.param("next tuesday", id="not-iso"),
        pytest.param("2026-13-01", id="no-such-month"),
        pytest.param("", id="empty"),
        pytest.param(20, id="a-number"),
    ],
)
def test_a_bad_until_is_refused_with_a_reason(value: object) -> None:
    with pytest.raises(MemoryValidationError) as raised:
        parse_until(value, NOW)
    assert raised.value.code == "invalid_until" and "until" in raised.value.message


def test_the_operations_carry_until_and_remove_forbids_it() -> None:
    """`until` reaches the operation (absent, a date, or null that clears); remove refuses it;
    a bad one names its operation."""
    parsed = parse_operations(
        {
            "operations": [
                {"target": "user", "action": "add", "content": "A", "until": "2026-12-20"},
                {"target": "user", "action": "replace", "match": "A", "content": "B"},
                {
                    "target": "user",
                    "action": "replace",
                    "match": "B",
                    "content": "C",
                    "until": None,
                },
            ]
        },
        NOW,
    )
    assert [(o.until, o.sets_until) for o in parsed] == [
        (datetime(2026, 12, 21), True),
        (None, False),
        (None, True),
    ]
    for bad in (
        {"target": "user", "action": "remove", "match": "A", "until": "2026-12-20"},
        {"target": "user", "action": "add", "content": "A", "until": "yesterday"},
    ):
        with pytest.raises(MemoryValidationError, match="Operation 1"):
            parse_operations({"operations": [bad]}, NOW)


def until(
    content: str, at: datetime | None, action: str = "add", match: str | None = None
) -> Operation:
    return Operation("user", action, match=match, content=content, until=at, sets_until=True)  # type: ignore[arg-type]


def test_an_expiry_follows_its_entry_through_the_batch() -> None:
    """add sets it; replace without until keeps it on the new text; replace with null clears it;
    remove drops it; an until-only replace is a change (and its inverse restores the old one)."""
    added = apply_operations(Snapshot(), [until("In Berlin.", LATER)])
    assert added.expiries == frozenset({("user", "In Berlin.", LATER)})
    moved = apply_operations(
        added, [Operation("user", "replace", match="Berlin", content="In Bonn.")]
    )
    assert moved.expiry("user", "In Bonn.") == LATER and len(moved.expiries) == 1
    cleared = apply_operations(moved, [until("In Bonn.", None, "replace", "Bonn")])
    assert cleared.expiries == frozenset() and cleared.user == ("In Bonn.",)
    removed = apply_operations(added, [Operation("user", "remove", match="Berlin")])
    assert removed.expiries == frozenset() and removed.user == ()
    later = LATER + timedelta(days=1)
    _, changes = resolve_operations(added, [until("In Berlin.", later, "replace", "Berlin")])
    assert changes[0].changed and (changes[0].until_before, changes[0].until_after) == (
        LATER,
        later,
    )
    undone = apply_operations(
        apply_operations(added, [until("In Berlin.", later, "replace", "Berlin")]), inverse(changes)
    )
    assert undone == added


def test_an_expired_entry_leaves_and_frees_its_characters() -> None:
    """At its time the entry is gone from the document (a removal recorded per entry), the
    store's characters drop to what the rest takes, and an entry that did not fit before now
    fits; an undone expiry brings the entry back with no expiry."""
    keep = "k" * 1000
    going = "g" * (LIMITS["user"] - 1000 - len(SEPARATOR))
    full = apply_operations(
        Snapshot(), [Operation("user", "add", content=keep), until(going, LATER)]
    )
    assert full.characters("user") == LIMITS["user"]
    with pytest.raises(MemoryValidationError):
        apply_operations(full, [Operation("user", "add", content="one more")])
    assert expire(full, LATER - timedelta(seconds=1)) == (full, ())
    remaining, changes = expire(full, LATER)
    assert remaining.user == (keep,) and remaining.characters("user") == len(keep)
    assert [(c.action, c.before, c.until_before) for c in changes] == [("remove", going, LATER)]
    assert (
        apply_operations(remaining, [Operation("user", "add", content="one more")]).user[-1]
        == "one more"
    )
    back = apply_operations(remaining, inverse(changes, restore_until=False))
    assert back.user == (keep, going) and back.expiries == frozenset()


ENTRY = st.text(alphabet="abcdefghij ", min_size=1, max_size=20).map(str.strip).filter(bool)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=st.lists(ENTRY, unique=True, max_size=8),
    offsets=st.lists(st.one_of(st.none(), st.integers(-100, 100)), min_size=8, max_size=8),
    at=st.integers(-100, 100),
)
def test_visible_never_shows_an_expired_entry_and_keeps_the_rest(
    entries: list[str], offsets: list[int | None], at: int
) -> None:
    """Whatever the expiries and the moment: no entry at or past its time is visible, every
    other entry stays in its order with its expiry, the characters never grow, and expiring
    again changes nothing."""
    expiries = frozenset(
        ("memory", entry, NOW + timedelta(hours=offset))
        for entry, offset in zip(entries, offsets, strict=False)
        if offset is not None
    )
    snapshot = Snapshot(memory=tuple(entries), expiries=expiries)  # type: ignore[arg-type]
    moment = NOW + timedelta(hours=at)
    seen, changes = expire(snapshot, moment)
    due = {entry for _, entry, when in expiries if when <= moment}
    assert seen.memory == tuple(entry for entry in entries if entry not in due)
    assert {c.before for c in changes} == due
    assert seen.expiries == frozenset(item for item in expiries if item[2] > moment)
    assert seen.characters("memory") <= snapshot.characters("memory")
    assert visible(seen, moment) == seen


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [
        ("the 20th", "2026-12-20"),
        ("the 5th", "2027-01-05"),
        ("December 20", "2026-12-20"),
        ("20 March", "2027-03-20"),
        ("Dec 3rd", "2027-12-03"),
        ("2027-01-15", "2027-01-15"),
        ("tomorrow", None),
    ],
)
def test_the_offline_model_reads_the_last_day_of_a_time_bound_fact(
    phrase: str, expected: str | None
) -> None:
    found = until_date(phrase, NOW.date())
    assert (found.isoformat() if found else None) == expected


OPERATION = st.builds(
    lambda action, text, other, offset: Operation(
        "memory",
        action,
        match=None if action == "add" else other,
        content=None if action == "remove" else text,
        until=None if offset is None else NOW + timedelta(days=offset),
        sets_until=action != "remove" and offset is not None,
    ),
    st.sampled_from(["add", "replace", "remove"]),
    ENTRY,
    ENTRY,
    st.one_of(st.none(), st.integers(1, 30)),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(OPERATION, min_size=1, max_size=4), max_size=6))
def test_expiries_only_ever_name_entries_of_their_document_and_take_no_room(
    batches: list[list[Operation]],
) -> None:
    """Whatever batches apply (refused ones change nothing): every expiry names an entry the
    document holds, the characters are the document's alone, and an entry written with an
    `until` carries exactly that expiry."""
    snapshot = Snapshot()
    for batch in batches:
        try:
            updated, changes = resolve_operations(snapshot, batch)
        except MemoryValidationError:
            continue
        snapshot = updated
        assert all(entry in snapshot.memory for _, entry, _ in snapshot.expiries)
        assert snapshot.characters("memory") == len(SEPARATOR.join(snapshot.memory))
        last = {c.after: c.until_after for c in changes if c.after is not None}
        for entry, at in last.items():
            if entry in snapshot.memory:
                assert snapshot.expiry("memory", entry) == at
