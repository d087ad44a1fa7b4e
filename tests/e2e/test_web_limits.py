"""The web client when a per-user limit is hit: a clear message that says what the limit is
and when to send again, not a generic error (Debian's Chromium, real server)."""

from __future__ import annotations

import re
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
    """One turn a minute: the second message is refused before its turn, so it is not shown
    as sent (nothing was stored: a reload shows the same); its text is back in the message
    box, the alert gives the server's words about the limit, and the wait counts down live
    (it is not frozen at its first value) until it says the message can go now."""
    app = create_app(e2e_settings(sqlite_file(tmp_path), user_turns_per_minute=1))
    with live_server(app) as base:
        # Both turns in one minute, however long the browser takes.
        app.state.runtime.limits.clock = lambda: PINNED
        page.clock.install()  # the page's timers run in real time until the test jumps ahead
        sign_in(page, base, "lena")
        first = send(page, "hello")
        expect(first).to_have_attribute("data-state", "done")
        send(page, "hello again")
        alert = page.locator("#chat-notice [role=alert]")
        expect(alert).to_contain_text("Limit reached: Too many turns: at most 1 a minute.")
        expect(alert).to_contain_text("Your message was not sent; it is back in the message box.")
        expect(alert).not_to_contain_text("failed")
        expect(page.get_by_label("Message", exact=True)).to_have_value("hello again")
        expect(page.locator("#messages > li.user .content")).to_have_text(["hello"])
        expect(page.locator("#messages > li.assistant")).to_have_count(1)
        wait = page.locator("#send-wait")
        expect(wait).to_have_text(re.compile(r"^You can send it again in (40|39|38) seconds\.$"))
        first_wait = wait.text_content()
        expect(wait).not_to_have_text(first_wait or "", timeout=5_000)
        expect(page.locator("#memory-notice")).not_to_contain_text("failed")
        # The wait is over (the server's clock moves on): the page says so.
        page.clock.fast_forward("00:45")
        expect(wait).to_have_text("You can send it again now.")
        expect(page.locator("#chat-notice [role=status]")).to_have_text(
            "The limit has cleared: you can send your message again."
        )
        page.reload()
        expect(page.locator("body")).to_have_attribute("data-ready", "true")
        expect(page.locator("#messages > li.user .content")).to_have_text(["hello"])
