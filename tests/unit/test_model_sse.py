"""Reading the model's event stream without the SDK's chunk models: the same events, data and
errors as the SDK's own decoder gives, so the turn sees exactly what it saw through the SDK,
however the body's bytes are cut."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.agent.llm import ModelClient, ModelFailure, RoundResult, build_model_client
from app.agent.model_sse import EventStream, StreamError, chunks
from app.settings import Settings

UNICODE = "caf\u00e9 \u2014 \U0001f600"
RULES = (
    b": keep-alive\n\n"
    b"event: message\r\nid: 7\r\ndata: one\r\n\r\n"
    b"retry: 10\r\rdata:two\r\ndata:  three\n\n" + f"data: {UNICODE}\n\n".encode() + b"data: last"
)
RULES_DATA = ["one", "two\n three", UNICODE, "last"]


async def body_of(*pieces: bytes) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


def collect(stream: AsyncIterator[Any]) -> list[Any]:
    async def run() -> list[Any]:
        return [item async for item in stream]

    return asyncio.run(run())


def events(*pieces: bytes) -> list[str]:
    stream = EventStream()
    found = [data for piece in pieces for data in stream.feed(piece)]
    return found + stream.end()


def test_the_event_stream_rules() -> None:
    """Comments and other fields are read past, multi-line data is joined by newlines, the
    optional space after the colon is dropped once, CRLF, LF and CR all end a line, an event
    without data is skipped, and a last event without its blank line still counts."""
    assert events(RULES) == RULES_DATA


@given(st.lists(st.integers(min_value=0, max_value=len(RULES)), max_size=12))
def test_the_events_do_not_depend_on_where_the_bytes_are_cut(cuts: list[int]) -> None:
    """Cut anywhere (inside a CRLF, inside a character), the body gives the same events."""
    bounds = [0, *sorted(cuts), len(RULES)]
    assert events(*(RULES[a:b] for a, b in zip(bounds, bounds[1:], strict=False))) == RULES_DATA


def test_a_cr_at_the_end_of_the_body_ends_its_line() -> None:
    assert events(b"data: a\r") == ["a"]
    assert events(b"data: a\r", b"\r") == ["a"]
    assert events(b"data: a\n\r") == ["a"]


def test_chunks_stop_at_done_and_read_the_rest() -> None:
    """JSON chunks up to `[DONE]`; whatever follows is consumed (the connection stays usable)
    but not parsed."""
    read: list[bytes] = []
    pieces = (b'data: {"a": 1}\n\ndata: [DO', b"NE]\n\ndata: not json\n\n", b"data: {oops")

    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            read.append(piece)
            yield piece

    assert collect(chunks(body())) == [{"a": 1}]
    assert read == list(pieces)


def test_the_last_chunk_without_its_blank_line_is_parsed() -> None:
    assert collect(chunks(body_of(b'data: {"a": 1}\n\ndata: {"b": 2}'))) == [{"a": 1}, {"b": 2}]


KEYS = st.text(max_size=5).filter(lambda key: key != "error")


@given(st.lists(st.dictionaries(KEYS, st.text(max_size=8), max_size=3), max_size=5))
def test_chunks_are_the_json_that_was_sent(sent: list[dict[str, str]]) -> None:
    """Whatever JSON the model sends (newlines and non-ASCII escaped or not) comes back equal."""
    body = b"".join(
        f"data: {json.dumps(chunk, ensure_ascii=index % 2 == 0)}\n\n".encode()
        for index, chunk in enumerate(sent)
    )
    assert collect(chunks(body_of(body, b"data: [DONE]\n\n"))) == sent


def test_an_error_event_raises() -> None:
    """A chunk carrying `error` ends the stream with StreamError (the SDK raises APIError)."""
    body = body_of(b'data: {"choices": []}\n\n', b'data: {"error": {"message": "x"}}\n\n')
    with pytest.raises(StreamError):
        collect(chunks(body))


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"{oops", id="not-json"),
        pytest.param(b"[1, 2]", id="not-an-object"),
        pytest.param(b"[" * 100_000, id="too-deep-for-the-parser"),
    ],
)
def test_a_chunk_that_is_not_a_json_object_is_a_stream_error(data: bytes) -> None:
    """Malformed data is a broken stream (StreamError, so `model_stream_broken` and the
    fallback rules), never an unexpected exception that ends the turn as `internal_error`."""
    with pytest.raises(StreamError):
        collect(chunks(body_of(b"data: " + data + b"\n\n")))


def stream_body(words: list[str]) -> bytes:
    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(chunk)}\r\n\r\n".encode()

    pieces = [event({"content": word}) for word in words]
    return b"".join([*pieces, event({}, "stop"), b"data: [DONE]\r\n\r\n"])


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "read-by-transport"])
@pytest.mark.parametrize("encoding", ["identity", "gzip", "deflate"])
def test_a_round_reads_the_body_as_sent_or_compressed(encoding: str, streamed: bool) -> None:
    """Through the SDK's client: a body sent as it is is read raw, a compressed one decoded,
    one the transport has already read is served from what it read."""
    words = ["caf\u00e9 ", "is ", "open"]
    raw = stream_body(words)
    body = {"identity": raw, "gzip": gzip.compress(raw), "deflate": zlib.compress(raw)}[encoding]

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 7):
            yield body[start : start + 7]

    def reply(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream", "content-encoding": encoding}
        return httpx.Response(200, headers=headers, content=pieces() if streamed else body)

    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    client = build_model_client(settings, httpx.MockTransport(reply))
    seen: list[str] = []

    async def run() -> RoundResult:
        try:
            return await client.run_round("m", [{"role": "user", "content": "hi"}], [], seen.append)
        finally:
            await client.aclose()

    result = asyncio.run(run())
    assert (result.text, result.finish_reason, seen) == ("".join(words), "stop", words)


Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """Read one HTTP request with a `Content-Length` body; return its head."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(
        next(
            line.split(b":", 1)[1]
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
    )
    await reader.readexactly(length)
    return head


