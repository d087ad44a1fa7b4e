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
from app.telemetry.redaction import redact_event
from app.telemetry.sensitive import current_scope
from app.telemetry.subjects import set_subject_hash_key
from app.telemetry.tracebacks import format_exception_safely, safe_exc_info

# Third-party loggers are private by default: below WARNING, a record from any logger that is
# not ours is withheld (its text replaced when it is created, and dropped by our handler), so a
# library, or a logger nobody listed, cannot print URLs, headers or bodies at LOG_LEVEL=DEBUG.
TRUSTED_LOGGERS: tuple[str, ...] = ("app", "alembic")  # and their children
TRUSTED_EXACT: frozenset[str] = frozenset({"uvicorn", "uvicorn.error"})  # lifecycle lines only
WITHHELD_MESSAGE = "[third-party log record below WARNING withheld]"
# The loggers known to print content are also held at WARNING, so that they do not even build
# their records: the openai SDK logs "Request options" with the whole JSON body and the response
# headers at DEBUG; its HTTP stack (httpx2/httpcore2, or httpx/httpcore) logs each request URL
# at INFO and every header at DEBUG, and h11/h2/hpack frames; aiohttp (the model endpoint's
# transport) logs connection and payload details at DEBUG; urllib3 and requests log URLs;
# websockets and watchfiles log frames and paths; asyncio's debug mode logs callback reprs;
# SQLAlchemy's engine logs bound parameters at INFO and rows at DEBUG (even without echo, once
# the root logger is at INFO); the database drivers log queries; sse-starlette logs every
# streamed chunk at DEBUG; python-multipart logs form fields; detect-secrets logs what it scans.
# uvicorn's access line (client address, path with query string) is replaced by our own
# `http.request` event, which names the route template instead.
CLAMPED_LOGGERS: tuple[str, ...] = (
    "openai",
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "h11",
    "h2",
    "hpack",
    "aiohttp",
    "anyio",
    "urllib3",
    "requests",
    "websockets",
    "watchfiles",
    "asyncio",
    "sqlalchemy.engine",
    "sqlalchemy.orm",
    "sqlalchemy.dialects",
    "sqlalchemy.pool",
    "psycopg",
    "pymysql",
    "sse_starlette",
    "starlette",
    "fastapi",
    "multipart",
    "python_multipart",
    "opentelemetry",
    "jwt",
    "detect-secrets",
    "uvicorn.access",
    "uvicorn.asgi",
)
_CLAMP_FLOOR = logging.WARNING
_OUR_HANDLER = "_agent_memory_telemetry"

_factory_lock = threading.Lock()
_factory_installed = False


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def is_trusted(name: str) -> bool:
    """Our own loggers (and uvicorn's lifecycle lines), which may log below WARNING."""
    return name in TRUSTED_EXACT or _under(name, TRUSTED_LOGGERS)


def is_clamped(name: str) -> bool:
    """Whether records of this logger below WARNING are withheld: every logger not ours."""
    return not is_trusted(name)


def sanitize_record(record: logging.LogRecord) -> None:
    """Make a standard-library record safe for any handler, at creation time.

    - a third-party record below WARNING that got through anyway (SQLAlchemy's `echo=True`
      bypasses logger levels, a library may reset its own level, a logger may be unlisted)
      loses its text: format strings are often pre-formatted with URLs and headers;
    - registered sensitive values are scrubbed from the formatted message;
    - the traceback is pre-rendered without exception messages into `exc_text` (which every
      `logging.Formatter` prints) and the exception object itself is dropped, since its repr and
      a handler's own formatting would show the message.
    structlog's own records carry an already-redacted event dict as `msg` and are left alone.
    """
    # logging.makeLogRecord builds an empty record (level None) and fills it in afterwards.
    below = isinstance(record.levelno, int) and record.levelno < _CLAMP_FLOOR
    if below and is_clamped(str(record.name)):
        record.msg, record.args = WITHHELD_MESSAGE, ()
        record.exc_info = record.exc_text = None
        return
    if not isinstance(record.msg, str):
        return
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
            try:
                sanitize_record(record)
            except Exception:
                # Never let the record through unsanitised (logging's error path would print
                # the original traceback, message included, to stderr).
                record.msg, record.args = WITHHELD_MESSAGE, ()
                record.exc_info = record.exc_text = None
            return record

        logging.setLogRecordFactory(factory)
        _factory_installed = True


class _ClampFilter(logging.Filter):
    """Drop what a third-party logger emits below WARNING despite its level (e.g. `echo=True`)."""

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
    # detect-secrets gives its logger a private stderr handler at import time; its records go
    # through ours instead, like everyone else's.
    secrets_logger = logging.getLogger("detect-secrets")
    secrets_logger.handlers.clear()
    secrets_logger.propagate = True
    # Warnings become `py.warnings` records, which the record factory scrubs (printed warnings
    # would bypass redaction). detect-secrets also turns this on when imported; saying it here
    # makes it independent of import order.
    logging.captureWarnings(True)


def _hash_key(settings: Settings) -> str | None:
    """The subject-hash key: TELEMETRY_HASH_KEY if the settings have one, else the dev secret;
    otherwise a per-process random key (hashes then differ between replicas and restarts)."""
    configured = settings.telemetry_hash_key
    secret = configured if configured is not None else settings.auth_dev_secret
    return secret.get_secret_value() if secret is not None else None
