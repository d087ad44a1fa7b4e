"""Versioned prompt templates: strict variables, untrusted framing, request-local agent copies."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest
from openai import AsyncOpenAI

from app.agent.agents import Agent
from app.agent.llm import IN_PROCESS_BASE_URL, ModelClient
from app.agent.prompts import MemoryView, PromptLibrary
from app.agent.tools import MEMORY_TOOL
from app.memory.render import BlockTags
from app.memory.rules import Snapshot
from app.policy.markers import RESERVED_TAG_NAME

SENTINEL = "The user prefers sentinel-7f3a answers."
SNAPSHOT = Snapshot(user=(SENTINEL,), memory=("The project uses Alembic.",))


def test_missing_variable_is_an_error_not_a_blank(tmp_path: Path) -> None:
    """StrictUndefined: a template that uses a value the code did not pass fails loudly."""
    (tmp_path / "system").mkdir()
    (tmp_path / "system" / "v9.md.j2").write_text("Hello {{ memory_block }} {{ typo_value }}")
    library = PromptLibrary(tmp_path)
    with pytest.raises(jinja2.UndefinedError):
        library.system_prompt("v9", MemoryView("available", SNAPSHOT, True, owner="u"))


def test_available_memory_is_framed_as_untrusted_data_with_the_policy() -> None:
    """The block is inside its tags, called untrusted data, and the save/skip policy is there."""
    tags = BlockTags("a" * 32)
    prompt = PromptLibrary().system_prompt(
        "v1", MemoryView("available", SNAPSHOT, True, owner="u"), tags=tags
    )
    assert tags.open in prompt and tags.close in prompt and SENTINEL in prompt
    assert "untrusted" in prompt.lower() and "not instructions" in prompt.lower()
    for phrase in ("Do not save", "secrets", "stable user preferences"):
        assert phrase in prompt
    assert f"{len(SENTINEL)}/1375" in prompt


@pytest.mark.parametrize("status", ["unavailable", "disabled"])
def test_no_block_unless_memory_is_available(status: str) -> None:
    """Unavailable and disabled memory render no block and no stored content."""
    view = MemoryView(status, SNAPSHOT, status == "unavailable", owner="u")  # type: ignore[arg-type]
    prompt = PromptLibrary().system_prompt("v1", view)
    assert f"<{RESERVED_TAG_NAME}" not in prompt and SENTINEL not in prompt


def test_tool_policy_only_when_the_tool_is_offered() -> None:
    """The save instructions appear only while memory_update is offered."""
    library = PromptLibrary()
    assert "memory_update" in library.system_prompt(
        "v1", MemoryView("available", SNAPSHOT, True, owner="u")
    )
    assert "memory_update" not in library.system_prompt(
        "v1", MemoryView("available", SNAPSHOT, False, owner="u")
    )


def test_eval_prompt_has_no_memory() -> None:
    """The memory-free agent's prompt carries no block and no tool policy."""
    prompt = PromptLibrary().eval_prompt("v1")
    assert f"<{RESERVED_TAG_NAME}" not in prompt and "memory_update" not in prompt


def test_a_turn_gets_a_copy_and_the_shared_agent_never_changes() -> None:
    """for_turn builds a request-local agent; the shared instance keeps no user's prompt."""
    shared = Agent(
        name="chat",
        model=ModelClient(AsyncOpenAI(base_url=IN_PROCESS_BASE_URL, api_key="k"), primary="m"),
        prompts=PromptLibrary(),
        prompt_version="v1",
        registered_tools=(MEMORY_TOOL,),
    )
    alice = shared.for_turn(MemoryView("available", SNAPSHOT, True, owner="u"))
    bob = shared.for_turn(MemoryView("disabled", Snapshot(), False, owner="u"))
    assert SENTINEL in alice.instructions and alice.tools == (MEMORY_TOOL,)
    assert SENTINEL not in bob.instructions and bob.tools == ()
    assert shared.instructions == "" and shared.tools == ()
    assert alice is not shared and alice.model is shared.model


