"""The offline model in process: an httpx transport that answers `POST .../chat/completions`
for `AsyncOpenAI`, streaming its body chunk by chunk (an `httpx.ASGITransport` would buffer it),
so text reaches the client word by word."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx

from app.offline.embeddings import embeddings_body
from app.offline.model import OfflineModel
from app.offline.wire import ChatRequest, Reply, completion_body, stream_body

Responder = Callable[[ChatRequest], Awaitable[Reply]]


class AsyncIteratorStream(httpx.AsyncByteStream):
    """A streaming httpx body from an async iterator; closing it closes the iterator."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        closer = getattr(self._chunks, "aclose", None)
        if closer is not None:
            await closer()


class ChatCompletionsTransport(httpx.AsyncBaseTransport):
    """Answers `POST .../chat/completions` in process with the replies of `responder`."""

    def __init__(self, responder: Responder, *, delay_seconds: float = 0.0) -> None:
        self.responder = responder
        self.delay_seconds = delay_seconds

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not found"}})
        body = json.loads(await request.aread())
        chat = ChatRequest.from_body(body)
        return await self.respond(chat, await self.responder(chat))

    async def respond(self, chat: ChatRequest, reply: Reply) -> httpx.Response:
        """The HTTP response that serves `reply` to `chat` (streamed when it asked for a stream).
        Tests extend this with failure replies (`tests/support/scripted.py`)."""
        if chat.stream:
            return httpx.Response(
                200,
                headers={"content-type": "text/event-stream"},
                stream=AsyncIteratorStream(stream_body(chat, reply, self.delay_seconds)),
            )
        return httpx.Response(200, json=completion_body(chat, reply))


def offline_transport(delay_ms: int) -> ChatCompletionsTransport:
    return ChatCompletionsTransport(OfflineModel(), delay_seconds=delay_ms / 1000)


class EmbeddingsTransport(httpx.AsyncBaseTransport):
    """Answers `POST .../embeddings` in process with the offline model's hashed vectors
    (EMBEDDING_BASE_URL=offline)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST" or not request.url.path.endswith("/embeddings"):
            return httpx.Response(404, json={"error": {"message": "not found"}})
        try:
            body = json.loads(await request.aread())
        except ValueError:
            return httpx.Response(400, json={"error": {"message": "invalid JSON"}})
        status, answer = embeddings_body(body)
        return httpx.Response(status, json=answer)
