"""The web client's files: served by the app itself (no CDN), shipped in the package, the
vendored libraries exactly as published, the favicon, and a page policy that stays strict.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Response, expect

from tests.e2e.web import send, settled, sign_in

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "app" / "web"
OWN_FILES = [WEB / "index.html", *sorted(WEB.glob("css/*.css")), *sorted(WEB.glob("js/**/*.js"))]


def test_the_favicon_is_an_icon(server: str) -> None:
    """`/favicon.ico` (asked for by browsers whatever the page says) is a real ICO file."""
    response = httpx.get(f"{server}/favicon.ico", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/vnd.microsoft.icon"
    assert response.content[:4] == b"\x00\x00\x01\x00"
    count = int.from_bytes(response.content[4:6], "little")
    sizes = {response.content[6 + 16 * index] for index in range(count)}
    assert {16, 32} <= sizes


@pytest.mark.browser
def test_a_session_loads_nothing_that_fails_and_nothing_from_elsewhere(
    server: str, page: Page, screen: str
) -> None:
    """Loading the page, signing in and chatting asks only this origin, and every answer is a
    success (but the session probe's 401 before sign-in): no 404 (favicon included), no asset
    from a CDN."""
    responses: list[Response] = []
    page.on("response", lambda response: responses.append(response))
    foreign: list[str] = []
    page.on(
        "request",
        lambda request: (
            foreign.append(request.url) if not request.url.startswith((server, "data:")) else None
        ),
    )
    sign_in(page, server, f"assets-{screen}")
    expect(send(page, "hello")).to_have_attribute("data-state", "done")
    settled(page, 1)
    icon = page.goto(f"{server}/favicon.ico")
    assert icon is not None and icon.status == 200
    assert icon.headers["content-type"] == "image/vnd.microsoft.icon"
    failed = [
        (response.request.method, response.status, response.url.removeprefix(server))
        for response in responses
        if response.status >= 400
    ]
    # Before sign-in the page asks `GET /auth/session` whether the browser's cookie names a
    # session; with no cookie yet the API answers 401 (its documented "nobody signed in"), which
    # the page reads as "show the sign-in form". That one probe is expected; nothing else may fail.
    if failed[:1] == [("GET", 401, "/auth/session")]:
        failed = failed[1:]
    assert failed == []
    assert foreign == []
    loaded = {response.url.removeprefix(server) for response in responses}
    assert "/static/vendor/marked/marked.esm.js" in loaded
    assert "/static/vendor/dompurify/purify.es.mjs" in loaded
    assert "/static/vendor/highlight/highlight.min.js" in loaded
    assert "/static/favicon.svg" in loaded


def _package_patterns() -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns: list[str] = pyproject["tool"]["setuptools"]["package-data"]["app"]
    return patterns


def test_every_web_file_ships_in_the_package() -> None:
    """An installed (non-editable) package serves the same page: every file under app/web is
    matched by a package-data pattern."""
    shipped = {path for pattern in _package_patterns() for path in (ROOT / "app").glob(pattern)}
    files = {path for path in WEB.rglob("*") if path.is_file() and "__pycache__" not in path.parts}
    assert files - shipped == set()


def test_the_vendored_libraries_are_the_published_files() -> None:
    """The vendored marked, DOMPurify and highlight.js are byte for byte the files their README
    lists (so a hand edit shows), and each carries its licence."""
    readme = (WEB / "vendor" / "README.md").read_text()
    listed = dict(
        (name, digest) for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", readme, re.M)
    )
    assert set(listed) == {
        "marked/marked.esm.js",
        "dompurify/purify.es.mjs",
        "highlight/highlight.min.js",
    }
    for name, digest in listed.items():
        assert hashlib.sha256((WEB / "vendor" / name).read_bytes()).hexdigest() == digest, name
    assert (WEB / "vendor" / "marked" / "LICENSE").is_file()
    assert (WEB / "vendor" / "dompurify" / "LICENSE").is_file()
    assert (WEB / "vendor" / "highlight" / "LICENSE").is_file()
    for library, version in (
        ("marked", "18.2.1"),
        ("DOMPurify", "3.5.0"),
        ("highlight.js", "11.12.0"),
    ):
        assert f"| {version} |" in readme.split(library, 1)[1].split("\n", 1)[0]


def test_the_page_policy_stays_strict(server: str) -> None:
    """The page's Content-Security-Policy allows no inline script or style, no eval and no other
    origin; the page's own files need none of that (no inline script, style or handler, no
    foreign URL)."""
    policy = httpx.get(server, timeout=10).headers["content-security-policy"]
    directives = dict(
        (part.split()[0], part.split()[1:]) for part in policy.split(";") if part.strip()
    )
    assert directives["script-src"] == ["'self'"]
    assert directives["style-src"] == ["'self'"]
    assert directives["default-src"] == ["'self'"]
    assert "unsafe" not in policy
    assert "http" not in policy

    html = (WEB / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)
    assert not re.search(r"<style|\sstyle=|\son[a-z]+=", html, re.I)
    for path in OWN_FILES:
        text = path.read_text()
        urls = set(re.findall(r"https?://[^\s\"')]+", text)) - {"http://www.w3.org/2000/svg"}
        assert urls == set(), (path.name, urls)
        assert "eval(" not in text and "new Function" not in text and "innerHTML" not in text


@pytest.mark.parametrize("address", ["/c/0b9c6a1e-5f0e-4c1a-9d7e-2f4b8a6c3d10", "/p/any-id"])
def test_every_page_address_is_the_page_with_its_policy(server: str, address: str) -> None:
    """A conversation's and a project's address answer the page itself, with the root's headers
    (its policy and no-cache): a reload or a bookmark opens the client, never a 404."""
    root = httpx.get(server, timeout=10)
    page = httpx.get(server + address, timeout=10)
    assert page.status_code == 200
    assert page.content == root.content
    for header in ("content-security-policy", "cache-control", "x-content-type-options"):
        assert page.headers[header] == root.headers[header]


@pytest.mark.parametrize(
    "path",
    [path for path in OWN_FILES if path.suffix == ".js"],
    ids=lambda path: str(path.relative_to(WEB)),
)
def test_each_module_says_its_job_and_stays_small(path: Path) -> None:
    """Every ES module opens with a comment saying what it is for, stays under 300 lines, and
    imports only the page's own files (no build step, nothing from elsewhere)."""
    text = path.read_text()
    assert text.startswith("// "), "a module opens with one sentence on its scope"
    assert len(text.splitlines()) < 300
    for specifier in re.findall(r"^import .* from \"([^\"]+)\";$", text, re.M):
        assert specifier.startswith(("./", "../")), specifier
