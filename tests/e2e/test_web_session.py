"""Sessions in Debian's Chromium: signing in (dev and oidc), signing out, and an expired token.
After either end, nothing of the previous person is left anywhere in the page.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Route, expect

from app.main import create_app
from tests.e2e.conftest import (
    TEST_SECRET,
    e2e_settings,
    guard,
    memory_of,
    new_context,
    screenshot,
    sqlite_file,
)
from tests.e2e.scripted_web import Scripted, ScriptedWebModel
from tests.e2e.web import (
    conversation,
    conversations_of,
    eventually,
    open_memory,
    send,
    settled,
    sign_in,
    sign_out,
    user_entries,
)
from tests.support.server import live_server
from tests.support.tokens import (
    dev_token,
)

pytestmark = pytest.mark.browser

FACT = "remember that I collect antique barometers"
NOTE = "The first person's secret project is called Bluebird."
DRAFT = "a draft the first person never sent"
HALF_TYPED = "half-typed note of the first person"


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ScriptedWebModel]]:
    model = ScriptedWebModel({})
    url = sqlite_file(tmp_path_factory.mktemp("session"))
    with live_server(create_app(e2e_settings(url), model_transport=model)) as base:
        yield base, model


def everything_on_the_page(page: Page) -> str:
    """All the page holds: its text (shown or hidden), every field's value, every attribute,
    and both storages."""
    text: str = page.evaluate(
        """() => {
            const parts = [document.documentElement.textContent];
            for (const element of document.querySelectorAll('*')) {
                for (const attribute of element.attributes) parts.push(attribute.value);
                if (typeof element.value === 'string') parts.push(element.value);
            }
            for (const storage of [sessionStorage, localStorage]) {
                for (let index = 0; index < storage.length; index += 1) {
                    parts.push(storage.key(index), storage.getItem(storage.key(index)));
                }
            }
            return parts.join('\\n');
        }"""
    )
    return text


def leave_traces(page: Page, base: str, name: str) -> list[str]:
    """A person's session with something in every part of the page; what would betray them."""
    token = sign_in(page, base, name)
    expect(send(page, FACT)).to_have_attribute("data-state", "done")
    settled(page, 1)
    entry = memory_of(base, token)["user"]["entries"][0]
    page.get_by_label("Message", exact=True).fill(DRAFT)
    open_memory(page)
    page.get_by_label("Add to “Agent notes”").fill(NOTE)
    page.get_by_label("Add to “Agent notes”").press("Enter")
    expect(page.locator("#doc-memory-entries li")).to_have_count(1)
    expect(page.locator("#memory-notice")).to_have_text("Saved: 1 new entry.")
    page.get_by_label("Add to “About you”").fill(HALF_TYPED)
    page.get_by_role("button", name=f"Edit: {entry}").click()
    return [name, FACT, entry, NOTE, DRAFT, HALF_TYPED, token, "Saved: 1 new entry."]


def assert_no_trace(page: Page, traces: list[str]) -> None:
    held = everything_on_the_page(page)
    left = [trace for trace in traces if trace in held]
    assert left == [], f"still on the page: {left}"


def test_after_sign_out_the_next_person_sees_nothing_of_the_previous_one(
    scripted: tuple[str, ScriptedWebModel], page: Page, screen: str
) -> None:
    """Signing out leaves nothing of the person in the page (name, sign-in box, conversations,
    messages, memory, statuses, drafts, token), and the next person in the same tab starts
    from an empty page of their own."""
    base, _model = scripted
    traces = leave_traces(page, base, f"first-{screen}")
    sign_out(page)
    expect(page.get_by_label("Your name")).to_have_value("")
    expect(page.get_by_label("Your name")).to_be_focused()
    expect(page.locator("#sign-in-notice")).to_have_text("")
    assert_no_trace(page, traces)

    sign_in(page, base, f"second-{screen}")
    expect(page.locator("#welcome")).to_be_visible()
    expect(page.locator("#messages li")).to_have_count(0)
    expect(page.locator("#conversations-empty")).to_be_attached()
    expect(page.locator("#conversation-list li")).to_have_count(0)
    expect(page.locator(".entries li")).to_have_count(0)
    expect(page.locator("#memory-notice")).to_have_text("")
    expect(page.locator("#chat-notice")).to_have_text("")
    expect(page.locator("#doc-user-usage")).to_have_text("0 / 1,375 characters")
    assert_no_trace(page, traces)
    screenshot(page, "next-person")


