"""Plant unique sentinels in every kind of a person's content, and scan every table and every
column of the database (search engines' own storage included) for them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
from sqlalchemy import URL, Engine, insert, inspect, make_url, text

from app.conversations import repository as transcripts
from app.db.schema import (
    conversation_messages,
    owner_token,
    postgres_owner_lexeme,
    web_sessions,
)
from app.memory.projects import Scope
from app.memory.provenance import Provenance
from app.memory.rules import Operation
from app.memory.service import MemoryService
from app.sessions.keys import session_hash
from tests.support.databases import MARIADB_ADMIN_URL

# Needles are the tail of each planted value: FTS5 stores a term after the prefix it shares with
# the term before it, so only a sentinel's random tail is sure to be stored whole.
TAIL = 12


def sentinel(kind: str) -> str:
    return f"zq{kind}{uuid.uuid4().hex}"


def tail(value: str) -> str:
    return value.lower()[-TAIL:]


@dataclass
class Planted:
    """What was stored for one subject: every needle by name, grouped by what removes it."""

    subject: str
    memory: dict[str, str] = field(default_factory=dict)  # memory, history, proposals
    projects: dict[str, str] = field(default_factory=dict)  # a project's name and id
    kept_conversation: dict[str, str] = field(default_factory=dict)
    deleted_conversation: dict[str, str] = field(default_factory=dict)
    identity: dict[str, str] = field(default_factory=dict)
    conversation_id: str = ""  # the conversation to delete alone

    def all(self) -> dict[str, str]:
        return {
            **self.memory,
            **self.projects,
            **self.kept_conversation,
            **self.deleted_conversation,
            **self.identity,
        }


def _add(target: str, content: str) -> list[Operation]:
    return [Operation(target=target, action="add", content=content)]  # type: ignore[arg-type]


def _conversation(
    engine: Engine, subject: str, stamp: datetime | None = None, project_id: str | None = None
) -> dict[str, str]:
    conversation_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
    title, question, answer = sentinel("title"), sentinel("question"), sentinel("answer")
    with engine.begin() as connection:
        transcripts.create(
            connection,
            conversation_id,
            subject,
            f"About {title}",
            stamp=stamp,
            project_id=project_id,
        )
        transcripts.add_message(
            connection, conversation_id, turn_id, "user", f"Tell me {question} now", "complete"
        )
        transcripts.add_message(
            connection, conversation_id, turn_id, "assistant", f"Here: {answer}.", "complete"
        )
    return {
        "conversation_id": conversation_id,
        "turn_id": turn_id,
        "title": title,
        "question": question,
        "answer": answer,
    }


def _browser_session(engine: Engine, subject: str) -> None:
    """A signed-in browser of the person (its row names them; its tokens are encrypted)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    with engine.begin() as connection:
        connection.execute(
            insert(web_sessions).values(
                id_hash=session_hash(f"cookie-of-{subject}"),
                subject=subject,
                roles="[]",
                created_at=now,
                expires_at=now + timedelta(days=1),
            )
        )


def plant(engine: Engine, subject: str) -> Planted:
    """Memory (both documents), history (also of an entry no longer in memory), a pending
    proposal, the save mode, two conversations with titles and messages (so the search index
    holds their words and the owner's token); a project (its name), its document, its history
    (also of an entry no longer in it), a proposal in it and a conversation in it."""
    planted = Planted(subject)
    kept = _conversation(engine, subject)
    deleted = _conversation(engine, subject)
    service = MemoryService(engine)
    project_name = sentinel("projectname")
    project = service.create_project(subject, f"Client {project_name}")
    in_project = _conversation(engine, subject, project_id=project.id)
    scope = Scope(project.id)
    project_doc, project_gone, project_proposed = (
        sentinel(k) for k in ("projectdoc", "projectgone", "projectproposed")
    )
    service.commit_operations(subject, [_add("project", f"Uses {project_gone}")], scope=scope)
    service.commit_operations(
        subject,
        [[Operation("project", "replace", match=project_gone, content=f"Uses {project_doc}")]],
        scope=scope,
    )
    memory, fact, gone, proposed = (sentinel(k) for k in ("memory", "fact", "gone", "proposed"))
    turn = Provenance("turn", kept["turn_id"], kept["conversation_id"])
    first = service.commit_operations(
        subject, [_add("memory", f"Project {memory}"), _add("user", f"Likes {gone}")]
    )
    service.commit_operations(
        subject,
        [[Operation(target="user", action="replace", match=gone, content=f"Likes {fact}")]],
        provenance=turn,
    )
    service.set_save_mode(subject, "ask")
    proposal = service.commit_operations(
        subject, [_add("memory", f"Maybe {proposed}")], provenance=turn, may_propose=True
    )
    assert proposal.proposal_id is not None and first.change_id is not None
    in_scope = service.commit_operations(
        subject,
        [_add("project", f"Maybe {project_proposed}")],
        provenance=Provenance("turn", in_project["turn_id"], in_project["conversation_id"]),
        may_propose=True,
        scope=Scope(project.id, owner=False),
    )
    assert in_scope.proposal_id is not None
    planted.memory = {
        "project_document": project_doc,
        "project_history_only": project_gone,
        "project_proposal": project_proposed,
        "project_proposal_id": in_scope.proposal_id,
        "memory": memory,
        "fact": fact,
        "history_only": gone,
        "proposal": proposed,
        "change_id": first.change_id,
        "proposal_id": proposal.proposal_id,
    }
    planted.kept_conversation = {
        **kept,
        **{f"project_{key}": value for key, value in in_project.items()},
    }
    planted.projects = {"project_name": project_name, "project_id": project.id}
    planted.deleted_conversation = {f"deleted_{key}": value for key, value in deleted.items()}
    planted.conversation_id = deleted["conversation_id"]
    _browser_session(engine, subject)
    planted.identity = {
        "subject": subject,
        "fts_owner_token": owner_token(subject),
        "postgres_owner_lexeme": postgres_owner_lexeme(subject),
    }
    _embed(engine)
    return planted


