"""OpenTelemetry tracing: one SDK provider, one redaction processor in front of every exporter.

Every span, ours and every instrumentation's (FastAPI's server and send/receive spans included),
passes through `RedactingSpanProcessor` before any exporter sees it. It rebuilds the span keeping
only allow-listed metadata: attribute keys are checked against an allow-list (strings only for
named keys, numbers for a few namespaces), span events keep only metadata attributes (an
exception event keeps its type, never its message or stacktrace), status descriptions are
dropped, URL query strings are cut, and values registered as sensitive in the request are
scrubbed from what is left.

`TELEMETRY_CAPTURE_CONTENT=true` lets the attributes in `CAPTURE_ATTRIBUTES` through, and only on
spans of our own instrumentation scope (`app.*`). It never relaxes anything else.
"""

from __future__ import annotations

import os
import threading
import types
from collections import OrderedDict
from collections.abc import Awaitable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, Status
from opentelemetry.util.types import Attributes
from starlette.types import ASGIApp, Receive, Scope, Send

from app.settings import Settings
from app.telemetry.sensitive import TelemetryScope, current_scope
from app.telemetry.span_policy import CAPTURE_ATTRIBUTES, URL_QUERY, filter_attributes

DEFAULT_SERVICE_NAME = "agent-memory-backend"
OUR_SCOPE_PREFIX = "app."


def _span_name(name: str, scope: TelemetryScope | None) -> str:
    name = URL_QUERY.sub("", name)
    return scope.scrub(name) if scope is not None else name


class _ScopesByTrace:
    """Request scopes by trace id, for spans that end outside the request's context (the FastAPI
    server span ends in the instrumentation middleware, around ours). Bounded, in case a root
    span never ends."""

    def __init__(self, limit: int = 10_000) -> None:
        self._scopes: OrderedDict[int, tuple[int, TelemetryScope]] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def put(self, trace_id: int, root_span_id: int, scope: TelemetryScope) -> None:
        with self._lock:
            self._scopes[trace_id] = (root_span_id, scope)
            while len(self._scopes) > self._limit:
                self._scopes.popitem(last=False)

    def get(self, trace_id: int) -> tuple[int, TelemetryScope] | None:
        with self._lock:
            return self._scopes.get(trace_id)

    def discard(self, trace_id: int) -> None:
        with self._lock:
            self._scopes.pop(trace_id, None)


