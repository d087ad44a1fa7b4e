"""The sources' own rules, pure: the memory sources are exactly the entries the prompt's block
shows (a withheld entry is not one; in a project the project's entries carry its id and a
document outside the scope is absent), a staged batch's changes name the entry each operation
wrote or removed, and a snippet given twice (recall, then search) is listed once."""

from __future__ import annotations

import json

import pytest

from app.agent.sources import (
    ConversationSource,
    TurnSources,
    change_sources,
    prompt_sources,
)
from app.memory.render import BlockTags, render_block
from app.memory.rules import Operation, Snapshot

TAGS = BlockTags("0" * 32)


def shown(snapshot: Snapshot, withheld: set[str]) -> list[str]:
    """The entries of the rendered block (its JSON string literals), in order."""
    block = render_block(snapshot, TAGS, lambda entry: entry in withheld)
    return [json.loads(line) for line in block.splitlines() if line.startswith('"')]


@pytest.mark.parametrize(
    ("snapshot", "withheld"),
    [
        pytest.param(Snapshot(user=("A", "B"), memory=("C",)), set(), id="general"),
        pytest.param(Snapshot(user=("A", "B"), memory=("C",)), {"B"}, id="one-withheld"),
        pytest.param(
            Snapshot(user=("A",), memory=("C",), project=("P",), targets=("user", "project")),
            set(),
            id="project-without-general",
        ),
        pytest.param(
            Snapshot(
                user=("A",), memory=("C",), project=("P",), targets=("user", "project", "memory")
            ),
            {"C"},
            id="project-with-general",
        ),
    ],
)
def test_memory_sources_are_the_entries_the_block_shows(
    snapshot: Snapshot, withheld: set[str]
) -> None:
    sources = prompt_sources(snapshot, lambda entry: entry in withheld, "p-1")
    assert [source.text for source in sources] == shown(snapshot, withheld)
    assert all(
        (source.project_id is not None) == (source.target == "project") for source in sources
    )


def test_changes_name_the_entry_each_operation_wrote_or_removed() -> None:
    staged = [
        Operation("user", "add", content="New."),
        Operation("memory", "replace", match="Old whole entry.", content="Newer.", pinned=True),
        Operation("user", "remove", match="Gone whole entry.", pinned=True),
    ]
    assert [change.data() for change in change_sources(staged, "proposed")] == [
        {"target": "user", "action": "add", "text": "New.", "outcome": "proposed"},
        {"target": "memory", "action": "replace", "text": "Newer.", "outcome": "proposed"},
        {"target": "user", "action": "remove", "text": "Gone whole entry.", "outcome": "proposed"},
    ]


def test_a_snippet_given_twice_is_listed_once() -> None:
    sources = TurnSources()
    recalled = ConversationSource("c", 7, "snippet", "Title", "recall")
    sources.given([recalled])
    sources.given([ConversationSource("c", 7, "snippet", "Title", "search")])
    sources.given([ConversationSource("c", 8, "other", "Title", "search")])
    assert [(s.message_id, s.via) for s in sources.conversations] == [(7, "recall"), (8, "search")]
