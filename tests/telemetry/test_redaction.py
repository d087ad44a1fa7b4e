"""Unit tests of the redaction layers: log processors, record sanitising, clamps, span filter."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import structlog
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags
from sqlalchemy import create_engine, text

from app.memory.rules import MemoryUsage
from app.settings import Settings
from app.telemetry import configure_logging, memory_event, register_sensitive, telemetry_scope
from app.telemetry.logging import WITHHELD_MESSAGE, sanitize_record
from app.telemetry.redaction import redact_event
from app.telemetry.sensitive import REDACTED, TelemetryScope
from app.telemetry.subjects import subject_hash
from app.telemetry.tracebacks import format_exception_safely, safe_exc_info
from app.telemetry.tracing import RedactingSpanProcessor, filter_attributes
from tests.telemetry.capture import capture_telemetry

SECRET = "SNTL-UNIT-4F9-redaction-OKAPI-17"


def debug_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"log_level": "DEBUG", "log_format": "json"}
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.fixture
def debug_logging() -> None:
    configure_logging(debug_settings())


# -- log processors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "message",
        "content",
        "text",
        "prompt",
        "messages",
        "arguments",
        "entries",
        "match",
        "body",
        "json",
        "data",
        "authorization",
        "token",
        "Authorization",
        "gen_ai.prompt",
        "positional_args",
        "operations",
    ],
)
def test_content_keys_are_dropped_whatever_their_value(key: str) -> None:
    """A content-bearing key never reaches a log line, even with an unregistered value."""
    out = redact_event(None, "info", {"event": "turn.started", key: SECRET, "rounds": 2})
    assert out == {"event": "turn.started", "rounds": 2}


def test_event_name_is_kept_and_nested_content_keys_dropped() -> None:
    """structlog's "event" is the constant name; nested dicts lose content keys too."""
    out = redact_event(
        None, "info", {"event": "memory.commit", "targets": {"user": 1, "content": SECRET}}
    )
    assert out == {"event": "memory.commit", "targets": {"user": 1}}


def test_registered_values_are_scrubbed_in_every_string_field() -> None:
    """A registered value is replaced wherever it appears as text, in any field or nesting."""
    with telemetry_scope():
        register_sensitive(SECRET)
        out = redact_event(
            None,
            "info",
            {"event": f"oops {SECRET}", "reason": f"x{SECRET}y", "items": [f"a {SECRET}"]},
        )
    assert SECRET not in repr(out)
    assert out["reason"] == f"x{REDACTED}y"


@pytest.mark.parametrize(
    "form",
    [
        pytest.param(lambda v: v, id="raw"),
        pytest.param(lambda v: repr({"m": v}), id="repr"),
        pytest.param(lambda v: __import__("json").dumps({"m": v}), id="json"),
    ],
)
def test_escaped_forms_of_registered_values_are_scrubbed(form: Any) -> None:
    """Third-party output shows values JSON- or repr-escaped; those forms are scrubbed too."""
    value = f'{SECRET} — naïve\n"quoted" line'
    scope = TelemetryScope()
    scope.register([value])
    scrubbed = scope.scrub(form(value))
    assert SECRET not in scrubbed
    assert "naïve" not in scrubbed and "na\\u00efve" not in scrubbed


def test_short_values_are_not_registered() -> None:
    """Very short strings would wreck every line; they are left to key dropping and clamps."""
    scope = TelemetryScope()
    scope.register(["user", "memory", "  hi  "])
    assert scope.values == frozenset()


async def test_registries_do_not_cross_concurrent_requests() -> None:
    """One request's sensitive values are not visible to (or scrubbed in) another request."""
    seen: dict[str, frozenset[str]] = {}
    ready = asyncio.Event()

    async def request(name: str, value: str) -> None:
        with telemetry_scope() as scope:
            register_sensitive(value)
            if name == "a":
                await ready.wait()
            else:
                ready.set()
            await asyncio.sleep(0)
            seen[name] = scope.values

    await asyncio.gather(request("a", "alpha-secret-value"), request("b", "bravo-secret-value"))
    assert "bravo-secret-value" not in seen["a"]
    assert "alpha-secret-value" not in seen["b"]


def test_registrations_in_a_worker_thread_reach_the_request() -> None:
    """asyncio.to_thread copies the context: the scope object is shared, not copied."""

    async def main() -> frozenset[str]:
        with telemetry_scope() as scope:
            await asyncio.to_thread(register_sensitive, SECRET)
            return scope.values

    assert SECRET in asyncio.run(main())


