"""The chat-completions request body, checked and turned into one turn: the client's earlier
messages as history, its last user message, and the generation options; anything this service
cannot honour is refused with a 400 that names the parameter, before anything is read or run.

Unknown top-level fields are ignored, as OpenAI-compatible servers do (clients send extras such
as `user` or `metadata`); known fields with bad values, client-side tools, non-text content and
`n` > 1 are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.agent.llm import Sampling
from app.agent.request import HistoryMessage, HistoryRole
from app.api.bodies import NOT_OBJECT

ClientRole = Literal["system", "developer", "user", "assistant"]
ROLES: frozenset[str] = frozenset({"system", "developer", "user", "assistant"})
# Many OpenAI-compatible models know no `developer` role: it is sent on as `system`.
HISTORY_ROLES: dict[str, HistoryRole] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}
NON_TEXT_PARTS = frozenset({"image_url", "input_audio", "file"})
MAX_STOP_SEQUENCES = 4
TOOLS_REFUSED = (
    "Client-side tools are not supported on this endpoint yet: send the request without "
    "`tools`, `functions`, `tool_choice` or tool messages. (The service's own memory tool runs "
    "server-side and needs nothing from the client.)"
)


class WireError(Exception):
    """A request refused in OpenAI's error shape; the route renders it with its status."""

    def __init__(self, status: int, message: str, *, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param


def bad(message: str, *, param: str | None, code: str = "invalid_request") -> WireError:
    return WireError(400, message, code=code, param=param)


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    message: str
    history: tuple[HistoryMessage, ...]
    sampling: Sampling
    stream: bool
    include_usage: bool
    # The project named by the model id (`<model>/project/<id>`), not yet checked as the
    # caller's (the route does); None for the base model id.
    project_id: str | None = None


PROJECT_MODEL_SEPARATOR = "/project/"


def project_model_id(model_id: str, project_id: str) -> str:
    """The model id that runs turns in one of the caller's projects (GET /openai/v1/models)."""
    return f"{model_id}{PROJECT_MODEL_SEPARATOR}{project_id}"


def split_model(model: str, model_id: str) -> tuple[bool, str | None]:
    """Whether `model` is this service's model, and the project it names (None: none)."""
    if model == model_id:
        return True, None
    prefix = model_id + PROJECT_MODEL_SEPARATOR
    if model.startswith(prefix) and len(model) > len(prefix):
        return True, model[len(prefix) :]
    return False, None


def parse_completion_request(
    body: object, *, model_id: str, max_message_chars: int
) -> CompletionRequest:
    if not isinstance(body, Mapping):
        raise bad(NOT_OBJECT, param=None)
    model, project_id = _model(body, model_id)
    _refuse_client_tools(body)
    _refuse_unsupported(body)
    messages = _messages(body.get("messages"))
    last_role, message = messages[-1]
    where = f"messages[{len(messages) - 1}]"
    if last_role != "user":
        raise bad(
            "The last message must be the user's: this service answers it (no assistant prefill).",
            param=f"{where}.role",
        )
    if not message.strip():
        raise bad("The last user message must contain text.", param=f"{where}.content")
    if len(message) > max_message_chars:
        raise bad(
            f"The last user message holds {len(message):,} characters; at most "
            f"{max_message_chars:,} are accepted.",
            param=f"{where}.content",
            code="message_too_long",
        )
    history = tuple(
        HistoryMessage(HISTORY_ROLES[role], text)
        for role, text in messages[:-1]
        if text.strip()  # an empty message says nothing to the model
    )
    stream = _optional(body, "stream", bool) or False
    options = _optional(body, "stream_options", Mapping) or {}
    include_usage = _optional(options, "include_usage", bool, prefix="stream_options.") or False
    return CompletionRequest(
        model=model,
        message=message,
        history=history,
        sampling=_sampling(body),
        stream=stream,
        include_usage=include_usage,
        project_id=project_id,
    )


def _model(body: Mapping[str, Any], model_id: str) -> tuple[str, str | None]:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad(
            "`model` is required: use the id that GET /openai/v1/models lists.", param="model"
        )
    served, project_id = split_model(model, model_id)
    if not served:
        # The requested name is not echoed: only the id this service serves.
        raise WireError(
            404,
            f"This service serves one model, {model_id!r} (GET /openai/v1/models lists "
            "it); the requested model does not exist here.",
            code="model_not_found",
            param="model",
        )
    return model, project_id


def _refuse_client_tools(body: Mapping[str, Any]) -> None:
    for field in ("tools", "functions"):
        if body.get(field):  # absent, null and [] all mean "no client tools"
            raise bad(TOOLS_REFUSED, param=field, code="tools_not_supported")
    for field in ("tool_choice", "function_call"):
        if body.get(field) not in (None, "none", "auto"):
            raise bad(TOOLS_REFUSED, param=field, code="tools_not_supported")


def _refuse_unsupported(body: Mapping[str, Any]) -> None:
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise bad("`n` must be a positive integer.", param="n")
    if n is not None and n > 1:
        raise bad(
            "`n` > 1 is not supported: each request runs one turn, with one answer.",
            param="n",
            code="unsupported_parameter",
        )
    if body.get("logprobs"):
        raise bad(
            "`logprobs` are not supported by this service.",
            param="logprobs",
            code="unsupported_parameter",
        )
    response_format = body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise bad(
            "Only text answers are supported: `response_format` must be absent or "
            '{"type": "text"}.',
            param="response_format",
            code="unsupported_parameter",
        )
    modalities = body.get("modalities")
    if (modalities is not None and modalities != ["text"]) or body.get("audio") is not None:
        raise bad(
            "Only text answers are supported: no audio output.",
            param="modalities",
            code="unsupported_parameter",
        )


def _messages(raw: object) -> list[tuple[ClientRole, str]]:
    if not isinstance(raw, list) or not raw:
        raise bad("`messages` must be a non-empty list of messages.", param="messages")
    parsed: list[tuple[ClientRole, str]] = []
    for index, item in enumerate(raw):
        where = f"messages[{index}]"
        if not isinstance(item, Mapping):
            raise bad(f"{where} must be an object with `role` and `content`.", param=where)
        role = item.get("role")
        if role in ("tool", "function") or item.get("tool_calls") or item.get("function_call"):
            raise bad(TOOLS_REFUSED, param=where, code="tools_not_supported")
        if role not in ROLES:
            raise bad(
                f"{where}.role must be one of system, developer, user or assistant.",
                param=f"{where}.role",
            )
        client_role: ClientRole = role
        parsed.append((client_role, _text(item.get("content"), client_role, f"{where}.content")))
    return parsed


def _text(content: object, role: ClientRole, where: str) -> str:
    """A message's text: a string, or text parts joined by newlines (an assistant's refusal
    parts count as its text). Images, audio and files are refused until supported."""
    if content is None and role == "assistant":
        return ""
    if isinstance(content, str):
        _check_unicode(content, where)
        return content
    if not isinstance(content, list):
        raise bad(f"{where} must be a string or a list of text parts.", param=where)
    pieces: list[str] = []
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        field = "refusal" if kind == "refusal" and role == "assistant" else "text"
        if isinstance(part, Mapping) and kind == field and isinstance(part.get(field), str):
            _check_unicode(part[field], f"{at}.{field}")
            pieces.append(part[field])
        elif kind in NON_TEXT_PARTS:
            raise bad(
                f"{at}: {kind} parts are not supported yet; send text only.",
                param=at,
                code="unsupported_content",
            )
        else:
            raise bad(f'{at} must be a text part: {{"type": "text", "text": "..."}}.', param=at)
    return "\n".join(pieces)


def _check_unicode(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # an unpaired surrogate, valid in JSON as "\ud800"
        raise bad(f"{where} must be valid Unicode text.", param=where) from None
    if "\x00" in text:  # refused as on /v1/chat: no database stores it in text
        raise bad(f"{where} must not contain the NUL character (U+0000).", param=where)


def _optional(body: Mapping[str, Any], key: str, kind: type[Any], *, prefix: str = "") -> Any:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, kind):
        expected = "a boolean" if kind is bool else "an object"
        raise bad(f"`{prefix}{key}` must be {expected}.", param=prefix + key)
    return value


def _number(body: Mapping[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise bad(f"`{key}` must be a number from {low:g} to {high:g}.", param=key)
    return float(value)


def _integer(body: Mapping[str, Any], key: str, *, low: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
        floor = f" of at least {low}" if low is not None else ""
        raise bad(f"`{key}` must be an integer{floor}.", param=key)
    return value


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    sequences = [value] if isinstance(value, str) else value
    if (
        not isinstance(sequences, list)
        or len(sequences) > MAX_STOP_SEQUENCES
        or not all(isinstance(item, str) and item for item in sequences)
    ):
        raise bad(
            f"`stop` must be a non-empty string or a list of at most {MAX_STOP_SEQUENCES} of them.",
            param="stop",
        )
    return tuple(sequences)


def _sampling(body: Mapping[str, Any]) -> Sampling:
    limits = [
        limit
        for limit in (
            _integer(body, "max_tokens", low=1),
            _integer(body, "max_completion_tokens", low=1),
        )
        if limit is not None
    ]
    return Sampling(
        max_tokens=min(limits) if limits else None,
        temperature=_number(body, "temperature", 0, 2),
        top_p=_number(body, "top_p", 0, 1),
        presence_penalty=_number(body, "presence_penalty", -2, 2),
        frequency_penalty=_number(body, "frequency_penalty", -2, 2),
        seed=_integer(body, "seed"),
        stop=_stop(body),
    )
