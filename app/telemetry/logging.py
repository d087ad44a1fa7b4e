"""One logging configuration for structlog and the standard library, private at every level.

structlog events and standard-library records (uvicorn, SQLAlchemy, httpx, openai, ...) end in the
same handler and the same `ProcessorFormatter`: JSON lines when `LOG_FORMAT=json`, readable lines
otherwise. Privacy does not depend on the handler, though: records are sanitised when they are
created (a log-record factory), so that any handler, including one a test or an operator adds to
the root logger, only ever sees redacted text.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor

from app.settings import Settings
from app.telemetry.redaction import (
    current_scope,
    format_exception_safely,
    redact_event,
    safe_exc_info,
    set_subject_hash_key,
)

# Loggers that print request bodies, bound parameters, rows or streamed chunks below WARNING:
# the openai SDK logs "Request options" with the whole JSON body at DEBUG; httpx/httpcore log URLs
# and headers; SQLAlchemy's engine logs bound parameters at INFO and rows at DEBUG (even without
# echo, once the root logger is at INFO); sse-starlette logs every streamed chunk at DEBUG;
# python-multipart logs form fields. They are held at WARNING whatever LOG_LEVEL says, which is
# what keeps LOG_LEVEL=DEBUG private. uvicorn's access line (client address, path with query
# string) is replaced by our own `http.request` event, which names the route template instead.
CLAMPED_LOGGERS: tuple[str, ...] = (
    "openai",
    "httpx",
    "httpcore",
    "hpack",
    "sqlalchemy.engine",
    "sqlalchemy.orm",
    "sqlalchemy.dialects",
    "sse_starlette",
    "multipart",
    "python_multipart",
    "uvicorn.access",
)
_CLAMP_FLOOR = logging.WARNING
_OUR_HANDLER = "_agent_memory_telemetry"

_factory_lock = threading.Lock()
_factory_installed = False


def is_clamped(name: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in CLAMPED_LOGGERS)


def sanitize_record(record: logging.LogRecord) -> None:
    """Make a standard-library record safe for any handler, at creation time.

    - a clamped logger's record below WARNING that got through anyway (SQLAlchemy's `echo=True`
      bypasses logger levels) keeps its format string but loses its arguments;
    - registered sensitive values are scrubbed from the formatted message;
    - the traceback is pre-rendered without exception messages into `exc_text` (which every
      `logging.Formatter` prints) and the exception object itself is dropped, since its repr and
      a handler's own formatting would show the message.
    structlog's own records carry an already-redacted event dict as `msg` and are left alone.
    """
    if not isinstance(record.msg, str):
        return
    if record.args and record.levelno < _CLAMP_FLOOR and is_clamped(record.name):
        record.args = ()
    scope = current_scope()
    if scope is not None and scope.values:
        try:
            message = record.getMessage()
        except Exception:  # a malformed third-party record: keep only its format string
            message = record.msg
        scrubbed = scope.scrub(message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, ()
    if record.exc_info and record.exc_info[1] is not None:
        record.exc_text = format_exception_safely(record.exc_info[1])
    record.exc_info = None


def _record_exception(_logger: Any, _method: str, event_dict: EventDict) -> EventDict:
    """For standard-library records: the safe traceback `sanitize_record` left in `exc_text`."""
    record = event_dict.get("_record")
    exc_text = getattr(record, "exc_text", None)
    if exc_text and "exception" not in event_dict:
        event_dict["exception"] = exc_text
    return event_dict


def _install_record_factory() -> None:
    global _factory_installed
    with _factory_lock:
        if _factory_installed:
            return
        previous: Callable[..., logging.LogRecord] = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            sanitize_record(record)
            return record

        logging.setLogRecordFactory(factory)
        _factory_installed = True


class _ClampFilter(logging.Filter):
    """Drop what a clamped logger emits below WARNING despite its level (e.g. `echo=True`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno < _CLAMP_FLOOR and is_clamped(record.name))


class _CurrentStderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is at emit time (test capture swaps it)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def _shared_processors() -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        safe_exc_info,
        redact_event,
    ]


def _renderer(log_format: str) -> Processor:
    if log_format == "json":
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=False)


def configure_logging(settings: Settings) -> None:
    """Idempotent: each call replaces the previous configuration (tests build many apps)."""
    _install_record_factory()
    set_subject_hash_key(_hash_key(settings))
    level = logging.getLevelNamesMapping()[settings.log_level]

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_shared_processors(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: tests (and structlog.testing.capture_logs) reconfigure at run time.
        cache_logger_on_first_use=False,
    )

    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[_record_exception, *_shared_processors()],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            _renderer(settings.log_format),
        ],
    )
    handler = _CurrentStderrHandler()
    handler.setFormatter(formatter)
    handler.addFilter(_ClampFilter())
    setattr(handler, _OUR_HANDLER, True)

    root = logging.getLogger()
    for existing in list(root.handlers):
        # Ours from an earlier call, or a plain basicConfig handler (the openai SDK installs one
        # when OPENAI_LOG is set) that would print a second, differently formatted copy.
        if getattr(existing, _OUR_HANDLER, False) or type(existing) is logging.StreamHandler:
            root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)

    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        # uvicorn's own dictConfig gives these non-propagating handlers; route them through ours.
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
        uvicorn_logger.setLevel(logging.NOTSET)
    for name in CLAMPED_LOGGERS:
        logging.getLogger(name).setLevel(max(_CLAMP_FLOOR, level))


def _hash_key(settings: Settings) -> str | None:
    """The subject-hash key: TELEMETRY_HASH_KEY if the settings have one, else the dev secret;
    otherwise a per-process random key (hashes then differ between replicas and restarts)."""
    configured = settings.telemetry_hash_key
    secret = configured if configured is not None else settings.auth_dev_secret
    return secret.get_secret_value() if secret is not None else None