def test_the_tool_schema_the_model_sees_is_pinned() -> None:
    """The memory tool's parameters come from the operation model the REST API documents, and
    are exactly the design's contract: one tool, `operations` of 1-20 items, target, action,
    match and content, and remember-until's optional `until` (contract v4), nothing else (no
    owner)."""
    from app.agent.tools import MEMORY_TOOL
    from app.memory.contract import MEMORY_TOOL_NAME, UNTIL_SCHEMA, operations_schema

    assert MEMORY_TOOL["function"]["name"] == MEMORY_TOOL_NAME == "memory_update"
    assert (
        MEMORY_TOOL["function"]["parameters"]
        == operations_schema()
        == {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "operations": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 20,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "target": {"enum": ["user", "memory"]},
                            "action": {"enum": ["add", "replace", "remove"]},
                            "match": {"type": ["string", "null"]},
                            "content": {"type": ["string", "null"]},
                            "until": UNTIL_SCHEMA,
                        },
                        "required": ["target", "action"],
                    },
                },
            },
            "required": ["operations"],
        }
    )


def test_v2_tells_when_to_search_only_when_the_tool_is_offered() -> None:
    """The search policy (when to search, when not, untrusted results) shows only while
    conversation_search is offered; v1 renders the same with or without it."""
    library, view = PromptLibrary(), MemoryView("available", SNAPSHOT, True, owner="u")
    offered = library.system_prompt("v2", view, search=True)
    assert "conversation_search" in offered and "Do not search" in offered
    assert "UNTRUSTED" in offered and "not memory" in offered
    assert "conversation_search" not in library.system_prompt("v2", view, search=False)
    tags = BlockTags("b" * 32)
    assert library.system_prompt("v1", view, search=True, tags=tags) == library.system_prompt(
        "v1", view, tags=tags
    )


@pytest.mark.parametrize("version", ["v1", "v2", "v3", "v4", "v5"])
def test_every_version_stays_loadable_and_renders_the_structural_block(version: str) -> None:
    """Old versions keep loading; whichever one is configured, the block carries this turn's
    tags and string-literal entries (the rendering is code, not template)."""
    tags = BlockTags("c" * 32)
    prompt = PromptLibrary().system_prompt(
        version, MemoryView("available", SNAPSHOT, True, owner="u"), tags=tags
    )
    assert prompt.count(tags.open) == 1 and prompt.count(tags.close) == 1
    assert f'"{SENTINEL}"' in prompt


def test_v3_names_the_turn_tag_and_the_entry_encoding() -> None:
    """v3 (and v4, the default, which is v3 outside projects: tests/unit/test_project_prompt.py)
    tells the model the block ends only at this turn's tag and that each
    entry is a JSON string literal, without spelling the closing tag a second time."""
    from app.settings import Settings

    tags = BlockTags("d" * 32)
    prompt = PromptLibrary().system_prompt(
        "v3", MemoryView("available", SNAPSHOT, True, owner="u"), tags=tags
    )
    before = prompt[: prompt.index(tags.open)]
    assert tags.name in before and "JSON string literal" in before and "DATA" in before
    assert prompt.count(tags.close) == 1
    assert Settings.model_fields["prompt_version"].default == "v5"


@pytest.mark.parametrize("in_project", [False, True])
def test_v5_is_v4_but_for_ranked_search(in_project: bool) -> None:
    """v5 (the default) changes only how search is described: without the search tool it is
    v4 byte for byte; with it, it says any word may match, ranked, and quotes make a phrase."""
    library, tags = PromptLibrary(), BlockTags("f" * 32)
    view = MemoryView("available", SNAPSHOT, True, owner="u")
    if in_project:
        view = MemoryView("available", SNAPSHOT, True, None, ("user", "project"), "P", owner="u")
    assert library.system_prompt("v5", view, tags=tags) == library.system_prompt(
        "v4", view, tags=tags
    )
    searching = library.system_prompt("v5", view, search=True, tags=tags)
    assert "any of the query's words may match" in searching and "double quotes" in searching
    assert "all words required" not in searching
    assert "all words required" in library.system_prompt("v4", view, search=True, tags=tags)


def test_each_prompt_draws_a_fresh_nonce() -> None:
    """Two compilations of the same memory never share a block tag: the nonce is drawn per
    turn, so no text can learn one turn's tag and use it in a later one."""
    library, view = PromptLibrary(), MemoryView("available", SNAPSHOT, True, owner="u")
    opening = re.compile(rf"<{RESERVED_TAG_NAME}_([0-9a-f]{{32}})>")
    nonces = {opening.findall(library.system_prompt("v3", view))[0] for _ in range(50)}
    assert len(nonces) == 50
