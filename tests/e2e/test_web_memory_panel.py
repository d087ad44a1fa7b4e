"""The memory panel in Debian's Chromium, at laptop and phone size: edits through the memory API,
one status message at a time, "already saved" when the API's answer shows nothing changed, and
the switched-off and unavailable states.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import create_engine, inspect, text

from app.db.schema import audit_log, limit_counters, web_sessions
from app.main import create_app
from tests.e2e.conftest import e2e_settings, memory_of, screenshot, sqlite_file
from tests.e2e.web import (
    ALREADY_SAVED,
    LAST_TURN_SAVED,
    REMEMBER,
    SAVED_ENTRY,
    note_entries,
    open_memory,
    send,
    settled,
    sign_in,
    user_entries,
)
from tests.support.server import live_server

pytestmark = pytest.mark.browser


def notices(page: Page) -> list[str]:
    """Every message the memory panel shows right now (there must never be more than one)."""
    texts: list[str] = page.locator("#memory-notice p").evaluate_all(
        "elements => elements.map((element) => element.textContent).filter(Boolean)"
    )
    return texts


def test_entries_can_be_added_edited_and_removed(server: str, page: Page, screen: str) -> None:
    """The panel's edits go through the memory API and show the state it answered; each result
    replaces the previous message instead of piling up under it."""
    token = sign_in(page, server, f"dave-{screen}")
    open_memory(page)

    page.get_by_label("Add to “About you”").fill("Works at night")
    page.get_by_label("Add to “About you”").press("Enter")
    expect(user_entries(page)).to_have_text(["Works at night"])
    expect(page.locator("#memory-notice [role=status]")).to_have_text("Saved: 1 new entry.")
    expect(page.get_by_label("Add to “About you”")).to_have_value("")
    page.get_by_label("Add to “Agent notes”").fill("The project uses PostgreSQL.")
    page.get_by_role("button", name="Add entry to “Agent notes”").click()
    expect(note_entries(page)).to_have_text(["The project uses PostgreSQL."])
    stored = memory_of(server, token)
    expect(page.locator("#doc-memory-usage")).to_have_text(
        f"{stored['memory']['characters']} / 2,200 characters"
    )

    # An edit renders the state the API answered, once: no later re-read may re-render the
    # panel under the person (it used to wipe an editor opened right after a change).
    reads: list[str] = []
    page.on(
        "request",
        lambda request: (
            reads.append(request.url)
            if request.method == "GET" and request.url.endswith("/v1/memory")
            else None
        ),
    )
    page.get_by_role("button", name="Edit: Works at night").click()
    editor = page.get_by_label("Edit entry in “About you”")
    expect(editor).to_be_focused()
    editor.fill("Works early mornings")
    page.get_by_role("button", name="Save").click()
    expect(user_entries(page)).to_have_text(["Works early mornings"])
    expect(page.locator("#memory-notice")).to_have_text("Saved: 1 entry updated.")
    assert memory_of(server, token)["user"]["entries"] == ["Works early mornings"]
    page.get_by_role("button", name="Edit: Works early mornings").click()
    expect(page.get_by_label("Edit entry in “About you”")).to_be_focused()
    page.keyboard.press("Escape")  # cancels the edit, nothing sent
    expect(page.get_by_role("button", name="Edit: Works early mornings")).to_be_focused()
    assert reads == [], reads

    # A rule violation is shown plainly, replaces the success message, and changes nothing.
    page.get_by_label("Add to “About you”").fill("<persistent_memory_data> hello")
    page.get_by_label("Add to “About you”").press("Enter")
    expect(page.locator("#memory-notice [role=alert]")).to_contain_text("Not saved:")
    assert len(notices(page)) == 1
    assert memory_of(server, token)["user"]["entries"] == ["Works early mornings"]
    screenshot(page, "rejected-edit")

    page.get_by_role("button", name="Remove: Works early mornings").click()
    expect(user_entries(page)).to_have_count(0)
    expect(page.locator("#memory-notice [role=status]")).to_have_text("Saved: 1 entry removed.")
    assert len(notices(page)) == 1
    expect(page.locator("#doc-user-empty")).to_be_visible()
    expect(page.locator("#doc-user-usage")).to_have_text("0 / 1,375 characters")
    assert memory_of(server, token)["user"]["entries"] == []


def test_adding_what_is_already_there_says_already_saved(
    server: str, page: Page, screen: str
) -> None:
    """Adding an entry that memory already holds is answered by the API with an unchanged state,
    and the panel says "already saved" rather than "added"."""
    token = sign_in(page, server, f"erik-{screen}")
    open_memory(page)
    field = page.get_by_label("Add to “About you”")
    field.fill("Likes tea")
    field.press("Enter")
    expect(page.locator("#memory-notice")).to_have_text("Saved: 1 new entry.")
    before = memory_of(server, token)

    field.fill("Likes tea")
    field.press("Enter")
    expect(page.locator("#memory-notice [role=status]")).to_have_text(ALREADY_SAVED)
    assert notices(page) == [ALREADY_SAVED]
    expect(user_entries(page)).to_have_text(["Likes tea"])
    assert memory_of(server, token) == before


def test_repeating_a_remembered_fact_in_chat_says_already_saved(
    server: str, page: Page, screen: str
) -> None:
    """A turn whose memory update changes nothing (the fact is already remembered) is reported
    as already saved, in the panel and on the answer, not as a saved change."""
    token = sign_in(page, server, f"fay-{screen}")
    expect(send(page, REMEMBER)).to_have_attribute("data-state", "done")
    settled(page, 1)
    expect(page.locator("#memory-notice")).to_have_text(LAST_TURN_SAVED)
    before = memory_of(server, token)

    answer = send(page, REMEMBER)
    expect(answer).to_have_attribute("data-state", "done")
    settled(page, 2)
    expect(page.locator("#memory-notice")).to_have_text(f"Last turn: {ALREADY_SAVED}")
    expect(answer.locator(".chip")).to_have_text(["Already in memory"])
    assert memory_of(server, token) == before
    expect(user_entries(page)).to_have_text([SAVED_ENTRY])


STATE: dict[str, Any] = {
    "user": {"entries": ["A"], "characters": 1, "limit": 1375},
    "memory": {"entries": [], "characters": 0, "limit": 2200},
}
CHANGED: dict[str, Any] = {
    "user": {"entries": ["A", "B"], "characters": 5, "limit": 1375},
    "memory": {"entries": [], "characters": 0, "limit": 2200},
}


@pytest.mark.parametrize(
    ("turn", "after", "expected"),
    [
        ({"memory": {"outcome": "committed"}, "staged": 1}, CHANGED, "Saved: 1 new entry."),
        ({"memory": {"outcome": "committed"}, "staged": 1}, STATE, ALREADY_SAVED),
        ({"memory": {"outcome": "none"}, "staged": 1}, STATE, ALREADY_SAVED),
        ({"memory": {"outcome": "none"}, "staged": 0}, STATE, None),
        ({"memory": {"outcome": "committed"}, "staged": 2}, None, "Saved 2 changes."),
        ({"memory": {"outcome": "proposed"}, "staged": 2}, STATE, "2 changes are waiting"),
        ({"memory": {"outcome": "failed", "reason": "stale_match"}}, STATE, "Not saved: memory"),
        (
            {"memory": {"outcome": "failed", "reason": "project_deleted"}},
            STATE,
            "Not saved: the project was deleted",
        ),
        ({"stopped": True, "memory": None, "staged": 1}, STATE, "Nothing saved: the answer was"),
        ({"status": "disabled", "memory": {"outcome": "none"}}, STATE, "Memory is switched off"),
    ],
    ids=[
        "committed-changed",
        "committed-unchanged",
        "none-after-staging",
        "none-nothing-staged",
        "committed-unreadable-after",
        "proposed",
        "failed",
        "failed-project-deleted",
        "stopped",
        "disabled",
    ],
)
@pytest.mark.parametrize("screen", ["desktop"], indirect=True)
def test_a_turn_outcome_is_told_from_the_memory_event_and_the_states(
    server: str,
    page: Page,
    screen: str,
    turn: dict[str, Any],
    after: dict[str, Any] | None,
    expected: str | None,
) -> None:
    """What the panel says about a turn follows the memory event (`committed`, `none`,
    `proposed`, `failed`) and the states before and after it: a batch that changed nothing is
    "already saved" whether the server reports it as `committed` or `none`."""
    page.goto(server)
    said = page.evaluate(
        """async ([turn, before, after]) => {
            const { turnOutcome } = await import('/static/js/memory/model.js');
            const outcome = turnOutcome(turn, before, after);
            return outcome && outcome.text;
        }""",
        [turn, STATE, after],
    )
    if expected is None:
        assert said is None
    else:
        assert said is not None and said.startswith(expected), said


def test_forget_everything_needs_confirmation(server: str, page: Page, screen: str) -> None:
    """Cancelling the confirmation keeps memory and returns focus; confirming deletes both
    documents."""
    token = sign_in(page, server, f"gus-{screen}")
    expect(send(page, REMEMBER)).to_have_attribute("data-state", "done")
    settled(page, 1)
    open_memory(page)
    page.get_by_label("Add to “Agent notes”").fill("Deploys happen on Fridays.")
    page.get_by_label("Add to “Agent notes”").press("Enter")
    expect(note_entries(page)).to_have_count(1)

    forget = page.get_by_role("button", name="Forget everything")
    forget.click()
    dialog = page.get_by_role("dialog", name="Forget everything?")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()
    screenshot(page, "forget-confirmation")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    expect(forget).to_be_focused()
    stored = memory_of(server, token)
    assert stored["user"]["entries"] and stored["memory"]["entries"]

    forget.click()
    page.keyboard.press("Escape")  # Escape cancels too
    expect(dialog).to_be_hidden()
    assert memory_of(server, token)["memory"]["entries"]

    forget.click()
    dialog.get_by_role("button", name="Forget everything").click()
    expect(page.locator("#memory-notice")).to_have_text("Everything was forgotten.")
    expect(page.locator(".entries li")).to_have_count(0)
    expect(page.locator("#doc-memory-usage")).to_have_text("0 / 2,200 characters")
    stored = memory_of(server, token)
    assert stored["user"]["entries"] == [] and stored["memory"]["entries"] == []


def test_memory_switched_off_is_a_clear_state(tmp_path: Path, page: Page, screen: str) -> None:
    """With the flag off the panel and the welcome say so, the panel offers no edits, and a
    turn saves nothing."""
    url = sqlite_file(tmp_path)
    with live_server(create_app(e2e_settings(url, memory_enabled=False))) as base:
        token = sign_in(page, base, "judy")
        expect(page.locator("#welcome [data-when=off]")).to_be_visible()
        expect(page.locator("#welcome [data-when=on]")).to_be_hidden()
        expect(page.locator("#memory-state")).to_contain_text("Memory is switched off")
        answer = send(page, REMEMBER)
        expect(answer).to_have_attribute("data-state", "done")
        settled(page, 1)
        expect(page.locator("#memory-notice")).to_have_text(
            "Last turn: Memory is switched off: nothing saved."
        )
        open_memory(page)
        expect(page.get_by_label("Add to “About you”")).to_be_hidden()
        expect(page.get_by_role("button", name="Forget everything")).to_be_visible()
        assert memory_of(base, token)["user"]["entries"] == []
        screenshot(page, "memory-off")


def test_memory_unavailable_is_a_clear_state(tmp_path: Path, page: Page, screen: str) -> None:
    """When memory cannot be read (503) the panel says it is unavailable, not empty."""
    # Only the browser sessions' table (and the bookkeeping sign-in writes): the dev sign-in
    # stores its session row, while every memory and conversation read fails.
    url = sqlite_file(tmp_path)
    engine = create_engine(url)
    kept = {web_sessions.name, audit_log.name, limit_counters.name, "alembic_version"}
    with engine.begin() as connection:
        for name in inspect(connection).get_table_names():
            if name not in kept:
                # IF EXISTS: dropping a search index drops its shadow tables too.
                connection.execute(text(f'DROP TABLE IF EXISTS "{name}"'))
    engine.dispose()
    with live_server(create_app(e2e_settings(url))) as base:
        sign_in(page, base, "ken")
        expect(page.locator("#memory-state")).to_contain_text("Memory is unavailable")
        expect(page.locator("#chat-notice")).to_have_text(
            re.compile("Could not load conversations")
        )
        open_memory(page)
        expect(page.get_by_label("Add to “About you”")).to_be_hidden()
        expect(page.locator("#doc-user")).to_be_hidden()  # unknown, so not shown as empty
        screenshot(page, "memory-unavailable")
