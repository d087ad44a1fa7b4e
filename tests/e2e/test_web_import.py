"""The Import dialog in Debian's Chromium, at laptop and phone size: a pasted ChatGPT answer is
previewed as what would be added to each store and what was left out (with the reason) before
anything is saved; "Add to memory" saves it through the proposal route, and Cancel leaves no
proposal behind.
"""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import memory_of
from tests.e2e.web import note_entries, open_memory, sign_in, user_entries
from tests.support.waiting import wait_for

pytestmark = pytest.mark.browser

PASTE = """Here's what I remember about you:

- You prefer concise answers.
- Your project "Ledgerly" runs on PostgreSQL.
- Your AWS key is AKIAIOSFODNN7EXAMPLE.

Let me know if you'd like me to forget anything."""

ADDED_USER = "The user prefers concise answers."
ADDED_NOTE = 'The user\'s project "Ledgerly" runs on PostgreSQL.'


def preview(page: Page) -> None:
    open_memory(page)
    page.get_by_role("button", name="Import from another assistant").click()
    dialog = page.get_by_role("dialog", name="Import from another assistant")
    expect(dialog).to_be_visible()
    dialog.get_by_label("What the other assistant remembers").fill(PASTE)
    dialog.get_by_role("button", name="Preview").click()
    expect(page.locator("#import-proposed li")).to_have_text(
        [f"About you{ADDED_USER}", f"Agent notes{ADDED_NOTE}"]
    )
    expect(page.locator("#import-dropped li")).to_have_text(
        ["Your AWS key is AKIAIOSFODNN7EXAMPLE. (looks like a secret)"]
    )


def proposals_of(base: str, token: str) -> list[object]:
    response = httpx.get(
        f"{base}/v1/memory/proposals", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    response.raise_for_status()
    proposals: list[object] = response.json()["proposals"]
    return proposals


def test_import_previews_then_adds_only_when_asked(server: str, page: Page, screen: str) -> None:
    """The preview saves nothing; "Add to memory" saves exactly the previewed facts, each in
    its store, and the panel shows them with their origin."""
    token = sign_in(page, server, f"ivy-{screen}")
    preview(page)
    assert memory_of(server, token)["user"]["entries"] == []
    page.get_by_role("button", name="Add to memory").click()
    expect(page.get_by_role("dialog", name="Import from another assistant")).to_be_hidden()
    expect(user_entries(page)).to_have_text([ADDED_USER])
    expect(note_entries(page)).to_have_text([ADDED_NOTE])
    expect(page.locator("#doc-user-entries .entry-origin")).to_contain_text("imported")
    assert memory_of(server, token)["memory"]["entries"] == [ADDED_NOTE]
    assert proposals_of(server, token) == []


def test_cancel_leaves_nothing_behind(server: str, page: Page, screen: str) -> None:
    """Cancelling a previewed import rejects its proposal: nothing saved, nothing waiting."""
    token = sign_in(page, server, f"jay-{screen}")
    preview(page)
    assert len(proposals_of(server, token)) == 1  # the preview is a stored proposal
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("dialog", name="Import from another assistant")).to_be_hidden()
    wait_for(lambda: proposals_of(server, token) == [], "the import's proposal to be rejected")
    assert memory_of(server, token)["user"]["entries"] == []
