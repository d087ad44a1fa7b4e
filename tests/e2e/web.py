"""What a person does in the web client, as test steps; and what the page shows, as facts.

Shared by the browser tests. Steps work at both screen sizes: on a phone the conversation list
and the memory panel are drawers that a step opens first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from playwright.sync_api import FloatRect, Locator, Page, expect

REMEMBER = "remember that I prefer short answers"
SAVED_ENTRY = "The user prefers short answers."
LAST_TURN_SAVED = "Last turn: Saved: 1 new entry."
ALREADY_SAVED = "Already saved: nothing changed."
T = TypeVar("T")


def eventually(probe: Callable[[], T | None], *, timeout: float = 15.0) -> T:
    """Polls `probe` until it returns a value (server-side state settles after a disconnect)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("the expected state was not reached before the deadline")
        time.sleep(0.05)


def is_phone(page: Page) -> bool:
    return (page.viewport_size or {"width": 1280})["width"] <= 900


def sign_in(page: Page, base: str, name: str) -> str:
    """Signs in with the dev form (the server sets the session cookie); a dev Bearer token for
    the same person, for the test's own API calls (the page holds no token)."""
    page.goto(base)
    page.get_by_label("Your name").fill(name)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#account-name")).to_have_text(name)
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    response = httpx.post(f"{base}/dev/token", json={"sub": name}, timeout=10)
    response.raise_for_status()
    return str(response.json()["access_token"])


def send(page: Page, text: str) -> Locator:
    """Sends a message; the assistant's answer to it."""
    page.get_by_label("Message", exact=True).fill(text)
    page.get_by_role("button", name="Send").click()
    return page.locator("#messages li.assistant").last


def settled(page: Page, turns: int) -> None:
    """Waits until `turns` turns are settled: answer, conversation list and memory all shown."""
    expect(page.locator("body")).to_have_attribute("data-turns", str(turns))


def _close_drawer_named(page: Page, name: str) -> None:
    if is_phone(page) and page.locator("#workspace").get_attribute(f"data-{name}") == "open":
        page.locator(f"#{name} [data-close]").click()
        expect(page.locator(f"#{name}")).to_be_hidden()


def open_memory(page: Page) -> None:
    """Makes the memory panel visible (a drawer on a phone)."""
    _close_drawer_named(page, "conversations")
    if is_phone(page) and page.locator("#workspace").get_attribute("data-memory") != "open":
        page.get_by_role("button", name="Memory", exact=True).click()
    expect(page.locator("#memory")).to_be_visible()
    expect(page.locator("#workspace")).to_have_attribute("data-memory", "open")


def open_conversations(page: Page) -> None:
    """Makes the conversation list visible (a drawer on a phone)."""
    _close_drawer_named(page, "memory")
    if is_phone(page) and page.locator("#workspace").get_attribute("data-conversations") != "open":
        page.get_by_role("button", name="Conversations", exact=True).click()
        expect(page.locator("#workspace")).to_have_attribute("data-conversations", "open")
    expect(page.locator("#conversations")).to_be_visible()


def close_drawer(page: Page) -> None:
    """Closes an open drawer (phone) and waits until it has slid out of the way."""
    if is_phone(page):
        page.keyboard.press("Escape")
        expect(page.locator("#scrim")).to_be_hidden()
        expect(page.locator("#conversations")).to_be_hidden()
        expect(page.locator("#memory")).to_be_hidden()


def sign_out(page: Page) -> None:
    open_conversations(page)
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#sign-in")).to_be_visible()


def user_entries(page: Page) -> Locator:
    return page.locator("#doc-user-entries li .entry-text")


def note_entries(page: Page) -> Locator:
    return page.locator("#doc-memory-entries li .entry-text")


def content_length(answer: Locator) -> int:
    return int(answer.locator(".content").evaluate("element => element.textContent.length"))


