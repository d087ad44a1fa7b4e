"""Sentinel tests: secret-like strings pushed through every path never reach logs or spans.

Each sentinel enters through one channel (memory via the tool and via the API, a user message,
rejected tool arguments, a cancelled turn, a failed turn, the eval route, the OpenAI-compatible
route's system, history, content-part and streamed messages and a body it refuses) of a real server
(uvicorn), with LOG_LEVEL=DEBUG. Every log record of every logger, everything written to
stdout/stderr and every finished span (names, attributes, events, links, resource) is captured
and searched. The same run proves that telemetry was produced, so that an empty capture cannot
pass for a private one.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from openai.types.chat import ChatCompletion
from opentelemetry import trace
from sqlalchemy import Engine

import app.telemetry.logging as tl
import app.telemetry.tracing as tt
from app.main import create_app
from app.offline.model import OfflineModel
from app.offline.wire import OFFLINE_MODEL_NAME, ChatRequest, Text
from app.telemetry.tracing import CAPTURE_ATTRIBUTES
from tests.support.apps import api_settings
from tests.support.scripted import Hang, HttpError, Reply, ScriptedTransport, memory_call
from tests.support.server import live_server
from tests.support.sse import Event, iter_events, names
from tests.support.tokens import dev_token
from tests.support.waiting import wait_for
from tests.telemetry.capture import Captured, capture_telemetry, span_text

TOOL_MEMORY = "SNTL-7Q2-memory-ZEBRA-91"
API_MEMORY = "SNTL-3J5-api-OSPREY-63"
USER_MESSAGE = "SNTL-8M1-message-IBIS-27"
REJECTED_ARGUMENTS = "SNTL-2R9-rejected-LYNX-48"
CANCELLED_MESSAGE = "SNTL-5C3-cancelled-MARMOT-15"
CANCELLED_STAGED = "SNTL-6C4-staged-VOLE-33"
FAILED_MESSAGE = "SNTL-9F6-failed-HERON-72"
FAILED_STAGED = "SNTL-1F2-staged-NEWT-84"
FAILED_UPSTREAM = "SNTL-4U7-upstream-GECKO-06"
EVAL_MESSAGE = "SNTL-0E5-eval-TAPIR-39"
EVAL_KEY = "eval-key-SNTL-KEY-QUAIL-55"
OPENAI_SYSTEM = "SNTL-1S8-client-system-ORCA-20"
OPENAI_HISTORY = "SNTL-3H1-history-KOALA-57"
OPENAI_MEMORY = "SNTL-7P4-part-memory-EGRET-64"
OPENAI_STREAMED = "SNTL-2S6-streamed-BISON-88"
OPENAI_REFUSED = "SNTL-8X3-refused-tool-DINGO-31"
SEARCH_QUERY = "SNTL-4Q8-search-query-MANATEE-12"
SEARCH_RESULT = "SNTL-6R2-search-result-PANGOLIN-77"
# Not content: logged on purpose through an ordinary path, to prove every channel is searched.
CANARY = "CANARY-searchable-PELICAN-00"

SENTINELS = [
    TOOL_MEMORY,
    API_MEMORY,
    USER_MESSAGE,
    REJECTED_ARGUMENTS,
    CANCELLED_MESSAGE,
    CANCELLED_STAGED,
    FAILED_MESSAGE,
    FAILED_STAGED,
    FAILED_UPSTREAM,
    EVAL_MESSAGE,
    EVAL_KEY,
    OPENAI_SYSTEM,
    OPENAI_HISTORY,
    OPENAI_MEMORY,
    OPENAI_STREAMED,
    OPENAI_REFUSED,
    SEARCH_QUERY,
    SEARCH_RESULT,
]
DEADLINE_SECONDS = 20.0


def _last_user_text(request: ChatRequest) -> str:
    for message in reversed(request.messages):
        if message.get("role") == "user":
            return str(message.get("content"))
    return ""


# The memory block's per-turn nonces the model saw in this run (they must be logged nowhere).
BLOCK_NONCES: list[str] = []
_BLOCK_TAG = re.compile(r"<persistent_memory_data_([0-9a-f]{32})>")


async def scripted_or_offline(request: ChatRequest) -> Reply:
    """The offline model, except for the turns that need a rejected call, a hang or an error."""
    BLOCK_NONCES.extend(_BLOCK_TAG.findall(request.system_text()))
    user_text = _last_user_text(request)
    after_tool = bool(request.messages) and request.messages[-1].get("role") == "tool"
    if REJECTED_ARGUMENTS in user_text:
        if after_tool:
            return Text("That could not be saved.")
        # add with a match is an invalid field combination: rejected, with its reason.
        return memory_call(
            {
                "target": "user",
                "action": "add",
                "match": REJECTED_ARGUMENTS,
                "content": f"x {REJECTED_ARGUMENTS}",
            }
        )
    if CANCELLED_MESSAGE in user_text:
        if after_tool:
            return Hang()
        return memory_call(
            {"target": "memory", "action": "add", "content": f"Cancelled note {CANCELLED_STAGED}"}
        )
    if FAILED_MESSAGE in user_text:
        if after_tool:
            return HttpError(500, f"upstream exploded on {FAILED_UPSTREAM}")
        return memory_call(
            {"target": "memory", "action": "add", "content": f"Failed note {FAILED_STAGED}"}
        )
    return OfflineModel().reply(request)


@dataclass
class Client:
    base: str
    token: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def chat(
        self, message: str, *, path: str = "/v1/chat", headers: dict[str, str] | None = None
    ) -> list[Event]:
        with (
            httpx.Client(base_url=self.base, timeout=30) as client,
            client.stream(
                "POST", path, json={"message": message}, headers=headers or self.auth
            ) as response,
        ):
            assert response.status_code == 200, response.read()
            return list(iter_events(response))

    def chat_until(self, message: str, stop_at: str) -> list[Event]:
        """Read the stream until the `stop_at` event, then disconnect."""
        seen: list[Event] = []
        with (
            httpx.Client(base_url=self.base, timeout=30) as client,
            client.stream(
                "POST", "/v1/chat", json={"message": message}, headers=self.auth
            ) as response,
        ):
            for event in iter_events(response):
                seen.append(event)
                if event.event == stop_at:
                    break
        return seen

    def complete(self, body: dict[str, Any], *, status: int = 200) -> str:
        """POST /openai/v1/chat/completions; the raw answer (JSON or event stream). Raw HTTP
        here, because the SDK's own debug log in this process would print the request body."""
        with httpx.Client(base_url=self.base, timeout=30) as client:
            response = client.post("/openai/v1/chat/completions", json=body, headers=self.auth)
        assert response.status_code == status, response.text
        return response.text

    def memory(self) -> dict[str, Any]:
        response = httpx.get(f"{self.base}/v1/memory", headers=self.auth, timeout=30)
        assert response.status_code == 200
        return dict(response.json())


