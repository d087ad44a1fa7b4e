"""An OpenAI-compatible `/v1/embeddings` in front of another one, for recall runs on a slow CPU:
it remembers each (model, input_type, text)'s vector, so a text the run's baselines embedded is
not embedded again for the service's worker (the same text and kind give the same vector), and
sends the texts it has not seen to the endpoint (several `--upstream`: in parallel) in batches
of `--batch` sorted by length (a batch is padded to its longest text: LoCoMo's batches of 64
cost several times their words).

    .venv/bin/python scripts/bench/embeddings_cache.py --upstream http://127.0.0.1:8091/v1 \
        [--port 8092] [--batch 8]

Then point EMBEDDING_BASE_URL at http://127.0.0.1:8092/v1.
"""

from __future__ import annotations

import argparse
import json
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CACHE: dict[tuple[str, str, str], list[float]] = {}
LOCK = threading.Lock()


def embed(upstream: str, body: dict[str, Any], texts: list[str]) -> list[list[float]]:
    request = urllib.request.Request(
        f"{upstream}/embeddings",
        # Floats upstream (the SDK asks for base64 by default and reads floats as well).
        data=json.dumps(
            {key: value for key, value in body.items() if key != "encoding_format"}
            | {"input": texts}
        ).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer none"},
    )
    with urllib.request.urlopen(request, timeout=600) as answer:
        data = json.loads(answer.read())["data"]
    return [item["embedding"] for item in sorted(data, key=lambda item: item["index"])]


def handler(upstreams: list[str], batch: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: object) -> None:
            return None

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            kind = str(body.get("input_type", ""))
            model = str(body.get("model", ""))
            with LOCK:  # one request at a time; its batches spread over the endpoints
                missing = sorted(
                    {text for text in texts if (model, kind, text) not in CACHE}, key=len
                )
                parts = [missing[start : start + batch] for start in range(0, len(missing), batch)]
                with ThreadPoolExecutor(len(upstreams)) as pool:
                    answers = pool.map(
                        lambda numbered: embed(
                            upstreams[numbered[0] % len(upstreams)], body, numbered[1]
                        ),
                        enumerate(parts),
                    )
                    for part, answer in zip(parts, answers, strict=True):
                        for text, vector in zip(part, answer, strict=True):
                            CACHE[(model, kind, text)] = vector
                vectors = [CACHE[(model, kind, text)] for text in texts]
            answer = json.dumps(
                {
                    "object": "list",
                    "model": model,
                    "data": [
                        {"object": "embedding", "index": index, "embedding": vector}
                        for index, vector in enumerate(vectors)
                    ],
                    "usage": {"prompt_tokens": 0, "total_tokens": 0},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--upstream",
        required=True,
        action="append",
        help="an endpoint's base URL (…/v1); several share the batches",
    )
    parser.add_argument("--port", type=int, default=8092)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(args.upstream, args.batch))
    print(f"embeddings cache on http://127.0.0.1:{args.port}/v1 -> {args.upstream}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
