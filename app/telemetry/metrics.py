"""Prometheus metrics: the series operators watch, recorded at the existing telemetry hooks
(the access event, the turn's end, the memory event, the model round, the flag read).

Labels are closed sets decided here (route templates, outcomes, codes), never a subject, a
user or conversation id, or content: a value outside its set is reported as "other".

Under `python -m app serve --workers N` each worker writes its values to files in
PROMETHEUS_MULTIPROC_DIR (set by `serve`), and an exposition from any worker sums them all:
counters and histograms over every worker that ever ran, gauges over the live ones.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    start_http_server,
)
from prometheus_client.registry import Collector
from sqlalchemy import Engine, event

__all__ = ["CONTENT_TYPE_LATEST"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_CODE = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_AGENTS = frozenset({"chat", "eval"})
_COMMIT_OUTCOMES = frozenset({"committed", "proposed", "none", "failed", "cancelled"})
_FINISHED = {"stop": "complete", "length": "complete", "tool_limit": "tool_limit"}
FlagMetricState = Literal["enabled", "disabled", "unavailable"]
_FLAG_STATES: tuple[FlagMetricState, ...] = ("enabled", "disabled", "unavailable")
# Seconds: a turn streams for up to TURN_TIMEOUT_SECONDS (120 s by default).
_TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
_SHORT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

HTTP_REQUESTS = Counter(
    "amem_http_requests",
    "HTTP requests answered, by method, route template and status.",
    ["method", "route", "status"],
)
TURNS = Counter(
    "amem_turns",
    "Chat turns ended, by agent and outcome (complete, tool_limit, interrupted, error).",
    ["agent", "outcome"],
)
TURN_ERRORS = Counter("amem_turn_errors", "Turns that ended with an error, by code.", ["code"])
TURN_DURATION = Histogram(
    "amem_turn_duration_seconds", "Turn duration, start to end.", ["agent"], buckets=_TURN_BUCKETS
)
TIME_TO_FIRST_TOKEN = Histogram(
    "amem_model_time_to_first_token_seconds",
    "From a model request to its first streamed text.",
    buckets=_SHORT_BUCKETS,
)
MODEL_TOKENS = Counter(
    "amem_model_tokens", "Tokens the model reported, by kind (prompt, completion).", ["kind"]
)
COMMITS = Counter(
    "amem_memory_commits",
    "Memory commit points, by outcome (committed, proposed, none, failed, stale_match, cancelled).",
    ["outcome"],
)
COMMIT_DURATION = Histogram(
    "amem_memory_commit_duration_seconds",
    "Memory commit duration (the transaction and its retries).",
    buckets=_SHORT_BUCKETS,
)
MEMORY_READS_FAILED_OPEN = Counter(
    "amem_memory_reads_failed_open",
    "Turns that answered without memory because the flag or memory could not be read.",
    ["source"],
)
OPEN_STREAMS = Gauge(
    "amem_open_streams", "Turns being streamed right now.", multiprocess_mode="livesum"
)
DB_POOL_IN_USE = Gauge(
    "amem_db_pool_connections_in_use",
    "Database connections checked out of the pools.",
    multiprocess_mode="livesum",
)
MEMORY_FLAG = Gauge(
    "amem_memory_flag",
    "Processes whose latest read of the memory flag gave this state.",
    ["state"],
    multiprocess_mode="livesum",
)
RATE_LIMITED = Counter(
    "amem_rate_limited",
    "Requests refused by a limit (429), by caller kind and limit.",
    ["caller", "limit"],
)
LIMIT_CHECKS_FAILED = Counter(
    "amem_limit_checks_failed",
    "Limit checks that could not reach the database in time (the request was served).",
)

# Semantic search (app/embeddings/): a search that answered by words alone, and why; the
# worker's embedding jobs by outcome.
SemanticFallback = Literal["timeout", "unavailable", "invalid", "recent_failure", "store_error"]
SEMANTIC_FALLBACKS = Counter(
    "amem_search_semantic_fallback",
    "Searches answered by words alone because the query's embedding or the vectors failed "
    "(timeout, unavailable, invalid answer, recent_failure: skipped after a failure, "
    "store_error).",
    ["reason"],
)
EmbeddingOutcome = Literal["embedded", "retried", "abandoned"]
EMBEDDING_JOBS = Counter(
    "amem_embedding_jobs",
    "Messages the embedding worker handled, by outcome (embedded, retried, abandoned).",
    ["outcome"],
)


def _code(value: str | None) -> str:
    return value if value is not None and _CODE.match(value) else "other"


# -- recording, called from the telemetry hooks ----------------------------------------------


def http_request(method: str | None, route: str | None, status: int) -> None:
    HTTP_REQUESTS.labels(
        method if method in _METHODS else "other",
        route if route is not None and route.startswith("/") else "unmatched",
        str(status) if 100 <= status <= 599 else "other",
    ).inc()


def turn_finished(agent: str, outcome: str, duration_seconds: float) -> None:
    """`outcome` is the turn's finish reason, `cancelled`, or its error code."""
    agent = agent if agent in _AGENTS else "other"
    if outcome in _FINISHED:
        kind = _FINISHED[outcome]
    elif outcome == "cancelled":
        kind = "interrupted"
    else:
        kind = "error"
        TURN_ERRORS.labels(_code(outcome)).inc()
    TURNS.labels(agent, kind).inc()
    TURN_DURATION.labels(agent).observe(duration_seconds)