def wait_for_growth(page: Page, answer: Locator, beyond: int) -> int:
    """Waits until the streamed text is longer than `beyond` characters; returns its length."""
    handle = answer.locator(".content").element_handle()
    page.wait_for_function(
        "([element, beyond]) => element.textContent.length > beyond", arg=[handle, beyond]
    )
    return content_length(answer)


def box(locator: Locator) -> FloatRect:
    value = locator.bounding_box()
    assert value is not None, f"{locator} has no box (not rendered)"
    return value


def inside_viewport(page: Page, locator: Locator) -> bool:
    """The element's whole box lies within the window."""
    size = page.viewport_size
    assert size is not None
    rect = box(locator)
    return (
        rect["x"] >= 0
        and rect["y"] >= 0
        and rect["x"] + rect["width"] <= size["width"] + 0.5
        and rect["y"] + rect["height"] <= size["height"] + 0.5
    )


def reachable(locator: Locator) -> bool:
    """Nothing covers the element's centre: a click or tap there lands on it."""
    return bool(
        locator.evaluate(
            """element => {
                const rect = element.getBoundingClientRect();
                const [x, y] = [rect.x + rect.width / 2, rect.y + rect.height / 2];
                const hit = document.elementFromPoint(x, y);
                return hit !== null && (hit === element || element.contains(hit));
            }"""
        )
    )


def page_scroll(page: Page) -> dict[str, Any]:
    """How far the page as a whole can scroll, and has scrolled."""
    value: dict[str, Any] = page.evaluate(
        """() => ({
            overflowY: document.scrollingElement.scrollHeight - window.innerHeight,
            overflowX: document.scrollingElement.scrollWidth - window.innerWidth,
            scrollY: window.scrollY,
        })"""
    )
    return value


def assert_page_does_not_scroll(page: Page) -> None:
    scroll = page_scroll(page)
    assert scroll["overflowY"] <= 0, scroll
    assert scroll["overflowX"] <= 0, scroll
    assert scroll["scrollY"] == 0, scroll


def scrolls_on_its_own(locator: Locator) -> bool:
    """The element has more content than room, and scrolls it itself."""
    return bool(
        locator.evaluate(
            """element => element.scrollHeight > element.clientHeight + 1
                && ['auto', 'scroll'].includes(getComputedStyle(element).overflowY)"""
        )
    )


def at_bottom(locator: Locator) -> bool:
    return bool(
        locator.evaluate(
            "element => element.scrollHeight - element.scrollTop - element.clientHeight <= 2"
        )
    )


def add_entries(base: str, token: str, target: str, entries: list[str]) -> dict[str, Any]:
    """Adds entries through the API (20 per batch, the API's limit); the new memory state."""
    body: dict[str, Any] = {}
    for start in range(0, len(entries), 20):
        operations = [
            {"target": target, "action": "add", "content": entry}
            for entry in entries[start : start + 20]
        ]
        response = httpx.post(
            f"{base}/v1/memory/operations",
            json={"operations": operations},
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        response.raise_for_status()
        body = response.json()
    return body


def conversations_of(base: str, token: str) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{base}/v1/conversations", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    response.raise_for_status()
    conversations: list[dict[str, Any]] = response.json()["conversations"]
    return conversations


def conversation(base: str, token: str, conversation_id: str) -> dict[str, Any]:
    response = httpx.get(
        f"{base}/v1/conversations/{conversation_id}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def chat_via_api(base: str, token: str, message: str) -> None:
    """One whole turn through the API (its stream read to the end), as another client would."""
    with httpx.stream(
        "POST",
        f"{base}/v1/chat",
        json={"message": message},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    ) as response:
        response.raise_for_status()
        for _line in response.iter_lines():
            pass


def fill_memory(base: str, token: str) -> dict[str, Any]:
    """Both documents nearly full (many entries): the panel is much taller than any window."""
    add_entries(
        base,
        token,
        "user",
        [
            f"Fact {number:02d} about the person, long enough to fill a line."
            for number in range(20)
        ],
    )
    return add_entries(
        base,
        token,
        "memory",
        [
            f"Project note {number:02d}: a convention the team follows every week."
            for number in range(30)
        ],
    )