class RedactingSpanProcessor(SpanProcessor):
    """The one redaction processor for spans; exporters only ever receive its sanitized copies."""

    def __init__(self) -> None:
        self._downstream: list[SpanProcessor] = []
        self._lock = threading.Lock()
        self.scopes = _ScopesByTrace()

    def add(self, processor: SpanProcessor) -> None:
        with self._lock:
            self._downstream = [*self._downstream, processor]

    def remove(self, processor: SpanProcessor) -> None:
        with self._lock:
            self._downstream = [p for p in self._downstream if p is not processor]

    @property
    def exporting(self) -> bool:
        """Whether any processor would receive a finished span."""
        return bool(self._downstream)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        # Downstream processors see only finished, sanitized spans.
        return None

    def _scope_for(self, span: ReadableSpan) -> TelemetryScope | None:
        bound = current_scope()
        context = span.context
        if context is None:
            return bound
        entry = self.scopes.get(context.trace_id)
        if entry is not None and entry[0] == context.span_id:
            self.scopes.discard(context.trace_id)  # the request's root span ends last
        if bound is not None:
            return bound
        return entry[1] if entry is not None else None

    def sanitize(self, span: ReadableSpan) -> ReadableSpan:
        scope = self._scope_for(span)
        library = span.instrumentation_scope
        ours = library is not None and library.name.startswith(OUR_SCOPE_PREFIX)
        allow_capture = ours and scope is not None and scope.capture_content
        events = [
            Event(
                _span_name(event.name, scope),
                filter_attributes(event.attributes, scope),
                event.timestamp,
            )
            for event in span.events
        ]
        links = [
            Link(link.context, filter_attributes(link.attributes, scope)) for link in span.links
        ]
        return ReadableSpan(
            name=_span_name(span.name, scope),
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=filter_attributes(span.attributes, scope, allow_capture=allow_capture),
            events=events,
            links=links,
            kind=span.kind,
            # Descriptions are free text ("ValueError: <the message>"): keep the code only.
            status=Status(span.status.status_code),
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    def on_end(self, span: ReadableSpan) -> None:
        downstream = self._downstream
        if not downstream:
            return
        clean = self.sanitize(span)
        for processor in downstream:
            processor.on_end(clean)

    def shutdown(self) -> None:
        for processor in self._downstream:
            processor.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return all(processor.force_flush(timeout_millis) for processor in self._downstream)


class WhileExporting(Sampler):
    """Record spans only while something would receive them; then as `inner` decides.

    Without an exporter (no OTLP endpoint, no test capture) a recorded span is work for nothing:
    its attributes, events and timing on every request, and three spans held open by every
    streamed turn (a sixth of an idle stream's memory). Dropped spans still carry trace and span
    ids, so context propagates as before."""

    def __init__(self, redactor: RedactingSpanProcessor, inner: Sampler) -> None:
        self.redactor = redactor
        self.inner = inner

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: trace.TraceState | None = None,
    ) -> SamplingResult:
        if not self.redactor.exporting:
            parent = trace.get_current_span(parent_context).get_span_context()
            return SamplingResult(Decision.DROP, trace_state=parent.trace_state)
        return self.inner.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"WhileExporting{{{self.inner.get_description()}}}"


class _Tracing:
    """Process-wide tracing state. The OTel API allows one global provider per process, while
    tests build many apps: the provider is created once; each app's lifespan holds a reference
    to the export pipeline, which is shut down (flushed, connections closed) with the last one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.provider: TracerProvider | None = None
        self.redactor = RedactingSpanProcessor()
        self.exporting: SpanProcessor | None = None
        self.users = 0


_state = _Tracing()


def build_resource() -> Resource:
    """From OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES; our name when none is given."""
    resource = Resource.create({})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    if SERVICE_VERSION not in resource.attributes:
        resource = resource.merge(Resource({SERVICE_VERSION: "0.1.0"}))
    return resource


def otlp_endpoint_configured() -> bool:
    return any(
        os.environ.get(name, "").strip()
        for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def _ensure_provider() -> TracerProvider:
    if _state.provider is None:
        # The sampler OTEL_TRACES_SAMPLER names (parent-based always-on by default), applied
        # only while spans are exported.
        configured = TracerProvider(shutdown_on_exit=False).sampler
        provider = TracerProvider(
            resource=build_resource(), sampler=WhileExporting(_state.redactor, configured)
        )
        provider.add_span_processor(_state.redactor)
        trace.set_tracer_provider(provider)
        if trace.get_tracer_provider() is not provider:
            # Someone else (e.g. auto-instrumentation) set a global provider first: its
            # processors would see unredacted spans, so refuse rather than leak.
            raise RuntimeError(
                "a global OpenTelemetry TracerProvider is already set; this service installs its "
                "own so that every span passes its redaction processor"
            )
        _state.provider = provider
    return _state.provider


def _exporting_processor() -> SpanProcessor | None:
    if not otlp_endpoint_configured():
        return None
    # Imported here: the exporter pulls in `requests`, needed only when exporting.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return BatchSpanProcessor(OTLPSpanExporter())


def configure_tracing(app: FastAPI, settings: Settings | None = None) -> None:
    """Instrument `app` (call before it starts: instrumentation adds middleware) on the
    process-wide provider. Settings are not needed yet: tracing follows the OTEL_* variables."""
    with _state.lock:
        _ensure_provider()
    plain = app.build_middleware_stack  # Starlette's, before the instrumentation replaces it
    FastAPIInstrumentor.instrument_app(
        app,
        tracer_provider=_state.provider,
        # Headers are never recorded: an empty capture list would fall back to the
        # OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_* variables, so sanitize every header name
        # as well; the allow-list drops http.request.header.* attributes regardless.
        http_capture_headers_sanitize_fields=[".*"],
        # No span per ASGI message: a streamed turn sends one message per event, and those
        # spans cost time on every event while telling nothing the server span does not.
        exclude_spans=["send", "receive"],
    )
    instrumented = app.build_middleware_stack

    def build_middleware_stack(self: FastAPI) -> ASGIApp:
        return WhileRecording(plain(), instrumented(), _state.redactor)

    app.build_middleware_stack = types.MethodType(build_middleware_stack, app)  # type: ignore[method-assign]


class WhileRecording:
    """The ASGI stack: the instrumented one while spans are recorded (an OTLP exporter or a
    test capture receives them), else the same middleware without the instrumentation's four
    layers (its middleware, two error middlewares, its exception recorder).

    With no receiver, those layers only made dropped spans: per request a server span, its
    context and context managers, and four more coroutine frames for as long as a stream is
    open. Chosen per request, so a capture or exporter added later sees the next request. Not
    itself a coroutine: it hands the chosen stack's awaitable to the server."""

    def __init__(self, plain: ASGIApp, instrumented: ASGIApp, redactor: RedactingSpanProcessor):
        self.plain, self.instrumented, self.redactor = plain, instrumented, redactor

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        app = self.instrumented if self.redactor.exporting else self.plain
        return app(scope, receive, send)


