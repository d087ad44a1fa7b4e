"""The two agents are lazy singletons: built once under concurrency, disposed at shutdown."""

from __future__ import annotations

import asyncio

from app.agent.agents import AgentRegistry
from app.agent.search_tool import SEARCH_TOOL
from app.agent.tools import MEMORY_TOOL
from tests.support.apps import api_settings
from tests.support.scripted import ScriptedModel


async def test_cold_concurrent_requests_build_one_instance_of_each_agent(
    sqlite_url: str,
) -> None:
    """Twenty cold concurrent lookups per agent build exactly one instance of each; only the
    authenticated agent registers the memory and search tools; aclose disposes both clients."""
    registry = AgentRegistry(
        api_settings(sqlite_url), model_transport=ScriptedModel([]).transport()
    )
    chats = await asyncio.gather(*(registry.chat() for _ in range(20)))
    evals = await asyncio.gather(*(registry.eval() for _ in range(20)))
    assert registry.builds == {"chat": 1, "eval": 1}
    assert all(agent is chats[0] for agent in chats)
    assert all(agent is evals[0] for agent in evals)
    assert chats[0] is not evals[0]
    assert chats[0].registered_tools == (MEMORY_TOOL, SEARCH_TOOL)
    assert evals[0].registered_tools == ()
    await registry.aclose()
    assert chats[0].model.client.is_closed() and evals[0].model.client.is_closed()