def model_tokens(prompt: int, completion: int) -> None:
    MODEL_TOKENS.labels("prompt").inc(max(0, prompt))
    MODEL_TOKENS.labels("completion").inc(max(0, completion))


def first_token(seconds: float) -> None:
    TIME_TO_FIRST_TOKEN.observe(seconds)


def memory_commit(outcome: str, reason: str | None, duration_seconds: float) -> None:
    label = outcome if outcome in _COMMIT_OUTCOMES else "other"
    if label == "failed" and reason == "stale_match":
        label = "stale_match"  # the edit's entry changed under it: its own series, it is common
    COMMITS.labels(label).inc()
    if label != "cancelled" and duration_seconds > 0:  # 0: decided before any transaction
        COMMIT_DURATION.observe(duration_seconds)


def memory_read_failed(source: Literal["flag", "memory"]) -> None:
    MEMORY_READS_FAILED_OPEN.labels(source).inc()


def remember_flag_state(name: str, state: FlagMetricState) -> None:
    if name != "memory":
        return
    for each in _FLAG_STATES:
        MEMORY_FLAG.labels(each).set(1 if each == state else 0)


def rate_limited(caller: Literal["user", "eval", "import"], limit: str) -> None:
    RATE_LIMITED.labels(caller, limit).inc()


def limit_check_failed() -> None:
    LIMIT_CHECKS_FAILED.inc()


def semantic_fallback(reason: SemanticFallback) -> None:
    SEMANTIC_FALLBACKS.labels(reason).inc()


def embedding_jobs(outcome: EmbeddingOutcome, count: int = 1) -> None:
    EMBEDDING_JOBS.labels(outcome).inc(count)


def stream_opened() -> None:
    OPEN_STREAMS.inc()


def stream_closed() -> None:
    OPEN_STREAMS.dec()


def watch_pool(engine: Engine) -> None:
    """Count the engine's checked-out connections in DB_POOL_IN_USE."""

    @event.listens_for(engine, "checkout")
    def _checkout(*_args: Any) -> None:
        DB_POOL_IN_USE.inc()

    @event.listens_for(engine, "checkin")
    def _checkin(*_args: Any) -> None:
        DB_POOL_IN_USE.dec()


# -- exposition ---------------------------------------------------------------------------------


def multiprocess_dir() -> Path | None:
    value = os.environ.get(MULTIPROC_ENV)
    return Path(value) if value else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_dead_workers(directory: Path) -> None:
    """Drop the live gauges of workers that are gone (a crashed worker never marks itself
    dead): their open streams and pool connections are not open any more."""
    for path in directory.glob("gauge_live*_*.db"):
        pid = path.stem.rpartition("_")[2]
        if pid.isdigit() and not _alive(int(pid)):
            multiprocess.mark_process_dead(int(pid), str(directory))  # type: ignore[no-untyped-call]


class _AllWorkers(Collector):
    """Every worker's values from the shared directory, read at each scrape."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def collect(self) -> Iterable[Any]:
        reap_dead_workers(self.directory)
        collector = multiprocess.MultiProcessCollector(None, str(self.directory))  # type: ignore[no-untyped-call]
        metric_families: Iterable[Any] = collector.collect()  # type: ignore[no-untyped-call]
        return metric_families


def exposition_registry() -> CollectorRegistry:
    """The registry to expose: every worker's values in multiprocess mode, else this process's."""
    directory = multiprocess_dir()
    if directory is None:
        return REGISTRY
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_AllWorkers(directory))
    return registry


def exposition() -> bytes:
    return generate_latest(exposition_registry())


def worker_exiting() -> None:
    """A worker that stops cleanly takes its live gauges with it."""
    directory = multiprocess_dir()
    if directory is not None:
        multiprocess.mark_process_dead(os.getpid(), str(directory))  # type: ignore[no-untyped-call]


def prepare_multiprocess_dir(directory: Path) -> None:
    """Empty (or create) the directory workers will write to: values of an earlier run would
    otherwise be summed into this one's."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in directory.glob("*.db"):
        path.unlink()


class MetricsListener:
    """The exposition on its own port (METRICS_PORT), so that it need not be public. Under
    several workers the first to bind the port serves it, with every worker's values."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._server: Any = None

    def start(self) -> bool:
        try:
            self._server, _thread = start_http_server(
                self.port, addr=self.host, registry=exposition_registry()
            )
        except OSError:  # another worker of this service serves the port
            return False
        return True

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
