"""The OpenAPI description of `/openai/v1`: the models list, a chat completion, a stream chunk
and the error body, in the shapes the official `openai` SDK parses (documentation and the
models routes' response models; the completion bodies themselves come from
`app/agent/openai_wire.py`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIErrorBody(BaseModel):
    error: OpenAIErrorDetail


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str | None
    refusal: str | None = None


class CompletionChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: None = None
    finish_reason: Literal["stop", "length"]


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage | None = None


_ERROR_DESCRIPTIONS = {
    400: "The body breaks the contract or asks for what is not supported (tools, images, n>1)",
    401: "Missing or invalid bearer token (the client's API key)",
    404: "Unknown model (model_not_found)",
    413: "The request body is too large",
    429: "Over a per-user limit (rate_limited); Retry-After says when to try again",
    500: "The turn failed inside this service; nothing was saved to memory",
    502: "The upstream model failed; nothing was saved to memory",
    503: "The database is unavailable; retry shortly",
    504: "The turn took too long; nothing was saved to memory",
}


def openai_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` entries: each status with the OpenAI error body."""
    return {
        status: {"model": OpenAIErrorBody, "description": _ERROR_DESCRIPTIONS[status]}
        for status in statuses
    }


COMPLETION_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A `chat.completion` (JSON), or with `stream: true` server-sent events: "
        "`data: <chat.completion.chunk>` lines ending with `data: [DONE]`; a turn that fails "
        'mid-stream sends `data: {"error": {...}}` before `[DONE]`',
        "model": ChatCompletion,  # application/json
        "content": {
            "text/event-stream": {
                "schema": {
                    "type": "object",
                    "required": ["data"],
                    "properties": {"data": {"type": "string"}},
                }
            },
        },
    },
    **openai_errors(400, 401, 404, 413, 429, 500, 502, 503, 504),
}

REQUEST_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "description": "The chat-completions body: `model` (the listed id), `messages` "
                    "(system/developer/user/assistant, text content), `stream`, `stream_options`, "
                    "`temperature`, `top_p`, `max_tokens`/`max_completion_tokens`, `stop`, `seed`, "
                    "`presence_penalty`, `frequency_penalty`. Client tools, non-text content and "
                    "n > 1 are refused; other fields are ignored.",
                },
                "example": {
                    "model": "offline-memory-1",
                    "messages": [{"role": "user", "content": "Remember that I prefer tea."}],
                    "stream": False,
                },
            }
        },
    }
}
