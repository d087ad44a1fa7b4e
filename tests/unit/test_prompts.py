"""Versioned prompt templates: strict variables, untrusted framing, request-local agent copies."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest

from app.agent.agents import Agent
from app.agent.llm import ModelClient
from app.agent.prompts import MemoryView, PromptLibrary
from app.agent.tools import MEMORY_TOOL
from app.memory.render import CLOSE_TAG, OPEN_TAG
from app.memory.rules import Snapshot

SENTINEL = "The user prefers sentinel-7f3a answers."
SNAPSHOT = Snapshot(user=(SENTINEL,), memory=("The project uses Alembic.",))


def test_missing_variable_is_an_error_not_a_blank(tmp_path: Path) -> None:
    """StrictUndefined: a template that uses a value the code did not pass fails loudly."""
    (tmp_path / "system").mkdir()
    (tmp_path / "system" / "v9.md.j2").write_text("Hello {{ memory_block }} {{ typo_value }}")
    library = PromptLibrary(tmp_path)
    with pytest.raises(jinja2.UndefinedError):
        library.system_prompt("v9", MemoryView("available", SNAPSHOT, True))


def test_available_memory_is_framed_as_untrusted_data_with_the_policy() -> None:
    """The block is inside its tags, called untrusted data, and the save/skip policy is there."""
    prompt = PromptLibrary().system_prompt("v1", MemoryView("available", SNAPSHOT, True))
    assert OPEN_TAG in prompt and CLOSE_TAG in prompt and SENTINEL in prompt
    assert "untrusted" in prompt.lower() and "not instructions" in prompt.lower()
    for phrase in ("Do not save", "secrets", "stable user preferences"):
        assert phrase in prompt
    assert f"{len(SENTINEL)}/1375" in prompt


@pytest.mark.parametrize("status", ["unavailable", "disabled"])
def test_no_block_unless_memory_is_available(status: str) -> None:
    """Unavailable and disabled memory render no block and no stored content."""
    view = MemoryView(status, SNAPSHOT, status == "unavailable")  # type: ignore[arg-type]
    prompt = PromptLibrary().system_prompt("v1", view)
    assert OPEN_TAG not in prompt and SENTINEL not in prompt


def test_tool_policy_only_when_the_tool_is_offered() -> None:
    """The save instructions appear only while memory_update is offered."""
    library = PromptLibrary()
    assert "memory_update" in library.system_prompt("v1", MemoryView("available", SNAPSHOT, True))
    assert "memory_update" not in library.system_prompt(
        "v1", MemoryView("available", SNAPSHOT, False)
    )


def test_eval_prompt_has_no_memory() -> None:
    """The memory-free agent's prompt carries no block and no tool policy."""
    prompt = PromptLibrary().eval_prompt("v1")
    assert OPEN_TAG not in prompt and "memory_update" not in prompt


def test_a_turn_gets_a_copy_and_the_shared_agent_never_changes() -> None:
    """for_turn builds a request-local agent; the shared instance keeps no user's prompt."""
    shared = Agent(
        name="chat",
        model=ModelClient(client=None, primary="m"),  # type: ignore[arg-type]
        prompts=PromptLibrary(),
        prompt_version="v1",
        registered_tools=(MEMORY_TOOL,),
    )
    alice = shared.for_turn(MemoryView("available", SNAPSHOT, True))
    bob = shared.for_turn(MemoryView("disabled", Snapshot(), False))
    assert SENTINEL in alice.instructions and alice.tools == (MEMORY_TOOL,)
    assert SENTINEL not in bob.instructions and bob.tools == ()
    assert shared.instructions == "" and shared.tools == ()
    assert alice is not shared and alice.model is shared.model


def test_the_tool_schema_the_model_sees_is_pinned() -> None:
    """The memory tool's parameters come from the operation model the REST API documents, and
    are exactly the design's contract: one tool, `operations` of 1-20 items, target, action,
    match and content, nothing else (no owner)."""
    from app.agent.tools import MEMORY_TOOL
    from app.memory.contract import MEMORY_TOOL_NAME, operations_schema

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
    library, view = PromptLibrary(), MemoryView("available", SNAPSHOT, True)
    offered = library.system_prompt("v2", view, search=True)
    assert "conversation_search" in offered and "Do not search" in offered
    assert "UNTRUSTED" in offered and "not memory" in offered
    assert "conversation_search" not in library.system_prompt("v2", view, search=False)
    assert library.system_prompt("v1", view, search=True) == library.system_prompt("v1", view)
