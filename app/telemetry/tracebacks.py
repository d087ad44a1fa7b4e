"""Tracebacks safe for telemetry: frames and exception types only, never exception messages
(they embed inputs: validation errors quote values, SQLAlchemy errors list bound parameters)."""

from __future__ import annotations

import sys
import traceback
from types import TracebackType
from typing import Any

from structlog.typing import EventDict


def _exception_lines(exc: BaseException, seen: set[int]) -> list[str]:
    seen.add(id(exc))
    lines: list[str] = []
    cause = exc.__cause__
    context = None if exc.__suppress_context__ else exc.__context__
    if cause is not None and id(cause) not in seen:
        lines += _exception_lines(cause, seen)
        lines.append("\nThe above exception was the direct cause of the following exception:\n\n")
    elif context is not None and id(context) not in seen:
        lines += _exception_lines(context, seen)
        lines.append("\nDuring handling of the above exception, another exception occurred:\n\n")
    if exc.__traceback__ is not None:
        lines.append("Traceback (most recent call last):\n")
        lines += traceback.StackSummary.extract(
            traceback.walk_tb(exc.__traceback__), capture_locals=False
        ).format()
    # The message is withheld: exception texts embed inputs (validation errors quote values,
    # SQLAlchemy errors list bound parameters). Type and location are what an operator needs.
    lines.append(f"{type(exc).__module__}.{type(exc).__qualname__}: [message withheld]\n")
    if isinstance(exc, BaseExceptionGroup):
        for index, inner in enumerate(exc.exceptions, 1):
            if id(inner) not in seen:
                lines.append(f"+-- sub-exception {index} --\n")
                lines += _exception_lines(inner, seen)
    return lines


ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def format_exception_safely(exc_info: ExcInfo | BaseException) -> str:
    """A traceback with frames and exception types only: no exception messages."""
    exc = exc_info if isinstance(exc_info, BaseException) else exc_info[1]
    return "".join(_exception_lines(exc, set())).rstrip("\n")


def _resolve_exc_info(value: Any) -> BaseException | None:
    if isinstance(value, BaseException):
        return value
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[1], BaseException):
        return value[1]
    if value is True:
        return sys.exc_info()[1]
    return None


def safe_exc_info(_logger: Any, _method: str, event_dict: EventDict) -> EventDict:
    """Replace `exc_info` with a message-free traceback under "exception"."""
    raw = event_dict.pop("exc_info", None)
    exc = _resolve_exc_info(raw)
    if exc is not None:
        event_dict["exception"] = format_exception_safely(exc)
    event_dict.pop("exception_message", None)
    return event_dict
