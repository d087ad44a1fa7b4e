"""What the database cannot or must not see is stopped at the boundary, on every dialect; what
the API accepts, every column holds whole.

- A subject outside the rule (1-128 characters, not only whitespace, no control characters or
  lone surrogates) is `401 invalid_token` before any statement runs: never a 503 from a
  database that chokes on NUL (PostgreSQL) and never a row.
- A conversation id not shaped like ours (NUL, control characters, another case, padding) is
  404 without a query.
- A message with NUL is refused with 422 and nothing is stored; other control characters and
  the longest message of 4-byte characters are stored exactly. A model's answer with NUL
  keeps its one assistant row (NUL shown and stored as U+FFFD).
- Timestamps in answers are ISO 8601 in UTC with a `Z`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import Engine

from app.conversations.titles import TITLE_CHARS
from app.main import create_app
from app.memory.rules import LIMITS
from tests.support.apps import api_settings, memory_rows
from tests.support.memory_db import StatementLog, watch
from tests.support.scripted import ScriptedModel, Text
from tests.support.server import live_server
from tests.support.sse import first, post_chat, text_of
from tests.support.tokens import dev_auth

MAX_MESSAGE_CHARS = 32_000  # the default, which the API contract names
EMOJI = "\U0001f600"  # 4 bytes in UTF-8, a surrogate pair in UTF-16


@dataclass
class Service:
    url: str
    engine: Engine  # the service's own engine, to see which statements a request ran

    @contextmanager
    def statements(self) -> Iterator[StatementLog]:
        with watch(self.engine) as log:
            yield log


@pytest.fixture
def service(engine: Engine, db_url: str) -> Iterator[Service]:
    app = create_app(api_settings(db_url, max_message_chars=MAX_MESSAGE_CHARS))
    with live_server(app) as url:
        yield Service(url, app.state.runtime.engine)


BAD_SUBJECTS = [
    pytest.param("ali\x00ce", id="nul"),
    pytest.param("\x00", id="only-nul"),
    pytest.param("alice\n", id="newline"),
    pytest.param("\talice", id="tab"),
    pytest.param("ali\x1bce", id="escape"),
    pytest.param("ali\x7fce", id="del"),
    pytest.param("ali\x85ce", id="c1-next-line"),
    pytest.param("ali\ud800ce", id="lone-surrogate"),
    pytest.param("a" * 129, id="129-characters"),
    pytest.param("   ", id="only-spaces"),
]
ROUTES = [
    ("GET", "/v1/memory", None),
    ("DELETE", "/v1/memory", None),
    (
        "POST",
        "/v1/memory/operations",
        {"operations": [{"target": "user", "action": "add", "content": "The user likes tea."}]},
    ),
    ("GET", "/v1/conversations", None),
    ("POST", "/v1/chat", {"message": "hello"}),
]


@pytest.mark.parametrize("subject", BAD_SUBJECTS)
def test_a_subject_outside_the_rule_is_401_before_any_statement(
    service: Service, subject: str
) -> None:
    """Every authenticated route answers 401 invalid_token with WWW-Authenticate; the service
    runs no statement at all for the request and stores nothing."""
    with httpx.Client(base_url=service.url, timeout=30) as client, service.statements() as log:
        for method, path, body in ROUTES:
            response = client.request(method, path, headers=dev_auth(subject), json=body)
            assert response.status_code == 401, (method, path, response.text)
            assert response.json()["error"]["code"] == "invalid_token"
            assert response.headers["www-authenticate"] == "Bearer"
    assert log.statements == []
    assert memory_rows(service.engine) == 0


@pytest.mark.parametrize(
    "subject",
    [
        pytest.param("a" * 128, id="128-characters"),
        pytest.param(EMOJI * 128, id="128-four-byte-characters"),
        pytest.param("\U0001d49cli\u00e7e \u0394", id="mixed-scripts-and-inner-space"),
    ],
)
def test_a_subject_at_the_limits_is_an_ordinary_user(service: Service, subject: str) -> None:
    """128 characters, 4-byte ones included, fit every dialect's column and round-trip."""
    headers = dev_auth(subject)
    fact = {"target": "user", "action": "add", "content": "The user likes tea."}
    with httpx.Client(base_url=service.url, timeout=30) as client:
        added = client.post("/v1/memory/operations", headers=headers, json={"operations": [fact]})
        assert added.status_code == 200, added.text
        assert client.get("/v1/memory", headers=headers).json()["user"]["entries"] == [
            "The user likes tea."
        ]
    assert memory_rows(service.engine, subject) == 1


