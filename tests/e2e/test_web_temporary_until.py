"""Temporary chats and remember-until in Debian's Chromium, at laptop and phone size: the
"Temporary chat" switch of a new chat starts one, its banner stays while it is shown (also after
a reload), nothing of it reaches memory or the conversation list; the memory panel sets and
clears the day an entry is kept until."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.sync_api import Page, expect

from app.db import erasure_audit as audit
from tests.e2e.conftest import memory_of
from tests.e2e.web import (
    REMEMBER,
    add_entries,
    conversations_of,
    is_phone,
    open_memory,
    send,
    settled,
    sign_in,
    user_entries,
)

pytestmark = pytest.mark.browser


def test_a_temporary_chat_stays_marked_and_leaves_memory_alone(
    server: str, page: Page, screen: str
) -> None:
    """Switched on, the banner shows before the first message and stays through the answer and a
    reload of its address; the offline model is offered no memory tool, so "remember" saves
    nothing; the chat is not listed; a new chat starts regular again."""
    token = sign_in(page, server, f"tina-{screen}")
    switch = page.get_by_label("Temporary chat")
    banner = page.locator("#temporary-banner")
    expect(switch).to_be_visible()
    expect(banner).to_be_hidden()
    switch.check()
    expect(banner).to_be_visible()
    answer = send(page, REMEMBER)
    expect(answer).to_contain_text("Memory is switched off here")
    settled(page, 1)
    expect(banner).to_be_visible()
    expect(switch).to_be_hidden()
    assert memory_of(server, token)["user"]["entries"] == []
    assert conversations_of(server, token) == []
    assert "/c/" in page.url

    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#messages li.assistant")).to_contain_text("Memory is switched off here")
    expect(banner).to_be_visible()

    page.locator("#new-conversation-narrow" if is_phone(page) else "#new-conversation").click()
    expect(banner).to_be_hidden()
    expect(switch).to_be_visible()
    expect(switch).not_to_be_checked()


def test_the_panel_sets_and_clears_the_day_an_entry_is_kept_until(
    server: str, page: Page, screen: str
) -> None:
    """Edit → "Keep until" a day → the entry says so and the API lists it as expiring at that
    day's end; emptied, the entry is kept until removed again."""
    token = sign_in(page, server, f"uma-{screen}")
    add_entries(server, token, "user", ["Is in Berlin"])
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    open_memory(page)
    expect(user_entries(page)).to_have_text(["Is in Berlin"])
    day = (audit.now() + timedelta(days=12)).date()

    page.get_by_role("button", name="Edit: Is in Berlin").click()
    page.get_by_label("Keep until").fill(day.isoformat())
    page.get_by_role("button", name="Save").click()
    until = page.locator("#doc-user-entries li .entry-until")
    expect(until).to_be_visible()
    expect(until).to_contain_text("Kept until")
    expect(page.locator("#memory-notice")).to_have_text("Saved: 1 entry updated.")
    end = (day + timedelta(days=1)).isoformat()
    assert memory_of(server, token)["user"]["expiring"] == [
        {"text": "Is in Berlin", "expires_at": f"{end}T00:00:00Z"}
    ]

    page.get_by_role("button", name="Edit: Is in Berlin").click()
    expect(page.get_by_label("Keep until")).to_have_value(day.isoformat())
    page.get_by_label("Keep until").fill("")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#doc-user-entries li .entry-until")).to_be_hidden()
    state = memory_of(server, token)
    assert state["user"]["entries"] == ["Is in Berlin"] and "expiring" not in state["user"]
