"""The web client in daily use (issue 54), in Debian's Chromium at 390, 900 and 1280 px, light
and dark: replaced answers keep their place and offer their versions after a reload, a tap right
after a reload is never lost, headers and dialogs keep their labels and buttons in view, a
refused message stays with the person, and a memory entry's edit saves on Enter and survives a
re-render.

One server for the module; each test runs at the three widths, the colour scheme alternating.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, expect

from tests.e2e.conftest import viewed_page, views
from tests.e2e.web import (
    add_entries,
    box,
    inside_viewport,
    is_phone,
    open_memory,
    reachable,
    scrolls_on_its_own,
    send,
    settled,
    sign_in,
    user_entries,
)

pytestmark = pytest.mark.browser

LIGHT_FIRST = views("light", "dark", "light")
DARK_FIRST = views("dark", "light", "dark")


@pytest.fixture
def page(browser: Browser, view: tuple[str, str]) -> Iterator[Page]:
    yield from viewed_page(browser, view)


def name_for(view: tuple[str, str], who: str) -> str:
    return f"{who}-{view[0]}-{view[1]}"


TOP_LEVEL = """list => [...list.children].map((item) => item.classList.contains('earlier-versions')
    ? 'fold:' + [...item.querySelectorAll(':scope > details > ol > li')]
        .map((inner) => (inner.classList.contains('user') ? 'user' : 'answer')).join('+')
    : (item.classList.contains('user') ? 'user:' : 'answer:')
        + item.querySelector('.content').textContent.slice(0, 40))"""


def top_level(page: Page) -> list[str]:
    order: list[str] = page.locator("#messages").evaluate(TOP_LEVEL)
    return order


# -- 2. replaced answers after a reload -------------------------------------------------------


@pytest.mark.parametrize("view", LIGHT_FIRST, indirect=True)
def test_replaced_versions_keep_their_place_and_switch_after_a_reload(
    server: str, page: Page, view: tuple[str, str]
) -> None:
    """Two regenerations and an edit: after a reload every earlier version sits where it sat
    live (just above the version that replaced it, the latest answer last); the regenerated
    answer offers `< 3/3 >`, whose Previous shows the replaced answers' text in its place."""
    sign_in(page, server, name_for(view, "versions"))
    send(page, "Tell me about Lisbon")
    settled(page, 1)
    send(page, "And about its trams?")
    settled(page, 2)
    page.locator("#messages > li.assistant").last.get_by_role(
        "button", name="Regenerate answer"
    ).click()
    settled(page, 3)
    page.locator("#messages > li.assistant").last.get_by_role(
        "button", name="Regenerate answer"
    ).click()
    settled(page, 4)
    latest = page.locator("#messages > li.assistant").last
    switcher = latest.get_by_role("group", name="Versions of this answer")
    expect(switcher.locator(".version-count")).to_have_text("3/3")
    live = top_level(page)
    assert [item.split(":")[0] for item in live] == [
        "user",
        "answer",
        "fold",
        "fold",
        "user",
        "answer",
    ], live

    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#messages > li.assistant")).to_have_count(2)
    assert top_level(page) == live
    expect(switcher.locator(".version-count")).to_have_text("3/3")
    earlier = page.locator("#messages > .earlier-versions li.assistant .content")
    first_text, second_text = earlier.all_text_contents()
    current_text = latest.locator(".content").text_content()
    switcher.get_by_role("button", name="Previous version").click()
    expect(switcher.locator(".version-count")).to_have_text("2/3")
    expect(latest.locator(".content")).to_have_text(second_text)
    expect(latest).to_have_class(re.compile(r"\bshowing-earlier\b"))
    switcher.get_by_role("button", name="Previous version").click()
    expect(switcher.locator(".version-count")).to_have_text("1/3")
    expect(latest.locator(".content")).to_have_text(first_text)
    expect(switcher.get_by_role("button", name="Previous version")).to_be_disabled()
    switcher.get_by_role("button", name="Next version").click()
    switcher.get_by_role("button", name="Next version").click()
    expect(switcher.locator(".version-count")).to_have_text("3/3")
    expect(latest.locator(".content")).to_have_text(current_text or "")
    expect(latest).not_to_have_class(re.compile(r"\bshowing-earlier\b"))

    # An edit of the first message folds everything from it on; after a reload too.
    page.locator("#messages > li.user").first.get_by_role("button", name="Edit message").click()
    page.get_by_label("Edit your message").fill("Tell me about Porto")
    page.get_by_role("button", name="Send", exact=True).first.click()
    settled(page, 1)  # the count starts again with the reload
    live = top_level(page)
    page.reload()
    expect(page.locator("#messages > li.assistant")).to_have_count(1)
    assert top_level(page) == live
    assert live[-2:] == ["user:Tell me about Porto", live[-1]] and live[-1].startswith("answer:")


