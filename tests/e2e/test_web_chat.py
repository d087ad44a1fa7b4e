"""The chat in Debian's Chromium, at laptop and phone size, against the real server.

Each test signs in as its own user, so the tests share one server without sharing memory.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, Page, expect

from app.main import create_app
from tests.e2e.conftest import (
    SCREENS,
    e2e_settings,
    guard,
    memory_of,
    new_context,
    screenshot,
    sqlite_file,
)
from tests.e2e.web import (
    LAST_TURN_SAVED,
    REMEMBER,
    SAVED_ENTRY,
    box,
    conversation,
    conversations_of,
    eventually,
    inside_viewport,
    is_phone,
    open_conversations,
    open_memory,
    reachable,
    send,
    settled,
    sign_in,
    user_entries,
    wait_for_growth,
)
from tests.support.scripted import HttpError, ScriptedModel, ScriptedTransport, Text, memory_call
from tests.support.server import live_server

pytestmark = pytest.mark.browser

LONG = "tell me a long story"


def test_an_answer_streams_and_the_fact_reaches_the_memory_panel(
    server: str, page: Page, screen: str
) -> None:
    """A saved fact reaches the panel with the usage the API reports, after the turn commits;
    the answer says what happened to memory. The page runs under a strict policy it obeys."""
    response = page.goto(server)
    assert response is not None
    assert "script-src 'self'" in response.headers["content-security-policy"]
    expect(page.locator("#sign-in .model-badge")).to_have_text("Offline model answering")
    token = sign_in(page, server, f"alice-{screen}")
    expect(page.locator("#chat .model-badge")).to_have_text("Offline model answering")
    expect(page.locator("#welcome")).to_be_visible()

    answer = send(page, REMEMBER)
    expect(answer).to_have_attribute("data-state", "done")
    expect(answer.locator(".content")).to_have_text("Saved.")
    settled(page, 1)
    expect(answer.locator(".chip")).to_have_text(["Memory updated"])
    expect(page.locator("#memory-notice")).to_have_text(LAST_TURN_SAVED)
    expect(page.locator("#welcome")).to_be_hidden()
    expect(user_entries(page)).to_have_text([SAVED_ENTRY])

    stored = memory_of(server, token)
    assert stored["user"]["entries"] == [SAVED_ENTRY]
    characters, limit = stored["user"]["characters"], stored["user"]["limit"]
    expect(page.locator("#doc-user-usage")).to_have_text(f"{characters} / {limit:,} characters")
    meter = page.locator("#doc-user-meter")
    expect(meter).to_have_attribute("aria-valuenow", str(characters))
    expect(meter).to_have_attribute("aria-valuemax", str(limit))
    expect(page.locator("#conversation-list .open[aria-current='page']")).to_have_count(1)
    open_memory(page)
    screenshot(page, "remembered")


def test_stop_cancels_the_turn_and_memory_stays_as_it_was(
    server: str, page: Page, screen: str
) -> None:
    """Stop aborts the request mid-stream: the server commits nothing, marks the turn stopped,
    and the reopened transcript shows the partial answer as stopped."""
    token = sign_in(page, server, f"carol-{screen}")
    expect(send(page, REMEMBER)).to_have_attribute("data-state", "done")
    settled(page, 1)
    before = memory_of(server, token)

    answer = send(page, LONG)
    first = wait_for_growth(page, answer, 20)
    wait_for_growth(page, answer, first + 20)  # token by token: the text keeps growing
    stop = page.get_by_role("button", name="Stop")
    expect(stop).to_be_visible()
    expect(page.get_by_role("button", name="Send")).to_be_hidden()
    assert inside_viewport(page, stop) and reachable(stop)
    screenshot(page, "streaming")
    stop.click()

    expect(answer).to_have_attribute("data-state", "stopped")
    expect(answer.locator(".note")).to_have_text(["Stopped: this answer is incomplete."])
    settled(page, 2)
    expect(page.locator("#memory-notice")).to_have_text(
        "Last turn: Nothing saved: the answer was stopped."
    )
    expect(page.get_by_role("button", name="Send")).to_be_visible()

    conversation_id = conversations_of(server, token)[0]["id"]

    def interrupted() -> dict[str, Any] | None:
        last = conversation(server, token, conversation_id)["messages"][-1]
        return last if last["role"] == "assistant" and last["status"] == "interrupted" else None

    stored = eventually(interrupted)
    assert LONG not in stored["content"]
    assert memory_of(server, token) == before
    expect(user_entries(page)).to_have_text([SAVED_ENTRY])

    page.get_by_role("button", name="New chat").click()
    expect(page.locator("#messages li")).to_have_count(0)
    expect(page.locator("#welcome")).to_be_visible()
    open_conversations(page)
    page.locator("#conversation-list .open").first.click()
    expect(page.locator("#messages li.assistant").last).to_have_attribute("data-state", "stopped")
    expect(page.locator("#messages li.assistant").last.locator(".note")).to_have_text(
        ["Stopped: this answer is incomplete."]
    )


def test_stop_after_the_model_staged_a_change_saves_nothing(
    tmp_path: Path, page: Page, screen: str
) -> None:
    """A change the model staged is discarded when the person stops the turn before it ends,
    and the answer's memory chip says so."""
    staged_then_long = ScriptedModel(
        [
            memory_call(
                {"target": "user", "action": "add", "content": "The user likes green tea."}
            ),
            Text(" ".join(f"word{number}" for number in range(400))),
        ]
    )
    app = create_app(
        e2e_settings(sqlite_file(tmp_path)),
        model_transport=ScriptedTransport(staged_then_long, delay_seconds=0.04),
    )
    with live_server(app) as base:
        token = sign_in(page, base, "liam")
        answer = send(page, "remember that I like green tea, then tell me a long story")
        expect(answer.locator(".chip")).to_have_text(["Saving 1 change to memory…"])
        wait_for_growth(page, answer, 40)
        page.get_by_role("button", name="Stop").click()
        expect(answer).to_have_attribute("data-state", "stopped")
        settled(page, 1)
        expect(answer.locator(".chip")).to_have_text(["Memory update discarded"])
        expect(page.locator("#memory-notice")).to_have_text(
            "Last turn: Nothing saved: the answer was stopped."
        )
        conversation_id = conversations_of(base, token)[0]["id"]
        eventually(
            lambda: (
                conversation(base, token, conversation_id)["messages"][-1]["status"]
                == "interrupted"
                or None
            )
        )
        assert memory_of(base, token)["user"]["entries"] == []
        expect(user_entries(page)).to_have_count(0)


