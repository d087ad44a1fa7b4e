"""Recall of conversation search: how often the evidence of a question about a long conversation
is among the first 1, 5 and 10 results, searched the way the prompt tells the model to search
(the question's content words), against baselines computed in the same run over the same
messages.

Each person's sessions are stored as that person's conversations through
`ConversationService.create` and `append`, the calls a `/v1/chat` turn makes to store its
messages (the same rows, owner and index triggers; no model is involved, since the stored text
is the dataset's). Each question is then searched with its content words (its words less
`search_text.STOPWORDS`), and a question counts as recalled at k when any of its evidence
messages is among the first k results. Baselines over the person's same messages, with the same
words:

- `bm25s`: BM25 (the `bm25s` package, its defaults: Lucene's variant, k1 1.5, b 0.75), each
  message cut into the same words as the search cuts them, function words left out.
- `dense` and `bm25s+dense` (reciprocal rank fusion, k 60): only when EMBEDDING_BASE_URL and
  EMBEDDING_MODEL name an OpenAI-compatible `/v1/embeddings` (EMBEDDING_API_KEY,
  EMBEDDING_QUERY_PREFIX, EMBEDDING_DOCUMENT_PREFIX and EMBEDDING_INPUT_TYPE optional),
  embedded with the openai SDK here, cosine similarity.
- `service_hybrid` (SQLite, PostgreSQL): the service's own semantic search with those settings
  (EMBEDDING_DIMENSIONS too): its worker embeds the stored messages, and each question is
  searched as the route does it (app/embeddings/), with its time after the vector arrived.

Datasets: `--small` (default) is tests/data/recall_small.json, this repository's own; `--locomo
PATH` reads LoCoMo (Maharana et al., 2024, "Evaluating Very Long-Term Conversational Memory of
LLM Agents", github.com/snap-research/locomo): its `data/locomo10.json`, or the directory of
per-conversation files that its `data/locomo10.zip` holds. LoCoMo is not in this repository
(its repository states no licence for redistribution): download it and give its path.
Questions of LoCoMo's category 5 (adversarial: the answer is not in the conversation) are left
out, as are questions without evidence.

    .venv/bin/python scripts/bench/recall.py [--locomo PATH] [--dialects sqlite,postgres,mariadb]
                                             [--out recall]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import Engine, select  # noqa: E402

from app.conversations.search_text import STOPWORDS, word_spans  # noqa: E402
from app.conversations.service import ConversationService  # noqa: E402
from app.db.schema import conversation_messages, conversations  # noqa: E402

SMALL = Path(__file__).resolve().parents[2] / "tests" / "data" / "recall_small.json"
KS = (1, 5, 10)
RRF_K = 60


@dataclass(frozen=True)
class Question:
    text: str
    evidence: frozenset[str]


@dataclass
class Person:
    """One person's sessions (each a conversation of (turn id, speaker, text)) and questions."""

    id: str
    sessions: list[list[tuple[str, str, str]]]
    questions: list[Question]
    speaker: str = ""  # whose turns are the user's (the others are the assistant's)
    texts: dict[str, str] = field(default_factory=dict)  # turn id -> text

    def __post_init__(self) -> None:
        self.texts = {turn: text for session in self.sessions for turn, _who, text in session}


def load_small(path: Path = SMALL) -> list[Person]:
    """This repository's dataset: {"people": [{"id", "sessions": [[{"id", "speaker", "text"}]],
    "questions": [{"question", "evidence": [turn id]}]}]}."""
    people = []
    for raw in json.loads(path.read_text())["people"]:
        sessions = [
            [(turn["id"], turn["speaker"], turn["text"]) for turn in session]
            for session in raw["sessions"]
        ]
        questions = [Question(q["question"], frozenset(q["evidence"])) for q in raw["questions"]]
        people.append(Person(raw["id"], sessions, questions, "user"))
    return people


def _locomo_text(turn: dict[str, Any]) -> str:
    text = str(turn.get("text", ""))
    caption = turn.get("blip_caption")
    return f"{text} [shares a photo: {caption}]" if caption else text


