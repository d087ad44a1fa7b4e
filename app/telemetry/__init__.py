"""Telemetry that is useful to operators and private by default: logs, traces, redaction."""

from __future__ import annotations

from app.telemetry.events import (
    MEMORY_COMMIT_EVENT,
    MEMORY_TOOL_EVENT,
    bind_subject,
    count_targets,
    memory_event,
    memory_read_failed,
    turn_context,
    turn_finished,
)
from app.telemetry.logging import configure_logging
from app.telemetry.sensitive import (
    REDACTED,
    register_json_strings,
    register_memory,
    register_operations,
    register_search,
    register_sensitive,
    register_tool_arguments,
    telemetry_scope,
)
from app.telemetry.subjects import subject_hash
from app.telemetry.tracing import (
    capture_content,
    captured_spans,
    configure_tracing,
    shutdown_tracing,
    start_export,
    start_span,
)

__all__ = [
    "MEMORY_COMMIT_EVENT",
    "MEMORY_TOOL_EVENT",
    "REDACTED",
    "bind_subject",
    "capture_content",
    "captured_spans",
    "configure_logging",
    "configure_tracing",
    "count_targets",
    "memory_event",
    "memory_read_failed",
    "register_json_strings",
    "register_memory",
    "register_operations",
    "register_search",
    "register_sensitive",
    "register_tool_arguments",
    "shutdown_tracing",
    "start_export",
    "start_span",
    "subject_hash",
    "telemetry_scope",
    "turn_context",
    "turn_finished",
]
