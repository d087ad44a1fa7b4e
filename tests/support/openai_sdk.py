"""The official `openai` SDK pointed at a live server's `/openai/v1`, with a user's dev token as
its API key (the way Open WebUI, LibreChat or a script would use the service)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import openai

from app.offline.wire import OFFLINE_MODEL_NAME, ChatRequest
from tests.support.tokens import dev_token

MODEL = OFFLINE_MODEL_NAME  # the default LLM_MODEL: the id /openai/v1/models lists
TIMEOUT_SECONDS = 30.0


def sdk(base_url: str, user: str, *, api_key: str | None = None) -> openai.OpenAI:
    """No SDK retries: a test must see each answer exactly as the server gave it."""
    return openai.OpenAI(
        base_url=f"{base_url}/openai/v1",
        api_key=api_key if api_key is not None else dev_token(user),
        max_retries=0,
        timeout=TIMEOUT_SECONDS,
    )


def async_sdk(base_url: str, user: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{base_url}/openai/v1",
        api_key=dev_token(user),
        max_retries=0,
        timeout=TIMEOUT_SECONDS,
    )


def user_says(text: str, *earlier: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [*(dict(message) for message in earlier), {"role": "user", "content": text}]


def data_lines(lines: Iterable[str]) -> list[str]:
    """The `data:` payloads of a raw event stream, in order (comments and blanks left out)."""
    return [line.removeprefix("data:").strip() for line in lines if line.startswith("data:")]


def prompt_words(request: ChatRequest) -> int:
    """What the offline model's wire format reports as `prompt_tokens` for one request."""
    total = 0
    for message in request.messages:
        content = message.get("content")
        if isinstance(content, str):
            total += len(content.split())
    return total
