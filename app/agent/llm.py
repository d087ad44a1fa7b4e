"""Model access through the official `openai` SDK: one streamed chat-completions round at a time."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import aiohttp
import httpx
import openai
import structlog
from openai import AsyncOpenAI, DefaultAioHttpClient
from opentelemetry import trace

from app.agent import model_sse
from app.agent.events import Usage
from app.offline.transport import offline_transport
from app.settings import Settings
from app.telemetry import metrics, start_span

log = structlog.get_logger(__name__)
tracer = trace.get_tracer(__name__)

# The in-process transport is addressed by a name that never resolves: nothing leaves the process.
IN_PROCESS_BASE_URL = "http://offline-model.invalid/v1"
# A real endpoint gets one SDK retry for a refused request; a stream is never retried midway.
REAL_MODEL_RETRIES = 1

Message = dict[str, Any]
# What reading a round's stream can raise: the SDK's errors, an error event, and the HTTP
# library's. The SDK sends through its own `httpx2` (a configured endpoint) or through the
# `httpx` client given to it (the offline model, tests); their exception classes are unrelated.
STREAM_ERRORS: tuple[type[Exception], ...] = (
    openai.OpenAIError,
    model_sse.StreamError,
    httpx.HTTPError,
)
try:
    import httpx2

    STREAM_ERRORS += (httpx2.HTTPError,)
except ImportError:  # pragma: no cover - an SDK release without its own HTTP stack
    pass
# A configured endpoint is read through aiohttp (`openai.DefaultAioHttpClient`), whose transport
# maps the errors it knows to httpx2's; any other aiohttp error is a broken stream too.
STREAM_ERRORS += (aiohttp.ClientError,)

# What the SDK adds per request, beside its default headers.
SDK_REQUEST_HEADERS = ("x-stainless-retry-count", "x-stainless-read-timeout")

FailureCode = Literal["model_error", "model_stream_broken"]


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call of a round. `oversized`: its arguments passed LLM_MAX_TOOL_ARGUMENT_CHARS
    while streaming; they were dropped there (`arguments` is empty) and the call is refused."""

    id: str
    name: str
    arguments: str
    oversized: bool = False


@dataclass(frozen=True)
class StreamLimits:
    """Bounds on what one streamed round may make the service hold (the settings' defaults)."""

    max_event_bytes: int = model_sse.MAX_EVENT_BYTES
    max_tool_calls: int = 16
    max_tool_argument_chars: int = 65_536


