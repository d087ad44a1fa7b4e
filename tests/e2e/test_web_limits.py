"""The web client when a per-user limit is hit: a clear message that says what the limit is
and when to send again, not a generic error (Debian's Chromium, real server)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from app.main import create_app
from tests.e2e.conftest import e2e_settings, sqlite_file
from tests.e2e.web import send, sign_in
from tests.support.server import live_server

pytestmark = pytest.mark.browser

PINNED = datetime(2026, 12, 3, 12, 0, 20, tzinfo=UTC)  # 40 s left in the minute


def test_a_turn_over_the_limit_says_so_and_when_to_send_again(page: Page, tmp_path: Path) -> None:
    """One turn a minute: the second message's answer is marked failed with "Limit reached",
    the server's words about the limit and a wait in seconds, shown in the answer and in the
    alert; the first answer stays as it was."""
    app = create_app(e2e_settings(sqlite_file(tmp_path), user_turns_per_minute=1))
    with live_server(app) as base:
        # Both turns in one minute, however long the browser takes.
        app.state.runtime.limits.clock = lambda: PINNED
        sign_in(page, base, "lena")
        first = send(page, "hello")
        expect(first).to_have_attribute("data-state", "done")
        second = send(page, "hello again")
        expect(second).to_have_attribute("data-state", "failed")
        expect(second.locator(".note")).to_contain_text(
            ["Limit reached: Too many turns: at most 1 a minute."]
        )
        expect(second.locator(".note")).to_contain_text(["You can send it again in 40 seconds."])
        expect(page.locator("#chat-notice [role=alert]")).to_contain_text("Limit reached")
        expect(page.locator("#messages li.assistant").first).to_have_attribute("data-state", "done")