def test_tracebacks_keep_frames_and_types_but_no_messages() -> None:
    """Exception messages embed inputs; a logged traceback shows only types and locations."""
    try:
        try:
            raise KeyError(SECRET)
        except KeyError as inner:
            raise ValueError(f"wrapped {SECRET}") from inner
    except ValueError as error:
        rendered = format_exception_safely(error)
        out = safe_exc_info(None, "error", {"event": "x", "exc_info": error})
    assert SECRET not in rendered and SECRET not in repr(out)
    assert "builtins.ValueError: [message withheld]" in rendered
    assert "builtins.KeyError" in rendered
    assert "test_tracebacks_keep_frames_and_types_but_no_messages" in rendered


def test_subject_hash_is_stable_and_not_the_subject() -> None:
    """Subjects appear only as a stable pseudonym."""
    assert subject_hash("alice") == subject_hash("alice") != subject_hash("bob")
    assert "alice" not in subject_hash("alice")
    assert len(subject_hash("alice")) == 16


# -- standard-library records -----------------------------------------------------------------


def test_stdlib_records_are_scrubbed_at_creation_for_every_handler(
    debug_logging: None, capfd: pytest.CaptureFixture[str]
) -> None:
    """A third-party record formatting a registered value is clean for any handler, including
    the test's own raw root handler, and in the rendered output."""
    with capture_telemetry(capfd) as captured, telemetry_scope():
        register_sensitive(SECRET)
        logging.getLogger("somelib.client").warning("payload %r", {"input": SECRET})
        try:
            raise RuntimeError(SECRET)
        except RuntimeError:
            logging.getLogger("somelib.client").exception("failed")
    assert captured.hits([SECRET]) == []
    assert any("payload" in event for event in captured.events())
    assert "[message withheld]" in captured.read_output()


def test_unlisted_third_party_records_below_warning_are_withheld(
    debug_logging: None, capfd: pytest.CaptureFixture[str]
) -> None:
    """Default deny: a logger nobody listed, logging an unregistered value below WARNING (even
    pre-formatted into its message), shows every handler only a placeholder; our own loggers
    and any logger's warnings are untouched."""
    unregistered = "SNTL-UNLISTED-header-value-77"
    with capture_telemetry(capfd) as captured:
        logging.getLogger("brandnew.http.client").setLevel(logging.DEBUG)
        preformatted = f"headers [(b'x-key', b'{unregistered}')]"  # as httpcore builds them
        logging.getLogger("brandnew.http.client").debug(preformatted)
        logging.getLogger("brandnew.http.client").info("GET %s", f"/v1?token={unregistered}")
        logging.getLogger("brandnew.http.client").warning("retrying")
        logging.getLogger("app.somewhere").debug("still.visible")
    assert captured.hits([unregistered]) == []
    events = captured.events()
    assert events.count(WITHHELD_MESSAGE) == 2
    assert "retrying" in events and "still.visible" in events


