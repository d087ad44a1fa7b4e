"""The web client on the second day (issue 34), in Debian's Chromium at 390, 900 and 1280 px, in
light and dark: statuses that say what happened and change when it changes, a URL per
conversation, regenerate and edit with the earlier versions kept, titles, the memory panel's
markdown, origins and contrast, and a readable layout between phone and laptop.

One server for the module. Each test runs at the three widths; the colour scheme alternates
between tests (and between widths) so that every width is seen in both schemes without running
every test six times.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.e2e.conftest import guard, viewed_page, views
from tests.e2e.web import (
    REMEMBER,
    SAVED_ENTRY,
    at_bottom,
    box,
    close_drawer,
    open_conversations,
    open_memory,
    send,
    settled,
    sign_in,
    sign_out,
    user_entries,
    wait_for_growth,
)

pytestmark = pytest.mark.browser

ASK_ANSWER = "I'll ask you before saving that."
TITLE = "I prefer short answers"


LIGHT_FIRST = views("light", "dark", "light")
DARK_FIRST = views("dark", "light", "dark")


@pytest.fixture
def page(browser: Browser, view: tuple[str, str]) -> Iterator[Page]:
    yield from viewed_page(browser, view)


def name_for(view: tuple[str, str], who: str) -> str:
    return f"{who}-{view[0]}-{view[1]}"


def api(base: str, token: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    response = httpx.request(
        method, f"{base}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=10, **kwargs
    )
    response.raise_for_status()
    return response


def memory_chip(answer: Locator) -> Locator:
    return answer.locator(".memory-chip")


def pathname(page: Page) -> str:
    return str(page.evaluate("() => location.pathname"))


# -- 1. honest statuses ----------------------------------------------------------------------


@pytest.mark.parametrize("view", LIGHT_FIRST, indirect=True)
def test_under_ask_the_answer_chip_card_origin_and_toasts_say_what_happened(
    server: str, page: Page, view: tuple[str, str]
) -> None:
    """With "Ask before saving" the answer says it will ask, the chip waits, the card says what
    would be added; Accept turns the chip into "Saved after your approval" and the origin says
    approved; Undo says what it undid and the chip says so; a second proposal rejected reads
    "Not saved: you rejected it"; a removal made in the panel is listed as removed by you."""
    token = sign_in(page, server, name_for(view, "ask"))
    api(server, token, "PUT", "/v1/memory/settings", json={"save_mode": "ask"})
    answer = send(page, REMEMBER)
    settled(page, 1)
    expect(answer.locator(".content")).to_have_text(ASK_ANSWER)
    expect(memory_chip(answer)).to_have_text("Waiting for your approval")
    open_memory(page)
    card = page.locator("#proposal-list li").first
    expect(card.locator(".change-text")).to_have_text(f"Add to About you: {SAVED_ENTRY}")
    expect(card).to_contain_text(f"Proposed from “{TITLE}”")
    card.get_by_role("button", name=re.compile("^Accept")).click()
    expect(user_entries(page)).to_have_text([SAVED_ENTRY])
    expect(page.locator("#doc-user-entries .entry-origin summary")).to_have_text(
        f"from “{TITLE}”, approved by you, just now"
    )
    expect(memory_chip(answer)).to_have_text("Saved after your approval")

    page.locator("#change-list li").first.get_by_role("button", name=re.compile("^Undo")).click()
    expect(page.locator("#memory-notice")).to_contain_text("Undone: 1 entry removed.")
    expect(memory_chip(answer)).to_have_text("Saved after your approval, then undone")

    close_drawer(page)
    second = send(page, "remember that my name is Ann")
    settled(page, 2)
    expect(memory_chip(second)).to_have_text("Waiting for your approval")
    open_memory(page)
    page.locator("#proposal-list li").first.get_by_role(
        "button", name=re.compile("^Reject")
    ).click()
    expect(memory_chip(second)).to_have_text("Not saved: you rejected it")

    api(server, token, "PUT", "/v1/memory/settings", json={"save_mode": "auto"})
    page.locator("#doc-user-add").fill("Likes tea")
    page.get_by_role("button", name="Add entry to “About you”").click()
    expect(user_entries(page)).to_have_text(["Likes tea"])
    page.get_by_role("button", name="Remove: Likes tea").click()
    expect(page.locator("#change-list li .change-meta").first).to_contain_text("Removed by you")


def test_search_marks_never_reach_the_answer(server: str, browser: Browser) -> None:
    """The offline model quotes what conversation_search gave it: no « » in the answer, while
    the person's own search view still marks the match."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    sign_in(page, server, "marks")
    send(page, "the zebra crossing is on Elm street")
    settled(page, 1)
    page.get_by_role("button", name="New chat").click()
    answer = send(page, "what did we discuss about zebra")
    settled(page, 2)
    expect(answer.locator(".content")).to_contain_text("zebra crossing")
    assert "«" not in answer.locator(".content").inner_text()
    page.get_by_label("Search conversations").fill("zebra")
    page.get_by_label("Search conversations").press("Enter")
    expect(page.locator("#search-results mark").first).to_have_text(re.compile("zebra", re.I))
    context.close()


