#!/usr/bin/env python3
"""Regenerates the web client's screenshots in docs/screenshots/ with Debian's Chromium.

The app runs in process on a temporary SQLite file. Its model is scripted: questions listed in
DEMO_ANSWERS get fixed markdown answers (to show rendering), everything else (remember, forget,
what do you remember) goes to the built-in offline model. Desktop shots are 1280×800, tablet
shots 900×1000, phone shots 390×844; each in light and dark where it matters.

    .venv/bin/python scripts/web_screenshots.py
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import jwt
import uvicorn
from playwright.sync_api import Browser, Page, ViewportSize, sync_playwright

from app.conversations.titles import title_from_message
from app.db.engine import build_engine
from app.db.migrate import upgrade
from app.main import create_app
from app.offline.model import OfflineModel
from app.offline.transport import ChatCompletionsTransport
from app.offline.wire import ChatRequest, Reply, Text
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}
TABLET: ViewportSize = {"width": 900, "height": 1000}

CSV_QUESTION = "How do I read a CSV file in Python and sum one column?"
CSV_ANSWER = """Use the standard library's `csv` module: no extra packages needed.

```python
import csv

with open("sales.csv", newline="") as file:
    total = sum(float(row["amount"]) for row in csv.DictReader(file))

print(f"Total: {total:.2f}")
```

A few things worth knowing:

- `newline=""` lets the reader handle line breaks inside quoted fields.
- `DictReader` takes the column names from the first row.
- For heavier analysis, **pandas** is the usual next step.

