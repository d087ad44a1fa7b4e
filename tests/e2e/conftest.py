"""End-to-end fixtures: the real server on a temporary SQLite file, and Debian's Chromium.

The tests start and stop the server themselves. The browser is the system Chromium, launched by
path: no browser is ever downloaded, and a missing Chromium fails the run instead of skipping.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from app.main import create_app
from app.settings import Settings
from tests.support.databases import migrated_engine
from tests.support.server import live_server

# Assertions wait as long as actions do: a streamed answer on a loaded two-core machine can take
# longer than Playwright's five-second default to finish, which is load, not a failure.
expect.set_options(timeout=15_000)

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
TEST_SECRET = "e2e-dev-secret-" + "0123456789abcdef" * 3
# Slow enough that a long answer streams for many seconds (Stop lands midway), fast enough that
# short turns take well under a second.
DELAY_MS = 40

# Playwright must never fetch browsers on its own; it drives the system Chromium only.
os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")


def e2e_settings(database_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "auth_mode": "dev",
        "auth_dev_secret": TEST_SECRET,
        "memory_enabled": True,
        "flag_cache_seconds": 0,
        "offline_model_delay_ms": DELAY_MS,
        "llm_base_url": None,
        "log_format": "console",
        # Warnings only: a module's server outlives each test, and a request line logged after a
        # test's output capture ended would reach the terminal.
        "log_level": "WARNING",
        # A scripted browser sends turns faster than a person: per-user limits are off here, as
        # in the API tests (tests/e2e/test_web_limits.py turns one on).
        "user_max_streams": 0,
        "user_turns_per_minute": 0,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def sqlite_file(directory: Path, *, migrate: bool = True) -> str:
    url = f"sqlite:///{directory / 'e2e.db'}"
    if migrate:
        migrated_engine(url).dispose()
    return url


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app with memory on and the offline model, on a fresh SQLite file; its base URL."""
    url = sqlite_file(tmp_path_factory.mktemp("e2e"))
    with live_server(create_app(e2e_settings(url))) as base:
        yield base


def token_for(base: str, sub: str) -> str:
    response = httpx.post(f"{base}/dev/token", json={"sub": sub}, timeout=10)
    response.raise_for_status()
    return str(response.json()["access_token"])


def memory_of(base: str, token: str) -> dict[str, Any]:
    response = httpx.get(
        f"{base}/v1/memory", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


# Module scope, not session: the sync API keeps an event loop running in this thread while it is
# open, and pytest-asyncio cannot run async tests in later modules until it has stopped.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    browser = playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
    )
    yield browser
    browser.close()


# The two sizes every web-client behaviour is proven at: a laptop and a phone.
SCREENS: dict[str, dict[str, Any]] = {
    "desktop": {"viewport": {"width": 1280, "height": 800}},
    "phone": {
        "viewport": {"width": 390, "height": 844},
        "is_mobile": True,
        "has_touch": True,
        "device_scale_factor": 2,
    },
}


@pytest.fixture(params=list(SCREENS))
def screen(request: pytest.FixtureRequest) -> str:
    """The screen size of this test's browser (tests run at each; override with indirect
    parametrization to pin one)."""
    return str(request.param)


def new_context(browser: Browser, screen: str, **options: Any) -> BrowserContext:
    """A fresh browser profile at this screen size: its own storage, so its own signed-in user."""
    context = browser.new_context(**{**SCREENS[screen], **options})
    context.set_default_timeout(15_000)
    return context


@pytest.fixture
def context(browser: Browser, screen: str) -> Iterator[BrowserContext]:
    context = new_context(browser, screen)
    yield context
    context.close()


def guard(page: Page) -> list[str]:
    """Collects every uncaught script error and every Content-Security-Policy refusal on `page`
    (the console message and the DOM's violation event); the caller asserts the list is empty."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    page.on(
        "console",
        lambda message: (
            errors.append(message.text)
            if "Content Security Policy" in message.text
            or "Content-Security-Policy" in message.text
            else None
        ),
    )
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', (event) => console.error("
        "`Content Security Policy violation: ${event.violatedDirective} ${event.blockedURI}`))"
    )
    return errors


@pytest.fixture
def page(context: BrowserContext) -> Iterator[Page]:
    """A page that fails its test on any script error or Content-Security-Policy violation."""
    page = context.new_page()
    errors = guard(page)
    yield page
    assert errors == [], errors


# The widths the responsive browser tests run at (a phone, a narrow and a wide desktop).
WIDTHS = {"390": 390, "900": 900, "1280": 1280}
PHONE_OPTIONS: dict[str, Any] = {"is_mobile": True, "has_touch": True}


def views(*schemes: str) -> list[Any]:
    """(width, scheme) params for an indirect `view`: the three widths, with the schemes given,
    in order."""
    return [
        pytest.param((width, scheme), id=f"{width}-{scheme}")
        for width, scheme in zip(WIDTHS, schemes, strict=True)
    ]


@pytest.fixture
def view(request: pytest.FixtureRequest) -> tuple[str, str]:
    value: tuple[str, str] = request.param
    return value


def viewed_page(browser: Browser, view: tuple[str, str]) -> Iterator[Page]:
    """A fresh profile at the view's width and colour scheme; fails on any script error."""
    width, scheme = view
    options = PHONE_OPTIONS if WIDTHS[width] < 600 else {}
    context = browser.new_context(
        viewport={"width": WIDTHS[width], "height": 844 if WIDTHS[width] < 600 else 800},
        color_scheme=scheme,  # type: ignore[arg-type]
        **options,
    )
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors = guard(page)
    yield page
    context.close()
    assert errors == [], errors


def screenshot(page: Page, name: str) -> None:
    """Keeps what the page looked like (test-artifacts/, for a person reading a failed run)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    width = (page.viewport_size or {"width": 0})["width"]
    page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"))