# -- 2. conversation URLs ----------------------------------------------------------------------


@pytest.mark.parametrize("view", DARK_FIRST, indirect=True)
def test_each_conversation_has_an_address_that_reload_back_and_forward_follow(
    server: str, page: Page, view: tuple[str, str], browser: Browser
) -> None:
    """A first answer gives the chat the address /c/<id>; a reload opens it again; New chat is
    `/`; Back returns to the conversation and Forward to the new chat; another person opening
    the address sees "Conversation not found", not an error."""
    sign_in(page, server, name_for(view, "url"))
    send(page, "Name a colour")
    settled(page, 1)
    address = pathname(page)
    assert re.fullmatch(r"/c/[0-9a-f-]{36}", address), address
    page.reload()
    expect(page.locator("#messages li.user .content")).to_have_text(["Name a colour"])
    assert pathname(page) == address
    expect(page).to_have_title(re.compile("^Name a colour"))

    close_drawer(page)
    new_chat = page.locator(
        "#new-conversation-narrow" if view[0] != "1280" else "#new-conversation"
    )
    new_chat.click()
    expect(page.locator("#welcome")).to_be_visible()
    assert pathname(page) == "/"
    page.go_back()
    expect(page.locator("#messages li.user .content")).to_have_text(["Name a colour"])
    assert pathname(page) == address
    page.go_forward()
    expect(page.locator("#welcome")).to_be_visible()

    stranger = browser.new_context(viewport=page.viewport_size)
    other = stranger.new_page()
    errors = guard(other)
    other.goto(server + address)
    other.get_by_label("Your name").fill(name_for(view, "stranger"))
    other.get_by_role("button", name="Sign in").click()
    expect(other.get_by_role("heading", name="Conversation not found")).to_be_visible()
    expect(other.locator("#messages li.user")).to_have_count(0)
    expect(other.locator("#chat-notice [role=alert]")).to_be_empty()
    other.get_by_role("button", name="Start a new chat").click()
    expect(other.locator("#welcome")).to_be_visible()
    assert errors == []
    stranger.close()


# -- 3 and 4. regenerate, edit, titles -------------------------------------------------------


@pytest.mark.parametrize("view", LIGHT_FIRST, indirect=True)
def test_regenerate_and_edit_keep_earlier_versions_and_titles_can_be_renamed(
    server: str, page: Page, view: tuple[str, str]
) -> None:
    """The title is made from the first message; Regenerate folds the first answer away as an
    earlier version (kept after a reload); editing the message folds that turn too and sends
    the edited text; Rename (in the chat's header) changes the title in the list and the tab."""
    token = sign_in(page, server, name_for(view, "regen"))
    first = send(page, "Please can you help me plan a trip to Lisbon in May?")
    settled(page, 1)
    first.get_by_role("button", name="Regenerate answer").click()
    settled(page, 2)
    expect(page.locator("#messages > li.assistant")).to_have_count(1)
    folds = page.locator("#messages > .earlier-versions")
    expect(folds).to_have_count(1)
    expect(folds.locator("summary")).to_have_text("Earlier version (replaced)")

    user = page.locator("#messages > li.user").first
    user.get_by_role("button", name="Edit message").click()
    page.get_by_label("Edit your message").fill("Plan a weekend in Porto")
    page.get_by_role("button", name="Send", exact=True).first.click()
    settled(page, 3)
    expect(page.locator("#messages > li.user .content")).to_have_text(["Plan a weekend in Porto"])
    expect(folds).to_have_count(2)

    page.reload()
    expect(page.locator("#messages > li.user .content")).to_have_text(["Plan a weekend in Porto"])
    expect(page.locator("#messages > .earlier-versions")).to_have_count(2)
    conversation_id = pathname(page).removeprefix("/c/")
    stored = api(server, token, "GET", f"/v1/conversations/{conversation_id}").json()
    assert [m["superseded_by"] is None for m in stored["messages"]] == [False] * 4 + [True] * 2

    open_conversations(page)
    title = page.locator("#conversation-list .open .label")
    expect(title).to_have_text(["Plan a trip to Lisbon in May"])
    close_drawer(page)
    page.get_by_role("button", name="Rename conversation").click()
    field = page.get_by_label("Conversation title")
    expect(field).to_have_value("Plan a trip to Lisbon in May")
    field.fill("Lisbon, then Porto")
    field.press("Enter")
    expect(page).to_have_title(re.compile("^Lisbon, then Porto"))
    open_conversations(page)
    expect(title).to_have_text(["Lisbon, then Porto"])