def _turn_finished(captured: Captured, outcome: str) -> bool:
    return any(
        isinstance(record.msg, dict)
        and record.msg.get("event") == "turn.finished"
        and record.msg.get("outcome") == outcome
        for record in captured.records
    )


def drive_every_channel(client: Client) -> None:
    """Push each sentinel through its channel and check that the channel really took it."""
    # Memory via the tool, in a complete turn (the offline model saves "remember that ...").
    events = client.chat(f"Remember that my favourite animal is the {TOOL_MEMORY}.")
    assert names(events)[-1] == "done"
    assert any(e.event == "memory" and e.data["outcome"] == "committed" for e in events)
    # Memory via the API.
    response = httpx.post(
        f"{client.base}/v1/memory/operations",
        headers=client.auth,
        timeout=30,
        json={
            "operations": [
                {
                    "target": "memory",
                    "action": "add",
                    "content": f"The project codename is {API_MEMORY}.",
                }
            ]
        },
    )
    assert response.status_code == 200, response.text
    stored = json.dumps(client.memory())
    assert TOOL_MEMORY in stored and API_MEMORY in stored
    # A user message, in a turn whose prompt now carries both memory entries.
    events = client.chat(f"What do you remember? Also, {USER_MESSAGE}.")
    assert names(events)[-1] == "done"
    events = client.chat("what do you remember")
    assert TOOL_MEMORY in json.dumps([e.data for e in events])  # the model did see memory
    # Rejected tool arguments.
    events = client.chat(f"Please note {REJECTED_ARGUMENTS}")
    assert any(e.event == "tool" and e.data["outcome"] == "rejected" for e in events)
    # A failed turn (model error after a staged edit).
    events = client.chat(f"Save this then fail {FAILED_MESSAGE}")
    assert names(events)[-1] == "error"
    # The eval route.
    events = client.chat(
        f"Evaluate {EVAL_MESSAGE}", path="/v1/eval/chat", headers={"X-Eval-Key": EVAL_KEY}
    )
    assert names(events)[-1] == "done"
    # The OpenAI-compatible route: the client's system message, history and a content part that
    # the offline model saves to memory; a streamed answer; a body it refuses (client tools).
    raw = client.complete(
        {
            "model": OFFLINE_MODEL_NAME,
            "messages": [
                {"role": "system", "content": f"Client instructions {OPENAI_SYSTEM}"},
                {"role": "assistant", "content": f"An earlier answer {OPENAI_HISTORY}"},
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "text",
                            "text": f"Remember that the locker code is {OPENAI_MEMORY}",
                        }
                    ],
                },
            ],
        }
    )
    assert ChatCompletion.model_validate_json(raw).choices[0].message.content == "Saved."
    assert OPENAI_MEMORY in json.dumps(client.memory())
    raw = client.complete(
        {
            "model": OFFLINE_MODEL_NAME,
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"Hi {OPENAI_STREAMED}"}],
        }
    )
    assert raw.rstrip().endswith("data: [DONE]") and '"usage":{' in raw
    client.complete(
        {
            "model": OFFLINE_MODEL_NAME,
            "messages": [{"role": "user", "content": "x"}],
            "tools": [
                {"type": "function", "function": {"name": "lookup", "description": OPENAI_REFUSED}}
            ],
        },
        status=400,
    )
    # Conversation search: a query through the route; a stored message found by the tool (the
    # offline model searches on "what did we discuss about ...") and quoted in the answer.
    response = httpx.get(
        f"{client.base}/v1/conversations/search",
        headers=client.auth,
        params={"q": f"okapi {SEARCH_QUERY}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    events = client.chat(f"The aardvark project codename is {SEARCH_RESULT}")
    assert names(events)[-1] == "done"
    events = client.chat("What did we discuss about the aardvark?")
    assert any(e.event == "tool" and e.data["outcome"] == "found" for e in events)
    assert SEARCH_RESULT in json.dumps([e.data for e in events])  # the result reached the model
    # A cancelled turn: disconnect once the edit is staged and the model hangs.
    events = client.chat_until(f"Save this then hang {CANCELLED_MESSAGE}", stop_at="tool")
    assert events[-1].data["outcome"] == "staged"
    stored = json.dumps(client.memory())
    for absent in (CANCELLED_STAGED, FAILED_STAGED, REJECTED_ARGUMENTS):
        assert absent not in stored


@pytest.fixture
def run(
    db: Engine,
    sqlite_url: str,
    capfd: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> Iterator[Captured]:
    # `db` empties the session database first: an earlier test may have left the flag off.
    capture, log_format = request.param
    BLOCK_NONCES.clear()
    settings = api_settings(
        sqlite_url,
        log_level="DEBUG",
        log_format=log_format,
        eval_api_key=EVAL_KEY,
        telemetry_capture_content=capture,
    )
    app = create_app(settings, model_transport=ScriptedTransport(scripted_or_offline))
    # A fresh subject per run: the session database keeps earlier runs' memory.
    token = dev_token(f"sentinel-user-{log_format}-{capture}-{uuid.uuid4().hex[:8]}")
    with capture_telemetry(capfd) as captured:
        with live_server(app) as base:
            client = Client(base, token)
            assert logging.getLogger().getEffectiveLevel() == logging.DEBUG
            # Libraries may re-open their loggers after configuration (SQLAlchemy's echo does):
            # the record-level layer must hold even then.
            reopened = {
                name: logging.getLogger(name).level
                for name in ("sqlalchemy.engine", "openai", "httpx", "sse_starlette")
            }
            for name in reopened:
                logging.getLogger(name).setLevel(logging.DEBUG)
            try:
                drive_every_channel(client)
                wait_for(lambda: _turn_finished(captured, "cancelled"), "the cancelled turn")
            finally:
                for name, level in reopened.items():
                    logging.getLogger(name).setLevel(level)
        logging.getLogger("tests.canary").warning("canary %s", CANARY)
        with trace.get_tracer("tests.canary").start_as_current_span("canary") as span:
            span.set_attribute("gen_ai.request.model", CANARY)
        yield captured
    assert token not in "\n".join(captured.channels().values())


def assert_telemetry_was_produced(captured: Captured) -> None:
    assert sorted(channel for _, channel in captured.hits([CANARY])) == [
        "log records",
        "spans",
        "stdout/stderr",
    ]
    spans = captured.span_names()
    for expected in (
        "chat.turn",
        "llm.round",
        "memory.tool",
        "memory.commit",
        "POST /v1/chat",
        "POST /v1/eval/chat",
        "POST /v1/memory/operations",
        "POST /openai/v1/chat/completions",
    ):
        assert expected in spans, f"no {expected!r} span in {sorted(set(spans))}"
    events = captured.events()
    for expected in (
        "turn.started",
        "turn.finished",
        "llm.round",
        "memory.tool",
        "memory.commit",
        "http.request",
    ):
        assert expected in events, f"no {expected!r} log event"
    turn_lines = [
        r.msg
        for r in captured.records
        if isinstance(r.msg, dict) and r.msg.get("event") == "turn.started"
    ]
    assert turn_lines and all(line.get("request_id") and line.get("turn_id") for line in turn_lines)
    commits = [
        r.msg
        for r in captured.records
        if isinstance(r.msg, dict)
        and r.msg.get("event") == "memory.commit"
        and r.msg.get("outcome") == "committed"
    ]
    assert commits and set(commits[0]) >= {
        "tool",
        "operation_count",
        "targets",
        "user_characters",
        "memory_characters",
        "duration_ms",
        "retry_count",
        "outcome",
        "subject_hash",
    }
    assert captured.read_output().strip(), "nothing was written to stdout/stderr"


@pytest.mark.parametrize(
    "run", [(False, "json"), (False, "console")], indirect=True, ids=["json", "console"]
)
def test_no_sentinel_reaches_any_log_or_span_by_default(run: Captured) -> None:
    """Default telemetry at LOG_LEVEL=DEBUG carries no message text, memory content, tool
    arguments, upstream error text or keys, on any channel; and telemetry is produced."""
    assert_telemetry_was_produced(run)
    assert run.hits(SENTINELS) == []
    # The memory block's nonce stays in the prompt: no log line or span can hand it to text
    # that a later turn stores.
    assert len(set(BLOCK_NONCES)) > 1 and run.hits(BLOCK_NONCES) == []
    for span in run.spans:
        assert not CAPTURE_ATTRIBUTES & set(span.attributes or {})


@pytest.mark.parametrize("run", [(True, "json")], indirect=True, ids=["capture-on"])
def test_capture_flag_adds_content_only_to_the_approved_attributes(run: Captured) -> None:
    """With TELEMETRY_CAPTURE_CONTENT on, sentinels appear in the named capture attributes of
    our spans and nowhere else: not in logs, not in framework spans, not in other attributes."""
    assert_telemetry_was_produced(run)
    channels = run.channels()
    assert [s for s in SENTINELS if s in channels["log records"]] == []
    assert [s for s in SENTINELS if s in channels["stdout/stderr"]] == []

    captured_values: list[str] = []
    for span in run.spans:
        attributes = dict(span.attributes or {})
        approved = {
            key: attributes.pop(key) for key in list(attributes) if key in CAPTURE_ATTRIBUTES
        }
        if approved:
            assert span.instrumentation_scope is not None
            assert span.instrumentation_scope.name.startswith("app.")
        captured_values.extend(str(value) for value in approved.values())
        rest = span_text(span).replace(json.dumps(approved), "")
        for value in approved.values():
            # Raw, JSON-escaped and repr-escaped (a multi-line answer: quoted search results).
            for form in (str(value), json.dumps(str(value))[1:-1], repr(str(value))[1:-1]):
                rest = rest.replace(form, "")
        assert [s for s in SENTINELS if s in rest] == [], span.name
    joined = "\n".join(captured_values)
    assert USER_MESSAGE in joined and REJECTED_ARGUMENTS in joined
    assert OPENAI_STREAMED in joined  # the OpenAI-compatible route's turn is the same turn
    assert EVAL_KEY not in joined


@pytest.fixture
def redaction_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch off every redaction layer (record sanitising, clamp filter, log processor,
    message-free tracebacks, span allow-list), leaving the capture harness as it is."""
    monkeypatch.setattr(tl, "sanitize_record", lambda record: None)
    monkeypatch.setattr(tl, "_ClampFilter", lambda: lambda record: True)
    monkeypatch.setattr(tl, "redact_event", lambda logger, method, event: event)
    monkeypatch.setattr(tl, "safe_exc_info", lambda logger, method, event: event)
    monkeypatch.setattr(
        tt, "filter_attributes", lambda attrs, scope, allow_capture=False: dict(attrs or {})
    )


@pytest.mark.parametrize("run", [(False, "json")], indirect=True, ids=["control"])
def test_the_same_run_without_redaction_leaks(redaction_disabled: None, run: Captured) -> None:
    """Control: with the redaction layers off, the same run puts messages, memory content,
    rejected arguments and upstream error text into logs and spans; so the zero-hit results
    above come from redaction, not from a harness that sees nothing."""
    leaked = {sentinel for sentinel, _ in run.hits(SENTINELS)}
    assert {USER_MESSAGE, TOOL_MEMORY, API_MEMORY, REJECTED_ARGUMENTS, FAILED_UPSTREAM} <= leaked
    assert OPENAI_MEMORY in leaked  # the memory written through the OpenAI-compatible route
