"""Light and dark in Debian's Chromium: the page follows the system colour scheme, live, and its
text stays readable (WCAG AA contrast) in both, at laptop and phone size.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from app.main import create_app
from tests.e2e.conftest import e2e_settings, screenshot, sqlite_file
from tests.e2e.scripted_web import Scripted, ScriptedWebModel
from tests.e2e.web import REMEMBER, open_memory, send, settled, sign_in
from tests.support.server import live_server

pytestmark = pytest.mark.browser

QUESTION = "show me a code block"
ANSWER = "Here is **some** code with `inline` bits:\n\n```sql\nselect 1;\n```\n\n> and a quote"

# Text people read, with the contrast it needs against what is behind it (WCAG AA: 4.5:1).
READABLE = [
    ".message.user .content",
    ".markdown p",
    ".markdown blockquote p",
    ".markdown pre code",
    ".markdown pre code span",
    ".markdown p code",
    ".code-language",
    ".message-meta time",
    ".copy-answer",
    ".chip",
    ".badge",
    ".composer-hint",
    "#message-input",
    ".group-title",
    ".conversation .open",
    ".account-text strong",
    ".account-text .muted",
    ".document h3",
    ".document-hint",
    ".usage-text",
    ".entry-text",
    "#memory-notice p",
    ".manage p",
    "#forget",
]

# Contrast of each visible element's text against its nearest opaque background.
CONTRASTS = """(selectors) => {
    const channels = (color) => (color.match(/[\\d.]+/g) || []).map(Number);
    const luminance = ([r, g, b]) => {
        const linear = [r, g, b].map((value) => {
            const v = value / 255;
            return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
        });
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2];
    };
    const background = (element) => {
        for (let node = element; node; node = node.parentElement) {
            const color = channels(getComputedStyle(node).backgroundColor);
            if (color.length === 3 || (color.length === 4 && color[3] > 0.9)) return color;
        }
        return channels(getComputedStyle(document.documentElement).backgroundColor);
    };
    const results = [];
    for (const selector of selectors) {
        for (const element of document.querySelectorAll(selector)) {
            const shown = element.checkVisibility({ visibilityProperty: true });
            if (!shown || (!element.textContent.trim() && !element.value)) continue;
            const text = luminance(channels(getComputedStyle(element).color));
            const behind = luminance(background(element));
            const ratio = (Math.max(text, behind) + 0.05) / (Math.min(text, behind) + 0.05);
            results.push([selector, Math.round(ratio * 100) / 100]);
        }
    }
    return results;
}"""

PAGE_COLOURS = """() => {
    const channels = (color) => (color.match(/[\\d.]+/g) || []).map(Number).slice(0, 3);
    const $ = (selector) => document.querySelector(selector);
    const mean = (values) => values.reduce((sum, value) => sum + value, 0) / values.length / 255;
    return {
        background: mean(channels(getComputedStyle($('#chat')).backgroundColor)),
        text: mean(channels(getComputedStyle($('.markdown p')).color)),
    };
}"""


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = ScriptedWebModel({QUESTION: Scripted(ANSWER)})
    url = sqlite_file(tmp_path_factory.mktemp("theme"))
    with live_server(create_app(e2e_settings(url), model_transport=model)) as base:
        yield base


def readable_everywhere(page: Page) -> list[tuple[str, float]]:
    """Checks the chat, then the memory panel (a drawer on a phone); the failing pairs."""
    measured: list[tuple[str, float]] = [tuple(pair) for pair in page.evaluate(CONTRASTS, READABLE)]
    open_memory(page)
    measured += [tuple(pair) for pair in page.evaluate(CONTRASTS, READABLE)]
    seen = {selector for selector, _ratio in measured}
    assert {".markdown p", ".markdown pre code", ".entry-text", "#memory-notice p"} <= seen, seen
    return [(selector, ratio) for selector, ratio in measured if ratio < 4.5]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_is_readable_in_both_colour_schemes(
    scripted: str, page: Page, screen: str, scheme: str
) -> None:
    """In light and in dark, every kind of text on the page (answers, code, times, chips,
    entries, notices, buttons) has at least 4.5:1 contrast with what is behind it."""
    page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
    sign_in(page, scripted, f"contrast-{scheme}-{screen}")
    expect(send(page, QUESTION)).to_have_attribute("data-state", "done")
    settled(page, 1)
    expect(send(page, REMEMBER)).to_have_attribute("data-state", "done")
    settled(page, 2)
    assert readable_everywhere(page) == []
    screenshot(page, f"theme-{scheme}")

    # Every kind of message the panel can show.
    for kind in ("info", "success", "warning", "error"):
        page.evaluate(
            """(kind) => {
                const notice = document.querySelector('#memory-notice');
                notice.dataset.kind = kind;
                notice.querySelector(kind === 'error' ? '[role=alert]' : '[role=status]')
                    .textContent = `A ${kind} message`;
            }""",
            kind,
        )
        ratios = page.evaluate(CONTRASTS, ["#memory-notice p"])
        assert ratios and all(ratio >= 4.5 for _selector, ratio in ratios), (kind, ratios)


def test_dark_mode_follows_the_system_setting(scripted: str, page: Page, screen: str) -> None:
    """The page is dark when the system is, light when it is, and switches live when the
    system setting changes, with no reload and no setting of its own."""
    page.emulate_media(color_scheme="dark")
    sign_in(page, scripted, f"dark-{screen}")
    expect(send(page, QUESTION)).to_have_attribute("data-state", "done")
    dark = page.evaluate(PAGE_COLOURS)
    assert dark["background"] < 0.2 and dark["text"] > 0.75, dark
    assert page.evaluate("() => getComputedStyle(document.documentElement).colorScheme") == (
        "light dark"
    )

    page.emulate_media(color_scheme="light")
    light = page.evaluate(PAGE_COLOURS)
    assert light["background"] > 0.9 and light["text"] < 0.25, light
    page.emulate_media(color_scheme="dark")
    assert page.evaluate(PAGE_COLOURS) == dark
