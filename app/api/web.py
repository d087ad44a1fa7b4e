"""Routes: the web client (`/`, its static assets, the favicon) and the public `GET /info` it
reads first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from app.api.deps import RuntimeDep

WEB_ROOT = Path(__file__).resolve().parent.parent / "web"

router = APIRouter()

# The page loads only its own files and talks only to this origin. Answers are markdown, rendered
# by the vendored parser and sanitizer with raw HTML shown as text; this policy is the line behind
# them: no inline script or style, no eval, no foreign image or script, should a layer slip.
PAGE_HEADERS = {
    "cache-control": "no-cache",
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}
# The page is plain files (no build step); `check_dir=False` keeps import free of file-system work.
router.mount("/static", StaticFiles(directory=WEB_ROOT, check_dir=False), name="static")


@router.get("/", include_in_schema=False)
async def index() -> FileResponse:
    # no-cache: a redeploy must reach open tabs on their next load, not after a cache expiry.
    return FileResponse(WEB_ROOT / "index.html", headers=PAGE_HEADERS)


# A conversation's address in the web client: the same page, which reads the id from the path
# once signed in (the token never travels with a page load, so the page, not this route, asks
# the API and shows "not found" for an id that is not the person's).
@router.get("/c/{conversation_id}", include_in_schema=False)
async def conversation_page(conversation_id: str) -> FileResponse:
    return FileResponse(WEB_ROOT / "index.html", headers=PAGE_HEADERS)


# A project's address (its conversations and "New chat in project"): the same page, on the same
# terms as a conversation's.
@router.get("/p/{project_id}", include_in_schema=False)
async def project_page(project_id: str) -> FileResponse:
    return FileResponse(WEB_ROOT / "index.html", headers=PAGE_HEADERS)


# Browsers, bookmarks and feed readers ask the root for the icon whatever the page links to.
@router.get("/favicon.ico", include_in_schema=False)
async def favicon() -> FileResponse:
    return FileResponse(
        WEB_ROOT / "favicon.ico",
        media_type="image/vnd.microsoft.icon",
        headers={"cache-control": "public, max-age=86400"},
    )


# Outside /v1 on purpose: every /v1 route needs a bearer token, and the page asks this first.
@router.get("/info")
async def info(runtime: RuntimeDep) -> dict[str, Any]:
    """What a client needs before signing in: the sign-in mode and whether the offline model
    answers. Public, and it carries no user data."""
    settings = runtime.settings
    return {
        "model": settings.llm_model,
        "offline": settings.offline_model,
        "auth_mode": settings.auth_mode,
        # Whether the page can sign a person in (a session cookie; app/api/account/sign_in.py).
        "browser_sign_in": settings.browser_sign_in,
        "memory_enabled": await runtime.flags.memory_enabled(),
        # Semantic search: null when off; `semantic` is false for the offline model's hashed
        # words (app/offline/embeddings.py), which find shared words, not meaning.
        "embeddings": (
            None
            if runtime.embeddings is None
            else {
                "model": runtime.embeddings.client.config.model,
                "semantic": runtime.embeddings.client.config.semantic,
            }
        ),
    }