# -- 5. the memory panel ---------------------------------------------------------------------


def contrast(foreground: str, background: str) -> float:
    """WCAG contrast ratio of two `rgb(...)`/`rgba(...)` colours (the foreground's alpha
    composited over the background)."""

    def channels(color: str) -> list[float]:
        return [float(part) for part in re.findall(r"[\d.]+", color)]

    fg, bg = channels(foreground), channels(background)[:3]
    alpha = fg[3] if len(fg) > 3 else 1.0
    mixed = [alpha * f + (1 - alpha) * b for f, b in zip(fg[:3], bg, strict=True)]

    def luminance(rgb: list[float]) -> float:
        def linear(value: float) -> float:
            c = value / 255
            return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

        r, g, b = (linear(value) for value in rgb)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    light, dark = sorted((luminance(mixed), luminance(bg)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


ICON_AT_REST = """element => {
    let opacity = 1;
    for (let node = element; node; node = node.parentElement) {
        opacity *= Number(getComputedStyle(node).opacity);
    }
    const clear = ['rgba(0, 0, 0, 0)', 'transparent'];
    let back = element;
    while (back && clear.includes(getComputedStyle(back).backgroundColor)) {
        back = back.parentElement;
    }
    const color = getComputedStyle(element).color.match(/[\\d.]+/g).slice(0, 3);
    return [`rgba(${color.join(', ')}, ${opacity})`, getComputedStyle(back).backgroundColor];
}"""


@pytest.mark.parametrize("view", DARK_FIRST, indirect=True)
def test_memory_entries_render_as_safe_markdown_with_full_origins_and_visible_icons(
    server: str, page: Page, view: tuple[str, str]
) -> None:
    """An entry's markdown is rendered (bold, code) and its raw HTML shown as text; its origin
    opens to every change that touched it; the entry's icons at rest meet WCAG AA's 3:1 for
    controls; the panel starts at the top again after sign-out."""
    token = sign_in(page, server, name_for(view, "panel"))
    entry = "Prefers **bold** and `code` <img src=x onerror=alert(1)>"
    for start in range(0, 25, 20):
        operations = [
            {"target": "memory", "action": "add", "content": f"Project note {n:02d}: long enough."}
            for n in range(start, min(start + 20, 25))
        ]
        api(server, token, "POST", "/v1/memory/operations", json={"operations": operations})
    api(
        server,
        token,
        "POST",
        "/v1/memory/operations",
        json={"operations": [{"target": "user", "action": "add", "content": entry}]},
    )
    api(
        server,
        token,
        "POST",
        "/v1/memory/operations",
        json={
            "operations": [
                {
                    "target": "user",
                    "action": "replace",
                    "match": "Prefers",
                    "content": entry + " now",
                }
            ]
        },
    )
    page.reload()
    open_memory(page)
    text = page.locator("#doc-user-entries .entry-text").first
    expect(text.locator("strong")).to_have_text("bold")
    expect(text.locator("code")).to_have_text("code")
    expect(text.locator("img")).to_have_count(0)
    expect(text).to_contain_text("<img src=x onerror=alert(1)>")

    origin = page.locator("#doc-user-entries .entry-origin").first
    expect(origin.locator("summary")).to_have_text("edited by you, just now")
    origin.locator("summary").click()
    expect(origin.locator("li")).to_have_count(2)
    expect(origin.locator("li").first).to_contain_text("Changed in About you")
    expect(origin.locator("li").last).to_contain_text("Added to About you")

    for button in page.locator("#doc-memory-entries .entry-actions .icon-button").all()[:2]:
        foreground, background = button.evaluate(ICON_AT_REST)
        assert contrast(foreground, background) >= 3.0, (foreground, background)

    page.locator("#memory-scroll").evaluate(
        "element => { element.scrollTop = element.scrollHeight; }"
    )
    assert page.locator("#memory-scroll").evaluate("element => element.scrollTop") > 0
    close_drawer(page)
    sign_out(page)
    sign_in(page, server, name_for(view, "panel-next"))
    open_memory(page)
    assert page.locator("#memory-scroll").evaluate("element => element.scrollTop") == 0


# -- 6. layout between phone and laptop --------------------------------------------------------


LONG = "tell me a long story"


@pytest.mark.parametrize("width", [768, 900, 1024])
def test_between_768_and_1024_px_lines_stay_readable_and_no_label_is_cut(
    server: str, browser: Browser, width: int
) -> None:
    """An answer's lines are at most about 70 characters wide (its box ≤ 760 px) and no
    visible button label or heading is cut off."""
    context = browser.new_context(viewport={"width": width, "height": 800})
    page = context.new_page()
    errors = guard(page)
    sign_in(page, server, f"layout-{width}")
    answer = send(page, "what do you remember")
    settled(page, 1)
    assert box(answer.locator(".content"))["width"] <= 760
    cut = page.evaluate(
        """() => [...document.querySelectorAll('button .label, h1, h2, h3, .badge, .usage-text')]
            .filter((element) => element.offsetParent !== null
                && getComputedStyle(element).clipPath === 'none'
                && (element.scrollWidth > element.clientWidth + 1))
            .map((element) => element.textContent.trim())"""
    )
    assert cut == [], cut
    assert errors == []
    context.close()


# -- 7. where the chat is: bottom after the panel closes, the pill off the Stopped line --------


def distance(scroller: Locator) -> float:
    """How far the scroller is from its bottom, in pixels."""
    return float(
        scroller.evaluate(
            "element => element.scrollHeight - element.scrollTop - element.clientHeight"
        )
    )


def test_closing_the_panel_keeps_the_chat_at_its_bottom_and_the_pill_off_the_stopped_line(
    server: str, browser: Browser
) -> None:
    """At 1024 px (the panel is a column): closing and opening the memory panel while an answer
    streams rewraps the chat, which keeps following the latest line. A stopped answer's
    "Stopped" note is not covered by the "Jump to latest" pill when the person is a little
    above the bottom."""
    context = browser.new_context(viewport={"width": 1024, "height": 480}, color_scheme="dark")
    page = context.new_page()
    errors = guard(page)
    sign_in(page, server, "bottom")
    for number in range(1, 4):  # the offline notice, three times: taller than the window
        send(page, f"hello {number}")
        settled(page, number)
    scroller = page.locator("#message-scroller")
    assert at_bottom(scroller)
    answer = send(page, LONG)
    grown = wait_for_growth(page, answer, 200)
    for _ in range(2):  # close the panel, then open it again, while the answer streams on
        page.get_by_role("button", name="Memory", exact=True).click()
        grown = wait_for_growth(page, answer, grown + 300)
        expect(page.get_by_role("button", name="Jump to latest")).to_be_hidden()
        assert distance(scroller) <= 32, distance(scroller)

    page.get_by_role("button", name="Stop").click()
    note = answer.locator(".note")
    expect(note).to_have_text("Stopped: this answer is incomplete.")
    scroller.evaluate(
        "element => { element.scrollTop = element.scrollHeight - element.clientHeight - 48; }"
    )
    pill = page.get_by_role("button", name="Jump to latest")
    expect(pill).to_be_visible()
    pill_box, note_box = box(pill), box(note)
    overlap = not (
        note_box["y"] + note_box["height"] <= pill_box["y"]
        or pill_box["y"] + pill_box["height"] <= note_box["y"]
    )
    assert not overlap, (note_box, pill_box)
    assert errors == []
    context.close()
