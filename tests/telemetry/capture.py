"""Capture every telemetry channel of a test: all log records, formatted output, finished spans."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.main import create_app
from app.offline.transport import Responder
from app.telemetry import captured_spans
from tests.support.apps import api_settings
from tests.support.scripted import ScriptedTransport
from tests.support.server import live_server
from tests.support.tokens import dev_token


class RecordingHandler(logging.Handler):
    """A DEBUG handler on the root logger: keeps every record of every logger, as handed over."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._guard:
            self.records.append(record)


def record_text(record: logging.LogRecord) -> str:
    """Everything a handler could print from a record: raw fields, message, plain formatting."""
    parts = [repr(vars(record)), str(record.msg)]
    try:
        parts.append(record.getMessage())
        parts.append(logging.Formatter().format(record))
    except Exception as error:  # a test failure, reported with the record
        parts.append(f"<unformattable record: {error!r}>")
    return "\n".join(parts)


def span_text(span: ReadableSpan) -> str:
    return "\n".join(
        [
            span.to_json(indent=None),
            repr(dict(span.attributes or {})),
            repr([(event.name, dict(event.attributes or {})) for event in span.events]),
            repr([dict(link.attributes or {}) for link in span.links]),
            repr(dict(span.resource.attributes)),
            repr(span.status.description),
        ]
    )


@dataclass
class Captured:
    handler: RecordingHandler
    spans_exporter: InMemorySpanExporter
    capfd: pytest.CaptureFixture[str]
    output: list[str] = field(default_factory=list)

    @property
    def records(self) -> list[logging.LogRecord]:
        return list(self.handler.records)

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self.spans_exporter.get_finished_spans())

    def read_output(self) -> str:
        out, err = self.capfd.readouterr()
        self.output.append(out + err)
        return "".join(self.output)

    def channels(self) -> dict[str, str]:
        """Each place a sentinel could land, as text."""
        return {
            "log records": "\n".join(record_text(record) for record in self.records),
            "stdout/stderr": self.read_output(),
            "spans": "\n".join(span_text(span) for span in self.spans),
        }

    def hits(self, sentinels: Iterable[str]) -> list[tuple[str, str]]:
        channels = self.channels()
        return [
            (sentinel, name)
            for sentinel in sentinels
            for name, text in channels.items()
            if sentinel in text or json.dumps(sentinel)[1:-1] in text
        ]

    def span_names(self) -> list[str]:
        return [span.name for span in self.spans]

    def events(self) -> list[str]:
        """structlog event names and standard-library messages, in order."""
        names = []
        for record in self.records:
            msg = record.msg
            names.append(str(msg.get("event")) if isinstance(msg, dict) else record.getMessage())
        return names


@contextmanager
def capture_telemetry(capfd: pytest.CaptureFixture[str]) -> Iterator[Captured]:
    root = logging.getLogger()
    handler = RecordingHandler()
    root.addHandler(handler)
    try:
        with captured_spans() as exporter:
            yield Captured(handler, exporter, capfd)
    finally:
        root.removeHandler(handler)


@contextmanager
def live_run(
    capfd: pytest.CaptureFixture[str],
    sqlite_url: str,
    model: Responder,
    drive: Callable[[str, dict[str, str]], None],
    *,
    subject: str,
) -> Iterator[Captured]:
    """Every channel of one run on a real server (uvicorn) at LOG_LEVEL=DEBUG, SQLAlchemy's
    engine logger re-opened at DEBUG: `drive(base_url, headers)` with a fresh subject's token
    and the scripted `model`; what was captured is yielded once the server has stopped."""
    settings = api_settings(sqlite_url, log_level="DEBUG", log_format="json")
    app = create_app(settings, model_transport=ScriptedTransport(model))
    token = dev_token(f"{subject}-{uuid.uuid4().hex[:8]}")
    with capture_telemetry(capfd) as captured:
        with live_server(app) as base:
            reopened = {name: logging.getLogger(name).level for name in ("sqlalchemy.engine",)}
            for name in reopened:
                logging.getLogger(name).setLevel(logging.DEBUG)
            try:
                drive(base, {"Authorization": f"Bearer {token}"})
            finally:
                for name, level in reopened.items():
                    logging.getLogger(name).setLevel(level)
        yield captured