def _embed(engine: Engine) -> None:
    """Semantic search's rows for every message: a vector (the offline model's) and, under
    another model, a queued job, so the scan reads both tables (app/embeddings/store.py)."""
    from app.embeddings import store
    from app.offline.embeddings import embed_text

    stamp = transcripts.now()
    with engine.begin() as connection:
        store.discover(connection, 0, 10_000, "scan-model", stamp)
        held = store.claim(connection, "scan", stamp, timedelta(minutes=5), 10_000)
        made = [(job, np.asarray(embed_text(job.content), dtype=np.float32)) for job in held]
        store.save(connection, "scan", made, "scan-model", "bytes", stamp)
        store.discover(connection, 0, 10_000, "scan-model-2", stamp)


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("latin-1")
    return "" if value is None else str(value)


def _quote(engine: Engine, name: str) -> str:
    return engine.dialect.identifier_preparer.quote(name)


def _rows(engine: Engine) -> Iterator[tuple[str, str]]:
    """(table, one row as text) for every row of every table, search storage included."""
    inspector = inspect(engine)
    dialect = engine.dialect.name
    with engine.connect() as connection:
        for table in inspector.get_table_names():
            if dialect == "postgresql":  # the whole row as text: tsvector columns included
                query = f"SELECT CAST(t AS text) FROM {_quote(engine, table)} AS t"
            else:
                columns = [_quote(engine, c["name"]) for c in inspector.get_columns(table)]
                query = f"SELECT {', '.join(columns)} FROM {_quote(engine, table)}"
            for row in connection.exec_driver_sql(query):
                yield table, " ".join(_text(value) for value in row).lower()
        if dialect in ("mysql", "mariadb"):
            yield from _innodb_fulltext(connection)
        connection.rollback()


def refuse_shared_server(url: URL) -> None:
    """Global variables are set only on a server a test started (the `own_mariadb` mark): the
    shared server on MARIADB_ADMIN_URL serves every other test and client."""
    shared = make_url(MARIADB_ADMIN_URL)
    if (url.host, url.port or 3306) == (shared.host, shared.port or 3306):
        raise AssertionError(
            "this sets a MariaDB global variable: mark the test `own_mariadb` (tests/conftest.py)"
        )


def _innodb_fulltext(connection: object) -> Iterator[tuple[str, str]]:
    """The words InnoDB's FULLTEXT index holds (its cache and its auxiliary tables), readable
    through INFORMATION_SCHEMA once `innodb_ft_aux_table` names the table."""
    from sqlalchemy import Connection

    assert isinstance(connection, Connection)
    refuse_shared_server(connection.engine.url)
    database = connection.exec_driver_sql("SELECT DATABASE()").scalar()
    connection.exec_driver_sql(
        f"SET GLOBAL innodb_ft_aux_table = '{database}/{conversation_messages.name}'"
    )
    for view in ("INNODB_FT_INDEX_CACHE", "INNODB_FT_INDEX_TABLE"):
        for (word,) in connection.exec_driver_sql(f"SELECT word FROM information_schema.{view}"):
            yield f"innodb:{view}", str(word).lower()


def scan(engine: Engine, needles: Mapping[str, str]) -> list[str]:
    """`table:needle` for each needle found anywhere (a needle is found by its tail)."""
    tails = {name: tail(value) for name, value in needles.items()}
    hits: set[str] = set()
    for table, row in _rows(engine):
        hits.update(f"{table}:{name}" for name, needle in tails.items() if needle in row)
    return sorted(hits)


@contextmanager
def fulltext_optimizable(engine: Engine) -> Iterator[None]:
    """On MariaDB, the server setting docs/privacy.md asks for: OPTIMIZE TABLE works on the
    FULLTEXT index alone, so the service runs it after deleting messages."""
    if engine.dialect.name not in ("mysql", "mariadb"):
        yield
        return
    refuse_shared_server(engine.url)
    with engine.connect() as connection:
        before = connection.exec_driver_sql(
            "SELECT @@GLOBAL.innodb_optimize_fulltext_only"
        ).scalar()
        connection.exec_driver_sql("SET GLOBAL innodb_optimize_fulltext_only = ON")
    try:
        yield
    finally:
        with engine.connect() as connection:
            connection.exec_driver_sql(
                f"SET GLOBAL innodb_optimize_fulltext_only = {1 if before else 0}"
            )


def text_query(engine: Engine, sql: str) -> list[tuple[object, ...]]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text(sql))]
