"""The app's routes as the router tries them, for the route-order test and
`scripts/bench/routing.py`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from starlette.routing import BaseRoute, Match, Mount

# The routes a chat turn arrives on.
TURN_ROUTES = [
    ("POST", "/v1/chat"),
    ("POST", "/openai/v1/chat/completions"),
    ("POST", "/v1/eval/chat"),
]


def leaves(route: BaseRoute) -> Iterator[BaseRoute]:
    """A top-level route itself, or every route of an included router, recursively."""
    router = getattr(route, "original_router", None)  # an included router
    if router is None:
        yield route
        return
    for child in router.routes:
        yield from leaves(child)


def requests(app: Any) -> list[tuple[str, str]]:
    """A request (method, concrete path) for every method of every route the app serves, in
    the order the router tries them (a mount: a GET below it)."""
    found: list[tuple[str, str]] = []
    for top in app.router.routes:
        for route in leaves(top):
            path = re.sub(r"\{[^}]+\}", "x1", getattr(route, "path", ""))
            methods = getattr(route, "methods", None) or ()
            if isinstance(route, Mount):
                methods, path = ("GET",), f"{path}/x1"
            for method in sorted(methods):
                if method != "HEAD" and (method, path) not in found:
                    found.append((method, path))
    return found


def http_scope(method: str, path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "root_path": "",
        "headers": [],
        "query_string": b"",
    }


def full_matches(app: Any, method: str, path: str) -> list[int]:
    """The indexes of the app's top-level routes that fully match the request."""
    scope = http_scope(method, path)
    return [
        index
        for index, route in enumerate(app.router.routes)
        if route.matches(dict(scope))[0] == Match.FULL
    ]
