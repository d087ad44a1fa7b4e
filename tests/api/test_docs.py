"""The documentation stays true: docs/api.md names exactly the routes the OpenAPI document has
and every setting, docs/design.md links only tests that exist, no link leaves the repository,
and every code comment that invokes "the design" points at docs/design.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from app.main import create_app
from app.settings import Settings
from tests.support.apps import api_settings

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
API = DOCS / "api.md"
DESIGN = DOCS / "design.md"

ROUTE_HEADING = re.compile(r"^### `(GET|POST|PUT|PATCH|DELETE) (/\S*)`$", re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
TEST_LINK = re.compile(r"\[`([\w.]+\.py)::(\w+)`\]\(([^)]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def test_api_md_documents_exactly_the_routes_of_the_openapi_document(sqlite_url: str) -> None:
    """Every (method, path) of the OpenAPI document has a ### `METHOD /path` heading in
    docs/api.md, and every such heading is a route the application serves."""
    schema = create_app(api_settings(sqlite_url)).openapi()
    served = {
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method in operations
    }
    documented = set(ROUTE_HEADING.findall(API.read_text()))
    assert sorted(served - documented) == [], "routes without a section in docs/api.md"
    assert sorted(documented - served) == [], "docs/api.md documents routes that do not exist"


def test_api_md_lists_every_setting() -> None:
    """The settings table names every setting the service reads."""
    text = API.read_text()
    missing = [name.upper() for name in Settings.model_fields if f"`{name.upper()}`" not in text]
    assert missing == []


def test_every_test_linked_from_design_md_exists() -> None:
    """Each invariant links the tests that prove it; each link names a real file and a test
    function defined in it, and each numbered invariant (but the limits) links at least one."""
    text = DESIGN.read_text()
    links = TEST_LINK.findall(text)
    assert len(links) > 20
    for filename, function, target in links:
        path = (DESIGN.parent / target).resolve()
        assert path.name == filename, (filename, target)
        assert path.is_file(), target
        defined = {
            node.name
            for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        assert function in defined, f"{target} has no {function}"
    sections = re.split(r"^## (?=\d+\. )", text, flags=re.M)[1:]
    assert len(sections) >= 12
    for section in sections:
        if "limits" not in section.splitlines()[0]:
            assert TEST_LINK.search(section), section.splitlines()[0]


@pytest.mark.parametrize("page", _pages(), ids=lambda page: page.name)
def test_no_link_leaves_the_repository(page: Path) -> None:
    """Links are relative and land on a file of the repository (and on a heading, when they
    name one); nothing points at material outside it."""
    text = page.read_text()
    assert "shared/" not in text and "design document" not in text
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://")):
            assert re.match(r"https?://(127\.0\.0\.1|localhost)[:/]", target), target
            continue
        file_part, _, anchor = target.partition("#")
        path = (page.parent / file_part).resolve() if file_part else page
        assert path.is_relative_to(REPO), target
        assert path.exists(), f"{page.name}: {target}"
        if anchor and path.suffix == ".md":
            anchors = {_slug(heading) for heading in HEADING.findall(path.read_text())}
            assert anchor in anchors, f"{page.name}: {target}"


def test_the_readme_stays_short() -> None:
    """The README is a way in, not the manual: the manual is docs/."""
    assert len((REPO / "README.md").read_text().splitlines()) <= 300


def test_comments_that_invoke_the_design_point_to_it() -> None:
    """A comment or docstring in app/ or migrations/ that says "the design" names the page."""
    stray = [
        f"{path.relative_to(REPO)}:{number}"
        for folder in ("app", "migrations")
        for path in sorted((REPO / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"\bthe design\b", line, re.I) and "docs/design.md" not in line
    ]
    assert stray == []
