"""Memory control in Debian's Chromium, at laptop and phone size: each entry says where it came
from, the history lists every change with Undo, "Ask before saving" turns what the assistant
wants to remember into cards to accept or reject, and Export downloads everything as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import APIResponse, Page, Route, expect

from app.main import create_app
from tests.e2e.conftest import e2e_settings, memory_of, sqlite_file
from tests.e2e.web import (
    REMEMBER,
    SAVED_ENTRY,
    close_drawer,
    open_memory,
    send,
    settled,
    sign_in,
    sign_out,
    user_entries,
)
from tests.support.gates import Gates
from tests.support.server import live_server
from tests.support.transcripts import GATE, HeldTranscript
from tests.support.waiting import wait_for

pytestmark = pytest.mark.browser

TITLE = "I prefer short answers"  # titled from the first message (app/conversations/titles.py)
ADDED = f"Added to About you: {SAVED_ENTRY}"
PROPOSED = f"Add to About you: {SAVED_ENTRY}"  # a card says what accepting would do


def history_items(page: Page):  # noqa: ANN201 (a Locator)
    return page.locator("#change-list li .change-text")


def cards(page: Page):  # noqa: ANN201
    return page.locator("#proposal-list li")


def test_each_entry_shows_its_origin_and_a_change_can_be_undone(
    server: str, page: Page, screen: str
) -> None:
    """A fact saved in a turn says which conversation it came from and when; the history lists
    the change with Undo; undoing removes the entry and lists the undo as a change too."""
    token = sign_in(page, server, f"erin-{screen}")
    send(page, REMEMBER)
    settled(page, 1)
    open_memory(page)
    expect(user_entries(page)).to_have_text([SAVED_ENTRY])
    expect(page.locator("#doc-user-entries .entry-origin")).to_have_text(
        f"from “{TITLE}”, just now"
    )
    expect(history_items(page)).to_have_text([ADDED])
    expect(page.locator("#change-list .change-meta")).to_contain_text(f"From “{TITLE}”")

    page.get_by_role("button", name=f"Undo: {ADDED}").click()
    expect(user_entries(page)).to_have_count(0)
    expect(history_items(page)).to_have_text([f"Removed from About you: {SAVED_ENTRY}", ADDED])
    expect(page.locator("#change-list li").nth(1).locator(".undone")).to_have_text("Undone")
    expect(page.get_by_role("button", name=f"Undo: {ADDED}")).to_have_count(0)
    expect(page.locator("#memory-notice [role=status]")).to_have_text("Undone: 1 entry removed.")
    assert memory_of(server, token)["user"]["entries"] == []


def test_an_undo_after_a_later_edit_is_refused_with_a_clear_message(
    server: str, page: Page, screen: str
) -> None:
    """The entry was edited since it was added: undoing the add says so and changes nothing;
    an entry added in the panel says it was added by you."""
    token = sign_in(page, server, f"finn-{screen}")
    open_memory(page)
    page.get_by_label("Add to “About you”").fill("Works at night")
    page.get_by_label("Add to “About you”").press("Enter")
    expect(page.locator("#doc-user-entries .entry-origin")).to_have_text("added by you, just now")
    page.get_by_role("button", name="Edit: Works at night").click()
    page.get_by_label("Edit entry in “About you”").fill("Works early mornings")
    page.get_by_role("button", name="Save").click()
    expect(user_entries(page)).to_have_text(["Works early mornings"])
    page.get_by_role("button", name="Undo: Added to About you: Works at night").click()
    expect(page.locator("#memory-notice [role=alert]")).to_have_text(
        "Cannot undo: that entry has changed since. Nothing was changed."
    )
    assert memory_of(server, token)["user"]["entries"] == ["Works early mornings"]


def test_ask_before_saving_shows_proposals_to_accept_or_reject(
    server: str, page: Page, screen: str
) -> None:
    """With the switch on, a turn's fact waits as a card and memory stays empty; Accept saves
    it (its origin says you approved it), Reject drops the next one; the switch is kept."""
    token = sign_in(page, server, f"gwen-{screen}")
    open_memory(page)
    page.get_by_label("Ask before saving").check()
    expect(page.locator("#memory-notice [role=status]")).to_have_text(
        "The assistant will ask before saving anything."
    )
    close_drawer(page)
    send(page, REMEMBER)
    settled(page, 1)
    open_memory(page)
    expect(cards(page)).to_have_count(1)
    expect(cards(page).first).to_contain_text(PROPOSED)
    expect(cards(page).first).to_contain_text(f"Proposed from “{TITLE}”")
    expect(user_entries(page)).to_have_count(0)
    assert memory_of(server, token)["user"]["entries"] == []

    page.get_by_role("button", name=f"Accept: {PROPOSED}").click()
    expect(cards(page)).to_have_count(0)
    expect(page.locator("#memory [data-section=proposals]")).to_be_hidden()
    expect(user_entries(page)).to_have_text([SAVED_ENTRY])
    expect(page.locator("#doc-user-entries .entry-origin")).to_have_text(
        f"from “{TITLE}”, approved by you, just now"
    )

    close_drawer(page)
    send(page, "remember that I live in Lisbon")
    settled(page, 2)
    open_memory(page)
    expect(cards(page)).to_have_count(1)
    page.get_by_role("button", name="Reject: Add to About you", exact=False).click()
    expect(cards(page)).to_have_count(0)
    expect(page.locator("#memory-notice [role=status]")).to_have_text(
        "Proposal rejected: nothing was saved."
    )
    assert memory_of(server, token)["user"]["entries"] == [SAVED_ENTRY]
    page.reload()
    open_memory(page)
    expect(page.get_by_label("Ask before saving")).to_be_checked()


def test_a_proposal_card_appears_while_the_turn_is_still_open(
    tmp_path: Path, page: Page, screen: str
) -> None:
    """The card is shown the moment the turn's `memory` event says `proposed`, not when the
    turn ends: while the server holds the turn open (its stream not yet done), the card is
    already there, and the answer is still streaming."""
    app = create_app(e2e_settings(sqlite_file(tmp_path)))
    gates = Gates()
    with live_server(app) as base:
        runtime = app.state.runtime
        runtime.conversations = HeldTranscript(runtime.engine, gates)
        try:
            sign_in(page, base, f"hana-{screen}")
            open_memory(page)
            page.get_by_label("Ask before saving").check()
            close_drawer(page)
            answer = send(page, REMEMBER)
            wait_for(lambda: GATE in gates.held, "the turn held after its memory event")
            open_memory(page)
            expect(cards(page)).to_have_count(1)
            expect(cards(page).first).to_contain_text(PROPOSED)
            expect(answer).to_have_attribute("data-state", "streaming")
        finally:
            gates.release(GATE)
        close_drawer(page)
        settled(page, 1)
        expect(answer).to_have_attribute("data-state", "done")


def test_export_downloads_memory_history_and_conversations(
    server: str, page: Page, screen: str, tmp_path: Path
) -> None:
    sign_in(page, server, f"hana-{screen}")
    send(page, REMEMBER)
    settled(page, 1)
    open_memory(page)
    with page.expect_download() as download_info:
        page.get_by_role("button", name="Export my data").click()
    download = download_info.value
    assert download.suggested_filename.startswith("memory-export-")
    path = tmp_path / download.suggested_filename
    download.save_as(path)
    body = json.loads(path.read_text())
    assert body["subject"] == f"hana-{screen}"
    assert body["memory"]["user"]["entries"] == [SAVED_ENTRY]
    assert [c["operations"][0]["after"] for c in body["history"]] == [SAVED_ENTRY]
    [conversation] = body["conversations"]
    assert conversation["title"] == TITLE
    assert [m["role"] for m in conversation["messages"]] == ["user", "assistant"]


def test_the_next_person_sees_none_of_the_previous_ones_history_or_proposals(
    server: str, page: Page, screen: str
) -> None:
    """Sign-out clears the history, the cards and the switch; the next person's panel shows
    only their own (empty) history, read for their token."""
    sign_in(page, server, f"ivan-{screen}")
    open_memory(page)
    page.get_by_label("Ask before saving").check()
    close_drawer(page)
    send(page, REMEMBER)
    settled(page, 1)
    send(page, "remember that I live in Lisbon")
    settled(page, 2)
    open_memory(page)
    expect(cards(page)).to_have_count(2)
    page.get_by_role("button", name=f"Accept: {PROPOSED}").click()
    expect(history_items(page)).to_have_count(1)
    sign_out(page)
    sign_in(page, server, f"jade-{screen}")
    open_memory(page)
    expect(page.locator("#memory [data-section=history] .empty")).to_be_visible()
    expect(history_items(page)).to_have_count(0)
    expect(cards(page)).to_have_count(0)
    expect(page.get_by_label("Ask before saving")).not_to_be_checked()


def test_the_save_mode_switch_never_undoes_a_click_with_an_older_read(
    server: str, page: Page, screen: str
) -> None:
    """ "Ask before saving" cannot be used until the stored mode is read, then shows it; a
    switch made while an older read of the mode is still on its way is not undone when that
    read answers."""
    token = sign_in(page, server, f"kai-{screen}")
    stored_mode = httpx.put(
        f"{server}/v1/memory/settings",
        headers={"Authorization": f"Bearer {token}"},
        json={"save_mode": "ask"},
        timeout=10,
    )
    assert stored_mode.status_code == 200, stored_mode.text
    held: list[tuple[Route, APIResponse]] = []
    holding = [True]

    def hold_reads(route: Route) -> None:
        if route.request.method != "GET" or not holding[0]:
            route.continue_()
            return
        held.append((route, route.fetch()))  # answered later, with what it read now

    def release_reads() -> None:
        # Every held read, oldest first, and none held from here on: the page may have read
        # the mode again meanwhile (its project scope settling), and only the newest read counts.
        holding[0] = False
        while held:
            route, answer = held.pop(0)
            route.fulfill(response=answer)

    page.route("**/v1/memory/settings", hold_reads)
    page.reload()  # the session stays; the page reads memory, then the save mode (held)
    switch = page.get_by_label("Ask before saving")
    until_held(page, held, "the page's read of the save mode")
    open_memory(page)
    expect(switch).to_be_disabled()
    release_reads()
    expect(switch).to_be_enabled()
    expect(switch).to_be_checked()

    holding[0] = True
    page.get_by_role("button", name="Refresh memory").click()
    until_held(page, held, "the refresh's read of the save mode")
    switch.uncheck()  # sent while the refresh's read, which said "ask", is still held
    expect(page.locator("#memory-notice")).to_contain_text("saves what it learns as it goes")
    release_reads()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    page.wait_for_load_state("networkidle")
    expect(switch).not_to_be_checked()
    mode = httpx.get(
        f"{server}/v1/memory/settings", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    assert mode.json()["save_mode"] == "auto"


def until_held(page: Page, held: list[tuple[Route, APIResponse]], what: str) -> None:
    """Let the page run (route handlers run inside Playwright calls) until a read is held."""
    for _ in range(300):
        if held:
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"{what} never arrived")
