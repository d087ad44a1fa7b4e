"""An answer's memory chip after a reload (issue 54), in Debian's Chromium at 390 and 1280 px:
each stored answer shows the chip the live turn ended with ("Memory updated", "Already in
memory", "Waiting for your approval"), labelled from what its sources keep, and the panel's
history relabels it as it does a live one; a regenerated turn keeps its place, its chips and its
version switcher across the reload."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.web import REMEMBER, close_drawer, open_memory, send, settled, sign_in

pytestmark = pytest.mark.browser

# Every answer on the page (folded earlier versions included), in order: its text's start and
# its chips, each as its text and its classes.
CHIPS = """list => [...list.querySelectorAll('li.assistant')].map((answer) => ({
    text: answer.querySelector('.content').textContent.slice(0, 30),
    folded: Boolean(answer.closest('.earlier-versions')),
    chips: [...answer.querySelectorAll('.activity .chip')].map(
        (chip) => [chip.textContent, [...chip.classList].sort().join(' ')]),
}))"""


# The conversation's top-level items in order: messages, and folds of earlier versions.
ORDER = """list => [...list.children].map((item) => (item.classList.contains('earlier-versions')
    ? 'fold' : (item.classList.contains('user') ? 'user' : 'answer')))"""


def chips(page: Page) -> list[dict[str, Any]]:
    shown: list[dict[str, Any]] = page.locator("#messages").evaluate(CHIPS)
    return shown


def reload(page: Page, answers: int) -> None:
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#messages > li.assistant")).to_have_count(answers)


def memory_chip_texts(page: Page) -> list[str]:
    return page.locator("#messages > li.assistant .memory-chip").all_text_contents()


def test_memory_chips_survive_a_reload(server: str, page: Page, screen: str) -> None:
    """A saved fact, the same fact again, a plain turn and (under "Ask before saving") a
    proposal: after a reload every answer shows exactly the chips it showed live; accepting the
    proposal relabels the reloaded chip."""
    sign_in(page, server, f"chips-{screen}")
    send(page, REMEMBER)
    settled(page, 1)
    send(page, REMEMBER)
    settled(page, 2)
    send(page, "hello there")
    settled(page, 3)
    open_memory(page)
    page.get_by_label("Ask before saving").check()
    expect(page.locator("#memory-notice")).to_contain_text("ask before saving")
    close_drawer(page)
    send(page, "remember that I live in Lisbon")
    settled(page, 4)
    expect(page.locator("#messages > li.assistant .memory-chip")).to_have_text(
        ["Memory updated", "Already in memory", "Waiting for your approval"]
    )
    live = chips(page)
    assert [answer["chips"] for answer in live][2] == [], live

    reload(page, 4)
    expect(page.locator("#messages > li.assistant .memory-chip")).to_have_text(
        ["Memory updated", "Already in memory", "Waiting for your approval"]
    )
    assert chips(page) == live

    open_memory(page)
    page.locator("#memory [data-section=proposals]").get_by_role("button", name="Accept").click()
    expect(page.locator("#messages > li.assistant .memory-chip").last).to_have_text(
        "Saved after your approval"
    )
    close_drawer(page)
    accepted = chips(page)
    reload(page, 4)
    expect(page.locator("#messages > li.assistant .memory-chip").last).to_have_text(
        "Saved after your approval"
    )
    assert chips(page) == accepted


def test_a_regenerated_turn_keeps_its_place_chips_and_versions_after_a_reload(
    server: str, page: Page, screen: str
) -> None:
    """A fact saved, then its answer regenerated (the fact is already remembered): after a
    reload the earlier version stays folded above the latest answer with its own chip, the
    latest keeps its chip, and `< 2/2 >` moves between the two answers' texts."""
    sign_in(page, server, f"regen-{screen}")
    send(page, "hello there")
    settled(page, 1)
    send(page, REMEMBER)
    settled(page, 2)
    page.locator("#messages > li.assistant").last.get_by_role(
        "button", name="Regenerate answer"
    ).click()
    settled(page, 3)
    latest = page.locator("#messages > li.assistant").last
    switcher = latest.get_by_role("group", name="Versions of this answer")
    expect(switcher.locator(".version-count")).to_have_text("2/2")
    expect(latest.locator(".memory-chip")).to_have_text("Already in memory")
    folded = page.locator("#messages > .earlier-versions li.assistant")
    expect(folded.locator(".memory-chip")).to_have_text("Memory updated")
    live = chips(page)
    assert [(answer["folded"], len(answer["chips"])) for answer in live] == [
        (False, 0),
        (True, 1),
        (False, 1),
    ], live
    order = page.locator("#messages").evaluate(ORDER)
    assert order == ["user", "answer", "fold", "user", "answer"], order

    reload(page, 2)
    assert page.locator("#messages").evaluate(ORDER) == order
    assert chips(page) == live
    earlier_text = folded.locator(".content").text_content() or ""
    current_text = latest.locator(".content").text_content() or ""
    expect(switcher.locator(".version-count")).to_have_text("2/2")
    switcher.get_by_role("button", name="Previous version").click()
    expect(switcher.locator(".version-count")).to_have_text("1/2")
    expect(latest.locator(".content")).to_have_text(earlier_text)
    expect(switcher.get_by_role("button", name="Previous version")).to_be_disabled()
    switcher.get_by_role("button", name="Next version").click()
    expect(switcher.locator(".version-count")).to_have_text("2/2")
    expect(latest.locator(".content")).to_have_text(current_text)
    expect(latest.locator(".memory-chip")).to_be_visible()
