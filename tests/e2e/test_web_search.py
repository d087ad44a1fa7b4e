"""Conversation search in Debian's Chromium, at laptop and phone size: the box over the list
finds the person's messages, shows the snippet with the match marked and any markup in the
message as plain text, and opens the conversation at the message found."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import guard
from tests.e2e.web import inside_viewport, open_conversations, send, settled, sign_in

pytestmark = pytest.mark.browser

HIT = "The quagga migration starts in spring <b>not bold</b> <img src=x onerror=alert(1)>"


def test_a_search_opens_the_conversation_at_the_message_found(
    server: str, page: Page, screen: str
) -> None:
    errors = guard(page)
    sign_in(page, server, f"searcher-{screen}")
    send(page, HIT)
    for turn in range(2, 6):
        send(page, f"filler message number {turn} " + "with some words " * 30)
        settled(page, turn)
    page.get_by_role("button", name="New chat").first.click()
    send(page, "an unrelated conversation")
    settled(page, 6)

    open_conversations(page)
    page.get_by_label("Search conversations").fill("quagga migration")
    results = page.locator("#search-results li")
    expect(results).to_have_count(1)
    expect(page.locator("#conversation-list")).to_be_hidden()
    snippet = results.first.locator(".search-snippet")
    expect(snippet.locator("mark")).to_have_text(["quagga", "migration"])
    expect(snippet).to_contain_text("<b>not bold</b>")  # shown as text, never parsed
    assert snippet.locator("b, img").count() == 0

    results.first.locator("button").click()
    hit = page.locator("#messages li.search-hit-message")
    expect(hit).to_have_count(1)
    expect(hit).to_contain_text("quagga migration")
    expect(page.locator("#messages li")).to_have_count(10)
    assert inside_viewport(page, hit.locator(".bubble"))

    open_conversations(page)
    page.get_by_label("Search conversations").press("Escape")
    expect(page.locator("#conversation-list")).to_be_visible()
    expect(page.locator("#search-results")).to_be_hidden()
    page.get_by_label("Search conversations").fill("nothingmatchesthisword")
    expect(page.locator("#search-results")).to_contain_text("No message matches.")
    assert errors == []