@dataclass(frozen=True)
class Sampling:
    """Generation options a client chose for its turn; None keeps the endpoint's default. They
    apply to every model round of the turn, and `max_tokens` never exceeds LLM_MAX_TOKENS."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def options(self, max_tokens_cap: int | None) -> dict[str, Any]:
        """The request options, with the client's token limit capped by the server's."""
        limits = [limit for limit in (self.max_tokens, max_tokens_cap) if limit is not None]
        chosen: dict[str, Any] = {
            "max_tokens": min(limits) if limits else None,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "seed": self.seed,
            "stop": list(self.stop) or None,
        }
        return {key: value for key, value in chosen.items() if value is not None}


DEFAULT_SAMPLING = Sampling()


@dataclass(frozen=True)
class RoundResult:
    text: str
    tool_calls: tuple[ToolCallRequest, ...]
    finish_reason: str | None
    usage: Usage | None = None


class ModelFailure(Exception):
    """A model round failed. `streamed` tells whether any answer text had been emitted."""

    def __init__(self, code: FailureCode, message: str, *, streamed: bool) -> None:
        super().__init__(message)
        self.code: FailureCode = code
        self.message = message
        self.streamed = streamed


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, Mapping) else getattr(value, name, None)


class TooManyToolCalls(Exception):
    """The round asked for more tool calls than LLM_MAX_TOOL_CALLS."""


@dataclass
class _Fragments:
    """Tool-call pieces of one streamed round, assembled by their `index`: at most
    `limits.max_tool_calls` calls, each call's arguments kept up to
    `limits.max_tool_argument_chars` (past that they are dropped as they come, not checked
    after the whole round was held)."""

    limits: StreamLimits = field(default_factory=StreamLimits)
    ids: dict[int, str] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    arguments: dict[int, list[str]] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    oversized: set[int] = field(default_factory=set)

    def add(self, delta: Any) -> None:
        """One `tool_calls` delta: the wire's dict, or an object with those attributes."""
        index = _field(delta, "index")
        if isinstance(index, bool) or not isinstance(index, int):
            raise model_sse.StreamError("a tool call without an integer index")
        if index not in self.arguments:
            if len(self.arguments) >= self.limits.max_tool_calls:
                raise TooManyToolCalls
            self.arguments[index], self.sizes[index] = [], 0
        if isinstance(call_id := _field(delta, "id"), str) and call_id:
            self.ids[index] = call_id[:_MAX_NAME_CHARS]
        function = _field(delta, "function")
        if function is None:
            return
        if isinstance(name := _field(function, "name"), str) and name:
            self.names[index] = (self.names.get(index, "") + name)[:_MAX_NAME_CHARS]
        arguments = _field(function, "arguments")
        if isinstance(arguments, str) and arguments and index not in self.oversized:
            self.sizes[index] += len(arguments)
            if self.sizes[index] > self.limits.max_tool_argument_chars:
                self.oversized.add(index)
                self.arguments[index] = []  # dropped now: what follows is not kept either
            else:
                self.arguments[index].append(arguments)

    def calls(self) -> tuple[ToolCallRequest, ...]:
        return tuple(
            ToolCallRequest(
                id=self.ids.get(index, f"call_{index}"),
                name=self.names.get(index, ""),
                arguments="".join(self.arguments[index]),
                oversized=index in self.oversized,
            )
            for index in sorted(self.arguments)
        )


# A tool's name or a call's id longer than this is cut (no tool of ours has a long name).
_MAX_NAME_CHARS = 256


@dataclass
class _Reading:
    """What one streamed round has said so far; each chunk is read in `add`, whose locals end
    with it (an idle stream waits between two chunks). A chunk of the wrong shape raises
    `StreamError`; a usage report without its counts leaves the usage unknown."""

    text: list[str] = field(default_factory=list)
    fragments: _Fragments = field(default_factory=_Fragments)
    finish_reason: str | None = None
    usage: Usage | None = None

    def add(self, chunk: dict[str, Any], on_text: Callable[[str], None]) -> None:
        if isinstance(counts := chunk.get("usage"), dict):
            tokens = (counts.get("prompt_tokens"), counts.get("completion_tokens"))
            known = all(isinstance(n, int) and not isinstance(n, bool) for n in tokens)
            self.usage = Usage(*tokens) if known else None  # type: ignore[arg-type]
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise model_sse.StreamError("choices is not a list")
        for choice in choices:
            if not isinstance(choice, dict):
                raise model_sse.StreamError("a choice is not an object")
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise model_sse.StreamError("a delta is not an object")
            if isinstance(content := delta.get("content"), str) and content:
                self.text.append(content)
                on_text(content)
            tool_deltas = delta.get("tool_calls") or []
            if not isinstance(tool_deltas, list):
                raise model_sse.StreamError("tool_calls is not a list")
            for tool_delta in tool_deltas:
                self.fragments.add(tool_delta)
            if reason := choice.get("finish_reason"):
                self.finish_reason = str(reason)[:_MAX_NAME_CHARS]


