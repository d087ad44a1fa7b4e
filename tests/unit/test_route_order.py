"""The app's routes: no two of them match one request, so the order they are tried in changes
no answer; and a turn's routes are tried first, since every router a request passes costs it
that router's matching (app/main.py)."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from app.main import create_app
from tests.support.apps import api_settings
from tests.support.routes import TURN_ROUTES, full_matches, requests


@pytest.fixture(scope="module")
def app(sqlite_url: str) -> FastAPI:
    return create_app(api_settings(sqlite_url))


def test_every_request_matches_exactly_one_route(app: FastAPI) -> None:
    found = requests(app)
    assert len(found) > 40  # every route of the contract, not a few
    for method, path in found:
        assert len(full_matches(app, method, path)) == 1, (method, path)


@pytest.mark.parametrize(("method", "path"), TURN_ROUTES)
def test_a_turn_passes_no_other_router_first(app: FastAPI, method: str, path: str) -> None:
    """Before a turn's route the app tries only FastAPI's own documentation routes and the other
    turn routes."""
    (index,) = full_matches(app, method, path)
    docs = {app.openapi_url, app.docs_url, app.swagger_ui_oauth2_redirect_url, app.redoc_url}
    turn_routers = {i for m, p in TURN_ROUTES for i in full_matches(app, m, p)}
    for before, route in enumerate(app.router.routes[:index]):
        own_docs = not hasattr(route, "original_router") and getattr(route, "path", None) in docs
        assert own_docs or before in turn_routers, (path, route)