@pytest.mark.parametrize("subject", BAD_SUBJECTS)
def test_dev_tokens_are_not_minted_for_a_subject_outside_the_rule(
    service: Service, subject: str
) -> None:
    """POST /dev/token applies the same rule as the token check: 422, and no token."""
    # json.dumps escapes a lone surrogate as `\ud800`, as any client may send it.
    response = httpx.post(
        f"{service.url}/dev/token",
        content=json.dumps({"sub": subject}),
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 422, response.text
    assert "access_token" not in response.json()


def test_conversation_ids_not_shaped_like_ours_are_404_without_a_query(service: Service) -> None:
    """NUL, control characters, another case or padding around a real id: reading, deleting
    and continuing answer 404 and touch no conversation table; the real one is intact."""
    headers = dev_auth("alice")
    _, events = post_chat(service.url, headers, {"message": "keep this"})
    real = first(events, "start").data["conversation_id"]
    shapes = [
        real.upper(),
        real + " ",
        " " + real,
        real[:-1] + "\x00",
        real + "\x07",
        "\x00",
        real.replace("-", ""),
        real + "\n",
    ]
    with httpx.Client(base_url=service.url, timeout=30) as client, service.statements() as log:
        for shape in shapes:
            path = "/v1/conversations/" + quote(shape, safe="")
            assert client.get(path, headers=headers).status_code == 404, repr(shape)
            assert client.delete(path, headers=headers).status_code == 404, repr(shape)
            turn, _ = post_chat(service.url, headers, {"message": "hi", "conversation_id": shape})
            assert turn.status_code == 404, repr(shape)
            assert turn.json()["error"]["code"] == "not_found"
    touched = [s for s in log.statements if "amem_conversation" in s.lower()]
    assert touched == []
    kept = httpx.get(f"{service.url}/v1/conversations/{real}", headers=headers, timeout=30)
    assert [m["content"] for m in kept.json()["messages"]][:1] == ["keep this"]


def test_a_message_with_nul_is_refused_and_nothing_is_stored(service: Service) -> None:
    """422 with a message naming NUL, for a new and for an existing conversation; no
    conversation is created and the existing one keeps its messages."""
    headers = dev_auth("alice")
    refused, _ = post_chat(service.url, headers, {"message": "hello\x00world"})
    assert refused.status_code == 422, refused.text
    assert "NUL" in refused.json()["error"]["message"]
    listed = httpx.get(f"{service.url}/v1/conversations", headers=headers, timeout=30).json()
    assert listed == {"conversations": []}

    _, events = post_chat(service.url, headers, {"message": "first"})
    conversation_id = first(events, "start").data["conversation_id"]
    again, _ = post_chat(
        service.url, headers, {"message": "\x00", "conversation_id": conversation_id}
    )
    assert again.status_code == 422
    body = httpx.get(
        f"{service.url}/v1/conversations/{conversation_id}", headers=headers, timeout=30
    ).json()
    assert [m["content"] for m in body["messages"]][:1] == ["first"]
    assert len(body["messages"]) == 2  # the first turn's question and answer only


def test_other_control_characters_in_a_message_are_stored_exactly(service: Service) -> None:
    """Everything but NUL is text every dialect stores: the transcript gives it back as sent."""
    message = "bell\x07 esc\x1b[31m tab\t crlf\r\n del\x7f next-line\x85 zwj\u200d end"
    headers = dev_auth("alice")
    response, events = post_chat(service.url, headers, {"message": message})
    assert response.status_code == 200
    conversation_id = first(events, "start").data["conversation_id"]
    assert conversation_id is not None
    body = httpx.get(
        f"{service.url}/v1/conversations/{conversation_id}", headers=headers, timeout=30
    ).json()
    assert body["messages"][0]["content"] == message


def test_the_longest_message_of_four_byte_characters_is_kept_whole(service: Service) -> None:
    """MAX_MESSAGE_CHARS emoji (128,000 bytes of UTF-8, twice MariaDB's TEXT) are stored and
    read back unchanged, title included; one more character is 413 and stores nothing."""
    headers = dev_auth("alice")
    message = EMOJI * MAX_MESSAGE_CHARS
    response, events = post_chat(service.url, headers, {"message": message}, timeout=60)
    assert response.status_code == 200
    conversation_id = first(events, "start").data["conversation_id"]
    assert conversation_id is not None, "the transcript was dropped"
    assert first(events, "done").data["finish_reason"] == "stop"
    body = httpx.get(
        f"{service.url}/v1/conversations/{conversation_id}", headers=headers, timeout=30
    ).json()
    assert body["messages"][0]["content"] == message
    assert body["title"] == EMOJI * TITLE_CHARS  # one long word: cut at the title's size

    too_long, _ = post_chat(service.url, headers, {"message": message + EMOJI})
    assert too_long.status_code == 413
    listed = httpx.get(f"{service.url}/v1/conversations", headers=headers, timeout=30).json()
    assert [c["id"] for c in listed["conversations"]] == [conversation_id]


@pytest.mark.parametrize("target", ["user", "memory"])
def test_memory_holds_four_byte_characters_up_to_its_limit(service: Service, target: str) -> None:
    """A document filled to its character limit with 4-byte characters is stored whole."""
    prefix = "The user likes "
    entry = prefix + "\U0001f375" * (LIMITS[target] - len(prefix))
    headers = dev_auth("alice")
    with httpx.Client(base_url=service.url, timeout=30) as client:
        added = client.post(
            "/v1/memory/operations",
            headers=headers,
            json={"operations": [{"target": target, "action": "add", "content": entry}]},
        )
        assert added.status_code == 200, added.text
        state = client.get("/v1/memory", headers=headers).json()[target]
    assert state["entries"] == [entry]
    assert state["characters"] == LIMITS[target]


ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def test_conversation_timestamps_are_iso_8601_utc_with_a_zone(service: Service) -> None:
    """Every `created_at`/`updated_at` in the listing and in a conversation reads like
    `2026-12-01T07:43:00.903074Z` and is the UTC moment the turn happened."""
    headers = dev_auth("alice")
    before = datetime.now(UTC).replace(microsecond=0)
    _, events = post_chat(service.url, headers, {"message": "what time is it?"})
    after = datetime.now(UTC)
    conversation_id = first(events, "start").data["conversation_id"]
    with httpx.Client(base_url=service.url, timeout=30) as client:
        summary = client.get("/v1/conversations", headers=headers).json()["conversations"][0]
        body = client.get(f"/v1/conversations/{conversation_id}", headers=headers).json()
    stamps = [
        summary["created_at"],
        summary["updated_at"],
        body["created_at"],
        body["updated_at"],
        *(m["created_at"] for m in body["messages"]),
    ]
    for stamp in stamps:
        assert ISO_UTC.fullmatch(stamp), stamp
        moment = datetime.fromisoformat(stamp)
        assert moment.utcoffset() is not None and moment.utcoffset().total_seconds() == 0
        assert before <= moment <= after, (stamp, before, after)


@pytest.mark.parametrize(
    "odd", [pytest.param("\x00", id="nul"), pytest.param("\ud800", id="lone-surrogate")]
)
def test_a_model_answer_with_unstorable_characters_keeps_its_one_row(
    engine: Engine, db_url: str, odd: str
) -> None:
    """The user cannot send NUL or a lone surrogate, but a model can answer with them.
    PostgreSQL cannot store NUL in text and no dialect stores a lone surrogate, so each is
    shown and stored as U+FFFD on every dialect: the turn keeps its one `complete` assistant
    row (never a silently dropped one), and what the client was streamed and what the
    transcript holds agree."""
    model = ScriptedModel([Text(f"before{odd}after")])
    app = create_app(api_settings(db_url), model_transport=model.transport())
    headers = dev_auth("alice")
    with live_server(app) as url:
        response, events = post_chat(url, headers, {"message": "say something odd"})
        assert response.status_code == 200
        conversation_id = first(events, "start").data["conversation_id"]
        body = httpx.get(
            f"{url}/v1/conversations/{conversation_id}", headers=headers, timeout=30
        ).json()
    answer = [(m["status"], m["content"]) for m in body["messages"] if m["role"] == "assistant"]
    assert answer == [("complete", "before\ufffdafter")]
    assert text_of(events) == "before\ufffdafter"
    model.assert_done()