class ModelClient:
    """Wraps one `AsyncOpenAI` client; `primary` and `fallback` are model names on it."""

    def __init__(
        self,
        client: AsyncOpenAI,
        *,
        primary: str,
        fallback: str | None = None,
        max_tokens: int | None = None,
        limits: StreamLimits | None = None,
    ) -> None:
        self.client = client
        # The SDK describes this host to the endpoint in `X-Stainless-*` headers (OS,
        # architecture, Python and SDK versions, async library, retry count, read timeout).
        # None of it is the endpoint's business (private by default), and each open stream
        # would hold them twice, as httpx2's headers and as aiohttp's.
        self._unsent_headers: dict[str, openai.Omit] = {
            name: openai.Omit()
            for name in (*client.default_headers, *SDK_REQUEST_HEADERS)
            if name.lower().startswith("x-stainless-")
        }
        self.primary = primary
        self.fallback = fallback
        self.max_tokens = max_tokens
        self.limits = limits or StreamLimits()

    async def run_round(
        self,
        model: str,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        on_text: Callable[[str], None],
        sampling: Sampling = DEFAULT_SAMPLING,
    ) -> RoundResult:
        """Stream one completion; text pieces go to `on_text` as they arrive."""
        options = sampling.options(self.max_tokens)
        with start_span(tracer, "llm.round") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.request.model", model)
            span.set_attribute("gen_ai.request.tool_count", len(tools))
            for option in ("max_tokens", "temperature"):
                if option in options:
                    span.set_attribute(f"gen_ai.request.{option}", options[option])
            started = time.perf_counter()
            first: list[float] = []

            def timed_text(piece: str) -> None:
                if not first:
                    first.append(time.perf_counter() - started)
                    metrics.first_token(first[0])
                on_text(piece)

            result = await self._stream(model, messages, tools, timed_text, options)
            if result.finish_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [result.finish_reason])
            if result.usage is not None:
                span.set_attribute("gen_ai.usage.input_tokens", result.usage.input_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", result.usage.output_tokens)
            log.info(
                "llm.round",
                model=model,
                finish_reason=result.finish_reason,
                tool_call_count=len(result.tool_calls),
                duration_ms=round((time.perf_counter() - started) * 1000, 1),
            )
            return result

    async def _stream(
        self,
        model: str,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        on_text: Callable[[str], None],
        options: Mapping[str, Any],
    ) -> RoundResult:
        # Messages and tools go in `extra_body`, which the SDK sends as it is: as parameters it
        # walks every message and tool schema against its TypedDicts, finding nothing to change
        # in plain dicts, on the event loop's time (docs/performance.md). The request's JSON is
        # the same.
        body: dict[str, Any] = {"messages": list(messages)}
        if tools:
            body["tools"] = list(tools)
        # The streaming response, read as plain JSON: the SDK still sends the request (auth,
        # retries, status errors), but builds no model object per chunk, which was the largest
        # share of a turn's CPU (scripts/bench/README.md).
        request = self.client.chat.completions.with_streaming_response.create(
            model=model,
            messages=[],  # replaced by body["messages"]
            stream=True,
            stream_options={"include_usage": True},
            extra_body=body,
            extra_headers=self._unsent_headers,
            **options,
        )
        try:
            response = await request.__aenter__()
        except openai.OpenAIError as error:
            raise ModelFailure(
                "model_error",
                f"The model request failed ({type(error).__name__}).",
                streamed=False,
            ) from error
        # While the answer streams, only the HTTP response is kept: not the SDK's wrapper with
        # its copy of the request options, nor the sent request's JSON body and headers, which
        # the response would otherwise hold until the round ends (most of an idle stream's
        # model-side memory; docs/performance.md). Closing it is what the wrapper's exit does.
        http = response.http_response
        http.request = type(http.request)(http.request.method, http.request.url)
        del request, response, body
        reading = _Reading(fragments=_Fragments(self.limits))
        try:
            async for chunk in model_sse.chunks(_body(http), self.limits.max_event_bytes):
                reading.add(chunk, on_text)
                del chunk  # not kept while the next one is awaited
        except TooManyToolCalls:
            raise ModelFailure(
                "model_error",
                f"The model asked for more than {self.limits.max_tool_calls} tool calls in "
                "one round.",
                streamed=bool(reading.text),
            ) from None
        except STREAM_ERRORS as error:
            name = "APIError" if isinstance(error, model_sse.StreamError) else type(error).__name__
            raise ModelFailure(
                "model_stream_broken",
                f"The model stream broke ({name}).",
                streamed=bool(reading.text),
            ) from error
        finally:
            await http.aclose()
        if reading.finish_reason is None:
            raise ModelFailure(
                "model_stream_broken",
                "The model stream ended without a finish reason.",
                streamed=bool(reading.text),
            )
        calls = reading.fragments.calls()
        if not round_finished(reading.finish_reason, bool(calls)):
            raise ModelFailure(
                "model_error",
                f"The model's answer ended with finish reason {_shown(reading.finish_reason)}, "
                "which is not a finished answer.",
                streamed=bool(reading.text),
            )
        return RoundResult("".join(reading.text), calls, reading.finish_reason, reading.usage)

    async def aclose(self) -> None:
        await self.client.close()


# The finish reasons of a round that ended as it should: an answer (`stop`), an answer cut at
# its token limit (`length`, a documented final answer), or tool calls to run. Any other
# (`error`, which some routers send for a failure midway; `content_filter`; a reason we do
# not know) ends a failed round: nothing of the turn is committed.
FINISHED = frozenset({"stop", "length", "tool_calls"})


def round_finished(finish_reason: str, has_calls: bool) -> bool:
    """Whether a round that ended with `finish_reason` may count: `tool_calls` only with
    calls to run (without any it would read as an answer the model never gave)."""
    if finish_reason == "tool_calls":
        return has_calls
    return finish_reason in FINISHED


def _shown(finish_reason: str) -> str:
    # The model's text: named only when it is one word (an error message must carry no content).
    return repr(finish_reason) if re.fullmatch(r"[a-z_]{1,32}", finish_reason) else "(unknown)"


def _body(http: httpx.Response) -> AsyncIterator[bytes]:
    """The response body's bytes: as received, unless the server compressed them or the
    transport has already read them (httpx's decoding iterator adds a generator and a decoder
    per open stream)."""
    encoding = http.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity") and not http.is_stream_consumed:
        return http.aiter_raw()
    return http.aiter_bytes()


def build_model_client(
    settings: Settings, transport: httpx.AsyncBaseTransport | None = None
) -> ModelClient:
    """The configured endpoint, or the offline model (or a test's transport) in process."""
    if transport is None and settings.llm_base_url is not None:
        api_key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else "unused"
        client = AsyncOpenAI(
            base_url=settings.llm_base_url,
            api_key=api_key,
            timeout=settings.llm_timeout_seconds,
            max_retries=REAL_MODEL_RETRIES,
            # The SDK's aiohttp client: its C parser and connection pool instead of httpx2's
            # pure-Python HTTP stack, which parsed every chunk of the answer with h11 and
            # polled each pooled connection's socket on every request (docs/performance.md).
            http_client=DefaultAioHttpClient(timeout=settings.llm_timeout_seconds),
        )
    else:
        client = AsyncOpenAI(
            base_url=IN_PROCESS_BASE_URL,
            api_key="offline",
            max_retries=0,
            # The SDK accepts an `httpx` client as well as its own `httpx2` one.
            http_client=cast(
                Any,
                httpx.AsyncClient(
                    transport=transport or offline_transport(settings.offline_model_delay_ms),
                    timeout=settings.llm_timeout_seconds,
                ),
            ),
        )
    return ModelClient(
        client,
        primary=settings.llm_model,
        fallback=settings.llm_fallback_model,
        max_tokens=settings.llm_max_tokens,
        limits=StreamLimits(
            max_event_bytes=settings.llm_max_event_bytes,
            max_tool_calls=settings.llm_max_tool_calls,
            max_tool_argument_chars=settings.llm_max_tool_argument_chars,
        ),
    )
