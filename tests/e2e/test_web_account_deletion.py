"""The "Delete my account" flow in Debian's Chromium, at laptop and phone size: the dialog
offers the export first, only the person's exactly typed name enables the deletion, and
afterwards the person is signed out and the server holds nothing of theirs (another person's
data stays)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import memory_of, token_for
from tests.e2e.web import REMEMBER, SAVED_ENTRY, open_memory, send, settled, sign_in

pytestmark = pytest.mark.browser


def conversations(base: str, token: str) -> list[object]:
    response = httpx.get(
        f"{base}/v1/conversations", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    response.raise_for_status()
    listed: list[object] = response.json()["conversations"]
    return listed


def test_delete_my_account_offers_the_export_asks_for_the_name_then_signs_out(
    server: str, page: Page, screen: str, tmp_path: Path
) -> None:
    """Export first downloads everything; a wrong name keeps the button disabled (control:
    nothing is erased while it is); the exact name erases the account, the page signs the
    person out with a message, and the server has no memory or conversation of theirs left."""
    name, other = f"ines-{screen}", f"other-{screen}"
    other_token = token_for(server, other)
    httpx.post(
        f"{server}/v1/memory/operations",
        json={"operations": [{"target": "user", "action": "add", "content": "Stays."}]},
        headers={"Authorization": f"Bearer {other_token}"},
        timeout=10,
    ).raise_for_status()
    token = sign_in(page, server, name)
    send(page, REMEMBER)
    settled(page, 1)
    open_memory(page)
    page.get_by_role("button", name="Delete my account").click()
    dialog = page.locator("#delete-account-dialog")
    expect(dialog).to_be_visible()

    with page.expect_download() as download_info:
        dialog.get_by_role("button", name="Export my data first").click()
    path = tmp_path / download_info.value.suggested_filename
    download_info.value.save_as(path)
    exported = json.loads(path.read_text())
    assert exported["memory"]["user"]["entries"] == [SAVED_ENTRY]
    assert len(exported["conversations"]) == 1

    confirm = dialog.get_by_role("button", name="Delete my account")
    dialog.get_by_label("to confirm").fill(name.upper())
    expect(confirm).to_be_disabled()
    assert memory_of(server, token)["user"]["entries"] == [SAVED_ENTRY]

    dialog.get_by_label("to confirm").fill(name)
    expect(confirm).to_be_enabled()
    confirm.click()
    expect(page.locator("#sign-in")).to_be_visible()
    expect(page.locator("#sign-in-notice")).to_contain_text("Your account was deleted")
    expect(page.locator("#account-name")).to_have_text("")
    # The erasure ended the browser's session too: the page, reloaded, asks who is there.
    page.reload()
    expect(page.get_by_label("Your name")).to_be_visible()
    assert memory_of(server, token)["user"]["entries"] == []
    assert conversations(server, token) == []
    assert memory_of(server, other_token)["user"]["entries"] == ["Stays."]
