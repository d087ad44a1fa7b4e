"""Sources under an answer in Debian's Chromium, at laptop and phone size: a quiet "Memory used"
line opens the list of what the answer was given (the entry's text, a link to its history);
"Wrong" removes the entry in one click with Undo (history says it was removed under an
answer); a reload shows the same sources; under "Ask before saving", "Wrong" first opens a
proposal to remove it. The memory panel's "Recall earlier chats" switch is the person's
`recall_chats` setting. An earlier chat's link opens it at the cited message (issue 52)."""

from __future__ import annotations

import json

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.conftest import memory_of
from tests.e2e.web import (
    REMEMBER,
    SAVED_ENTRY,
    close_drawer,
    conversation,
    inside_viewport,
    open_memory,
    send,
    settled,
    sign_in,
    user_entries,
)

pytestmark = pytest.mark.browser


def sources_of(answer: Locator) -> Locator:
    return answer.locator("details.sources")


def open_sources(answer: Locator) -> Locator:
    sources = sources_of(answer)
    sources.locator("summary").click()
    expect(sources).to_have_attribute("open", "")
    return sources


def test_memory_used_opens_and_wrong_removes_with_undo(
    server: str, page: Page, screen: str
) -> None:
    """The second answer lists the saved entry; "Wrong" removes it from memory (history source
    `sources`), Undo puts it back; after a reload the answer still lists it."""
    token = sign_in(page, server, f"sol-{screen}")
    send(page, REMEMBER)
    settled(page, 1)
    answer = send(page, "what do you know about me")
    settled(page, 2)
    sources = sources_of(answer)
    expect(sources.locator("summary")).to_have_text("Memory used · 1 entry")
    open_sources(answer)
    entry = sources.locator(".source-entry")
    expect(entry.locator(".source-text")).to_have_text(SAVED_ENTRY)
    expect(entry.get_by_role("link", name="History")).to_be_visible()

    entry.get_by_role("button", name=f"Wrong: {SAVED_ENTRY}").click()
    expect(entry.locator(".source-removed")).to_contain_text("Removed from memory.")
    assert memory_of(server, token)["user"]["entries"] == []
    history = httpx.get(
        f"{server}/v1/memory/history", headers={"Authorization": f"Bearer {token}"}
    ).json()["changes"]
    assert history[0]["source"] == "sources"
    open_memory(page)
    expect(user_entries(page)).to_have_count(0)
    close_drawer(page)

    entry.get_by_role("button", name="Undo").click()
    expect(entry.locator(".source-removed")).to_have_count(0)
    assert memory_of(server, token)["user"]["entries"] == [SAVED_ENTRY]

    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    reloaded = page.locator("#messages li.assistant").last
    expect(sources_of(reloaded).locator("summary")).to_have_text("Memory used · 1 entry")
    open_sources(reloaded)
    expect(reloaded.locator(".source-entry .source-text")).to_have_text(SAVED_ENTRY)

    reloaded.get_by_role("link", name="History").click()
    expect(page.locator("#memory")).to_be_visible()
    expect(page.locator("#doc-user-entries .entry-origin")).to_have_attribute("open", "")


def test_under_ask_before_saving_wrong_proposes_first(server: str, page: Page, screen: str) -> None:
    """With "Ask before saving" on, "Wrong" opens a proposal; Keep leaves the entry; Remove
    removes it. "Recall earlier chats" is saved as the person's setting."""
    token = sign_in(page, server, f"tam-{screen}")
    send(page, REMEMBER)
    settled(page, 1)
    open_memory(page)
    page.get_by_label("Ask before saving").check()
    expect(page.locator("#memory-notice")).to_contain_text("ask before saving")
    page.get_by_label("Recall earlier chats").check()
    expect(page.locator("#memory-notice")).to_contain_text("earlier chats")
    close_drawer(page)
    settings = httpx.get(
        f"{server}/v1/memory/settings", headers={"Authorization": f"Bearer {token}"}
    ).json()
    assert settings == {"save_mode": "ask", "recall_chats": True}

    answer = send(page, "hello again")
    settled(page, 2)
    sources = open_sources(answer)
    entry = sources.locator(".source-entry")
    entry.get_by_role("button", name=f"Wrong: {SAVED_ENTRY}").click()
    proposal = entry.get_by_role("group", name="Proposal: remove this entry")
    expect(proposal).to_contain_text(f"Remove from About you: “{SAVED_ENTRY}”?")
    proposal.get_by_role("button", name="Keep").click()
    expect(proposal).to_have_count(0)
    assert memory_of(server, token)["user"]["entries"] == [SAVED_ENTRY]

    entry.get_by_role("button", name=f"Wrong: {SAVED_ENTRY}").click()
    entry.get_by_role("group", name="Proposal: remove this entry").get_by_role(
        "button", name="Remove"
    ).click()
    expect(entry.locator(".source-removed")).to_contain_text("Removed from memory.")
    assert memory_of(server, token)["user"]["entries"] == []


def turn(base: str, token: str, message: str, conversation_id: str | None = None) -> str:
    """One whole turn through the API, in `conversation_id` (None: a new one); its id."""
    body: dict[str, str] = {"message": message}
    if conversation_id is not None:
        body["conversation_id"] = conversation_id
    with httpx.stream(
        "POST",
        f"{base}/v1/chat",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    ) as response:
        response.raise_for_status()
        lines = [line for line in response.iter_lines() if line.startswith("data:")]
    started = json.loads(lines[0].removeprefix("data:"))
    return str(started["conversation_id"])


CITED = "My grandmother ran a bakery in Zanzibar that sold cardamom buns"


def test_an_earlier_chats_link_opens_it_at_the_cited_message(
    server: str, page: Page, screen: str
) -> None:
    """With "Recall earlier chats" on, an answer lists the earlier conversation it was given;
    its link opens that conversation (its address too) scrolled to the cited message, which is
    highlighted for a moment, far above the conversation's end."""
    token = sign_in(page, server, f"cite-{screen}")
    earlier = turn(server, token, CITED)
    for number in range(12):
        turn(server, token, f"Filler question number {number} about the weather", earlier)
    httpx.put(
        f"{server}/v1/memory/settings",
        json={"recall_chats": True},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    ).raise_for_status()
    answer = send(page, "what about the bakery in Zanzibar and its cardamom buns?")
    settled(page, 1)
    sources = open_sources(answer)
    link = sources.locator(".source-chat-link").first
    expect(link).to_have_attribute("href", f"/c/{earlier}")
    cited_id = int(link.get_attribute("data-message") or "0")
    stored = {m["id"]: m for m in conversation(server, token, earlier)["messages"]}
    assert "Zanzibar" in stored[cited_id]["content"]
    link.click()

    expect(page).to_have_url(f"{server}/c/{earlier}")
    expect(page.locator("#messages > li.message")).to_have_count(26)
    cited = page.locator("#messages > li.message.cited-message")
    expect(cited).to_have_count(1)
    expect(cited.locator(".content")).to_contain_text(stored[cited_id]["content"][:40])
    assert inside_viewport(page, cited)
    assert not inside_viewport(page, page.locator("#messages > li.message").last)
    # Briefly: the highlight goes; the view stays at the message.
    expect(page.locator("#messages .cited-message")).to_have_count(0, timeout=6_000)
    assert inside_viewport(
        page, page.locator("#messages > li.message").nth(list(stored).index(cited_id))
    )
