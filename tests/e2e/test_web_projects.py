"""Projects in the web client (issue 32), in Debian's Chromium at 390, 900 and 1280 px, in light and
dark: the sidebar's projects, a project's page at /p/<id>, a conversation's project in the header
(and Move), rename, delete with the choice of what becomes of its conversations, and the memory
panel showing the project's notes, with where each document applies.

The model is the offline one, plus one phrase: "project note: <text>" is saved to the `project`
document when the turn's tool offers that target (a turn in a project), and answered without a
tool call otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from app.main import create_app
from app.offline.model import OfflineModel
from app.offline.transport import ChatCompletionsTransport
from app.offline.wire import ChatRequest, Reply, Text, ToolCall, ToolCalls
from tests.e2e.conftest import e2e_settings, guard, sqlite_file, viewed_page, views
from tests.e2e.test_web_theme import CONTRASTS
from tests.e2e.web import (
    close_drawer,
    open_conversations,
    open_memory,
    send,
    settled,
    sign_in,
)
from tests.support.server import live_server

pytestmark = pytest.mark.browser

NOTE = re.compile(r"^project note:\s*(?P<text>.+)$", re.I | re.S)
PROJECT_FACT = "The client deploys on Fridays."
UUID = r"[0-9a-f-]{36}"
# What the projects add that people read, with the contrast it needs (WCAG AA: 4.5:1).
PROJECT_TEXT = [
    ".applies",
    ".memory-unused",
    ".document-hint",
    "#chat-project .label",
    ".project-open",
    ".projects .group-title",
    "#project-home p",
    ".project-chat",
]


def offers_project_target(value: Any) -> bool:
    """The memory tool's schema lists `project` among the targets (anywhere in an enum)."""
    if isinstance(value, dict):
        enum = value.get("enum")
        if isinstance(enum, list) and "project" in enum:
            return True
        return any(offers_project_target(item) for item in value.values())
    if isinstance(value, list):
        return any(offers_project_target(item) for item in value)
    return False


class ProjectNotesModel:
    """The offline model, and "project note: ..." saved to the project document in a project."""

    def __init__(self) -> None:
        self.offline = OfflineModel()

    async def __call__(self, request: ChatRequest) -> Reply:
        last = request.messages[-1] if request.messages else {}
        content = last.get("content")
        note = NOTE.match(content.strip()) if isinstance(content, str) else None
        if last.get("role") == "user" and note:
            if not offers_project_target(list(request.tools)):
                return Text("There is no project here to keep that in.")
            operation = {"target": "project", "action": "add", "content": note.group("text")}
            return ToolCalls(
                (ToolCall("memory_update", {"operations": [operation]}, "call_project_1"),)
            )
        return await self.offline(request)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = sqlite_file(tmp_path_factory.mktemp("projects"))
    transport = ChatCompletionsTransport(ProjectNotesModel())
    with live_server(create_app(e2e_settings(url), model_transport=transport)) as base:
        yield base


@pytest.fixture
def page(browser: Browser, view: tuple[str, str]) -> Iterator[Page]:
    yield from viewed_page(browser, view)