@contextlib.asynccontextmanager
async def configured_endpoint(serve: Serve, **settings: Any) -> AsyncIterator[ModelClient]:
    """The model client of a configured endpoint (the SDK's own HTTP client), served by `serve`
    on a real loopback socket; `settings` are more of the client's settings."""
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    configured = Settings(  # type: ignore[call-arg]
        _env_file=None, llm_base_url=f"http://127.0.0.1:{port}/v1", llm_api_key="k", **settings
    )
    client = build_model_client(configured)
    try:
        yield client
    finally:
        await client.aclose()
        server.close()


def test_a_real_endpoint_that_drops_midway_is_a_broken_stream() -> None:
    """A configured endpoint (the SDK's own HTTP client) that closes the connection inside the
    body: the round fails as `model_stream_broken` with the text so far marked as streamed, not
    with the HTTP library's exception."""
    first = stream_body(["half "]).split(b"\r\n\r\n")[0] + b"\r\n\r\n"

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        writer.write(head + b"transfer-encoding: chunked\r\n\r\n")
        writer.write(f"{len(first):x}\r\n".encode() + first + b"\r\n")
        await writer.drain()
        writer.close()  # no last chunk: the body is cut

    async def run() -> ModelFailure:
        async with configured_endpoint(serve) as client:
            with pytest.raises(ModelFailure) as failure:
                await client.run_round("m", [{"role": "user", "content": "hi"}], [], print)
            return failure.value

    failure = asyncio.run(run())
    assert (failure.code, failure.streamed) == ("model_stream_broken", True)


