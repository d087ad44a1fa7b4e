"""The conversation list as a person keeps it (issue 54): pinned conversations first, archived
ones out of the list but in their own list and in search, and pages by cursor that never repeat
or skip a conversation when others start between two pages. SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from tests.support.apps import api_settings
from tests.support.scripted import ScriptedModel, Text, serve_with_model
from tests.support.sse import post_chat
from tests.support.tokens import dev_auth

ALICE = dev_auth("alice")
# Generous: on a loaded two-core machine a request can take seconds, which is load, not a fault.
TIMEOUT = 30


def start(url: str, message: str) -> str:
    _, events = post_chat(url, ALICE, {"message": message})
    return str(events[0].data["conversation_id"])


def listed(url: str, **params: Any) -> dict[str, Any]:
    response = httpx.get(f"{url}/v1/conversations", params=params, headers=ALICE, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def ids(body: dict[str, Any]) -> list[str]:
    return [conversation["id"] for conversation in body["conversations"]]


def patch(
    url: str, conversation_id: str, body: dict[str, Any], who: str = "alice"
) -> httpx.Response:
    return httpx.patch(
        f"{url}/v1/conversations/{conversation_id}",
        json=body,
        headers=dev_auth(who),
        timeout=TIMEOUT,
    )


def test_pages_follow_the_list_and_stay_stable_while_conversations_start(
    engine: Engine, db_url: str
) -> None:
    """`limit` pages the list in its order, `next` leads to the following page (null after
    the last); a conversation started between two pages goes to the top of the list and
    neither repeats nor displaces what the next page holds; without `limit` the list is whole
    (and carries no `next`)."""
    model = ScriptedModel([Text("ok")] * 7)
    with serve_with_model(api_settings(db_url), model) as url:
        started = [start(url, f"conversation {number}") for number in range(5)]
        newest_first = started[::-1]
        first = listed(url, limit=2)
        newcomer = start(url, "started between two pages")
        second = listed(url, limit=2, before=first["next"])
        third = listed(url, limit=2, before=second["next"])
        whole = listed(url)
        another = start(url, "started after the last page")
        past_the_end = listed(url, limit=2, before=third["next"]) if third["next"] else None
    assert ids(first) + ids(second) + ids(third) == newest_first
    assert (first["next"] is not None, second["next"] is not None, third["next"]) == (
        True,
        True,
        None,
    )
    assert past_the_end is None
    assert ids(whole) == [newcomer, *newest_first] and "next" not in whole
    assert another not in ids(whole)
    model.assert_done()


def test_pinned_first_archived_apart_and_still_searchable(engine: Engine, db_url: str) -> None:
    """A pinned conversation lists first (and pages keep that order); an archived one leaves
    the list, lists under `archived=true`, is still found by search and read by id; both are
    undone by the same PATCH, and neither changes the conversation's `updated_at`."""
    model = ScriptedModel([Text("ok")] * 4)
    with serve_with_model(api_settings(db_url), model) as url:
        oldest, middle, archived, newest = (
            start(url, text) for text in ("oldest", "middle", "zanzibar trip", "newest")
        )
        before = {c["id"]: c for c in listed(url)["conversations"]}
        pinned = patch(url, oldest, {"pinned": True})
        filed = patch(url, archived, {"archived": True})
        order = ids(listed(url))
        paged = listed(url, limit=1)
        paged_rest = listed(url, limit=5, before=paged["next"])
        archive = listed(url, archived="true")
        found = httpx.get(
            f"{url}/v1/conversations/search",
            params={"q": "zanzibar"},
            headers=ALICE,
            timeout=TIMEOUT,
        ).json()
        read = httpx.get(f"{url}/v1/conversations/{archived}", headers=ALICE, timeout=TIMEOUT)
        restored = patch(url, archived, {"archived": False, "pinned": False})
        unpinned = patch(url, oldest, {"pinned": False})
        after = ids(listed(url))
    assert pinned.status_code == 200 and pinned.json()["pinned"] is True
    assert filed.status_code == 200 and filed.json()["archived"] is True
    assert pinned.json()["updated_at"] == before[oldest]["updated_at"]
    assert filed.json()["updated_at"] == before[archived]["updated_at"]
    assert order == [oldest, newest, middle]
    assert ids(paged) + ids(paged_rest) == order and paged_rest["next"] is None
    assert ids(archive) == [archived]
    assert [result["conversation_id"] for result in found["results"]] == [archived]
    assert read.status_code == 200
    assert restored.json()["archived"] is False and unpinned.json()["pinned"] is False
    assert after == [newest, archived, middle, oldest]
    model.assert_done()


@pytest.mark.parametrize(
    ("query", "code"),
    [
        pytest.param({"before": "not-a-cursor"}, "invalid_cursor", id="garbage-cursor"),
        pytest.param({"before": "W3RydWVd"}, "invalid_cursor", id="cursor-of-wrong-shape"),
        pytest.param({"limit": 0}, "invalid_request", id="limit-zero"),
        pytest.param({"limit": 101}, "invalid_request", id="limit-over-100"),
    ],
)
def test_a_bad_page_request_is_a_clear_422(
    engine: Engine, db_url: str, query: dict[str, Any], code: str
) -> None:
    """A cursor this service did not hand out, or a limit outside 1-100, answers 422 with its
    code; nothing else happens."""
    with serve_with_model(api_settings(db_url), ScriptedModel([])) as url:
        response = httpx.get(
            f"{url}/v1/conversations", params=query, headers=ALICE, timeout=TIMEOUT
        )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == code


def test_pin_and_archive_are_the_owners_and_take_booleans(engine: Engine, db_url: str) -> None:
    """Another user's PATCH is a 404 and changes nothing; a flag that is not a boolean, or an
    empty change, is a 422."""
    model = ScriptedModel([Text("ok")])
    with serve_with_model(api_settings(db_url), model) as url:
        mine = start(url, "mine")
        theirs = patch(url, mine, {"pinned": True, "archived": True}, who="bob")
        not_boolean = patch(url, mine, {"pinned": "yes"})
        empty = patch(url, mine, {})
        still = listed(url)["conversations"]
    assert theirs.status_code == 404
    assert (not_boolean.status_code, empty.status_code) == (422, 422)
    assert [(c["id"], c["pinned"], c["archived"]) for c in still] == [(mine, False, False)]
    model.assert_done()
