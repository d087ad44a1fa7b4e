"""The layout in Debian's Chromium at laptop and phone size: the page itself never scrolls, each
area scrolls on its own, the composer (Send/Stop) is always in view, and the message list follows
a streaming answer unless the person scrolled up.

Answers come from a scripted model with gates, so a test looks at the page mid-answer without
racing the stream.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Locator, Page, expect

from app.main import create_app
from tests.e2e.conftest import e2e_settings, screenshot, sqlite_file
from tests.e2e.scripted_web import Scripted, ScriptedWebModel
from tests.e2e.web import (
    assert_page_does_not_scroll,
    at_bottom,
    box,
    chat_via_api,
    close_drawer,
    fill_memory,
    inside_viewport,
    is_phone,
    open_conversations,
    open_memory,
    reachable,
    scrolls_on_its_own,
    send,
    settled,
    sign_in,
)
from tests.support.server import live_server

pytestmark = pytest.mark.browser

LAST_LINE = "This is the very last line of the long answer."
LONG_QUESTION = "write me something long"
LONG_ANSWER = (
    "\n\n".join(
        f"Paragraph {number}: the answer goes on, line after line, so that it is far taller "
        "than any window and the list has to follow it."
        for number in range(1, 41)
    )
    + f"\n\n{LAST_LINE}"
)


def part(name: str, words: int) -> str:
    return " ".join(f"{name}{number}" for number in range(words)) + f" {name}-end"


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ScriptedWebModel]]:
    model = ScriptedWebModel({LONG_QUESTION: Scripted(LONG_ANSWER, delay_seconds=0.002)})
    url = sqlite_file(tmp_path_factory.mktemp("layout"))
    with live_server(create_app(e2e_settings(url), model_transport=model)) as base:
        yield base, model


def gated_answer(model: ScriptedWebModel, question: str) -> Scripted:
    """Three parts of 250 words; the stream waits after the first and after the second."""
    first, second, third = part("alpha", 250), part("bravo", 250), part("charlie", 250)
    scripted = Scripted(f"{first} {second} {third}")
    scripted.gate(len(first.split()))
    scripted.gate(len(first.split()) + len(second.split()))
    model.answers[question] = scripted
    return scripted


def wait_for_text(page: Page, answer: Locator, word: str) -> None:
    handle = answer.locator(".content").element_handle()
    page.wait_for_function(
        "([element, word]) => element.textContent.includes(word)", arg=[handle, word]
    )


def scroll_up(page: Page, scroller: Locator, pixels: int) -> None:
    """Scrolls the list up as a person does: the wheel over it (touch emulation takes it too)."""
    rect = box(scroller)
    page.mouse.move(rect["x"] + rect["width"] / 2, rect["y"] + rect["height"] / 2)
    page.mouse.wheel(0, -pixels)
    page.wait_for_function(
        "(element) => element.scrollHeight - element.scrollTop - element.clientHeight > 100",
        arg=scroller.element_handle(),
    )


def test_the_last_line_of_a_long_answer_is_in_view_when_it_finishes(
    scripted: tuple[str, ScriptedWebModel], page: Page, screen: str
) -> None:
    """The list follows the answer to its end: its last line is visible above the composer, and
    the page around it has not moved."""
    base, _model = scripted
    sign_in(page, base, f"long-{screen}")
    answer = send(page, LONG_QUESTION)
    expect(answer).to_have_attribute("data-state", "done")
    settled(page, 1)

    scroller = page.locator("#message-scroller")
    last_line = answer.locator(".content p").last
    expect(last_line).to_have_text(LAST_LINE)
    assert scrolls_on_its_own(scroller)
    assert at_bottom(scroller)
    line, view, composer = box(last_line), box(scroller), box(page.locator("#composer"))
    assert line["y"] >= view["y"] and line["y"] + line["height"] <= view["y"] + view["height"]
    assert view["y"] + view["height"] <= composer["y"] + 1
    assert inside_viewport(page, page.locator("#composer"))
    assert box(page.locator(".chat-head"))["y"] == 0
    assert_page_does_not_scroll(page)
    screenshot(page, "long-answer-finished")


def test_the_page_never_scrolls_and_each_area_scrolls_on_its_own(
    scripted: tuple[str, ScriptedWebModel], page: Page, screen: str
) -> None:
    """With a long answer, many conversations and a full memory, the page as a whole has nothing
    to scroll: the messages, the conversation list and the memory panel each scroll themselves."""
    base, _model = scripted
    token = sign_in(page, base, f"areas-{screen}")
    fill_memory(base, token)
    for number in range(30):
        chat_via_api(base, token, f"conversation number {number}")
    page.reload()
    expect(page.locator("#doc-memory-entries li")).to_have_count(30)
    expect(send(page, LONG_QUESTION)).to_have_attribute("data-state", "done")
    settled(page, 1)

    assert scrolls_on_its_own(page.locator("#message-scroller"))
    assert_page_does_not_scroll(page)
    open_conversations(page)
    assert scrolls_on_its_own(page.locator("#conversation-scroll"))
    assert_page_does_not_scroll(page)
    close_drawer(page)
    open_memory(page)
    assert scrolls_on_its_own(page.locator("#memory-scroll"))
    assert_page_does_not_scroll(page)
    close_drawer(page)

    # Wheeling over the header, where nothing scrolls, moves nothing either.
    header = box(page.locator(".chat-head"))
    page.mouse.move(header["x"] + 20, header["y"] + header["height"] / 2)
    page.mouse.wheel(0, 600)
    assert_page_does_not_scroll(page)
    assert box(page.locator(".chat-head"))["y"] == 0


def test_the_composer_is_in_view_with_a_full_memory_panel(
    scripted: tuple[str, ScriptedWebModel], page: Page, screen: str
) -> None:
    """However full the memory panel, Send stays in view and reachable, and the panel's own
    controls (down to Forget everything) are reached by scrolling the panel, not the page."""
    base, _model = scripted
    token = sign_in(page, base, f"full-{screen}")
    fill_memory(base, token)
    page.reload()
    expect(page.locator("#doc-user-entries li")).to_have_count(20)
    expect(page.locator("#doc-memory-entries li")).to_have_count(30)

    open_memory(page)
    panel = page.locator("#memory-scroll")
    assert scrolls_on_its_own(panel)
    forget = page.get_by_role("button", name="Forget everything")
    forget.scroll_into_view_if_needed()
    assert inside_viewport(page, forget) and reachable(forget)
    assert at_bottom(panel)
    assert_page_does_not_scroll(page)
    screenshot(page, "full-memory-panel")
    close_drawer(page)

    send_button = page.get_by_role("button", name="Send")
    assert inside_viewport(page, page.locator("#composer"))
    assert reachable(send_button)
    answer = send(page, "remember that I like tea")
    expect(answer).to_have_attribute("data-state", "done")
    settled(page, 1)
    assert inside_viewport(page, page.locator("#composer")) and reachable(send_button)
    assert_page_does_not_scroll(page)


def test_following_pauses_when_scrolled_up_and_jump_to_latest_resumes(
    scripted: tuple[str, ScriptedWebModel], page: Page, screen: str
) -> None:
    """While an answer streams the list stays on the newest text; once the person scrolls up it
    stays where they are reading and offers "Jump to latest", which brings them back and
    following resumes."""
    base, model = scripted
    question = f"stream in three parts for {screen}"
    answer_script = gated_answer(model, question)
    try:
        sign_in(page, base, f"follow-{screen}")
        scroller = page.locator("#message-scroller")
        jump = page.get_by_role("button", name="Jump to latest")
        answer = send(page, question)
        wait_for_text(page, answer, "alpha-end")
        assert scrolls_on_its_own(scroller)
        page.wait_for_function(
            "(element) => element.scrollHeight - element.scrollTop - element.clientHeight <= 2",
            arg=scroller.element_handle(),
        )
        expect(jump).to_be_hidden()

        scroll_up(page, scroller, 500)
        expect(jump).to_be_visible()
        reading = scroller.evaluate("element => element.scrollTop")
        assert inside_viewport(page, jump) and reachable(jump)
        screenshot(page, "scrolled-up-while-streaming")

        next(iter(answer_script.gates.values())).set()
        wait_for_text(page, answer, "bravo-end")
        assert abs(scroller.evaluate("element => element.scrollTop") - reading) <= 1
        assert not at_bottom(scroller)
        expect(jump).to_be_visible()

        jump.click()
        expect(jump).to_be_hidden()
        assert at_bottom(scroller)
        expect(page.get_by_label("Message", exact=True)).to_be_focused()

        answer_script.release()
        expect(answer).to_have_attribute("data-state", "done")
        wait_for_text(page, answer, "charlie-end")
        assert at_bottom(scroller)
        expect(jump).to_be_hidden()
    finally:
        answer_script.release()


def test_stop_stays_reachable_while_an_answer_streams(
    scripted: tuple[str, ScriptedWebModel], page: Page, screen: str
) -> None:
    """During a long answer Stop is on screen and nothing covers it, whether the person follows
    the answer or scrolls back to the top to read; it ends the turn."""
    base, model = scripted
    question = f"a long answer to stop on {screen}"
    answer_script = gated_answer(model, question)
    try:
        sign_in(page, base, f"stopper-{screen}")
        answer = send(page, question)
        wait_for_text(page, answer, "alpha-end")
        stop = page.get_by_role("button", name="Stop")
        assert inside_viewport(page, stop) and reachable(stop)
        if is_phone(page):
            assert box(stop)["y"] + box(stop)["height"] <= 844

        page.locator("#message-scroller").evaluate("element => element.scrollTo(0, 0)")
        expect(page.get_by_role("button", name="Jump to latest")).to_be_visible()
        assert inside_viewport(page, stop) and reachable(stop)
        assert_page_does_not_scroll(page)
        next(iter(answer_script.gates.values())).set()
        wait_for_text(page, answer, "bravo-end")
        assert inside_viewport(page, stop) and reachable(stop)
        screenshot(page, "stop-while-streaming")
        stop.click()
        expect(answer).to_have_attribute("data-state", "stopped")
        expect(page.get_by_role("button", name="Send")).to_be_visible()
    finally:
        answer_script.release()


@pytest.mark.parametrize("screen", ["phone"], indirect=True)
def test_the_side_panels_are_drawers_on_a_phone(
    scripted: tuple[str, ScriptedWebModel], page: Page, screen: str
) -> None:
    """On a phone the conversation list and the memory panel open over the chat: focus moves
    into the drawer, the chat behind it is inert, and Escape or the backdrop closes it and
    returns focus to the button that opened it."""
    base, _model = scripted
    sign_in(page, base, "drawers")
    chat = page.locator("#chat")
    for name, panel, close_with in (
        ("Conversations", "#conversations", "escape"),
        ("Memory", "#memory", "backdrop"),
    ):
        toggle = page.get_by_role("button", name=name, exact=True)
        expect(page.locator(panel)).to_be_hidden()
        expect(toggle).to_have_attribute("aria-expanded", "false")
        toggle.click()
        expect(page.locator(panel)).to_be_visible()
        expect(toggle).to_have_attribute("aria-expanded", "true")
        expect(page.locator(f"{panel} [data-close]")).to_be_focused()
        assert chat.evaluate("element => element.inert") is True
        if close_with == "escape":
            page.keyboard.press("Escape")
        else:
            page.mouse.click(20, 400)  # the backdrop left of the memory drawer
        expect(page.locator(panel)).to_be_hidden()
        expect(toggle).to_be_focused()
        assert chat.evaluate("element => element.inert") is False


@pytest.mark.parametrize("screen", ["desktop"], indirect=True)
def test_the_memory_panel_folds_away_on_a_wide_screen(
    scripted: tuple[str, ScriptedWebModel], page: Page, screen: str
) -> None:
    """On a wide screen the memory panel is a column that the Memory button folds away (the
    chat widens) and brings back; the choice outlives a reload."""
    base, _model = scripted
    sign_in(page, base, "folder")
    toggle = page.get_by_role("button", name="Memory", exact=True)
    expect(toggle).to_have_attribute("aria-expanded", "true")
    narrow_chat = box(page.locator("#chat"))["width"]
    toggle.click()
    expect(page.locator("#memory")).to_be_hidden()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    assert box(page.locator("#chat"))["width"] > narrow_chat
    page.reload()
    expect(page.locator("#account-name")).to_have_text("folder")
    expect(page.locator("#memory")).to_be_hidden()
    page.get_by_role("button", name="Memory", exact=True).click()
    expect(page.locator("#memory")).to_be_visible()
    assert abs(box(page.locator("#chat"))["width"] - narrow_chat) <= 1