@pytest.mark.parametrize("encoding", ["identity", "gzip", "deflate"])
def test_a_configured_endpoint_is_read_as_sent_or_compressed(encoding: str) -> None:
    """A configured endpoint goes through the SDK's aiohttp client over a real socket: a chunked
    body, sent in small pieces and compressed or not, gives the same text as it was written."""
    words = ["caf\u00e9 ", "is ", "open"]
    raw = stream_body(words)
    body = {"identity": raw, "gzip": gzip.compress(raw), "deflate": zlib.compress(raw)}[encoding]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            + f"content-encoding: {encoding}\r\n".encode()
            + b"transfer-encoding: chunked\r\n\r\n"
        )
        for start in range(0, len(body), 7):
            piece = body[start : start + 7]
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    seen: list[str] = []

    async def run() -> RoundResult:
        async with configured_endpoint(serve) as client:
            return await client.run_round("m", [{"role": "user", "content": "hi"}], [], seen.append)

    result = asyncio.run(run())
    assert (result.text, result.finish_reason, seen) == ("".join(words), "stop", words)


def test_a_configured_endpoint_that_refuses_the_request_is_a_model_error() -> None:
    """An error status, then a closed port: the SDK's errors through its aiohttp client become
    `model_error` with nothing streamed, never the HTTP library's own exception."""

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b'{"error": {"message": "overloaded"}}'
        writer.write(
            b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    async def run() -> list[tuple[str, bool]]:
        failures = []
        async with configured_endpoint(refuse) as client:
            with pytest.raises(ModelFailure) as status:
                await client.run_round("m", [{"role": "user", "content": "hi"}], [], print)
            failures.append((status.value.code, status.value.streamed))
        closed = await asyncio.start_server(refuse, "127.0.0.1", 0)
        port = closed.sockets[0].getsockname()[1]
        closed.close()
        await closed.wait_closed()
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None, llm_base_url=f"http://127.0.0.1:{port}/v1", llm_api_key="k"
        )
        client = build_model_client(settings)
        try:
            with pytest.raises(ModelFailure) as refused:
                await client.run_round("m", [{"role": "user", "content": "hi"}], [], print)
            failures.append((refused.value.code, refused.value.streamed))
        finally:
            await client.aclose()
        return failures

    assert asyncio.run(run()) == [("model_error", False), ("model_error", False)]


def test_a_configured_endpoint_that_stops_sending_is_a_broken_stream() -> None:
    """The stream's first chunk, then silence past LLM_TIMEOUT_SECONDS: aiohttp's read timeout
    ends the round as `model_stream_broken` with the text so far marked as streamed."""
    first = stream_body(["half "]).split(b"\r\n\r\n")[0] + b"\r\n\r\n"
    release = asyncio.Event()

    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            + b"transfer-encoding: chunked\r\n\r\n"
            + f"{len(first):x}\r\n".encode()
            + first
            + b"\r\n"
        )
        await writer.drain()
        await release.wait()  # nothing more until the test ends
        writer.close()

    async def run() -> ModelFailure:
        try:
            async with configured_endpoint(stall, llm_timeout_seconds=0.3) as client:
                with pytest.raises(ModelFailure) as failure:
                    await client.run_round("m", [{"role": "user", "content": "hi"}], [], print)
                return failure.value
        finally:
            release.set()

    failure = asyncio.run(run())
    assert (failure.code, failure.streamed) == ("model_stream_broken", True)


def test_a_configured_endpoint_learns_nothing_of_the_host() -> None:
    """The request a configured endpoint receives carries none of the SDK's `X-Stainless-*`
    headers describing the host (OS, architecture, Python and SDK versions, retry state): the
    one left says how the SDK reads the answer (`X-Stainless-Raw-Response: stream`)."""
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await read_request(reader))
        raw = stream_body(["hi"])
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            + f"content-length: {len(raw)}\r\n\r\n".encode()
            + raw
        )
        await writer.drain()
        writer.close()

    async def run() -> RoundResult:
        async with configured_endpoint(serve) as client:
            return await client.run_round("m", [{"role": "user", "content": "hi"}], [], print)

    assert asyncio.run(run()).text == "hi"
    (head,) = heads
    names = {line.split(b":", 1)[0].lower() for line in head.split(b"\r\n")[1:] if line}
    stainless = {name for name in names if name.startswith(b"x-stainless")}
    assert stainless == {b"x-stainless-raw-response"}
    assert {b"authorization", b"content-type", b"content-length", b"host"} <= names
