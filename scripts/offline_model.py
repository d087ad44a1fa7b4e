"""Serve the built-in offline model over HTTP as an OpenAI-compatible chat-completions endpoint.

Anything that speaks the OpenAI protocol can use it, including this service itself:

    python scripts/offline_model.py --port 8081
    LLM_BASE_URL=http://127.0.0.1:8081/v1 LLM_API_KEY=unused python -m app serve

The replies are exactly those of the in-process offline model (`app/offline/`). It also answers
`POST /v1/embeddings` with deterministic hashed bag-of-words vectors (not semantic):

    EMBEDDING_BASE_URL=http://127.0.0.1:8081/v1 EMBEDDING_MODEL=offline-hash-1 \
        EMBEDDING_DIMENSIONS=256 python -m app serve
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.offline.embeddings import embeddings_body  # noqa: E402 (after the path setup above)
from app.offline.model import OfflineModel  # noqa: E402
from app.offline.wire import (  # noqa: E402
    OFFLINE_MODEL_NAME,
    ChatRequest,
    completion_body,
    stream_body,
)


def build_app(delay_ms: int = 15) -> Starlette:
    model = OfflineModel()
    delay = delay_ms / 1000

    async def completions(request: Request) -> Response:
        try:
            body: Any = json.loads(await request.body())
        except ValueError:
            return JSONResponse({"error": {"message": "invalid JSON"}}, status_code=400)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return JSONResponse({"error": {"message": "messages is required"}}, status_code=400)
        chat = ChatRequest.from_body(body)
        reply = await model(chat)
        if chat.stream:
            return StreamingResponse(
                stream_body(chat, reply, delay),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-store"},
            )
        return JSONResponse(completion_body(chat, reply))

    async def embeddings(request: Request) -> Response:
        """Deterministic hashed bag-of-words vectors: not semantic (app/offline/embeddings.py)."""
        try:
            body: Any = json.loads(await request.body())
        except ValueError:
            return JSONResponse({"error": {"message": "invalid JSON"}}, status_code=400)
        status, answer = embeddings_body(body)
        return JSONResponse(answer, status_code=status)

    async def models(_request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": OFFLINE_MODEL_NAME,
                        "object": "model",
                        "created": 0,
                        "owned_by": "offline",
                    }
                ],
            }
        )

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument(
        "--delay-ms", type=int, default=15, help="pause between streamed words (default 15)"
    )
    args = parser.parse_args(argv)
    uvicorn.run(build_app(args.delay_ms), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
