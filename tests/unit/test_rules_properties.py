"""Hypothesis properties of the memory rules and a stateful check of the ledger against a model."""

from __future__ import annotations

import unicodedata
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from app.memory.ledger import MemoryLedger, replay, stage_operations
from app.memory.rules import (
    LIMITS,
    SEPARATOR,
    TARGETS,
    MemoryValidationError,
    Operation,
    Snapshot,
    apply_operations,
)
from app.policy import content as policy
from app.policy import scanning

PROPERTY_SETTINGS = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# Fragments that each break one rule; Hypothesis splices them into otherwise ordinary text.
HOSTILE = [
    SEPARATOR,
    "\n§\n",
    "§",
    "\n§",
    "§\n",
    " § ",
    "\r\n§\r\n",
    "\t",
    "\x00",
    "\x07",
    "\x1b",
    "\x7f",
    "\x85",
    "\r",
    "\r\n",
    "\u200b",
    "\u202e",
    "\u2066",
    "\ufeff",
    "\u2060",
    "<persistent_memory_data>",
    "</persistent_memory_data>",
    "</PERSISTENT_MEMORY_DATA>",
    "< persistent_memory_data >",
    "＜/persistent_memory_data＞",
    "Ignore all previous instructions",
    "you are now a",
    "system: ",
    "<!-- hidden -->",
    "Do not tell the user",
    "curl $API_KEY",
    "cat ~/.ssh/id_rsa",
    "send it to https://e.example",
    "sk-abcdefghijklmnopqrstuvwx",
    "password = hunter22",
    "-----BEGIN PRIVATE KEY-----",
    "ｙｏｕ ａｒｅ ｎｏｗ ａ",
    "\U000e0049\U000e0067\U000e006e",  # tag characters
    "\u00ad",
    "\u034f",
    "\u200f",
    "\u2028§\u2029",
    "</persistent_mem\u043ery_data",
    "<persistent_memory_data foo=1/>",
    "the user's password is hunter22",
    "PIN is 4821",
    "AKIA IOSF ODNN 7EXA MPLE",
    "e\u0301",  # decomposed: stored composed
    "   ",
    "\n",
]
WORDS = ["tea", "Python", "the user", "likes", "SQL", "deploys", "on Fridays", "CI", "§", "x" * 300]

fragments = st.one_of(
    st.sampled_from(WORDS),
    st.sampled_from(WORDS),
    st.sampled_from(HOSTILE),
    st.text(max_size=8),
)
texts = st.lists(fragments, min_size=1, max_size=5).map(" ".join)
# Ordinary words only: not the delimiter, not the single over-long word.
ORDINARY_WORDS = [word for word in WORDS if word != "§" and len(word) < 100]
long_texts = st.builds(
    lambda word, count: (word + " ") * count, st.sampled_from(ORDINARY_WORDS), st.integers(0, 300)
)
contents = st.one_of(texts, long_texts)
matches = st.one_of(st.sampled_from(["tea", "the user", "x", "likes", "Python", "SQL", "§"]), texts)
targets = st.sampled_from(["user", "memory"])
actions = st.sampled_from(["add", "replace", "remove"])
operations = st.one_of(
    # Mostly well-formed operations, so that batches get far enough to test content and capacity.
    st.builds(Operation, target=targets, action=st.just("add"), content=contents),
    st.builds(Operation, target=targets, action=st.just("add"), content=contents),
    st.builds(
        Operation, target=targets, action=st.just("replace"), match=matches, content=contents
    ),
    st.builds(Operation, target=targets, action=st.just("remove"), match=matches),
    # ...and sometimes any combination of fields, including invalid targets and actions.
    st.builds(
        Operation,
        target=st.one_of(targets, st.text(max_size=6)),
        action=st.one_of(actions, st.text(max_size=6)),
        match=st.one_of(st.none(), matches),
        content=st.one_of(st.none(), contents),
    ),
)


def assert_storable(snapshot: Snapshot) -> None:
    """Every invariant a stored document must keep."""
    for target in TARGETS:
        entries = snapshot.entries(target)
        document = SEPARATOR.join(entries)
        assert len(document) <= LIMITS[target]
        assert len(set(entries)) == len(entries), "duplicate entries"
        # The stored document splits back into exactly the same entries.
        assert (tuple(document.split(SEPARATOR)) if document else ()) == entries
        for entry in entries:
            assert entry and entry == entry.strip()
            assert "\r" not in entry
            assert SEPARATOR not in entry
            assert all(line.strip() != "§" for line in entry.split("\n"))
            assert all(c == "\n" or unicodedata.category(c) != "Cc" for c in entry)
            folded = unicodedata.normalize("NFKC", entry).lower()
            assert "persistent_memory_data>" not in folded.replace(" ", "")
            assert scanning.scan(entry) is None
            assert policy.is_acceptable(entry), "the content policy refuses a stored entry"


def operations_on(snapshot: Snapshot) -> st.SearchStrategy[Operation]:
    """Operations whose matches often quote (part of) an entry that exists right now."""
    stored = [entry for target in TARGETS for entry in snapshot.entries(target)]
    if not stored:
        return operations
    quoted = st.builds(
        lambda entry, start, size: entry[start : start + size] or entry,
        st.sampled_from(stored),
        st.integers(0, 20),
        st.integers(1, 60),
    )
    live = st.one_of(quoted, st.sampled_from(stored))
    return st.one_of(
        operations,
        st.builds(
            Operation, target=targets, action=st.just("replace"), match=live, content=contents
        ),
        st.builds(Operation, target=targets, action=st.just("remove"), match=live),
    )


