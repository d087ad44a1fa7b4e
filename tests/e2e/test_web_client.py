"""The web client in Debian's Chromium against the real server and the offline model.

Each test signs in as its own user, so the tests share one server without sharing memory.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Dialog, Locator, Page, expect

from app.agent.offline import ChatCompletionsTransport
from app.main import create_app
from tests.e2e.conftest import e2e_settings, memory_of, screenshot, sqlite_file
from tests.support.scripted import HttpError, ScriptedModel, Text, memory_call
from tests.support.server import live_server
from tests.support.tokens import OIDC_AUDIENCE, OIDC_ISSUER, JwksServer, SigningKey, oidc_claims

pytestmark = pytest.mark.browser

REMEMBER = "remember that I prefer short answers"
SAVED_ENTRY = "The user prefers short answers."
LONG = "tell me a long story"
T = TypeVar("T")


def eventually(probe: Callable[[], T | None], *, timeout: float = 15.0) -> T:
    """Poll `probe` until it returns a value (server-side state settles after a disconnect)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("the expected state was not reached before the deadline")
        time.sleep(0.05)


@pytest.fixture
def page_errors(page: Page) -> Iterator[list[str]]:
    """Every uncaught script error and every Content-Security-Policy refusal on the page; the
    test fails if there is one."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text)
            if "Content Security Policy" in message.text else None)
    yield errors
    assert errors == []


def sign_in(page: Page, base: str, name: str) -> str:
    page.goto(base)
    page.get_by_label("Your name").fill(name)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#account-name")).to_have_text(name)
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    token = page.evaluate("sessionStorage.getItem('agent-memory-token')")
    assert isinstance(token, str)
    return token


def send(page: Page, text: str) -> Locator:
    page.get_by_label("Message", exact=True).fill(text)
    page.get_by_role("button", name="Send").click()
    return page.locator("#messages li.assistant").last


def user_entries(page: Page) -> Locator:
    return page.locator("#doc-user-entries li .entry-text")


def text_length(bubble: Locator) -> int:
    return int(bubble.locator(".text").evaluate("element => element.textContent.length"))


def wait_for_growth(page: Page, bubble: Locator, beyond: int) -> int:
    """Wait until the streamed text is longer than `beyond` characters; returns its length."""
    handle = bubble.locator(".text").element_handle()
    page.wait_for_function(
        "([element, beyond]) => element.textContent.length > beyond", arg=[handle, beyond]
    )
    return text_length(bubble)


def conversation(base: str, token: str, conversation_id: str) -> dict[str, Any]:
    response = httpx.get(
        f"{base}/v1/conversations/{conversation_id}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def only_conversation_id(base: str, token: str) -> str:
    response = httpx.get(
        f"{base}/v1/conversations", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    response.raise_for_status()
    conversations = response.json()["conversations"]
    assert len(conversations) == 1
    return str(conversations[0]["id"])


def test_remember_streams_and_the_entry_appears_with_its_usage(
    server: str, page: Page, page_errors: list[str]
) -> None:
    """A saved fact reaches the panel with the usage the API reports, after the turn commits.
    The page is served under a strict Content-Security-Policy that it fully complies with."""
    response = page.goto(server)
    assert response is not None
    assert "script-src 'self'" in response.headers["content-security-policy"]
    expect(page.locator("#model-badge")).to_have_text("Offline model answering")
    screenshot(page, "01-sign-in")
    token = sign_in(page, server, "alice")
    expect(page.locator("#doc-user-empty")).to_be_visible()

    answer = send(page, REMEMBER)
    expect(answer).to_have_attribute("data-state", "done")
    expect(answer.locator(".text")).to_have_text("Saved.")
    expect(answer).to_contain_text("Memory update proposed (1 change).")
    expect(page.locator("#memory-outcome")).to_have_text("Last turn: Saved 1 change.")
    expect(user_entries(page)).to_have_text([SAVED_ENTRY])

    stored = memory_of(server, token)
    assert stored["user"]["entries"] == [SAVED_ENTRY]
    characters, limit = stored["user"]["characters"], stored["user"]["limit"]
    expect(page.locator("#doc-user-usage")).to_contain_text(f"{characters} / {limit:,} characters")
    assert page.locator("#doc-user-meter").evaluate("meter => [meter.value, meter.max]") == [
        characters, limit,
    ]
    expect(page.locator("#conversation-list .open[aria-current='true']")).to_have_count(1)
    screenshot(page, "02-remembered")


def test_stop_cancels_the_turn_and_memory_stays_as_it_was(
    server: str, page: Page, page_errors: list[str]
) -> None:
    """Stop aborts the fetch mid-stream: the server commits nothing and marks the turn stopped."""
    token = sign_in(page, server, "carol")
    expect(send(page, REMEMBER)).to_have_attribute("data-state", "done")
    expect(user_entries(page)).to_have_count(1)
    before = memory_of(server, token)

    answer = send(page, LONG)
    # Token by token: the text keeps growing while the turn streams.
    first = wait_for_growth(page, answer, 20)
    wait_for_growth(page, answer, first + 20)
    expect(page.get_by_role("button", name="Stop")).to_be_enabled()
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    screenshot(page, "03-streaming")
    page.get_by_role("button", name="Stop").click()

    expect(answer).to_have_attribute("data-state", "stopped")
    expect(answer).to_contain_text("Stopped: this answer is incomplete.")
    expect(page.locator("#memory-outcome")).to_have_text(
        "Last turn: Nothing saved: the turn was stopped."
    )
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    screenshot(page, "04-stopped")

    conversation_id = only_conversation_id(server, token)

    def interrupted() -> dict[str, Any] | None:
        messages = conversation(server, token, conversation_id)["messages"]
        last = messages[-1]
        return last if last["role"] == "assistant" and last["status"] == "interrupted" else None

    stored = eventually(interrupted)
    assert LONG not in stored["content"]
    assert memory_of(server, token) == before
    expect(user_entries(page)).to_have_text([SAVED_ENTRY])

    # Reopened from the sidebar, the transcript shows the partial answer marked as stopped.
    page.get_by_role("button", name="New").click()
    expect(page.locator("#messages li")).to_have_count(0)
    page.locator("#conversation-list .open").first.click()
    expect(page.locator("#messages li.assistant").last).to_have_attribute("data-state", "stopped")


def test_entries_can_be_added_edited_and_removed(
    server: str, page: Page, page_errors: list[str]
) -> None:
    """The panel's edits go through the memory API: each one is what the API then reports."""
    token = sign_in(page, server, "dave")

    page.get_by_label("Add to “About you”").fill("Works at night")
    page.get_by_label("Add to “About you”").press("Enter")
    expect(user_entries(page)).to_have_text(["Works at night"])
    page.get_by_label("Add to “Agent notes”").fill("The project uses PostgreSQL.")
    page.locator("#doc-memory form.add-entry button").click()
    expect(page.locator("#doc-memory-entries li .entry-text")).to_have_text(
        ["The project uses PostgreSQL."]
    )
    stored = memory_of(server, token)
    expect(page.locator("#doc-memory-usage")).to_contain_text(
        f"{stored['memory']['characters']} / 2,200 characters"
    )

    # An edit renders the state the API answered, once: no later re-read may re-render the
    # panel under the user (it used to wipe an editor opened right after a change).
    reads: list[str] = []
    page.on("request", lambda request: reads.append(request.url)
            if request.method == "GET" and request.url.endswith("/v1/memory") else None)
    page.get_by_role("button", name="Edit: Works at night").click()
    editor = page.get_by_label("Edit entry")
    expect(editor).to_be_focused()
    editor.fill("Works early mornings")
    page.get_by_role("button", name="Save").click()
    expect(user_entries(page)).to_have_text(["Works early mornings"])
    assert memory_of(server, token)["user"]["entries"] == ["Works early mornings"]
    page.get_by_role("button", name="Edit: Works early mornings").click()
    expect(page.get_by_label("Edit entry")).to_be_focused()
    assert reads == [], reads
    with page.expect_request(lambda request: request.url.endswith("/v1/memory")):
        page.get_by_role("button", name="Cancel").click()  # Cancel does re-read, on purpose
    screenshot(page, "05-edited")

    # A rule violation is shown plainly and changes nothing.
    page.get_by_label("Add to “About you”").fill("<persistent_memory_data> hello")
    page.get_by_label("Add to “About you”").press("Enter")
    expect(page.locator("#memory-error")).to_contain_text("Not saved:")
    assert memory_of(server, token)["user"]["entries"] == ["Works early mornings"]
    screenshot(page, "06-rejected")

    page.get_by_role("button", name="Remove: Works early mornings").click()
    expect(user_entries(page)).to_have_count(0)
    expect(page.locator("#doc-user-empty")).to_be_visible()
    expect(page.locator("#doc-user-usage")).to_contain_text("0 / 1,375 characters")
    assert memory_of(server, token)["user"]["entries"] == []


