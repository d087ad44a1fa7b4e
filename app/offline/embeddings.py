"""The offline model's embeddings: a hashed bag of words, deterministic and not semantic.

Each word (lowercased, letters and digits) adds +1 or -1 at one of DIMENSIONS positions chosen by
its hash; the sum is scaled to unit length. Two texts are close when they share words, so every
path of semantic search (the worker, the vectors, the fusion) runs with no network and no model,
with results a test can predict; a paraphrase with other words is NOT found (GET /info says
`"semantic": false`). Served in process (EMBEDDING_BASE_URL=offline) and by
scripts/offline_model.py at /v1/embeddings.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct

OFFLINE_EMBEDDING_MODEL = "offline-hash-1"
DIMENSIONS = 256
_WORD = re.compile(r"\w+", re.UNICODE)


def _slot(word: str) -> tuple[int, float]:
    digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % DIMENSIONS, 1.0 if (value >> 63) & 1 else -1.0


def embed_text(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    """The unit vector of `text`'s words (all zeros but the first for a text without words)."""
    vector = [0.0] * dimensions
    for word in _WORD.findall(text.lower()):
        slot, sign = _slot(word)
        vector[slot % dimensions] += sign
    norm = math.sqrt(sum(value * value for value in vector))
    if norm == 0.0:
        vector[0] = 1.0
        return vector
    return [value / norm for value in vector]


def _encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "base64":  # little-endian float32, as the OpenAI API encodes them
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector


def embeddings_body(body: object) -> tuple[int, dict[str, object]]:
    """The status and body answering an OpenAI `/v1/embeddings` request body."""
    if not isinstance(body, dict):
        return 400, {"error": {"message": "a JSON object is required"}}
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return 400, {"error": {"message": "input must be a string or a list of strings"}}
    encoding = str(body.get("encoding_format") or "float")
    return 200, {
        "object": "list",
        "model": str(body.get("model") or OFFLINE_EMBEDDING_MODEL),
        "data": [
            {"object": "embedding", "index": index, "embedding": _encoded(embed_text(t), encoding)}
            for index, t in enumerate(texts)
        ],
        "usage": {"prompt_tokens": 0, "total_tokens": 0},
    }