def load_locomo(path: Path) -> list[Person]:
    """LoCoMo's samples (a JSON list, or one sample per file in a directory)."""
    if path.is_dir():
        samples = [json.loads(file.read_text()) for file in sorted(path.glob("*.json"))]
        names = [file.stem for file in sorted(path.glob("*.json"))]
    else:
        samples = json.loads(path.read_text())
        names = [str(sample.get("sample_id", index)) for index, sample in enumerate(samples)]
    people = []
    for name, sample in zip(names, samples, strict=True):
        conversation = sample.get("conversation", sample)
        numbers = sorted(
            int(key.split("_")[1])
            for key in conversation
            if key.startswith("session_") and key.count("_") == 1
        )
        sessions = [
            [
                (str(turn["dia_id"]), str(turn["speaker"]), _locomo_text(turn))
                for turn in conversation[f"session_{number}"]
            ]
            for number in numbers
            if conversation[f"session_{number}"]
        ]
        questions = [
            Question(str(qa["question"]), frozenset(str(e) for e in qa["evidence"]))
            for qa in sample["qa"]
            if qa.get("category") != 5 and qa.get("evidence")
        ]
        people.append(Person(name, sessions, questions, str(conversation.get("speaker_a", ""))))
    return people


def words(text: str) -> list[str]:
    """The search's words of `text` (lower case, runs of letters and digits), less function
    words: a message's tokens for BM25, and a question's content words."""
    found = (text[start:end].lower() for start, end in word_spans(text))
    return [word for word in found if word not in STOPWORDS]


def content_query(question: str) -> str:
    """The question as the prompt tells the model to search: its distinct content words."""
    return " ".join(dict.fromkeys(words(question)))


# -- storing ------------------------------------------------------------------------------------


def owner_of(person: Person) -> str:
    return f"recall-{person.id}"


async def _ingest(service: ConversationService, person: Person) -> dict[str, str]:
    """The person's sessions as conversations; turn id (the dataset's) by our turn id."""
    dataset_turn: dict[str, str] = {}
    for session in person.sessions:
        conversation: str | None = None
        for turn, speaker, text in session:
            ours = str(uuid.uuid4())
            dataset_turn[ours] = turn
            role = "user" if speaker == person.speaker else "assistant"
            if conversation is None:
                conversation = await service.create(owner_of(person), ours, text)
                assert conversation is not None, "the database refused a conversation"
            else:
                assert await service.append(conversation, ours, role, text)
    return dataset_turn


def ingest(engine: Engine, people: Sequence[Person]) -> dict[int, str]:
    """Every person's messages stored; the dataset's turn id by message id."""
    service = ConversationService(engine)

    async def store_all() -> dict[str, str]:
        mapping: dict[str, str] = {}
        for person in people:
            mapping.update(await _ingest(service, person))
        return mapping

    by_turn = asyncio.run(store_all())
    owners = [owner_of(person) for person in people]
    query = (
        select(conversation_messages.c.id, conversation_messages.c.turn_id)
        .join(conversations, conversations.c.id == conversation_messages.c.conversation_id)
        .where(conversations.c.user_id.in_(owners))
    )
    with engine.connect() as connection:
        return {row.id: by_turn[row.turn_id] for row in connection.execute(query)}


# -- rankings -----------------------------------------------------------------------------------

Ranker = Callable[[Person, Question], list[str]]


def lexical(engine: Engine, by_message: dict[int, str], timings: list[float]) -> Ranker:
    """The service's ranked search (`ConversationService.ranked`), its first 10 results."""
    service = ConversationService(engine)

    def rank(person: Person, question: Question) -> list[str]:
        began = time.perf_counter()
        hits = service.ranked(owner_of(person), content_query(question.text), max(KS))
        timings.append((time.perf_counter() - began) * 1000)
        return [by_message[hit.message_id] for hit in hits]

    return rank


def bm25_baseline() -> Ranker:
    """bm25s over the person's messages, the same words."""
    import bm25s

    indexes: dict[str, tuple[Any, list[str]]] = {}

    def rank(person: Person, question: Question) -> list[str]:
        if person.id not in indexes:
            turns = list(person.texts)
            retriever = bm25s.BM25()
            retriever.index([words(person.texts[turn]) or ["\u2205"] for turn in turns])
            indexes[person.id] = (retriever, turns)
        retriever, turns = indexes[person.id]
        known = [word for word in words(question.text) if word in retriever.vocab_dict]
        if not known:
            return []
        found, scores = retriever.retrieve([known], k=min(max(KS), len(turns)), show_progress=False)
        return [
            turns[int(index)] for index, score in zip(found[0], scores[0], strict=True) if score > 0
        ]

    return rank