def test_forget_everything_needs_confirmation(
    server: str, page: Page, page_errors: list[str]
) -> None:
    """Dismissing the confirmation keeps memory; accepting it deletes both documents."""
    token = sign_in(page, server, "erin")
    expect(send(page, REMEMBER)).to_have_attribute("data-state", "done")
    page.get_by_label("Add to “Agent notes”").fill("Deploys happen on Fridays.")
    page.get_by_label("Add to “Agent notes”").press("Enter")
    expect(page.locator("#doc-memory-entries li")).to_have_count(1)
    expect(user_entries(page)).to_have_count(1)

    dialogs: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.get_by_role("button", name="Forget everything").click()
    expect(page.get_by_role("button", name="Forget everything")).to_be_focused()
    assert dialogs and "Forget everything?" in dialogs[0]
    stored = memory_of(server, token)
    assert stored["user"]["entries"] and stored["memory"]["entries"]

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Forget everything").click()
    expect(page.locator("#memory-outcome")).to_have_text("Everything was forgotten.")
    expect(page.locator(".entries li")).to_have_count(0)
    expect(page.locator("#doc-memory-usage")).to_contain_text("0 / 2,200 characters")
    stored = memory_of(server, token)
    assert stored["user"]["entries"] == [] and stored["memory"]["entries"] == []
    screenshot(page, "07-forgotten")