def test_a_failed_turn_is_shown_plainly_and_saves_nothing(
    tmp_path: Path, page: Page, screen: str
) -> None:
    """When the model fails after staging, the page shows the error once and memory is unchanged."""
    staged_then_failing = ScriptedModel(
        [
            memory_call(
                {"target": "user", "action": "add", "content": "The user likes green tea."}
            ),
            HttpError(500, "upstream exploded"),
        ]
    )
    app = create_app(
        e2e_settings(sqlite_file(tmp_path)),
        model_transport=ScriptedTransport(staged_then_failing),
    )
    with live_server(app) as base:
        token = sign_in(page, base, "mia")
        answer = send(page, "remember that I like green tea")
        expect(answer).to_have_attribute("data-state", "failed")
        expect(answer.locator(".note")).to_contain_text(["Error:"])
        expect(page.locator("#chat-notice [role=alert]")).to_contain_text("The answer failed:")
        expect(page.locator("#chat-notice [role=status]")).to_have_text("")
        settled(page, 1)
        expect(page.locator("#memory-notice")).to_have_text(
            "Last turn: Nothing saved: the answer failed."
        )
        assert memory_of(base, token)["user"]["entries"] == []
        screenshot(page, "failed-turn")


def test_keyboard_only_use(server: str, page: Page, screen: str) -> None:
    """Sign in, send, stop and reach the controls with the keyboard alone; focus is visible."""
    page.goto(server)
    expect(page.get_by_label("Your name")).to_be_focused()
    page.keyboard.type(f"heidi-{screen}")
    page.keyboard.press("Enter")
    expect(page.locator("#account-name")).to_have_text(f"heidi-{screen}")
    message = page.get_by_label("Message", exact=True)
    expect(message).to_be_focused()

    page.keyboard.type(REMEMBER)
    page.keyboard.press("Enter")
    expect(page.locator("#messages li.assistant").last).to_have_attribute("data-state", "done")
    settled(page, 1)
    expect(user_entries(page)).to_have_text([SAVED_ENTRY])
    expect(message).to_be_focused()

    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Send")).to_be_focused()
    outline = page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("none", "")
    page.keyboard.press("Shift+Tab")
    expect(message).to_be_focused()

    # Shift+Enter is a new line, Enter sends, Escape stops a streaming answer.
    page.keyboard.type("tell me")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("a long story")
    expect(message).to_have_value("tell me\na long story")
    page.keyboard.press("Enter")
    answer = page.locator("#messages li.assistant").last
    wait_for_growth(page, answer, 10)
    page.keyboard.press("Escape")
    expect(answer).to_have_attribute("data-state", "stopped")