def api(base: str, token: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    response = httpx.request(
        method, f"{base}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=10, **kwargs
    )
    response.raise_for_status()
    return response


def make_project(base: str, token: str, name: str) -> str:
    project_id: str = api(base, token, "POST", "/v1/projects", json={"name": name}).json()["id"]
    return project_id


def chat_in(base: str, token: str, message: str, project_id: str | None = None) -> str:
    """One whole turn through the API, in a new conversation (in the project, when given)."""
    body: dict[str, Any] = {"message": message}
    if project_id:
        body["project_id"] = project_id
    conversation_id = ""
    with httpx.stream(
        "POST",
        f"{base}/v1/chat",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    ) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            found = re.search(rf'"conversation_id":\s*"({UUID})"', line)
            if found and not conversation_id:
                conversation_id = found.group(1)
    assert conversation_id
    return conversation_id


def pathname(page: Page) -> str:
    return str(page.evaluate("() => location.pathname"))


def new_chat(page: Page, view: tuple[str, str]) -> None:
    close_drawer(page)
    page.locator("#new-conversation-narrow" if view[0] != "1280" else "#new-conversation").click()
    expect(page.locator("#welcome-title")).to_be_visible()


def open_project(page: Page, name: str) -> None:
    """Opens a project's page from the sidebar."""
    open_conversations(page)
    page.locator("#project-list .project-open", has_text=name).click()
    expect(page.locator("#project-home-title")).to_have_text(name)


@pytest.mark.parametrize("view", views("light", "dark", "light"), indirect=True)
def test_a_project_keeps_its_notes_and_the_panel_says_where_each_entry_applies(
    server: str, page: Page, view: tuple[str, str], browser: Browser
) -> None:
    """A project made in the sidebar opens its page at /p/<id>; a chat started there is in the
    project (its header says so); what the assistant keeps for the project shows in the panel
    labelled "This project only", beside "About you" ("All chats"), and never in a general
    conversation's panel; the general notes join the project only when its switch says so.
    The page's address survives a reload, Back and Forward; another person gets "not found"."""
    token = sign_in(page, server, f"ada-{view[0]}-{view[1]}")
    open_conversations(page)
    expect(page.locator("#projects-empty")).to_be_visible()
    page.get_by_role("button", name="New project").click()
    page.get_by_label("New project name").fill("  Client A  ")
    page.get_by_label("New project name").press("Enter")
    expect(page.locator("#project-home-title")).to_have_text("Client A")
    address = pathname(page)
    assert re.fullmatch(rf"/p/{UUID}", address), address
    project_id = address.removeprefix("/p/")
    expect(page.get_by_label("Message", exact=True)).to_be_focused()
    expect(page.get_by_label("Message", exact=True)).to_have_attribute(
        "placeholder", "Message the assistant in “Client A”"
    )
    open_conversations(page)
    expect(page.locator("#project-list .project-open[aria-current=page]")).to_have_text("Client A")
    close_drawer(page)

    send(page, f"project note: {PROJECT_FACT}")
    settled(page, 1)
    conversation_address = pathname(page)
    assert re.fullmatch(rf"/c/{UUID}", conversation_address), conversation_address
    expect(page.locator("#chat-project")).to_be_visible()
    expect(page.locator("#chat-project")).to_have_attribute("aria-label", "Project: Client A")
    open_memory(page)
    expect(page.locator("#doc-project-entries .entry-text")).to_have_text([PROJECT_FACT])
    expect(page.locator("#doc-project-applies")).to_have_text("This project only")
    expect(page.locator("#doc-user-applies")).to_have_text("All chats")
    expect(page.locator("#doc-memory")).to_be_hidden()
    expect(page.locator("#doc-memory-unused")).to_be_visible()
    measured = page.evaluate(CONTRASTS, PROJECT_TEXT)
    assert {".applies", ".memory-unused"} <= {selector for selector, _ in measured}
    assert [pair for pair in measured if pair[1] < 4.5] == []
    scoped = api(server, token, "GET", f"/v1/memory?project_id={project_id}").json()
    assert scoped["project"]["entries"] == [PROJECT_FACT]
    general = api(server, token, "GET", "/v1/memory").json()
    assert PROJECT_FACT not in general["memory"]["entries"] + general["user"]["entries"]
    conversations = api(server, token, "GET", "/v1/conversations").json()["conversations"]
    assert [c["project_id"] for c in conversations] == [project_id]
    open_conversations(page)
    expect(page.locator("#project-list .project-conversations .open")).to_have_count(1)
    expect(page.locator("#conversation-list .open")).to_have_count(0)

    # A general conversation: its panel has no project notes, and the project's entry is nowhere.
    new_chat(page, view)
    assert pathname(page) == "/"
    expect(page.locator("#chat-project")).to_be_hidden()
    send(page, "remember that the office plants need water")
    settled(page, 2)
    open_memory(page)
    expect(page.locator("#doc-project")).to_be_hidden()
    expect(page.locator("#doc-memory")).to_be_visible()
    expect(page.locator("#doc-memory-applies")).to_have_text("Chats outside projects")
    expect(page.locator("#doc-memory-entries .entry-text")).to_have_text(
        ["The office plants need water."]
    )
    expect(page.locator("#memory")).not_to_contain_text(PROJECT_FACT)

    # "New chat in Client A" opens its page, ready to write; the project opts into the general
    # notes there: they show in its panel, labelled as shared.
    open_conversations(page)
    page.get_by_role("button", name="New chat in Client A").click()
    expect(page.locator("#project-home-title")).to_have_text("Client A")
    expect(page.get_by_label("Message", exact=True)).to_be_focused()
    switch = page.get_by_label("Also use my general agent notes")
    expect(switch).not_to_be_checked()
    switch.check()
    expect(switch).to_be_checked()
    project = api(server, token, "GET", "/v1/projects").json()["projects"][0]
    assert project["general_memory"] is True
    open_memory(page)
    expect(page.locator("#doc-memory-applies")).to_have_text("Also in this project")
    expect(page.locator("#doc-project-applies")).to_have_text("This project only")
    expect(page.locator("#doc-memory-unused")).to_be_hidden()
    new_chat(page, view)
    open_memory(page)
    expect(page.locator("#doc-memory-applies")).to_have_text(
        "Chats outside projects, and in “Client A”"
    )

    # The project's page has an address: reload, Back and Forward return there.
    page.goto(server + address)
    expect(page.locator("#project-home-title")).to_have_text("Client A")
    expect(page.locator("#project-chats li")).to_have_count(1)
    measured = page.evaluate(CONTRASTS, PROJECT_TEXT)
    assert {"#project-home p", ".project-chat"} <= {selector for selector, _ in measured}
    assert [pair for pair in measured if pair[1] < 4.5] == []
    page.reload()
    expect(page.locator("#project-home-title")).to_have_text("Client A")
    open_memory(page)
    expect(page.locator("#doc-project-entries .entry-text")).to_have_text([PROJECT_FACT])
    close_drawer(page)
    page.locator("#project-chats .project-chat").click()
    expect(page.locator("#messages li.user .content")).to_have_text(
        [f"project note: {PROJECT_FACT}"]
    )
    assert pathname(page) == conversation_address
    page.go_back()
    expect(page.locator("#project-home-title")).to_have_text("Client A")
    assert pathname(page) == address
    page.go_forward()
    expect(page.locator("#messages li.user .content")).to_have_text(
        [f"project note: {PROJECT_FACT}"]
    )
    expect(page.locator("#chat-project")).to_be_visible()

    # Another person opening the address: "Project not found", and nothing of it.
    stranger = browser.new_context(viewport=page.viewport_size)
    other = stranger.new_page()
    errors = guard(other)
    other.goto(server + address)
    other.get_by_label("Your name").fill(f"stranger-{view[0]}-{view[1]}")
    other.get_by_role("button", name="Sign in").click()
    expect(other.get_by_role("heading", name="Project not found")).to_be_visible()
    expect(other.locator("body")).not_to_contain_text("Client A")
    expect(other.locator("#doc-project")).to_be_hidden()
    other.get_by_role("button", name="Start a new chat").click()
    expect(other.locator("#welcome-title")).to_be_visible()
    assert errors == []
    stranger.close()


@pytest.mark.parametrize("view", views("dark", "light", "dark"), indirect=True)
def test_projects_are_renamed_conversations_moved_and_deleting_asks_what_becomes_of_them(
    server: str, page: Page, view: tuple[str, str]
) -> None:
    """Rename on the project's page; Move in the header puts a conversation in a project and
    takes it out again; deleting a project with conversations offers "Move them out" (they stay,
    outside projects) or "Delete its N conversations" (they are gone); an empty one is only
    confirmed."""
    who = f"bo-{view[0]}-{view[1]}"
    token = httpx.post(f"{server}/dev/token", json={"sub": who}, timeout=10).json()["access_token"]
    alpha = make_project(server, token, "Alpha")
    beta = make_project(server, token, "Beta")
    make_project(server, token, "Empty")
    loose = chat_in(server, token, "Name a colour")
    chat_in(server, token, "Name a fruit", alpha)
    kept = [chat_in(server, token, f"Name a city {n}", beta) for n in range(2)]
    sign_in(page, server, who)

    # Rename, from the project's page.
    open_project(page, "Alpha")
    page.get_by_role("button", name="Rename").click()
    field = page.get_by_label("Project name", exact=True)
    expect(field).to_be_focused()
    field.fill("Alpha Corp")
    field.press("Enter")
    expect(page.locator("#project-home-title")).to_have_text("Alpha Corp")
    expect(page.get_by_role("button", name="Rename")).to_be_focused()
    open_conversations(page)
    expect(page.locator("#project-list .project-open", has_text="Alpha Corp")).to_have_count(1)
    expect(page.locator("#project-list .project-open", has_text="Alpha")).to_have_count(1)
    names = {p["name"] for p in api(server, token, "GET", "/v1/projects").json()["projects"]}
    assert names == {"Alpha Corp", "Beta", "Empty"}

    # Move a general conversation into the project, then out again.
    page.locator("#conversation-list .open").first.click()
    expect(page.locator("#chat-project")).to_be_hidden()
    page.get_by_role("button", name="Move to a project").click()
    expect(page.get_by_label("Project", exact=True)).to_be_focused()
    page.get_by_label("Project", exact=True).select_option(label="Alpha Corp")
    page.get_by_role("button", name="Move", exact=True).click()
    expect(page.locator("#chat-project")).to_have_attribute("aria-label", "Project: Alpha Corp")
    expect(page.locator("#chat-notice [role=status]")).to_have_text("Moved to “Alpha Corp”.")
    assert api(server, token, "GET", f"/v1/conversations/{loose}").json()["project_id"] == alpha
    open_conversations(page)
    expect(page.locator("#conversation-list .open")).to_have_count(0)
    close_drawer(page)
    page.get_by_role("button", name="Move to a project").click()
    page.get_by_label("Project", exact=True).select_option(value="")
    page.get_by_role("button", name="Move", exact=True).click()
    expect(page.locator("#chat-project")).to_be_hidden()
    assert api(server, token, "GET", f"/v1/conversations/{loose}").json()["project_id"] is None
    page.get_by_role("button", name="Move to a project").click()
    page.get_by_label("Project", exact=True).select_option(label="Alpha Corp")
    page.get_by_role("button", name="Move", exact=True).click()
    expect(page.locator("#chat-project")).to_be_visible()

    # Delete, moving its two conversations out: they stay, outside projects.
    open_project(page, "Alpha Corp")
    page.get_by_role("button", name="Delete project").click()
    expect(page.locator("#confirm-text")).to_contain_text("It has 2 conversations")
    page.get_by_role("button", name="Move them out").click()
    expect(page.locator("#chat-notice [role=status]")).to_have_text(
        "Project deleted: its conversations are now outside projects."
    )
    assert pathname(page) == "/"
    conversations = api(server, token, "GET", "/v1/conversations").json()["conversations"]
    outside = {c["id"] for c in conversations if c["project_id"] is None}
    assert loose in outside and len(outside) == 2
    open_conversations(page)
    expect(page.locator("#conversation-list .open")).to_have_count(2)
    expect(page.locator("#project-list .project-open")).to_have_count(2)

    # Delete, with its two conversations: they are gone.
    page.locator("#project-list .project-conversations .open").first.click()
    expect(page.locator("#chat-project")).to_have_attribute("aria-label", "Project: Beta")
    open_project(page, "Beta")
    page.get_by_role("button", name="Delete project").click()
    page.get_by_role("button", name="Delete its 2 conversations").click()
    expect(page.locator("#chat-notice [role=status]")).to_have_text(
        "Project deleted, with its conversations."
    )
    for conversation_id in kept:
        response = httpx.get(
            f"{server}/v1/conversations/{conversation_id}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert response.status_code == 404
    assert beta not in {
        p["id"] for p in api(server, token, "GET", "/v1/projects").json()["projects"]
    }

    # An empty project is only confirmed; Cancel first keeps it.
    open_project(page, "Empty")
    page.get_by_role("button", name="Delete project").click()
    expect(page.locator("#confirm-alt")).to_be_hidden()
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("button", name="Delete project")).to_be_focused()
    page.get_by_role("button", name="Delete project").click()
    page.locator("#confirm-ok").click()
    expect(page.locator("#chat-notice [role=status]")).to_have_text("Project deleted.")
    assert api(server, token, "GET", "/v1/projects").json()["projects"] == []
    open_conversations(page)
    expect(page.locator("#projects-empty")).to_be_visible()


@pytest.mark.parametrize("view", views("dark", "light", "dark")[1:2], indirect=True)
def test_signing_out_leaves_nothing_of_the_projects(server: str, page: Page) -> None:
    """After sign-out the page holds nothing of the person's projects: not their names (in the
    sidebar, the header, the project's page, Move's choices, the tab or the composer's hint), nor
    the project's notes; the next person starts outside projects."""
    token = sign_in(page, server, "cy-projects")
    project_id = make_project(server, token, "Secret Client")
    api(
        server,
        token,
        "POST",
        f"/v1/memory/operations?project_id={project_id}",
        json={
            "operations": [{"target": "project", "action": "add", "content": "Codename Kestrel"}]
        },
    )
    conversation_id = chat_in(server, token, "Name a colour", project_id)
    page.goto(f"{server}/c/{conversation_id}")
    expect(page.locator("#chat-project")).to_have_attribute("aria-label", "Project: Secret Client")
    page.get_by_role("button", name="Move to a project").click()
    page.get_by_role("button", name="Cancel").click()
    open_memory(page)
    expect(page.locator("#doc-project-entries .entry-text")).to_have_text(["Codename Kestrel"])
    page.goto(f"{server}/p/{project_id}")
    expect(page.locator("#project-home-title")).to_have_text("Secret Client")
    expect(page).to_have_title(re.compile("^Secret Client"))

    open_conversations(page)
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#sign-in")).to_be_visible()
    for secret in ("Secret Client", "Codename Kestrel"):
        expect(page.locator("body")).not_to_contain_text(secret)
    assert "Secret Client" not in page.title()
    assert page.locator("#move-project option").count() == 0
    expect(page.get_by_label("Message", exact=True)).to_have_attribute(
        "placeholder", "Message the assistant"
    )

    sign_in(page, server, "cy-next")
    expect(page.locator("#projects-empty")).to_be_attached()
    expect(page.locator("#project-home")).to_be_hidden()
    expect(page.locator("#doc-project")).to_be_hidden()
    expect(page.locator("body")).not_to_contain_text("Secret Client")


@pytest.mark.parametrize("view", views("light", "dark", "light")[2:], indirect=True)
def test_in_a_project_the_panel_edits_and_undoes_the_projects_notes(
    server: str, page: Page
) -> None:
    """The panel in a project writes the project's notes (not the general ones), lists that
    change in its history as "Project notes", and undoes it in the project's scope."""
    token = sign_in(page, server, "di-projects")
    project_id = make_project(server, token, "Gamma")
    page.goto(f"{server}/p/{project_id}")
    expect(page.locator("#project-home-title")).to_have_text("Gamma")
    open_memory(page)
    page.get_by_label("Add to “Project notes”").fill("Gamma ships on Mondays.")
    page.get_by_label("Add to “Project notes”").press("Enter")
    expect(page.locator("#doc-project-entries .entry-text")).to_have_text(
        ["Gamma ships on Mondays."]
    )
    scoped = api(server, token, "GET", f"/v1/memory?project_id={project_id}").json()
    assert scoped["project"]["entries"] == ["Gamma ships on Mondays."]
    assert api(server, token, "GET", "/v1/memory").json()["memory"]["entries"] == []
    change = page.locator("#change-list li").first
    expect(change.locator(".change-text")).to_have_text(
        "Added to Project notes: Gamma ships on Mondays."
    )
    change.get_by_role("button", name=re.compile("^Undo")).click()
    expect(page.locator("#doc-project-entries .entry-text")).to_have_count(0)
    expect(page.locator("#memory-notice [role=status]")).to_have_text("Undone: 1 entry removed.")
    scoped = api(server, token, "GET", f"/v1/memory?project_id={project_id}").json()
    assert scoped["project"]["entries"] == []


IMPORTED = """Here's what I remember about you:

- You prefer concise answers.
- Your project "Ledgerly" runs on PostgreSQL."""


@pytest.mark.parametrize("view", views("light", "dark", "light")[1:2], indirect=True)
def test_in_a_project_search_and_import_keep_to_the_project(
    server: str, page: Page, view: tuple[str, str]
) -> None:
    """In a project the sidebar's search reads that project's conversations (its placeholder
    and its results say so, with the way to all of them), outside projects every conversation;
    the Import dialog in a project says where the facts go and adds the facts about the work to
    the project's notes, never to the general ones."""
    token = sign_in(page, server, "ed-projects")
    project_id = make_project(server, token, "Quagga Co")
    inside = chat_in(server, token, "quagga inventory for the client", project_id)
    outside = chat_in(server, token, "quagga inventory at home")
    page.goto(f"{server}/p/{project_id}")
    expect(page.locator("#project-home-title")).to_have_text("Quagga Co")

    open_conversations(page)
    box = page.get_by_label("Search conversations")
    expect(box).to_have_attribute("placeholder", "Search in “Quagga Co”")
    box.fill("quagga inventory")
    hits = page.locator("#search-results li button.search-hit")
    expect(hits).to_have_count(1)
    expect(hits.first).to_have_attribute("data-id", inside)
    expect(page.locator("#search-results .search-scope")).to_contain_text("In “Quagga Co”.")
    page.get_by_role("button", name="Search all conversations").click()
    expect(hits).to_have_count(2)
    assert {hits.nth(i).get_attribute("data-id") for i in range(2)} == {inside, outside}
    page.get_by_role("button", name="Only “Quagga Co”").click()
    expect(hits).to_have_count(1)
    box.press("Escape")
    close_drawer(page)

    open_memory(page)
    page.get_by_role("button", name="Import from another assistant").click()
    dialog = page.get_by_role("dialog", name="Import from another assistant")
    expect(dialog.locator("#import-place")).to_contain_text("Into “Quagga Co”")
    dialog.get_by_label("What the other assistant remembers").fill(IMPORTED)
    dialog.get_by_role("button", name="Preview").click()
    expect(page.locator("#import-proposed li")).to_have_text(
        [
            "About youThe user prefers concise answers.",
            'Project notesThe user\'s project "Ledgerly" runs on PostgreSQL.',
        ]
    )
    page.get_by_role("button", name="Add to memory").click()
    expect(dialog).to_be_hidden()
    expect(page.locator("#doc-project-entries .entry-text")).to_have_text(
        ['The user\'s project "Ledgerly" runs on PostgreSQL.']
    )
    scoped = api(server, token, "GET", f"/v1/memory?project_id={project_id}").json()
    assert scoped["project"]["entries"] == ['The user\'s project "Ledgerly" runs on PostgreSQL.']
    general = api(server, token, "GET", "/v1/memory").json()
    assert general["memory"]["entries"] == []
    assert general["user"]["entries"] == ["The user prefers concise answers."]
    assert api(server, token, "GET", f"/v1/memory/proposals?project_id={project_id}").json() == {
        "proposals": []
    }

    new_chat(page, view)
    open_conversations(page)
    expect(box).to_have_attribute("placeholder", "Search conversations")
    box.fill("quagga inventory")
    expect(hits).to_have_count(2)
    expect(page.locator("#search-results .search-scope")).to_have_count(0)