| Approach | Best for |
|---|---|
| `csv` module | small scripts, no dependencies |
| `pandas.read_csv` | analysis, joins, grouping |
"""
STORY_QUESTION = "Tell me a long story about a lighthouse keeper"
STORY_ANSWER = "\n\n".join(
    f"**Night {number}.** The keeper climbed the hundred and twelve steps, trimmed the wick and "
    "wrote the weather in the log: wind from the west, a long swell, two ships far out. "
    "Nobody had asked him to keep the log so carefully; he did it because one day "
    "someone would need to know."
    for number in range(1, 25)
)
DEMO_ANSWERS = {
    CSV_QUESTION: CSV_ANSWER,
    STORY_QUESTION: STORY_ANSWER,
    "Plan a weekend in Lisbon with two kids": (
        "Short version, as you like it:\n\n1. **Saturday:** Oceanário in the morning, "
        "Parque das Nações by bike after lunch.\n2. **Sunday:** tram 28 to Alfama, "
        "then the castle.\n\nBook the aquarium online to skip the queue."
    ),
    "Explain the difference between TCP and UDP": (
        "**TCP** delivers every byte, in order, or tells you it could not. "
        "**UDP** sends datagrams and forgets them: faster, but loss and reordering are yours "
        "to handle."
    ),
    "Draft a polite reminder email about an overdue invoice": (
        "> Hi Alex, a quick reminder that invoice **#2041** was due on 15 November. "
        "Could you let me know when we can expect payment? Thanks!"
    ),
}
# Facts told on the phone shots, so that the memory drawer shows a turn's outcome.
PHONE_FACTS = ["remember that I like my coffee black", "remember that I am learning Portuguese"]
SIDEBAR_PROMPTS = [
    "Draft a polite reminder email about an overdue invoice",
    "Explain the difference between TCP and UDP",
    "Plan a weekend in Lisbon with two kids",
]
PROJECT_NAME = "Client: Atlas Logistics"
PROJECT_NOTES = [
    "Atlas deploys on Fridays after their change board; no releases on public holidays.",
    "Their warehouse API is Django 4.2 on PostgreSQL 15; staging is `atlas-stg`.",
    "Contact: Priya (engineering lead) prefers a written summary before any call.",
]
PROJECT_QUESTION = "Plan a weekend in Lisbon with two kids"
MEMORY_PROMPTS = [
    "remember that I prefer short answers",
    "my name is Sam",
    "remember that I work as a data engineer in Lisbon",
    "remember that the analytics project uses PostgreSQL 16 and dbt",
    "remember that releases go out on Tuesdays after the team review",
]


class DemoModel:
    """Fixed markdown for the demo questions; the offline model for everything else."""

    def __init__(self) -> None:
        self.offline = OfflineModel()

    async def __call__(self, request: ChatRequest) -> Reply:
        last = request.messages[-1] if request.messages else {}
        if last.get("role") == "user" and isinstance(last.get("content"), str):
            answer = DEMO_ANSWERS.get(last["content"].strip())
            if answer is not None:
                return Text(answer)
        return await self.offline(request)


@contextmanager
def serving(database_url: str, transport: ChatCompletionsTransport) -> Iterator[str]:
    settings = Settings(
        _env_file=None,
        database_url=database_url,
        auth_mode="dev",
        auth_dev_secret="screenshots-dev-secret-" + "0123456789abcdef" * 3,
        memory_enabled=True,
        flag_cache_seconds=0,
        llm_base_url="http://model.example.invalid/v1",  # never called: the transport answers
        llm_model="example-model",
        log_format="console",
        log_level="WARNING",
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, model_transport=transport),
            host="127.0.0.1",
            port=port,
            log_config=None,
            lifespan="on",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def chat(base: str, token: str, message: str, conversation_id: str | None = None) -> str:
    """One turn through the API (the native stream, read to its end); the conversation id."""
    body: dict[str, Any] = {"message": message}
    if conversation_id:
        body["conversation_id"] = conversation_id
    headers = {"authorization": f"Bearer {token}"}
    with httpx.stream("POST", f"{base}/v1/chat", json=body, headers=headers, timeout=30) as reply:
        for line in reply.iter_lines():
            if line.startswith("data:") and '"conversation_id"' in line:
                conversation_id = json.loads(line[5:])["conversation_id"]
    assert conversation_id is not None
    return conversation_id


def seed(base: str, name: str) -> str:
    token = httpx.post(f"{base}/dev/token", json={"sub": name}, timeout=10).json()["access_token"]
    for prompt in SIDEBAR_PROMPTS:
        chat(base, token, prompt)
    memory_conversation = None
    for prompt in MEMORY_PROMPTS:
        memory_conversation = chat(base, token, prompt, memory_conversation)
    return str(token)


def open_page(
    browser: Browser,
    base: str,
    token: str | None,
    *,
    phone: bool,
    dark: bool,
    viewport: ViewportSize | None = None,
) -> Page:
    context = browser.new_context(
        viewport=viewport or (PHONE if phone else DESKTOP),
        device_scale_factor=2 if phone else 1,
        is_mobile=phone,
        has_touch=phone,
        color_scheme="dark" if dark else "light",
        reduced_motion="reduce",
    )
    page = context.new_page()
    if token:  # the token's person signs in as the page would: the server sets the cookie
        subject = jwt.decode(token, options={"verify_signature": False})["sub"]
        context.request.post(f"{base}/auth/dev/login", data={"sub": subject})
    page.goto(base)
    page.wait_for_selector("body[data-ready=true]")
    return page


def ask(page: Page, question: str) -> None:
    page.get_by_label("Message", exact=True).fill(question)
    page.get_by_role("button", name="Send").click()


def answered(page: Page, turns: int) -> None:
    """Waits until the page has settled `turns` turns (answer, conversations and memory read)."""
    page.wait_for_selector(f"body[data-turns='{turns}']")


def streamed_beyond(page: Page, characters: int) -> None:
    # A function, not an expression string: the page's policy forbids eval, Playwright's too.
    page.wait_for_function(
        "(limit) => document.querySelector('#messages li.assistant:last-child .content')"
        ".textContent.length > limit",
        arg=characters,
    )


def shot(page: Page, name: str) -> None:
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.screenshot(path=str(OUT / f"{name}.png"))
    print(f"  {name}.png")


def open_csv_conversation(page: Page, phone: bool) -> None:
    if phone:
        page.get_by_role("button", name="Conversations", exact=True).click()
    # The newest conversation of that title (the list is newest first).
    title = title_from_message(CSV_QUESTION)
    page.locator("#conversation-list .open", has_text=title).first.click()
    page.wait_for_selector("#messages > li.assistant[data-state=done]")


def stream_and_stop(page: Page, base: str, token: str, name: str, beyond: int) -> None:
    """A long answer, caught mid-stream (scrolled up on a desktop), then stopped and deleted."""
    ask(page, STORY_QUESTION)
    streamed_beyond(page, beyond)
    if name.startswith("desktop"):
        page.mouse.move(640, 300)
        page.mouse.wheel(0, -500)
        page.wait_for_selector("#jump-latest:not([hidden])")
    shot(page, name)
    page.get_by_role("button", name="Stop").click()
    page.wait_for_selector("#messages li.assistant:last-child[data-state=stopped]")
    headers = {"authorization": f"Bearer {token}"}
    listed = httpx.get(f"{base}/v1/conversations", headers=headers, timeout=10).json()
    for conversation in listed["conversations"]:
        if conversation["title"] == title_from_message(STORY_QUESTION):
            httpx.delete(f"{base}/v1/conversations/{conversation['id']}", headers=headers)


def shoot_projects(browser: Browser, base: str, token: str) -> None:
    """A client's project: its page, and one of its chats with the project's notes in the panel
    (labelled with where each document applies), on a desktop and a phone."""
    headers = {"authorization": f"Bearer {token}"}
    project = httpx.post(
        f"{base}/v1/projects", json={"name": PROJECT_NAME}, headers=headers, timeout=10
    ).json()
    operations = [{"target": "project", "action": "add", "content": note} for note in PROJECT_NOTES]
    httpx.post(
        f"{base}/v1/memory/operations?project_id={project['id']}",
        json={"operations": operations},
        headers=headers,
        timeout=10,
    ).raise_for_status()
    body = {"message": PROJECT_QUESTION, "project_id": project["id"]}
    with httpx.stream("POST", f"{base}/v1/chat", json=body, headers=headers, timeout=30) as reply:
        for _line in reply.iter_lines():
            pass
    for dark in (False, True):
        suffix = "-dark" if dark else ""
        page = open_page(browser, base, token, phone=False, dark=dark)
        page.goto(f"{base}/p/{project['id']}")
        page.wait_for_selector("#project-chats li")
        page.wait_for_selector("#doc-project-entries li")
        shot(page, f"desktop-project{suffix}")
        page.locator("#project-chats .project-chat").first.click()
        page.wait_for_selector("#messages > li.assistant[data-state=done]")
        page.wait_for_selector("#chat-project:not([hidden])")
        shot(page, f"desktop-project-chat{suffix}")
        page.context.close()
        page = open_page(browser, base, token, phone=True, dark=dark)
        page.get_by_role("button", name="Conversations", exact=True).click()
        page.locator("#project-list .project-conversations .open").first.click()
        page.wait_for_selector("#chat-project:not([hidden])")
        page.get_by_role("button", name="Memory", exact=True).click()
        page.wait_for_selector("#doc-project-entries li")
        page.locator("#doc-project").scroll_into_view_if_needed()
        shot(page, f"phone-project-memory{suffix}")
        page.context.close()


def main() -> None:
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    OUT.mkdir(parents=True, exist_ok=True)
    transport = ChatCompletionsTransport(DemoModel())
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{Path(directory) / 'screens.db'}"
        engine = build_engine(url)
        upgrade(engine)
        engine.dispose()
        with serving(url, transport) as base, sync_playwright() as driver:
            token = seed(base, "sam")
            browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])

            page = open_page(browser, base, None, phone=False, dark=False)
            page.get_by_label("Your name").fill("sam")
            shot(page, "desktop-sign-in")
            page.context.close()

            for dark in (False, True):
                suffix = "-dark" if dark else ""
                page = open_page(browser, base, token, phone=False, dark=dark)
                page.wait_for_selector("#doc-user-entries li")
                shot(page, f"desktop-welcome{suffix}")
                if dark:
                    open_csv_conversation(page, phone=False)
                else:
                    ask(page, CSV_QUESTION)
                    answered(page, 1)
                shot(page, f"desktop-answer{suffix}")
                if not dark:
                    search = page.get_by_label("Search conversations")
                    search.fill("Lisbon")
                    page.locator("#search-results li").first.wait_for()
                    shot(page, "desktop-search")
                    search.press("Escape")
                    page.locator("#change-list li").first.wait_for()
                    page.locator("#history-title").scroll_into_view_if_needed()
                    shot(page, "desktop-memory-history")
                    page.get_by_role("button", name="New chat").click()
                    transport.delay_seconds = 0.03
                    stream_and_stop(page, base, token, "desktop-streaming-scrolled-up", 2500)
                    transport.delay_seconds = 0.0
                page.context.close()

            # A tablet: the chat alone, an answer regenerated (the first version folded above),
            # in a conversation of its own, deleted afterwards.
            headers = {"authorization": f"Bearer {token}"}
            for dark in (False, True):
                suffix = "-dark" if dark else ""
                page = open_page(browser, base, token, phone=True, dark=dark, viewport=TABLET)
                if dark:
                    open_csv_conversation(page, phone=True)
                else:
                    ask(page, CSV_QUESTION)
                    answered(page, 1)
                    page.get_by_role("button", name="Regenerate answer").click()
                    answered(page, 2)
                page.locator("#messages > .earlier-versions summary").first.click()
                shot(page, f"tablet-regenerated{suffix}")
                regenerated = page.evaluate("() => location.pathname").removeprefix("/c/")
                page.context.close()
            httpx.delete(f"{base}/v1/conversations/{regenerated}", headers=headers, timeout=10)

            # "Ask before saving": the answer says it will ask; the chip and the card wait.
            settings = f"{base}/v1/memory/settings"
            httpx.put(settings, json={"save_mode": "ask"}, headers=headers, timeout=10)
            page = open_page(browser, base, token, phone=False, dark=False)
            page.get_by_role("button", name="New chat").click()
            ask(page, "Remember that I review pull requests in the morning")
            answered(page, 1)
            page.locator("#proposal-list li").first.wait_for()
            shot(page, "desktop-ask-before-saving")
            card = page.locator("#proposal-list li").first
            card.get_by_role("button", name=re.compile("^Reject")).click()
            page.context.close()
            httpx.put(settings, json={"save_mode": "auto"}, headers=headers, timeout=10)

            for dark, fact in ((False, PHONE_FACTS[0]), (True, PHONE_FACTS[1])):
                suffix = "-dark" if dark else ""
                page = open_page(browser, base, token, phone=True, dark=dark)
                shot(page, f"phone-welcome{suffix}")
                open_csv_conversation(page, phone=True)
                page.locator("#messages li.assistant .markdown pre").first.wait_for()
                page.locator("#messages li.user").last.scroll_into_view_if_needed()
                shot(page, f"phone-answer{suffix}")
                page.get_by_role("button", name="New chat").click()
                ask(page, fact)
                answered(page, 1)
                page.get_by_role("button", name="Memory", exact=True).click()
                shot(page, f"phone-memory{suffix}")
                page.keyboard.press("Escape")
                page.get_by_role("button", name="Conversations", exact=True).click()
                shot(page, f"phone-conversations{suffix}")
                page.keyboard.press("Escape")
                page.get_by_role("button", name="New chat").click()
                transport.delay_seconds = 0.03
                stream_and_stop(page, base, token, f"phone-streaming{suffix}", 900)
                transport.delay_seconds = 0.0
                page.context.close()

            shoot_projects(browser, base, token)
            browser.close()


if __name__ == "__main__":
    main()