# -- 12. a tap right after a reload ------------------------------------------------------------


@pytest.mark.parametrize("view", DARK_FIRST, indirect=True)
def test_a_drawer_opened_while_the_addressed_conversation_loads_stays_open(
    server: str, page: Page, view: tuple[str, str]
) -> None:
    """A reload opens the conversation its address names; a drawer (or, wide, the memory
    panel) the person opens while that conversation is still loading stays open when it
    arrives: the late arrival does not close what the person just opened."""
    sign_in(page, server, name_for(view, "tap"))
    send(page, "Tell me about Lisbon")
    settled(page, 1)
    held: list[Route] = []
    released = False

    def hold(route: Route) -> None:
        if released:
            route.continue_()
        else:
            held.append(route)

    page.route(re.compile(r".*/v1/conversations/[0-9a-f-]{36}$"), hold)
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    open_memory(page)
    assert held, "the conversation's request was not held"
    released = True
    for route in held:
        route.continue_()
    expect(page.locator("#messages > li.assistant")).to_have_count(1)
    expect(page.locator("#memory")).to_be_visible()
    expect(page.locator("#workspace")).to_have_attribute("data-memory", "open")
    if is_phone(page):
        expect(page.locator("#scrim")).to_be_visible()


# -- 6. the import dialog and the address after deleting the account ----------------------------

LONG_PASTE = "\n".join(
    f"- You keep a note about topic number {number}, which matters to your work."
    for number in range(40)
)


@pytest.mark.parametrize("view", LIGHT_FIRST, indirect=True)
def test_a_long_import_preview_scrolls_and_its_buttons_stay_in_view(
    server: str, page: Page, view: tuple[str, str]
) -> None:
    """However long the preview, it scrolls inside the dialog and Cancel and "Add to memory"
    stay within the window, where a click lands on them."""
    sign_in(page, server, name_for(view, "import"))
    open_memory(page)
    page.get_by_role("button", name="Import from another assistant").click()
    dialog = page.get_by_role("dialog", name="Import from another assistant")
    dialog.get_by_label("What the other assistant remembers").fill(LONG_PASTE)
    dialog.get_by_role("button", name="Preview").click()
    add = dialog.get_by_role("button", name="Add to memory")
    expect(add).to_be_visible()
    assert scrolls_on_its_own(page.locator("#import-result"))
    for button in (add, dialog.get_by_role("button", name="Cancel")):
        assert inside_viewport(page, button), button
        assert reachable(button), button


@pytest.mark.parametrize("view", DARK_FIRST, indirect=True)
def test_after_deleting_the_account_the_address_is_the_start_page(
    server: str, page: Page, view: tuple[str, str]
) -> None:
    """The account is deleted from inside a conversation: the page signs out and its address
    no longer names the deleted conversation."""
    name = name_for(view, "erased")
    sign_in(page, server, name)
    send(page, "Tell me about Lisbon")
    settled(page, 1)
    expect(page).to_have_url(re.compile(r"/c/[0-9a-f-]{36}$"))
    open_memory(page)
    page.get_by_role("button", name="Delete my account").click()
    dialog = page.locator("#delete-account-dialog")
    dialog.get_by_label("to confirm").fill(name)
    dialog.get_by_role("button", name="Delete my account").click()
    expect(page.locator("#sign-in-notice")).to_contain_text("Your account was deleted")
    assert page.evaluate("() => location.pathname + location.search + location.hash") == "/"


# -- 5. editing a memory entry -----------------------------------------------------------------