def start_export() -> None:
    """At lifespan start: make sure the export pipeline runs (one per process)."""
    with _state.lock:
        _ensure_provider()
        _state.users += 1
        if _state.exporting is None:
            _state.exporting = _exporting_processor()
            if _state.exporting is not None:
                _state.redactor.add(_state.exporting)


def shutdown_tracing() -> None:
    """At lifespan end: flush and close the export pipeline once no app uses it."""
    with _state.lock:
        _state.users = max(0, _state.users - 1)
        if _state.users or _state.exporting is None:
            return
        exporting, _state.exporting = _state.exporting, None
        _state.redactor.remove(exporting)
    exporting.shutdown()


def start_span(tracer: trace.Tracer, name: str) -> AbstractContextManager[trace.Span]:
    """`tracer.start_as_current_span(name)` while spans are recorded; otherwise the invalid
    span, changing no context. A span dropped by the sampler would still hold its context
    managers and contexts for as long as the turn runs (an idle stream holds two), for nobody."""
    if not _state.redactor.exporting:
        return nullcontext(trace.INVALID_SPAN)
    return tracer.start_as_current_span(name)


def capture_content(span: trace.Span, key: str, value: str) -> None:
    """Record content on one of our spans, only when the request's capture flag is on."""
    scope = current_scope()
    if key in CAPTURE_ATTRIBUTES and scope is not None and scope.capture_content:
        span.set_attribute(key, value)


def link_request_scope(scope: TelemetryScope) -> None:
    """Tie a request's scope to its server span, which ends outside the request's context."""
    span = trace.get_current_span()
    context = span.get_span_context()
    if span.is_recording() and context.is_valid:
        _state.redactor.scopes.put(context.trace_id, context.span_id, scope)


@contextmanager
def captured_spans(exporter: SpanExporter | None = None) -> Iterator[InMemorySpanExporter]:
    """Test hook: every finished span, as exporters receive it (after redaction), in memory."""
    memory = exporter if isinstance(exporter, InMemorySpanExporter) else InMemorySpanExporter()
    processor = SimpleSpanProcessor(memory)
    with _state.lock:
        _ensure_provider()
    _state.redactor.add(processor)
    try:
        yield memory
    finally:
        _state.redactor.remove(processor)
