"""What a ChatGPT or Open WebUI user reaches for first (issue 54, item 7), in Debian's Chromium
at 390, 900 and 1280 px, light and dark: coloured code blocks (highlight.js, under the page's
strict policy), a theme switch kept on the device, keyboard shortcuts that are listed, pinned
and archived conversations, and a conversation list that loads more on demand.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import create_engine, insert

from app.db.schema import conversation_messages, conversations
from app.main import create_app
from tests.e2e.conftest import e2e_settings, sqlite_file, viewed_page, views
from tests.e2e.scripted_web import Scripted, ScriptedWebModel
from tests.e2e.web import (
    close_drawer,
    is_phone,
    open_conversations,
    send,
    settled,
    sign_in,
)
from tests.support.server import live_server

pytestmark = pytest.mark.browser

CODE_QUESTION = "show me some python"
CODE = 'def greet(name):\n    return f"Hello, {name}!"  # a comment\n\nprint(greet("Ada"), 42)'
CODE_ANSWER = f"Here it is:\n\n```python\n{CODE}\n```\n\nAnd `inline` stays plain."

LIGHT_FIRST = views("light", "dark", "light")
DARK_FIRST = views("dark", "light", "dark")


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("preferences")


@pytest.fixture(scope="module")
def scripted(database: Path) -> Iterator[str]:
    model = ScriptedWebModel({CODE_QUESTION: Scripted(CODE_ANSWER)})
    with live_server(
        create_app(e2e_settings(sqlite_file(database)), model_transport=model)
    ) as base:
        yield base


@pytest.fixture
def page(browser: Browser, view: tuple[str, str]) -> Iterator[Page]:
    yield from viewed_page(browser, view)


def name_for(view: tuple[str, str], who: str) -> str:
    return f"{who}-{view[0]}-{view[1]}"


# -- code blocks --------------------------------------------------------------------------------


@pytest.mark.parametrize("view", LIGHT_FIRST, indirect=True)
def test_code_blocks_are_coloured_by_language_and_keep_their_text(
    scripted: str, page: Page, view: tuple[str, str]
) -> None:
    """A fenced block that names its language is coloured by highlight.js (keywords, strings,
    numbers and comments in spans with its classes, each in a different colour) under the
    page's policy (the page fixture fails on any violation); the block's text and its Copy
    are exactly the code; inline code stays plain."""
    sign_in(page, scripted, name_for(view, "code"))
    answer = send(page, CODE_QUESTION)
    expect(answer).to_have_attribute("data-state", "done")
    code = answer.locator("pre code")
    expect(code).to_have_class(re.compile(r"\bhljs\b"))
    assert code.text_content() == CODE + "\n"
    colours = {
        kind: code.locator(f".hljs-{kind}").first.evaluate("e => getComputedStyle(e).color")
        for kind in ("keyword", "string", "number", "comment")
    }
    plain = code.evaluate("e => getComputedStyle(e).color")
    assert len(set(colours.values()) | {plain}) == 5, colours
    expect(answer.locator("p code")).to_have_text("inline")
    assert answer.locator("p code span").count() == 0


# -- theme --------------------------------------------------------------------------------------

# The tokens as the page paints them: each is a light-dark() pair (css/base.css) that the root's
# colour scheme resolves, so they are read through a probe's computed colour and shadow.
TOKENS = """() => {
    const probe = document.createElement('div');
    document.body.append(probe);
    const names = ['--bg', '--text', '--accent', '--code-bg', '--muted', '--danger'];
    const values = names.map((name) => {
        probe.style.color = `var(${name})`;
        return getComputedStyle(probe).color;
    });
    probe.style.boxShadow = 'var(--shadow)';
    values.push(getComputedStyle(probe).boxShadow);
    probe.remove();
    return values;
}"""


@pytest.mark.parametrize("view", DARK_FIRST, indirect=True)
def test_the_theme_switch_overrides_the_system_and_is_kept(
    scripted: str, page: Page, view: tuple[str, str]
) -> None:
    """Theme: system follows the browser's scheme; light or dark wins over it, is kept across a
    reload, and gives exactly the tokens that scheme has when the system asks for it."""
    sign_in(page, scripted, name_for(view, "theme"))
    page.emulate_media(color_scheme="dark")
    system_dark = page.evaluate(TOKENS)
    page.emulate_media(color_scheme="light")
    system_light = page.evaluate(TOKENS)
    assert system_dark != system_light
    open_conversations(page)
    chooser = page.get_by_label("Theme")
    expect(chooser).to_have_value("system")
    chooser.select_option("dark")
    assert page.evaluate(TOKENS) == system_dark
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    assert page.evaluate(TOKENS) == system_dark
    open_conversations(page)
    expect(page.get_by_label("Theme")).to_have_value("dark")
    page.emulate_media(color_scheme="dark")
    page.get_by_label("Theme").select_option("light")
    assert page.evaluate(TOKENS) == system_light
    page.get_by_label("Theme").select_option("system")
    assert page.evaluate(TOKENS) == system_dark


# -- shortcuts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("view", LIGHT_FIRST, indirect=True)
def test_shortcuts_start_a_chat_and_search_and_are_listed(
    scripted: str, page: Page, view: tuple[str, str]
) -> None:
    """Ctrl+Shift+O leaves a conversation for a new chat (the address becomes /); Ctrl+K puts
    the caret in the conversation search (opening the list's drawer on a narrow screen); the
    Keyboard shortcuts dialog lists both."""
    sign_in(page, scripted, name_for(view, "keys"))
    send(page, "Tell me about Lisbon")
    settled(page, 1)
    expect(page).to_have_url(re.compile(r"/c/[0-9a-f-]{36}$"))
    page.keyboard.press("Control+Shift+O")
    expect(page).to_have_url(re.compile(r"/$"))
    expect(page.locator("#welcome")).to_be_visible()
    expect(page.get_by_label("Message", exact=True)).to_be_focused()
    page.keyboard.press("Control+K")
    expect(page.locator("#conversation-search-input")).to_be_focused()
    if is_phone(page):
        expect(page.locator("#workspace")).to_have_attribute("data-conversations", "open")
    page.get_by_role("button", name="Keyboard shortcuts").click()
    listing = page.locator("#shortcuts-dialog")
    expect(listing).to_be_visible()
    expect(listing.locator("dd")).to_contain_text(["New chat", "Search conversations"])
    expect(listing.locator("dt").first).to_have_text("Ctrl + Shift + O")
    listing.get_by_role("button", name="Close").click()
    expect(listing).to_be_hidden()


# -- pin, archive, pages --------------------------------------------------------------------------


def seed_conversations(database: Path, owner: str, count: int) -> list[str]:
    """`count` conversations of `owner`, written straight to the database (a minute apart,
    "Chat 00" the oldest); their ids, newest first."""
    engine = create_engine(f"sqlite:///{database / 'e2e.db'}")
    start = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=1)
    ids: list[str] = []
    with engine.begin() as connection:
        for number in range(count):
            stamp = start + timedelta(minutes=number)
            conversation_id = str(uuid.uuid4())
            connection.execute(
                insert(conversations).values(
                    id=conversation_id,
                    user_id=owner,
                    title=f"Chat {number:02d}",
                    created_at=stamp,
                    updated_at=stamp,
                )
            )
            connection.execute(
                insert(conversation_messages).values(
                    conversation_id=conversation_id,
                    turn_id=str(uuid.uuid4()),
                    role="user",
                    content=f"message of chat {number:02d}",
                    status="complete",
                    created_at=stamp,
                )
            )
            ids.append(conversation_id)
    engine.dispose()
    return ids[::-1]


@pytest.mark.parametrize("view", DARK_FIRST, indirect=True)
def test_pin_archive_and_show_more_in_the_sidebar(
    scripted: str, database: Path, page: Page, view: tuple[str, str]
) -> None:
    """The list shows a page of 30 and "Show more" for the rest; a pinned conversation moves
    to a Pinned group at the top (and stays after a reload); an archived one leaves the list
    for the Archived view, from which it is restored; archived, it is still found by search."""
    owner = name_for(view, "filing")
    sign_in(page, scripted, owner)
    seed_conversations(database, owner, 33)
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    open_conversations(page)
    rows = page.locator("#conversation-list .conversation .open")
    expect(rows).to_have_count(30)
    expect(rows.first).to_have_text("Chat 32")
    page.get_by_role("button", name="Show more").click()
    expect(rows).to_have_count(33)
    expect(rows.last).to_have_text("Chat 00")
    expect(page.get_by_role("button", name="Show more")).to_be_hidden()

    page.locator("#conversation-list .conversation", has_text="Chat 05").hover()
    page.get_by_role("button", name="Pin conversation: Chat 05").click()
    expect(rows.first).to_have_text("Chat 05")
    expect(page.locator("#conversation-list .group-title").first).to_have_text("Pinned")
    expect(page.get_by_role("button", name="Unpin conversation: Chat 05")).to_have_attribute(
        "aria-pressed", "true"
    )
    page.locator("#conversation-list .conversation", has_text="Chat 31").hover()
    page.get_by_role("button", name="Archive conversation: Chat 31").click()
    expect(page.locator("#conversation-list .open", has_text="Chat 31")).to_have_count(0)
    expect(rows).to_have_count(32)  # the rows shown before stay shown

    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    open_conversations(page)
    expect(rows.first).to_have_text("Chat 05")
    expect(page.locator("#conversation-list .open", has_text="Chat 31")).to_have_count(0)
    page.get_by_role("button", name="Archived").click()
    expect(rows).to_have_text(["Chat 31"])
    page.get_by_role("button", name="Restore conversation: Chat 31").click()
    expect(rows).to_have_count(0)
    expect(page.locator("#conversations-empty")).to_have_text("No archived conversations.")
    page.get_by_role("button", name="Back to conversations").click()
    expect(page.locator("#conversation-list .open", has_text="Chat 31")).to_have_count(1)

    page.locator("#conversation-list .conversation", has_text="Chat 07").hover()
    page.get_by_role("button", name="Archive conversation: Chat 07").click()
    expect(page.locator("#conversation-list .open", has_text="Chat 07")).to_have_count(0)
    page.get_by_label("Search conversations").fill("chat 07")
    page.get_by_label("Search conversations").press("Enter")
    expect(page.locator("#search-results")).to_contain_text("Chat 07")
    close_drawer(page)
