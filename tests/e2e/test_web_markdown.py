"""Answers as markdown in Debian's Chromium: rendered by the vendored parser and sanitizer, code
blocks with Copy, and raw HTML in an answer shown as text, never an element, never run.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import BrowserContext, Locator, Page, Request, expect

from app.main import create_app
from tests.e2e.conftest import e2e_settings, screenshot, sqlite_file
from tests.e2e.scripted_web import Scripted, ScriptedWebModel
from tests.e2e.web import open_conversations, send, settled, sign_in
from tests.support.server import live_server

pytestmark = pytest.mark.browser

CODE = 'import csv\n\nwith open("data.csv") as file:\n    rows = list(csv.reader(file))'
MARKDOWN_QUESTION = "show me some markdown"
MARKDOWN = f"""## A heading

Some **bold**, some *emphasis*, `inline code` and a [link](https://example.org/docs).

1. first step
2. second step

- [x] done task

```python
{CODE}
```

| Name | Value |
|---|---|
| a | 1 |

> a quotation
"""

HOSTILE_QUESTION = "answer with hostile html"
HOSTILE = """Raw HTML follows.

<img src="x" onerror="window.__pwned = 'img'">

<script>window.__pwned = 'script'</script>

Inline <b onclick="window.__pwned = 'bold'">bold</b>, <svg onload="window.__pwned = 1"></svg>.

<iframe src="javascript:window.__pwned = 'iframe'"></iframe>

<style>body { display: none }</style>

[click me](javascript:window.__pwned='link'), <a href="javascript:window.__pwned=2">anchor</a>

![tracking pixel](http://tracker.example.invalid/pixel.png)

<form action="https://evil.example.invalid"><input name="x"></form>
"""
# Elements an answer may never contain, whatever its text.
FORBIDDEN = "img, script, iframe, svg, style, form, input, object, embed, b, video, audio, link"


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ScriptedWebModel]]:
    model = ScriptedWebModel(
        {
            MARKDOWN_QUESTION: Scripted(MARKDOWN, delay_seconds=0.002),
            HOSTILE_QUESTION: Scripted(HOSTILE, delay_seconds=0.002),
        }
    )
    url = sqlite_file(tmp_path_factory.mktemp("markdown"))
    with live_server(create_app(e2e_settings(url), model_transport=model)) as base:
        yield base, model


def test_markdown_answers_are_rendered(
    scripted: tuple[str, ScriptedWebModel], page: Page, screen: str
) -> None:
    """Headings, emphasis, lists, code blocks (language and Copy), tables and quotations become
    their elements; links open in a new tab without handing over the page."""
    base, _model = scripted
    sign_in(page, base, f"md-{screen}")
    answer = send(page, MARKDOWN_QUESTION)
    expect(answer).to_have_attribute("data-state", "done")
    content = answer.locator(".content")
    expect(content.locator("h2")).to_have_text("A heading")
    expect(content.locator("strong").first).to_have_text("bold")
    expect(content.locator("em")).to_have_text("emphasis")
    expect(content.locator("p code")).to_have_text("inline code")
    expect(content.locator("ol li")).to_have_text(["first step", "second step"])
    expect(content.locator("ul li")).to_have_text(["☑ done task"])
    expect(content.locator("blockquote")).to_have_text("a quotation")
    expect(content.locator("table th")).to_have_text(["Name", "Value"])
    expect(content.locator("table td")).to_have_text(["a", "1"])
    block = content.locator(".code-block")
    expect(block.locator(".code-language")).to_have_text("python")
    expect(block.locator("pre code")).to_have_text(CODE)
    expect(block.get_by_role("button", name="Copy code")).to_be_visible()
    link = content.get_by_role("link", name="link")
    expect(link).to_have_attribute("href", "https://example.org/docs")
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
    screenshot(page, "markdown")


def test_copy_buttons_copy_the_code_and_the_whole_answer(
    scripted: tuple[str, ScriptedWebModel], context: BrowserContext, page: Page, screen: str
) -> None:
    """A code block's Copy puts exactly its code on the clipboard; the answer's Copy puts the
    answer's markdown source there."""
    base, _model = scripted
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    sign_in(page, base, f"copy-{screen}")
    answer = send(page, MARKDOWN_QUESTION)
    expect(answer).to_have_attribute("data-state", "done")

    copy_code = answer.get_by_role("button", name="Copy code")
    copy_code.click()
    expect(copy_code).to_contain_text("Copied")
    assert page.evaluate("() => navigator.clipboard.readText()") == CODE

    copy_answer = answer.get_by_role("button", name="Copy answer")
    copy_answer.click()
    expect(copy_answer).to_contain_text("Copied")
    assert page.evaluate("() => navigator.clipboard.readText()") == MARKDOWN


def test_raw_html_in_an_answer_does_not_execute(
    scripted: tuple[str, ScriptedWebModel], page: Page, screen: str
) -> None:
    """`<img onerror>`, `<script>`, event attributes, `javascript:` links, frames, styles,
    forms and remote images in an answer never become elements and never run, live or when the
    conversation is reopened from the transcript; the markup is shown as the text it is."""
    base, _model = scripted
    outgoing: list[str] = []
    page.on("request", lambda request: outgoing.append(request.url) if _foreign(request) else None)
    sign_in(page, base, f"hostile-{screen}")
    answer = send(page, HOSTILE_QUESTION)
    expect(answer).to_have_attribute("data-state", "done")
    settled(page, 1)

    for shown in (answer, _reopened(page)):
        content = shown.locator(".content")
        expect(content).to_contain_text('<img src="x" onerror="window.__pwned = \'img\'">')
        expect(content).to_contain_text("<script>window.__pwned = 'script'</script>")
        expect(content).to_contain_text("<style>body { display: none }</style>")
        assert content.locator(FORBIDDEN).count() == 0
        assert content.locator("[onerror], [onclick], [onload], [style]").count() == 0
        hrefs = content.locator("a[href]").evaluate_all("links => links.map((link) => link.href)")
        assert all(href.startswith(("http://", "https://")) for href in hrefs), hrefs
        expect(content.locator("a", has_text="tracking pixel")).to_have_count(1)
        content.get_by_text("click me").click()
        assert page.evaluate("() => window.__pwned") is None
        expect(page.locator("body")).to_be_visible()
    assert outgoing == []
    screenshot(page, "hostile-html")


def _foreign(request: Request) -> bool:
    return not request.url.startswith(("http://127.0.0.1", "data:", "blob:"))


def _reopened(page: Page) -> Locator:
    """The same answer, rendered again from the stored transcript."""
    page.get_by_role("button", name="New chat").click()
    open_conversations(page)
    page.locator("#conversation-list .open").first.click()
    answer = page.locator("#messages li.assistant").last
    expect(answer).to_have_attribute("data-state", "done")
    return answer


def test_streaming_keeps_the_blocks_already_shown(
    scripted: tuple[str, ScriptedWebModel], page: Page, screen: str
) -> None:
    """While an answer streams, blocks that are complete keep their elements: a code block the
    person is copying from, or text they selected, is not rebuilt under them by the next words."""
    base, model = scripted
    question = f"stream a code block then more for {screen}"
    first = f"```python\n{CODE}\n```\n\nAnd then"
    scripted_answer = Scripted(first + " " + " ".join(f"more{n}" for n in range(80)))
    gate = scripted_answer.gate(len(first.split()))
    model.answers[question] = scripted_answer
    try:
        sign_in(page, base, f"stable-{screen}")
        answer = send(page, question)
        expect(answer.locator(".content")).to_contain_text("And then")
        answer.locator("pre").evaluate("element => { element.dataset.marked = 'kept'; }")
        gate.set()
        expect(answer).to_have_attribute("data-state", "done")
        expect(answer.locator(".content")).to_contain_text("more79")
        expect(answer.locator("pre")).to_have_attribute("data-marked", "kept")
    finally:
        scripted_answer.release()