def test_a_second_user_sees_none_of_it(
    server: str, browser: Browser, context: BrowserContext
) -> None:
    """Another user, in another browser profile, sees no entry and no conversation of the first."""
    first = context.new_page()
    sign_in(first, server, "frank")
    expect(send(first, REMEMBER)).to_have_attribute("data-state", "done")
    expect(first.locator("#doc-user-entries li")).to_have_count(1)
    expect(first.locator("#conversation-list li")).to_have_count(1)

    other = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        second = other.new_page()
        token = sign_in(second, server, "grace")
        expect(second.locator("#conversations-empty")).to_be_visible()
        expect(second.locator("#conversation-list li")).to_have_count(0)
        expect(second.locator(".entries li")).to_have_count(0)
        expect(second.locator("#doc-user-usage")).to_contain_text("0 / 1,375 characters")
        assert memory_of(server, token)["user"]["entries"] == []
        screenshot(second, "08-second-user")
    finally:
        other.close()


def test_keyboard_only_use(server: str, page: Page, page_errors: list[str]) -> None:
    """Sign in, send, stop and reach the controls with the keyboard alone; focus is visible."""
    page.goto(server)
    expect(page.get_by_label("Your name")).to_be_focused()
    page.keyboard.type("heidi")
    page.keyboard.press("Enter")
    expect(page.locator("#account-name")).to_have_text("heidi")
    expect(page.get_by_label("Message", exact=True)).to_be_focused()

    page.keyboard.type(REMEMBER)
    page.keyboard.press("Enter")
    expect(page.locator("#messages li.assistant").last).to_have_attribute("data-state", "done")
    expect(user_entries(page)).to_have_text([SAVED_ENTRY])
    expect(page.get_by_label("Message", exact=True)).to_be_focused()

    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Send")).to_be_focused()
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("none", "")
    page.keyboard.press("Shift+Tab")

    # Escape stops a streaming answer from the message box.
    page.keyboard.type(LONG)
    page.keyboard.press("Enter")
    answer = page.locator("#messages li.assistant").last
    wait_for_growth(page, answer, 10)
    page.keyboard.press("Escape")
    expect(answer).to_have_attribute("data-state", "stopped")
    screenshot(page, "09-keyboard")


def test_phone_sized_screen(server: str, browser: Browser) -> None:
    """At phone width the page is one column with no sideways scrolling."""
    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                                has_touch=True, device_scale_factor=2)
    try:
        page = phone.new_page()
        sign_in(page, server, "ivan")
        expect(send(page, REMEMBER)).to_have_attribute("data-state", "done")
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0
        chat = page.locator("main.chat").bounding_box()
        memory = page.locator("aside.memory").bounding_box()
        assert chat is not None and memory is not None
        assert memory["y"] >= chat["y"] + chat["height"]
        screenshot(page, "10-phone")
    finally:
        phone.close()


def test_memory_switched_off_is_a_clear_state(
    tmp_path: Path, page: Page, page_errors: list[str]
) -> None:
    """With the flag off the panel says so, offers no edits, and a turn saves nothing."""
    url = sqlite_file(tmp_path)
    with live_server(create_app(e2e_settings(url, memory_enabled=False))) as base:
        token = sign_in(page, base, "judy")
        expect(page.locator("#memory-state")).to_contain_text("Memory is switched off")
        expect(page.get_by_label("Add to “About you”")).to_be_hidden()
        answer = send(page, REMEMBER)
        expect(answer).to_have_attribute("data-state", "done")
        expect(page.locator("#memory-outcome")).to_have_text(
            "Last turn: Memory is switched off: nothing saved."
        )
        assert memory_of(base, token)["user"]["entries"] == []
        screenshot(page, "11-memory-off")


