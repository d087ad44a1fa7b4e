"""Schemathesis against the service's own OpenAPI document, served by a live uvicorn server
with a valid bearer token: no 5xx anywhere, and every response conforms to its declaration."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from app.main import create_app
from tests.support.apps import api_settings
from tests.support.scripted import serve_with_model
from tests.support.tokens import dev_token

EVAL_KEY = "fuzz-eval-key-0123456789"
# Bounded so that the whole run stays near a minute on two cores.
EXAMPLES_PER_OPERATION = 60


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.support.databases import migrated_engine

    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'fuzz.db'}"
    migrated_engine(url).dispose()
    settings_ = api_settings(url, eval_api_key=EVAL_KEY, log_level="ERROR")
    with serve_with_model(settings_) as served:
        yield served


@pytest.fixture(scope="module")
def api_schema(base_url: str) -> Any:
    return schemathesis.openapi.from_url(f"{base_url}/openapi.json")


def cases() -> list[Any]:
    """(method, path, mode) for every documented operation; building the app connects to
    nothing."""
    document = create_app(api_settings("sqlite://")).openapi()
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            found.append(pytest.param(method.upper(), path, GenerationMode.POSITIVE))
            # A free-form string in the path has no invalid value, so path-only operations
            # get positive data only.
            parameters = [p for p in operation.get("parameters", []) if p["in"] != "path"]
            if parameters or operation.get("requestBody"):
                found.append(pytest.param(method.upper(), path, GenerationMode.NEGATIVE))
    return found


# `schemathesis.pytest.from_fixture` needs pytest internals that pytest 9 removed, so each
# operation is its own pytest case driving the operation's Hypothesis strategy directly.
@pytest.mark.parametrize(("method", "path", "mode"), cases())
def test_every_operation_answers_within_its_declaration(
    api_schema: Any, base_url: str, method: str, path: str, mode: GenerationMode
) -> None:
    """Whatever Schemathesis sends (data that fits the schema, or data that does not), the
    answer is never a 5xx and matches the status codes, content types, headers and body
    schemas that the document declares.

    One check is left out: "schema-valid request accepted". A JSON schema cannot say that an
    `add` needs `content`, or that a conversation id must exist, so such requests are refused
    with a documented 4xx, as they should be.
    """
    operation = api_schema[path][method]
    headers = {"Authorization": f"Bearer {dev_token('fuzzer', roles=['operator'])}"}

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: Any) -> None:
        case.call_and_validate(
            base_url=base_url, headers=headers, excluded_checks=[positive_data_acceptance]
        )

    fuzz()