def test_conversation_titles_are_readable_in_full(server: str, page: Page, screen: str) -> None:
    """Titles that share their first words are shown whole (wrapped, not cut after a few
    characters), with the full title as a tooltip; a title reopens its conversation."""
    sign_in(page, server, f"olga-{screen}")
    titles = [
        "Compare the quarterly numbers for the north region",
        "Compare the quarterly numbers for the south region",
    ]
    for number, title in enumerate(titles, start=1):
        page.get_by_role("button", name="New chat").click()
        expect(send(page, title)).to_have_attribute("data-state", "done")
        settled(page, number)

    open_conversations(page)
    labels = page.locator("#conversation-list .open .label")
    expect(labels).to_have_text(list(reversed(titles)))
    for index in range(2):
        label = labels.nth(index)
        fits = label.evaluate(
            "element => element.scrollHeight <= element.clientHeight + 1"
            " && element.scrollWidth <= element.clientWidth + 1"
        )
        assert fits, f"title {index} is cut off"
        tooltip = page.locator("#conversation-list .open").nth(index).get_attribute("title")
        assert tooltip is not None and tooltip.startswith(titles[1 - index])
    page.locator("#conversation-list .open").nth(1).click()
    expect(page.locator("#messages li.user .content")).to_have_text([titles[0]])
    if is_phone(page):
        expect(page.locator("#workspace")).to_have_attribute("data-conversations", "closed")


def test_the_empty_state_welcomes_and_says_what_is_remembered(
    server: str, page: Page, screen: str
) -> None:
    """A new chat opens on a welcome that says what the assistant remembers and how to control
    it; a suggestion fills the message box without sending."""
    sign_in(page, server, f"pia-{screen}")
    welcome = page.locator("#welcome")
    expect(welcome).to_be_visible()
    expect(welcome).to_contain_text("About you")
    expect(welcome).to_contain_text("Agent notes")
    expect(welcome).to_contain_text("Memory panel")
    expect(welcome).to_contain_text("forget")
    expect(welcome.locator("[data-when=off]")).to_be_hidden()

    welcome.get_by_role("button", name="What do you remember about me?").click()
    message = page.get_by_label("Message", exact=True)
    expect(message).to_have_value("What do you remember about me?")
    expect(message).to_be_focused()
    expect(page.locator("#messages li")).to_have_count(0)

    page.keyboard.press("Enter")
    expect(page.locator("#messages li.assistant").last).to_have_attribute("data-state", "done")
    expect(welcome).to_be_hidden()
    settled(page, 1)
    page.get_by_role("button", name="New chat").click()
    expect(welcome).to_be_visible()
    expect(page.locator("#messages li")).to_have_count(0)


