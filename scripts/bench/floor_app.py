"""The floor of the required stack: the least a turn can cost with FastAPI, sse-starlette and the
openai SDK in one uvicorn process, for `turn_overhead.py --floor` to measure next to the service.

One route, `POST /v1/chat` with `{"message": ...}`: one streamed completion from `LLM_BASE_URL`
through the SDK (read as lines of JSON, not parsed into the SDK's models, as the service too),
each text piece sent as a `delta` event, then `done`. No authentication, database, memory,
prompt, transcript, logging or telemetry: whatever the service adds on top of this floor is
what its own work costs; the floor's own added time is what the stack costs.

    uvicorn scripts.bench.floor_app:app   (LLM_BASE_URL=http://127.0.0.1:8081/v1 [FLOOR_AIOHTTP=1])
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from openai import AsyncOpenAI, DefaultAioHttpClient
from pydantic import BaseModel
from sse_starlette import EventSourceResponse

client = AsyncOpenAI(
    base_url=os.environ.get("LLM_BASE_URL", "http://127.0.0.1:8081/v1"),
    api_key=os.environ.get("LLM_API_KEY", "unused"),
    # One retry of a request that never started, as the service's own client has
    # (app/agent/llm.py): without it, a pooled connection the stub closed while idle between
    # two blocks failed a turn now and then at 32 concurrent, and the run with it.
    max_retries=1,
    # FLOOR_AIOHTTP=1: the SDK's aiohttp client (as the service uses) instead of its default.
    http_client=DefaultAioHttpClient() if os.environ.get("FLOOR_AIOHTTP") == "1" else None,
)
MODEL = os.environ.get("LLM_MODEL", "offline")

app = FastAPI()


class ChatBody(BaseModel):
    message: str


async def deltas(message: str) -> AsyncIterator[dict[str, Any]]:
    async with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=[{"role": "user", "content": message}], stream=True
    ) as response:
        async for line in response.iter_lines():
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[5:]).get("choices") or ():
                if text := (choice.get("delta") or {}).get("content"):
                    yield {"event": "delta", "data": json.dumps({"text": text})}
    yield {"event": "done", "data": json.dumps({"finish_reason": "stop"})}


@app.post("/v1/chat")
async def chat(body: ChatBody) -> EventSourceResponse:
    return EventSourceResponse(deltas(body.message))


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