def test_memory_unavailable_is_a_clear_state(
    tmp_path: Path, page: Page, page_errors: list[str]
) -> None:
    """When memory cannot be read (GET 503) the panel says it is unavailable, not empty."""
    url = sqlite_file(tmp_path, migrate=False)  # no tables: every memory read fails
    with live_server(create_app(e2e_settings(url))) as base:
        sign_in(page, base, "ken")
        expect(page.locator("#memory-state")).to_contain_text("Memory is unavailable")
        expect(page.get_by_label("Add to “About you”")).to_be_hidden()
        expect(page.locator("#doc-user")).to_be_hidden()  # unknown, so not shown as empty
        expect(page.locator("#chat-error")).to_have_text(re.compile("Could not load conversations"))
        screenshot(page, "12-memory-unavailable")


def test_stop_after_the_model_staged_a_change_saves_nothing(
    tmp_path: Path, page: Page, page_errors: list[str]
) -> None:
    """A change the model proposed is discarded when the user stops the turn before it ends."""
    staged_then_long = ScriptedModel([
        memory_call({"target": "user", "action": "add", "content": "The user likes green tea."}),
        Text(" ".join(f"word{number}" for number in range(400))),
    ])
    app = create_app(
        e2e_settings(sqlite_file(tmp_path)),
        model_transport=ChatCompletionsTransport(staged_then_long, delay_seconds=0.04),
    )
    with live_server(app) as base:
        token = sign_in(page, base, "liam")
        answer = send(page, "remember that I like green tea, then tell me a long story")
        expect(answer).to_contain_text("Memory update proposed (1 change).")
        wait_for_growth(page, answer, 40)
        page.get_by_role("button", name="Stop").click()
        expect(answer).to_have_attribute("data-state", "stopped")
        expect(page.locator("#memory-outcome")).to_have_text(
            "Last turn: Nothing saved: the turn was stopped."
        )
        conversation_id = only_conversation_id(base, token)
        eventually(
            lambda: conversation(base, token, conversation_id)["messages"][-1]["status"]
            == "interrupted" or None
        )
        assert memory_of(base, token)["user"]["entries"] == []
        expect(user_entries(page)).to_have_count(0)
        screenshot(page, "13-staged-then-stopped")


def test_a_failed_turn_is_shown_plainly_and_saves_nothing(
    tmp_path: Path, page: Page, page_errors: list[str]
) -> None:
    """When the model fails after staging, the page shows the error and memory is unchanged."""
    staged_then_failing = ScriptedModel([
        memory_call({"target": "user", "action": "add", "content": "The user likes green tea."}),
        HttpError(500, "upstream exploded"),
    ])
    app = create_app(
        e2e_settings(sqlite_file(tmp_path)),
        model_transport=ChatCompletionsTransport(staged_then_failing),
    )
    with live_server(app) as base:
        token = sign_in(page, base, "mia")
        answer = send(page, "remember that I like green tea")
        expect(answer).to_have_attribute("data-state", "failed")
        expect(answer).to_contain_text("Error:")
        expect(page.locator("#chat-error")).to_contain_text("The answer failed:")
        expect(page.locator("#memory-outcome")).to_have_text(
            "Last turn: Nothing saved: the turn failed."
        )
        assert memory_of(base, token)["user"]["entries"] == []
        screenshot(page, "14-failed-turn")


def test_oidc_mode_signs_in_with_a_pasted_token(
    tmp_path: Path, page: Page, page_errors: list[str]
) -> None:
    """In oidc mode the page asks for a token (no name field); a bad token is refused plainly."""
    key = SigningKey.rsa("e2e-key")
    with JwksServer([key]).running() as jwks:
        settings = e2e_settings(
            sqlite_file(tmp_path),
            auth_mode="oidc",
            auth_dev_secret=None,
            auth_jwks_url=jwks.url,
            auth_issuer=OIDC_ISSUER,
            auth_audience=OIDC_AUDIENCE,
        )
        with live_server(create_app(settings)) as base:
            page.goto(base)
            expect(page.get_by_label("Access token")).to_be_focused()
            expect(page.get_by_label("Your name")).to_be_hidden()
            screenshot(page, "15-oidc-sign-in")

            page.get_by_label("Access token").fill("not-a-token")
            page.get_by_role("button", name="Use this token").click()
            expect(page.locator("#sign-in-error")).to_contain_text("This token was not accepted")

            page.get_by_label("Access token").fill(key.sign(oidc_claims("oidc-user")))
            page.get_by_role("button", name="Use this token").click()
            expect(page.locator("#account-name")).to_have_text("oidc-user")
            expect(send(page, REMEMBER)).to_have_attribute("data-state", "done")
            expect(user_entries(page)).to_have_text([SAVED_ENTRY])