@pytest.mark.parametrize("zone", ["Asia/Kolkata", "America/St_Johns"])
def test_timestamps_are_shown_in_local_time(
    server: str, browser: Browser, screen: str, zone: str
) -> None:
    """Message times are the API's UTC instants in the person's zone (half-hour offsets, so a
    naive timestamp read as local time, or a dropped offset, shows the wrong minutes)."""
    context = new_context(browser, screen, timezone_id=zone, locale="en-GB")
    try:
        page = context.new_page()
        errors = guard(page)
        token = sign_in(page, server, f"quinn-{screen}-{zone}")
        expect(send(page, REMEMBER)).to_have_attribute("data-state", "done")
        settled(page, 1)
        conversation_id = conversations_of(server, token)[0]["id"]
        open_conversations(page)
        page.locator("#conversation-list .open").first.click()
        # The list's own items: the answer's sources (what it saved) are nested list items.
        expect(page.locator("#messages > li")).to_have_count(2)

        stored = conversation(server, token, conversation_id)["messages"]
        times = page.locator("#messages > li time")
        expect(times).to_have_count(2)
        for index, message in enumerate(stored):
            instant = datetime.fromisoformat(message["created_at"])
            if instant.tzinfo is None:  # a naive value from the API is UTC
                instant = instant.replace(tzinfo=UTC)
            local = instant.astimezone(ZoneInfo(zone))
            expect(times.nth(index)).to_have_text(
                re.compile(rf"^0?{local.hour}:{local.minute:02d}$")
            )
            machine = times.nth(index).get_attribute("datetime")
            assert machine is not None
            assert datetime.fromisoformat(machine.replace("Z", "+00:00")) == instant.replace(
                microsecond=instant.microsecond // 1000 * 1000
            )
        assert errors == []
    finally:
        context.close()


def test_the_time_parser_reads_every_api_form_as_the_same_instant(
    server: str, page: Page, screen: str
) -> None:
    """`2026-12-01T07:43:00.903074Z`, the same with an offset, and the naive value (UTC) are one
    instant; garbage is no time at all."""
    page.goto(server)
    result = page.evaluate(
        """async () => {
            const { parseTimestamp } = await import('/static/js/time.js');
            const forms = ['2026-12-01T07:43:00.903074Z', '2026-12-01T07:43:00.903074',
                           '2026-12-01T09:43:00.903+02:00', '2026-12-01 07:43:00.903074',
                           '2026-12-01T07:43:00.903074+00:00'];
            return { instants: forms.map((form) => parseTimestamp(form).getTime()),
                     garbage: [parseTimestamp('yesterday'), parseTimestamp(''),
                               parseTimestamp(null)] };
        }"""
    )
    expected = int(datetime(2026, 12, 1, 7, 43, 0, 903000, tzinfo=UTC).timestamp() * 1000)
    assert result["instants"] == [expected] * 5
    assert result["garbage"] == [None, None, None]


def test_the_phone_layout_has_no_sideways_scrolling(server: str, page: Page, screen: str) -> None:
    """At either size nothing is wider than the window, even with a long unbroken word."""
    sign_in(page, server, f"ivan-{screen}")
    expect(send(page, "x" * 300)).to_have_attribute("data-state", "done")
    settled(page, 1)
    overflow = page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0
    user = page.locator("#messages li.user .bubble")
    rect = box(user)
    assert rect["x"] >= 0 and rect["x"] + rect["width"] <= SCREENS[screen]["viewport"]["width"]
    assert re.fullmatch(r"x+", user.locator(".content").inner_text())
