"""The two agents: an authenticated one that may offer the memory and search tools and a
memory-free one for evaluation (no tool at all). Each is a lazy singleton built behind an
`asyncio.Lock` and disposed at shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from app.agent.events import SEARCH_TOOL_NAME
from app.agent.llm import ModelClient, build_model_client
from app.agent.prompts import MemoryView, PromptLibrary
from app.agent.search_tool import SEARCH_TOOL
from app.agent.sources import ConversationSource
from app.agent.tools import MEMORY_TOOL, memory_tool
from app.concurrency import to_thread
from app.memory.contract import MEMORY_TOOL_NAME
from app.settings import Settings

AgentName = Literal["chat", "eval"]


@dataclass(frozen=True)
class Agent:
    """Shared and immutable: a turn gets its own copy through `for_turn`, never a mutation."""

    name: AgentName
    model: ModelClient
    prompts: PromptLibrary
    prompt_version: str
    registered_tools: tuple[Mapping[str, Any], ...]
    instructions: str = ""
    tools: tuple[Mapping[str, Any], ...] = ()

    @property
    def uses_memory(self) -> bool:
        return bool(self.registered_tools)

    def for_turn(
        self,
        memory: MemoryView | None,
        *,
        search: bool = False,
        recalled: Sequence[ConversationSource] = (),
    ) -> Agent:
        """A request-local copy with the compiled prompt and the tools offered this turn:
        memory_update when the memory view offers it, conversation_search when `search`; the
        recall block follows the prompt when anything was `recalled`."""
        if memory is None or not self.uses_memory:
            return dataclasses.replace(
                self, instructions=self.prompts.eval_prompt(self.prompt_version), tools=()
            )
        wanted = {MEMORY_TOOL_NAME: memory.tool_offered, SEARCH_TOOL_NAME: search}
        offered = tuple(
            memory_tool(memory.targets) if tool is MEMORY_TOOL else tool
            for tool in self.registered_tools
            if wanted.get(str(tool["function"]["name"]))
        )
        instructions = self.prompts.system_prompt(self.prompt_version, memory, search=search)
        if recalled:
            instructions = f"{instructions}\n\n{self.prompts.recall_section(recalled)}"
        return dataclasses.replace(self, instructions=instructions, tools=offered)


class AgentRegistry:
    """Builds each agent once, on first use; two cold concurrent requests share one instance."""

    def __init__(
        self,
        settings: Settings,
        *,
        model_transport: httpx.AsyncBaseTransport | None = None,
        prompts: PromptLibrary | None = None,
    ) -> None:
        self.settings = settings
        self.model_transport = model_transport
        self.prompts = prompts or PromptLibrary()
        self.builds: dict[AgentName, int] = {"chat": 0, "eval": 0}
        self._agents: dict[AgentName, Agent] = {}
        self._locks: dict[AgentName, asyncio.Lock] = {
            "chat": asyncio.Lock(),
            "eval": asyncio.Lock(),
        }

    async def chat(self) -> Agent:
        return await self._get("chat")

    async def eval(self) -> Agent:
        return await self._get("eval")

    async def _get(self, name: AgentName) -> Agent:
        agent = self._agents.get(name)
        if agent is not None:
            return agent
        async with self._locks[name]:
            agent = self._agents.get(name)
            if agent is None:
                agent = await self._build(name)
                self._agents[name] = agent
            return agent

    async def _build(self, name: AgentName) -> Agent:
        self.builds[name] += 1
        version = (
            self.settings.prompt_version if name == "chat" else self.settings.eval_prompt_version
        )
        kind: Literal["system", "eval"] = "system" if name == "chat" else "eval"
        # Compile the template off the event loop: a missing or broken prompt fails here, once.
        await to_thread(self.prompts.template, kind, version)
        return Agent(
            name=name,
            model=build_model_client(self.settings, self.model_transport),
            prompts=self.prompts,
            prompt_version=version,
            registered_tools=(MEMORY_TOOL, SEARCH_TOOL) if name == "chat" else (),
        )

    async def aclose(self) -> None:
        agents, self._agents = list(self._agents.values()), {}
        for agent in agents:
            await agent.model.aclose()