def test_an_answer_still_streaming_at_sign_out_never_reaches_the_next_person(
    scripted: tuple[str, ScriptedWebModel], page: Page, screen: str
) -> None:
    """Sign-out aborts the turn in flight: the rest of the previous person's answer and its
    memory outcome never appear on the page of the person who signs in next."""
    base, model = scripted
    question = f"a long private answer for {screen}"
    opening = "The private answer begins here"
    answer_script = Scripted(f"{opening} and then goes on about Bluebird for a while.")
    gate = answer_script.gate(len(opening.split()))
    model.answers[question] = answer_script
    try:
        token = sign_in(page, base, f"streamer-{screen}")
        answer = send(page, question)
        expect(answer.locator(".content")).to_have_text(opening)
        sign_out(page)
        sign_in(page, base, f"after-streamer-{screen}")
        gate.set()
        conversation_id = conversations_of(base, token)[0]["id"]
        # The server is done with the aborted turn once it has stored its partial answer.
        eventually(
            lambda: (
                conversation(base, token, conversation_id)["messages"][-1]["role"] == "assistant"
                or None
            )
        )
        expect(page.locator("#messages li")).to_have_count(0)
        assert "Bluebird" not in everything_on_the_page(page)
        assert opening not in everything_on_the_page(page)
    finally:
        answer_script.release()


def test_an_expired_token_ends_the_session_and_clears_everything(
    scripted: tuple[str, ScriptedWebModel], page: Page, screen: str
) -> None:
    """When the API answers 401 (here: the server's own answer to an expired token), the page
    returns to sign-in, says why once, and keeps nothing of the person."""
    base, _model = scripted
    name = f"expiring-{screen}"
    traces = leave_traces(page, base, name)
    expired = dev_token(name, secret=TEST_SECRET, ttl=-120)

    def with_expired_token(route: Route) -> None:
        route.continue_(headers={**route.request.headers, "authorization": f"Bearer {expired}"})

    page.route("**/v1/memory", with_expired_token)
    page.get_by_role("button", name="Refresh memory").click()
    expect(page.locator("#sign-in")).to_be_visible()
    expect(page.locator("#sign-in-notice [role=alert]")).to_have_text(
        "Your session has ended. Please sign in again."
    )
    expect(page.get_by_label("Your name")).to_have_value("")
    assert_no_trace(page, traces)
    screenshot(page, "session-ended")


def test_a_second_user_sees_none_of_it(
    scripted: tuple[str, ScriptedWebModel], browser: Browser, page: Page, screen: str
) -> None:
    """Another person, in another browser profile, sees no entry and no conversation of the
    first."""
    base, _model = scripted
    sign_in(page, base, f"frank-{screen}")
    expect(send(page, FACT)).to_have_attribute("data-state", "done")
    settled(page, 1)
    expect(user_entries(page)).to_have_count(1)

    other = new_context(browser, screen)
    try:
        second = other.new_page()
        errors = guard(second)
        token = sign_in(second, base, f"grace-{screen}")
        expect(second.locator("#conversations-empty")).to_be_attached()
        expect(second.locator("#conversation-list li")).to_have_count(0)
        expect(second.locator(".entries li")).to_have_count(0)
        assert memory_of(base, token)["user"]["entries"] == []
        assert errors == []
    finally:
        other.close()


@pytest.mark.parametrize("screen", ["desktop"], indirect=True)
def test_dev_sign_in_is_a_cookie_every_tab_shares_and_sign_out_reaches_them_all(
    scripted: tuple[str, ScriptedWebModel], context: BrowserContext, page: Page, screen: str
) -> None:
    """Dev mode's name-only sign-in sets the same HttpOnly session cookie as the provider's: a
    reload and a second tab are signed in without asking, no token is in the page's storage, and
    sign-out in one tab shows the sign-in card in the other and ends the session on the server."""
    base, _model = scripted
    name = f"tabs-{screen}"
    sign_in(page, base, name)
    held = "() => [sessionStorage.length, document.cookie, JSON.stringify({...localStorage})]"
    assert page.evaluate(held)[:2] == [0, ""]
    assert "eyJ" not in page.evaluate(held)[2]  # no JWT anywhere a script can read
    page.reload()
    expect(page.locator("#account-name")).to_have_text(name)
    other = context.new_page()
    errors = guard(other)
    other.goto(base)
    expect(other.locator("#account-name")).to_have_text(name)
    copied = context.cookies()

    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#sign-in")).to_be_visible()
    expect(other.locator("#sign-in")).to_be_visible()
    expect(other.locator("#sign-in-notice")).to_contain_text("You signed out in another tab.")
    expect(other.locator("#account-name")).to_have_text("")
    context.add_cookies(copied)  # type: ignore[arg-type]
    assert context.request.get(f"{base}/v1/memory").status == 401
    assert errors == []
