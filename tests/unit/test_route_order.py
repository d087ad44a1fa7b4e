"""The app's routes: no two of them match one request, so the order they are tried in changes
no answer; and a turn's routes are tried first, since every router a request passes costs it
that router's matching (app/main.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from starlette.routing import BaseRoute, Match, Mount

from app.main import create_app
from tests.support.apps import api_settings

TURN_ROUTES = [
    ("POST", "/v1/chat"),
    ("POST", "/openai/v1/chat/completions"),
    ("POST", "/v1/eval/chat"),
]


@pytest.fixture(scope="module")
def app(sqlite_url: str) -> FastAPI:
    return create_app(api_settings(sqlite_url))


def _leaves(route: BaseRoute) -> Iterator[BaseRoute]:
    router = getattr(route, "original_router", None)  # an included router
    if router is None:
        yield route
        return
    for child in router.routes:
        yield from _leaves(child)


def _requests(app: FastAPI) -> Iterator[tuple[str, str]]:
    """A request (method, concrete path) for every method of every route the app serves."""
    for top in app.router.routes:
        for route in _leaves(top):
            path = re.sub(r"\{[^}]+\}", "x1", getattr(route, "path", ""))
            if isinstance(route, Mount):
                yield "GET", f"{path}/x1"
                continue
            for method in getattr(route, "methods", None) or ():
                yield method, path


def _full_matches(app: FastAPI, method: str, path: str) -> list[int]:
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "root_path": "",
        "headers": [],
        "query_string": b"",
    }
    return [
        index
        for index, route in enumerate(app.router.routes)
        if route.matches(dict(scope))[0] == Match.FULL
    ]


def test_every_request_matches_exactly_one_route(app: FastAPI) -> None:
    requests = sorted(set(_requests(app)))
    assert len(requests) > 40  # every route of the contract, not a few
    for method, path in requests:
        assert len(_full_matches(app, method, path)) == 1, (method, path)


@pytest.mark.parametrize(("method", "path"), TURN_ROUTES)
def test_a_turn_passes_no_other_router_first(app: FastAPI, method: str, path: str) -> None:
    """Before a turn's route the app tries only FastAPI's own documentation routes and the other
    turn routes."""
    (index,) = _full_matches(app, method, path)
    docs = {app.openapi_url, app.docs_url, app.swagger_ui_oauth2_redirect_url, app.redoc_url}
    turn_routers = {i for m, p in TURN_ROUTES for i in _full_matches(app, m, p)}
    for before, route in enumerate(app.router.routes[:index]):
        own_docs = not hasattr(route, "original_router") and getattr(route, "path", None) in docs
        assert own_docs or before in turn_routers, (path, route)