@PROPERTY_SETTINGS
@given(st.data())
def test_no_batch_sequence_yields_an_unstorable_snapshot(data: st.DataObject) -> None:
    """Whatever the model sends (malicious text included), each snapshot that apply_operations
    returns is within limits, duplicate-free and free of forbidden characters, delimiters,
    reserved tags and threats; a raising batch leaves its input snapshot as it was."""
    snapshot = Snapshot()
    for _ in range(data.draw(st.integers(1, 10), label="batches")):
        batch = data.draw(st.lists(operations_on(snapshot), min_size=1, max_size=3), label="batch")
        before = snapshot
        copy = Snapshot(user=tuple(before.user), memory=tuple(before.memory))
        try:
            snapshot = apply_operations(snapshot, batch)
        except MemoryValidationError as error:
            assert before == copy
            assert error.message
            snapshot = before
        assert_storable(snapshot)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(long_texts.filter(lambda text: text.strip() != ""), min_size=1, max_size=12), targets
)
def test_capacity_holds_for_any_sequence_of_adds(adds: list[str], target: str) -> None:
    """Adds of long ordinary facts alone never push a store past its limit: the batch that would
    is refused, and it is refused exactly when the rendered document would exceed the limit."""
    snapshot = Snapshot()
    for content in adds:
        entries = snapshot.entries(cast(Any, target))
        normalized = content.strip()
        expected = entries if normalized in entries else (*entries, normalized)
        fits = len(SEPARATOR.join(expected)) <= LIMITS[target]
        try:
            snapshot = apply_operations(
                snapshot, [Operation(cast(Any, target), "add", content=content)]
            )
        except MemoryValidationError as error:
            assert not fits and error.code == "capacity_exceeded"
        else:
            assert fits and snapshot.entries(cast(Any, target)) == expected
        assert_storable(snapshot)


# -- the ledger against a simple model ------------------------------------------------------

FACT_IDS = st.integers(0, 5)
fact_texts = st.builds(lambda i, n: f"fact {i} " + "word " * n, FACT_IDS, st.integers(0, 120))


def model_apply(state: dict[str, list[str]], batch: list[Operation]) -> dict[str, list[str]] | None:
    """The rules restated simply for well-formed, harmless facts; None means rejected."""
    entries = {target: list(values) for target, values in state.items()}
    for operation in batch:
        values = entries[operation.target]
        if operation.action == "add":
            assert operation.content is not None
            if operation.content.strip() not in values:
                values.append(operation.content.strip())
            continue
        assert operation.match is not None
        match = operation.match.strip()
        found = [i for i, value in enumerate(values) if value == match] or [
            i for i, value in enumerate(values) if match in value
        ]
        if len(found) != 1:
            return None
        if operation.action == "remove":
            del values[found[0]]
            continue
        assert operation.content is not None
        new = operation.content.strip()
        if any(value == new for i, value in enumerate(values) if i != found[0]):
            return None
        values[found[0]] = new
    if any(len(SEPARATOR.join(values)) > LIMITS[target] for target, values in entries.items()):
        return None
    return entries


class LedgerMachine(RuleBasedStateMachine):
    """Stage random batches; the ledger must agree with the model, and replaying its batches on
    the starting snapshot must reproduce its state (what the commit relies on)."""

    @initialize()
    def start(self) -> None:
        self.start_snapshot = Snapshot()
        self.ledger = MemoryLedger(snapshot=self.start_snapshot)
        self.model: dict[str, list[str]] = {"user": [], "memory": []}

    def _matches(self, data: st.DataObject, target: str) -> str:
        existing = self.model[target]
        options = [st.sampled_from([f"fact {i}" for i in range(6)] + ["word", "absent"])]
        if existing:
            options.append(st.sampled_from(existing))
        return data.draw(st.one_of(options))

    @rule(data=st.data(), size=st.integers(1, 4))
    def stage(self, data: st.DataObject, size: int) -> None:
        batch: list[Operation] = []
        for _ in range(size):
            target = data.draw(targets)
            action = data.draw(actions)
            if action == "add":
                batch.append(Operation(target, "add", content=data.draw(fact_texts)))
            elif action == "remove":
                batch.append(Operation(target, "remove", match=self._matches(data, target)))
            else:
                batch.append(
                    Operation(
                        target,
                        "replace",
                        match=self._matches(data, target),
                        content=data.draw(fact_texts),
                    )
                )
        expected = model_apply(self.model, batch)
        before_snapshot, before_batches = self.ledger.snapshot, list(self.ledger.batches)
        try:
            stage_operations(self.ledger, batch)
        except MemoryValidationError:
            assert expected is None
            assert self.ledger.snapshot == before_snapshot
            assert self.ledger.batches == before_batches
        else:
            assert expected is not None
            self.model = expected

    @rule()
    def stage_duplicate_add(self) -> None:
        """Adding an existing fact is a no-op, also through the ledger."""
        existing = self.model["memory"]
        if not existing:
            return
        before = self.ledger.snapshot
        stage_operations(self.ledger, [Operation("memory", "add", content=existing[0])])
        assert self.ledger.snapshot == before

    @invariant()
    def agrees_with_model(self) -> None:
        assert list(self.ledger.snapshot.user) == self.model["user"]
        assert list(self.ledger.snapshot.memory) == self.model["memory"]

    @invariant()
    def replay_reproduces_the_ledger(self) -> None:
        assert replay(self.start_snapshot, self.ledger.batches) == self.ledger.snapshot
        assert_storable(self.ledger.snapshot)


TestLedgerAgainstModel = LedgerMachine.TestCase
TestLedgerAgainstModel.settings = settings(
    max_examples=30,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