@pytest.mark.parametrize("view", LIGHT_FIRST, indirect=True)
def test_a_memory_edit_saves_on_enter_and_survives_a_re_render(
    server: str, page: Page, view: tuple[str, str]
) -> None:
    """In an entry's editor Shift+Enter starts a new line and Enter saves; an unsaved edit
    stays open with its text when the panel re-renders (a refresh), and when its entry was
    removed meanwhile it stays too, saying that Save adds it as a new entry."""
    token = sign_in(page, server, name_for(view, "entry"))
    add_entries(server, token, "user", ["Works at night", "Lives in Lisbon"])
    open_memory(page)
    page.get_by_role("button", name="Refresh memory").click()
    expect(user_entries(page)).to_have_text(["Works at night", "Lives in Lisbon"])

    page.get_by_role("button", name="Edit: Works at night").click()
    editor = page.get_by_label("Edit entry in “About you”")
    editor.fill("Works early")
    editor.press("Shift+Enter")
    expect(editor).to_have_value("Works early\n")
    editor.press("Backspace")
    editor.press_sequentially(" mornings")
    editor.press("Enter")
    expect(user_entries(page)).to_have_text(["Works early mornings", "Lives in Lisbon"])
    expect(editor).to_have_count(0)

    page.get_by_role("button", name="Edit: Lives in Lisbon").click()
    editor.fill("Lives in Porto since May")
    with page.expect_response(re.compile(r"/v1/memory(\?.*)?$")):
        page.get_by_role("button", name="Refresh memory").click()
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => done()))")
    expect(editor).to_have_value("Lives in Porto since May")

    add_entries(server, token, "user", ["Likes trams"])
    httpx_remove(server, token, "Lives in Lisbon")
    page.get_by_role("button", name="Refresh memory").click()
    expect(user_entries(page)).to_have_text(["Works early mornings", "Likes trams"])
    expect(editor).to_have_value("Lives in Porto since May")
    expect(page.locator("#doc-user-entries .edit-gone")).to_contain_text("adds your text")
    editor.press("Enter")
    expect(user_entries(page)).to_have_text(
        ["Works early mornings", "Likes trams", "Lives in Porto since May"]
    )
    expect(editor).to_have_count(0)


def httpx_remove(base: str, token: str, entry: str) -> None:
    """Removes an entry through the API, as another tab would."""
    httpx.post(
        f"{base}/v1/memory/operations",
        json={"operations": [{"target": "user", "action": "remove", "match": entry}]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    ).raise_for_status()


# -- 3. the chat's header ------------------------------------------------------------------------

LONG_TITLE = "Plan the quarterly review with the whole north region team, the budget and the hiring"


@pytest.mark.parametrize("view", DARK_FIRST, indirect=True)
def test_the_header_shows_the_title_and_the_project_beside_its_buttons(
    server: str, page: Page, view: tuple[str, str]
) -> None:
    """In a project's conversation the header shows the title (one line on a narrow screen,
    at most two on a wide one, the whole title as its tooltip) next to Rename and Move, and the
    project's name uncut on a wide screen; nothing in the header overlaps or leaves the window."""
    token = sign_in(page, server, name_for(view, "header"))
    project = httpx.post(
        f"{server}/v1/projects",
        json={"name": "Alpha Corp"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    ).json()
    with httpx.stream(
        "POST",
        f"{server}/v1/chat",
        json={"message": "Plan the review", "project_id": project["id"]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    ) as response:
        lines = list(response.iter_lines())
    conversation_id = re.search(r'"conversation_id": ?"([0-9a-f-]{36})"', "\n".join(lines))
    assert conversation_id is not None
    httpx.patch(
        f"{server}/v1/conversations/{conversation_id.group(1)}",
        json={"title": LONG_TITLE},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    ).raise_for_status()
    page.goto(f"{server}/c/{conversation_id.group(1)}")
    title = page.locator("#chat-title")
    expect(title).to_have_text(LONG_TITLE)
    expect(title).to_have_attribute("title", LONG_TITLE)
    header = page.locator("#chat-head")
    rename = header.get_by_role("button", name="Rename conversation")
    move = header.get_by_role("button", name="Move to a project")
    link = page.locator("#chat-project")
    for shown in (title, rename, move, link):
        expect(shown).to_be_visible()
        assert inside_viewport(page, shown), shown
    title_box = box(title)
    assert title_box["width"] >= 48, title_box  # readable words, not a sliver
    line = float(title.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)"))
    lines_shown = round(title_box["height"] / line)
    assert lines_shown <= (1 if is_phone_width(page) else 2), (lines_shown, title_box)
    assert title_box["x"] + title_box["width"] <= box(rename)["x"] + 0.5
    assert box(link)["x"] + box(link)["width"] <= title_box["x"] + 0.5
    if not is_phone_width(page):
        label = link.locator(".label")
        expect(label).to_have_text("Alpha Corp")
        assert label.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), "the project is cut"


def is_phone_width(page: Page) -> bool:
    return (page.viewport_size or {"width": 1280})["width"] <= 900