def embedding_settings() -> dict[str, str] | None:
    base, model = os.environ.get("EMBEDDING_BASE_URL"), os.environ.get("EMBEDDING_MODEL")
    if not base or not model:
        return None
    return {
        "base_url": base,
        "model": model,
        "api_key": os.environ.get("EMBEDDING_API_KEY") or "none",
        "query_prefix": os.environ.get("EMBEDDING_QUERY_PREFIX", ""),
        "document_prefix": os.environ.get("EMBEDDING_DOCUMENT_PREFIX", ""),
        "input_type": os.environ.get("EMBEDDING_INPUT_TYPE", "false"),
    }


def dense_baseline(config: dict[str, str]) -> Ranker:
    """Cosine similarity of the endpoint's embeddings: the question (whole, with the query
    prefix) against each message (with the document prefix)."""
    import numpy as np
    from openai import OpenAI

    client = OpenAI(base_url=config["base_url"], api_key=config["api_key"])

    def embed(texts: list[str], kind: str = "document") -> Any:
        vectors = []
        typed = config["input_type"].lower() == "true"
        for start in range(0, len(texts), 64):
            batch = texts[start : start + 64]
            answer = client.embeddings.create(
                model=config["model"],
                input=batch,
                extra_body={"input_type": kind} if typed else None,
            )
            vectors.extend(item.embedding for item in answer.data)
        matrix = np.asarray(vectors, dtype=np.float32)
        return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)

    indexes: dict[str, tuple[Any, list[str]]] = {}

    def rank(person: Person, question: Question) -> list[str]:
        if person.id not in indexes:
            turns = list(person.texts)
            prefixed = [config["document_prefix"] + person.texts[turn] for turn in turns]
            indexes[person.id] = (embed(prefixed), turns)
        matrix, turns = indexes[person.id]
        query = embed([config["query_prefix"] + question.text], "query")[0]
        order = np.argsort(-(matrix @ query))[: max(KS)]
        return [turns[int(index)] for index in order]

    return rank


def service_hybrid(
    engine: Engine,
    by_message: dict[int, str],
    timings: list[float],
    rankings: list[dict[str, Any]] | None = None,
) -> Ranker:
    """The service's own semantic search (app/embeddings/): its worker embeds the stored
    messages through the configured endpoint (EMBEDDING_* settings), then each question is
    searched as a route searches it, the question's vector (whole, as the dense baseline) fused
    with the ranking of its content words; `timings` gets each search's time after the vector
    arrived (storage, nearest, lexical, fusion, snippets); `rankings`, when given, gets each
    question's evidence and its lexical and nearest lists (50 each), to study a fusion."""
    from app.conversations.search import ANY_PROJECT
    from app.embeddings.setup import build_embeddings
    from app.settings import load_settings

    settings = load_settings(database_url=engine.url.render_as_string(hide_password=False))
    embeddings = build_embeddings(settings, engine)
    if embeddings is None or embeddings.worker is None:
        raise SystemExit(f"{engine.dialect.name} stores no vectors")
    worker, semantic = embeddings.worker, embeddings.search

    async def embed_all() -> None:
        while not (await worker.cycle()).idle:
            pass

    # One event loop for the worker and the queries: the endpoint's client keeps connections
    # bound to the loop that opened them (a second loop found them closed, and every query
    # then fell back to words: `unavailable`, then `recent_failure`).
    loop = asyncio.new_event_loop()
    loop.run_until_complete(embed_all())
    service = ConversationService(engine)
    service.semantic = semantic

    def rank(person: Person, question: Question) -> list[str]:
        vector = loop.run_until_complete(semantic.query_vector(question.text))
        began = time.perf_counter()
        found = service._search(
            owner_of(person), content_query(question.text), max(KS), None, ANY_PROJECT, vector
        )
        timings.append((time.perf_counter() - began) * 1000)
        if rankings is not None and vector is not None:  # both lists, for fusion studies
            lexical = service.ranked(owner_of(person), content_query(question.text), 50)
            dense = semantic.nearest(owner_of(person), vector) or []
            rankings.append(
                {
                    "person": person.id,
                    "evidence": sorted(question.evidence),
                    "lexical": [by_message[hit.message_id] for hit in lexical],
                    "dense": [by_message[message_id] for message_id in dense],
                }
            )
        return [by_message[hit.message_id] for hit in found]

    return rank


def fused(*rankers: Ranker) -> Ranker:
    """Reciprocal rank fusion (k 60) of the rankers' lists."""

    def rank(person: Person, question: Question) -> list[str]:
        scores: dict[str, float] = {}
        for ranker in rankers:
            for place, turn in enumerate(ranker(person, question)):
                scores[turn] = scores.get(turn, 0.0) + 1.0 / (RRF_K + place + 1)
        return sorted(scores, key=lambda turn: -scores[turn])[: max(KS)]

    return rank