def test_a_failing_sanitiser_withholds_the_record(
    debug_logging: None, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """If sanitising ever raises, the record is withheld: logging's own error path (which
    prints the original traceback and message to stderr) is never reached."""

    def broken(record: logging.LogRecord) -> None:
        raise RuntimeError("sanitiser bug")

    monkeypatch.setattr("app.telemetry.logging.sanitize_record", broken)
    with capture_telemetry(capfd) as captured:
        try:
            raise ValueError(SECRET)
        except ValueError:
            logging.getLogger("app.somewhere").exception("failed")
    assert captured.hits([SECRET]) == []
    assert "Logging error" not in captured.read_output()
    assert WITHHELD_MESSAGE in captured.events()


def test_sanitize_record_leaves_structlog_records_alone() -> None:
    """structlog records carry an already-redacted event dict; it is not stringified."""
    record = logging.LogRecord("app.x", logging.INFO, __file__, 1, {"event": "e"}, (), None)
    sanitize_record(record)
    assert record.msg == {"event": "e"}


@pytest.mark.parametrize(
    "logger_name",
    [
        "openai._base_client",
        "httpx",
        "httpx2",
        "httpcore.http11",
        "httpcore2.http11",
        "httpcore2.connection",
        "urllib3.connectionpool",
        "requests",
        "websockets.client",
        "watchfiles.main",
        "asyncio",
        "h11",
        "psycopg",
        "pymysql",
        "detect-secrets",
        "sqlalchemy.engine.Engine",
        "sqlalchemy.pool",
        "sse_starlette.sse",
        "uvicorn.asgi",
    ],
)
def test_content_printing_loggers_are_clamped_at_debug(
    logger_name: str, debug_logging: None, capfd: pytest.CaptureFixture[str]
) -> None:
    """LOG_LEVEL=DEBUG does not open the loggers that print request bodies or parameters,
    even for values nobody registered."""
    with capture_telemetry(capfd) as captured:
        logging.getLogger(logger_name).debug("Request options: %s", {"json_data": SECRET})
        logging.getLogger(logger_name).info("params %r", (SECRET,))
        logging.getLogger("app.somewhere").debug("still.visible")
    assert captured.hits([SECRET]) == []
    assert "still.visible" in captured.events()


def test_sqlalchemy_echo_parameters_do_not_leak(
    debug_logging: None, capfd: pytest.CaptureFixture[str]
) -> None:
    """`echo=True` bypasses logger levels and adds its own stdout handler: bound parameters
    (memory content) still never reach any output."""
    engine = create_engine("sqlite://", echo="debug")
    try:
        with capture_telemetry(capfd) as captured, engine.connect() as connection:
            connection.execute(text("select :value"), {"value": SECRET}).all()
        hits = captured.hits([SECRET])
        assert any("select" in event for event in captured.events()) or captured.output
    finally:
        engine.dispose()
        for handler in list(logging.getLogger("sqlalchemy.engine.Engine").handlers):
            logging.getLogger("sqlalchemy.engine.Engine").removeHandler(handler)
    assert hits == []


def test_structlog_events_are_redacted_before_any_handler(
    debug_logging: None, capfd: pytest.CaptureFixture[str]
) -> None:
    """A careless structlog call (content key, registered value, positional args) stays private
    in raw records and in the JSON output, and the line is still produced."""
    log = structlog.get_logger("app.careless")
    with capture_telemetry(capfd) as captured, telemetry_scope():
        register_sensitive(SECRET)
        log.info("turn.careless", content=SECRET, reason=f"because {SECRET}", rounds=3)
        log.debug("turn.positional %s", SECRET)
    assert captured.hits([SECRET]) == []
    assert "turn.careless" in captured.events()
    assert '"rounds": 3' in captured.read_output()


def test_memory_event_has_the_designs_fields(
    debug_logging: None, capfd: pytest.CaptureFixture[str]
) -> None:
    """The memory event carries exactly the design's metadata; unknown outcomes become enums."""
    with capture_telemetry(capfd) as captured:
        memory_event(
            stage="commit",
            operation_count=2,
            targets={"user": 1, "memory": 1},
            usage=MemoryUsage(640, 910),
            duration_ms=38.04,
            retry_count=0,
            outcome="committed",
        )
        memory_event(
            stage="tool",
            operation_count=1,
            targets={"user": 1},
            usage=MemoryUsage(1, 2),
            duration_ms=1,
            outcome=f"weird {SECRET}",
        )
    events = [r.msg for r in captured.records if isinstance(r.msg, dict)]
    commit = next(e for e in events if e["event"] == "memory.commit")
    assert {
        k: commit[k]
        for k in (
            "tool",
            "operation_count",
            "targets",
            "user_characters",
            "memory_characters",
            "duration_ms",
            "retry_count",
            "outcome",
        )
    } == {
        "tool": "memory_update",
        "operation_count": 2,
        "targets": {"user": 1, "memory": 1},
        "user_characters": 640,
        "memory_characters": 910,
        "duration_ms": 38.0,
        "retry_count": 0,
        "outcome": "committed",
    }
    tool = next(e for e in events if e["event"] == "memory.tool")
    assert tool["outcome"] == "other"
    assert captured.hits([SECRET]) == []


# -- spans ------------------------------------------------------------------------------------


def _span(attributes: dict[str, Any], *, scope_name: str = "app.agent.turn", **kw: Any) -> Any:
    context = SpanContext(1, 2, is_remote=False, trace_flags=TraceFlags(1))
    return ReadableSpan(
        name=kw.pop("name", "chat.turn"),
        context=context,
        attributes=attributes,
        resource=Resource({}),
        instrumentation_scope=InstrumentationScope(scope_name),
        **kw,
    )


def test_span_attributes_outside_the_allow_list_are_dropped() -> None:
    """Only metadata keys survive: content keys, unknown strings and header captures go."""
    kept = filter_attributes(
        {
            "gen_ai.request.model": "m1",
            "gen_ai.usage.input_tokens": 12,
            "memory.operation_count": 2,
            "memory.content": SECRET,
            "gen_ai.prompt": SECRET,
            "gen_ai.input.messages": SECRET,
            "http.request.header.authorization": ["Bearer x"],
            "http.target": f"/v1/chat?q={SECRET}",
            "url.query": f"q={SECRET}",
            "app.anything": SECRET,
            "app.count": 3,
        },
        None,
    )
    assert kept == {
        "gen_ai.request.model": "m1",
        "gen_ai.usage.input_tokens": 12,
        "memory.operation_count": 2,
        "http.target": "/v1/chat",
        "app.count": 3,
    }


def test_span_processor_strips_events_status_and_registered_values() -> None:
    """Exception events keep the type only; status descriptions go; names are scrubbed."""
    from opentelemetry.sdk.trace import Event

    processor = RedactingSpanProcessor()
    span = _span(
        {"gen_ai.request.model": f"model {SECRET}"},
        name=f"POST /v1/x?{SECRET}",
        events=[
            Event(
                "exception",
                {
                    "exception.type": "ValueError",
                    "exception.message": SECRET,
                    "exception.stacktrace": SECRET,
                },
            )
        ],
        status=Status(StatusCode.ERROR, f"ValueError: {SECRET}"),
    )
    with telemetry_scope():
        register_sensitive(SECRET)
        clean = processor.sanitize(span)
    assert SECRET not in clean.to_json()
    assert clean.events[0].attributes == {"exception.type": "ValueError"}
    assert clean.status.status_code is StatusCode.ERROR and clean.status.description is None
    assert clean.name == "POST /v1/x"


@pytest.mark.parametrize(
    ("capture", "scope_name", "kept"),
    [
        (False, "app.agent.turn", False),
        (True, "app.agent.turn", True),
        (True, "opentelemetry.instrumentation.fastapi", False),
    ],
    ids=["flag-off", "flag-on-our-span", "flag-on-framework-span"],
)
def test_capture_attributes_pass_only_with_the_flag_on_our_spans(
    capture: bool, scope_name: str, kept: bool
) -> None:
    """The capture flag opens the named attributes on our own spans and nothing else."""
    processor = RedactingSpanProcessor()
    span = _span(
        {"app.capture.user_message": SECRET, "gen_ai.prompt": SECRET}, scope_name=scope_name
    )
    with telemetry_scope(TelemetryScope(capture_content=capture)):
        clean = processor.sanitize(span)
    assert dict(clean.attributes or {}) == ({"app.capture.user_message": SECRET} if kept else {})


def test_tracer_spans_reach_exporters_only_redacted(capfd: pytest.CaptureFixture[str]) -> None:
    """A real SDK span with content attributes is exported without them."""
    tracer = trace.get_tracer("app.test")
    with capture_telemetry(capfd) as captured:
        with tracer.start_as_current_span("memory.tool") as span:
            span.set_attribute("memory.operation_count", 1)
            span.set_attribute("gen_ai.tool.call.arguments", SECRET)
            span.add_event("tool.result", {"content": SECRET, "count": 1})
        spans = captured.spans
    assert [s.name for s in spans] == ["memory.tool"]
    assert dict(spans[0].attributes or {}) == {"memory.operation_count": 1}
    assert captured.hits([SECRET]) == []


def test_detect_secrets_logs_through_our_handler_only(
    debug_logging: None, capfd: pytest.CaptureFixture[str]
) -> None:
    """detect-secrets installs a private stderr handler when imported; after configuration its
    records go through our handler only: one redacted line, not a second raw one."""
    import app.policy.secrets  # noqa: F401  (imports detect-secrets)

    detect = logging.getLogger("detect-secrets")
    configure_logging(debug_settings())
    assert detect.handlers == [] and detect.propagate
    with capture_telemetry(capfd) as captured, telemetry_scope():
        register_sensitive(SECRET)
        detect.error("scan failed on %s", SECRET)
    output = captured.read_output()
    assert captured.hits([SECRET]) == []
    assert output.count("scan failed on") == 1