def cached(ranker: Ranker) -> Ranker:
    memo: dict[tuple[str, str], list[str]] = {}

    def rank(person: Person, question: Question) -> list[str]:
        key = (person.id, question.text)
        if key not in memo:
            memo[key] = ranker(person, question)
        return memo[key]

    return rank


def recall(people: Sequence[Person], ranker: Ranker) -> dict[str, float]:
    """Share of questions with an evidence message in the first k, for each k; and with any
    result at all."""
    hits = dict.fromkeys(KS, 0)
    answered = total = 0
    for person in people:
        for question in person.questions:
            ranked = ranker(person, question)
            total += 1
            answered += bool(ranked)
            for k in KS:
                hits[k] += bool(question.evidence & set(ranked[:k]))
    figures = {f"recall@{k}": round(hits[k] / total, 4) if total else 0.0 for k in KS}
    return {**figures, "any_result": round(answered / total, 4) if total else 0.0}


def evaluate(
    engine: Engine, people: Sequence[Person], rankings: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Recall of the service's search and of the baselines over the same stored messages."""
    began = time.perf_counter()
    by_message = ingest(engine, people)
    ingest_seconds = time.perf_counter() - began
    timings: list[float] = []
    search = cached(lexical(engine, by_message, timings))
    bm25 = cached(bm25_baseline())
    figures: dict[str, Any] = {
        "messages": sum(len(person.texts) for person in people),
        "questions": sum(len(person.questions) for person in people),
        "ingest_seconds": round(ingest_seconds, 1),
        "search": recall(people, search),
        "bm25s": recall(people, bm25),
    }
    config = embedding_settings()
    if config is not None:
        dense = cached(dense_baseline(config))
        figures["embedding_model"] = config["model"]
        figures["dense"] = recall(people, dense)
        figures["bm25s+dense"] = recall(people, fused(bm25, dense))
        figures["search+dense"] = recall(people, fused(search, dense))
        if engine.dialect.name in ("sqlite", "postgresql"):
            hybrid_timings: list[float] = []
            hybrid = cached(service_hybrid(engine, by_message, hybrid_timings, rankings))
            figures["service_hybrid"] = recall(people, hybrid)
            from scripts.bench._common import percentile as pct

            figures["service_hybrid_ms"] = {
                "p50": round(pct(hybrid_timings, 0.5), 2),
                "p95": round(pct(hybrid_timings, 0.95), 2),
            }
    from scripts.bench._common import percentile

    figures["search_ms"] = {
        "p50": round(percentile(timings, 0.5), 2),
        "p95": round(percentile(timings, 0.95), 2),
    }
    return figures


@contextmanager
def database(dialect: str) -> Iterator[Engine]:
    from scripts.bench.search import database as bench_database

    with bench_database(dialect) as engine:
        yield engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo", type=Path, help="LoCoMo's locomo10.json (or its folder)")
    parser.add_argument("--dialects", default="sqlite,postgres,mariadb")
    parser.add_argument("--out", default=None, help="results/OUT.json (default: recall_DATASET)")
    parser.add_argument(
        "--rankings",
        action="store_true",
        help="also write each question's lexical and nearest lists (results/OUT_DIALECT_rankings)",
    )
    args = parser.parse_args()
    people = load_locomo(args.locomo) if args.locomo else load_small()
    dataset = "locomo" if args.locomo else "small"
    from scripts.bench._common import write_results

    results: dict[str, Any] = {"dataset": dataset}
    for dialect in args.dialects.split(","):
        rankings: list[dict[str, Any]] | None = [] if args.rankings else None
        with database(dialect) as engine:
            results[dialect] = evaluate(engine, people, rankings)
        if rankings:
            name = f"{args.out or f'recall_{dataset}'}_{dialect}_rankings"
            print("wrote", write_results(name, {"questions": rankings}))
        row = results[dialect]
        print(f"{dialect}: {row['messages']} messages, {row['questions']} questions")
        for name in ("search", "bm25s", "dense", "bm25s+dense", "search+dense", "service_hybrid"):
            if name in row:
                print(f"  {name:13} " + "  ".join(f"{k} {v:.3f}" for k, v in row[name].items()))
        print(f"  search p50 {row['search_ms']['p50']} ms, p95 {row['search_ms']['p95']} ms")
        print("wrote", write_results(args.out or f"recall_{dataset}", results))


if __name__ == "__main__":
    main()
