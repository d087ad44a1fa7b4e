"""`python -m app`: migrate, serve, switch the memory flag, mint dev tokens, erase a user and
apply the retention settings."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from app.settings import Settings, SettingsError, get_settings, load_settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

# `serve` is the embedded, try-it-now mode: memory is on unless the environment says otherwise.
SERVE_DEFAULTS = {"MEMORY_ENABLED": "true", "LOG_FORMAT": "console"}
# On SIGTERM the server stops accepting, lets open turns finish for this long, then cancels
# them (a cancelled turn commits nothing). Without it uvicorn waits for every open stream.
SHUTDOWN_GRACE_SECONDS = 10


def _this_python() -> str:
    """This interpreter as a shell command from here: `.venv/bin/python` when serve runs from
    the repository's venv, so the printed command works outside an activated venv too."""
    executable = Path(sys.executable)
    try:
        return str(executable.relative_to(Path.cwd()))
    except ValueError:
        return str(executable)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


@contextmanager
def _database(settings: Settings, *, migrating: bool = False) -> Iterator[Engine]:
    """The command's engine, with the service's limits (a migration's longer ones when
    migrating), disposed when the command is done with it."""
    from app.db.engine import build_engine, database_limits, migration_limits

    limits = migration_limits(settings) if migrating else database_limits(settings)
    engine = build_engine(settings.database_url, limits)
    try:
        yield engine
    finally:
        engine.dispose()


# -- commands -------------------------------------------------------------------------------


def cmd_migrate(_args: argparse.Namespace) -> int:
    from app.db.migrate import head_revision, upgrade

    with _database(load_settings(), migrating=True) as engine:
        upgrade(engine)
    print(f"database migrated to {head_revision()}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.db.migrate import upgrade
    from app.http_protocol import PROTOCOL_PATH
    from app.memory.flags import MEMORY_FLAG, seed_flag

    for name, value in SERVE_DEFAULTS.items():
        os.environ.setdefault(name, value)
    get_settings.cache_clear()
    settings = get_settings()  # validates, and creates the dev secret file when needed
    with _database(settings, migrating=True) as engine:
        upgrade(engine)
        # Stored, not just in this process's environment: `flags get` and every other process
        # on this database then report the flag this server follows.
        seed_flag(engine, MEMORY_FLAG, settings.memory_enabled, updated_by="serve")
    own_metrics = _share_metrics() if args.workers > 1 else None
    url = f"http://{args.host}:{args.port}"
    print(
        f"Serving agent memory on {url}  (auth: {settings.auth_mode}, "
        f"model: {'offline' if settings.offline_model else settings.llm_model})"
    )
    if settings.auth_mode == "dev":
        print(f"Get a token:  TOKEN=$({_this_python()} -m app token --sub alice)")
    sys.stdout.flush()
    # Each worker is its own process (its own pool, threads and flag cache) on one socket.
    try:
        uvicorn.run(
            "app.main:app",
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            workers=args.workers,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
            http=PROTOCOL_PATH,  # bounded request heads and bodies (app/http_protocol.py)
        )
    finally:
        if own_metrics is not None:
            shutil.rmtree(own_metrics, ignore_errors=True)
    return 0


def _share_metrics() -> Path | None:
    """Workers write their metrics to one directory that any of them exposes summed (the
    exposition is every worker's, not one's at random). An operator's PROMETHEUS_MULTIPROC_DIR
    is emptied first (values of an earlier run would be added to this one's); without one, a
    fresh directory is made, returned for removal when serve ends."""
    from app.telemetry.metrics import MULTIPROC_ENV, prepare_multiprocess_dir

    given = os.environ.get(MULTIPROC_ENV)
    directory = Path(given) if given else Path(tempfile.mkdtemp(prefix="amem-metrics-"))
    prepare_multiprocess_dir(directory)
    os.environ[MULTIPROC_ENV] = str(directory.resolve())  # the spawned workers inherit it
    return None if given else directory


def _actor() -> str:
    """Who runs this command, for the audit log: `cli:<os user>`."""
    try:
        return f"cli:{getpass.getuser()}"[:128]
    except (OSError, KeyError):  # no passwd entry (a container's arbitrary uid)
        return f"cli:uid-{os.getuid()}"


def cmd_flags(args: argparse.Namespace) -> int:
    from app.memory.flags import KNOWN_FLAGS, read_flag, write_flag

    settings = load_settings()
    try:
        with _database(settings) as engine:
            if args.flags_command == "set":
                state = write_flag(engine, args.name, args.value == "on", updated_by=_actor())
                print(f"{state.name}: {'on' if state.enabled else 'off'} (database)")
                return 0
            for name in KNOWN_FLAGS:
                default = settings.memory_enabled if name == "memory" else False
                state = read_flag(engine, name, default)
                print(f"{state.name}: {'on' if state.enabled else 'off'} ({state.source})")
            return 0
    except Exception as error:
        # Never a guessed default: a server that cannot read the table runs with memory off.
        print(
            f"error: the flags cannot be read or written ({type(error).__name__}); "
            "a running service keeps memory off until they can",
            file=sys.stderr,
        )
        return 1


def cmd_audit(args: argparse.Namespace) -> int:
    from app.operators import audit

    try:
        with _database(load_settings()) as engine, engine.connect() as connection:
            entries = audit.entries(connection, limit=args.limit, before=args.before)
    except Exception as error:
        print(f"error: the audit log cannot be read ({type(error).__name__})", file=sys.stderr)
        return 1
    for entry in entries:
        print(
            json.dumps(
                {
                    "id": entry.id,
                    "created_at": entry.created_at.isoformat().replace("+00:00", "Z"),
                    "actor": entry.actor,
                    "action": entry.action,
                    "target": entry.target,
                    "before": entry.before,
                    "after": entry.after,
                },
                ensure_ascii=False,
            )
        )
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from app.identity.tokens import DevTokens, subject_problem

    settings: Settings = load_settings()
    if settings.auth_mode != "dev":
        return _fail("dev tokens exist only with AUTH_MODE=dev")
    problem = subject_problem(args.sub)
    if problem is not None:
        return _fail(f"--sub {problem}")
    settings = settings.with_dev_secret(create=False)
    if settings.auth_dev_secret is None:  # pragma: no cover - with_dev_secret sets or raises
        return _fail("no dev signing key")
    tokens = DevTokens(
        settings.auth_dev_secret.get_secret_value(),
        ttl_seconds=args.ttl or settings.auth_dev_token_ttl_seconds,
        leeway_seconds=settings.auth_leeway_seconds,
    )
    print(tokens.issue(args.sub, args.role))
    return 0


def cmd_users_erase(args: argparse.Namespace) -> int:
    from app.conversations.service import ConversationService
    from app.db import erasure_audit as audit
    from app.erasure.service import ErasureService
    from app.identity.tokens import subject_problem
    from app.runtime import build_memory_service

    problem = subject_problem(args.subject)
    if problem is not None:
        return _fail(f"SUBJECT {problem}")
    settings = get_settings()
    try:
        with _database(settings) as engine:
            memory = build_memory_service(settings, engine)
            erasure = ErasureService(engine, memory, ConversationService(engine))
            report = erasure.erase(args.subject)
    except Exception as error:
        print(
            f"error: the erasure did not complete ({type(error).__name__}); "
            "run the same command again to finish it",
            file=sys.stderr,
        )
        return 1
    others = "".join(f", {name}: {count}" for name, count in report.others.items())
    print(
        f"erased: memory documents: {report.memory_documents}, "
        f"conversations: {report.conversations}{others}"
    )
    if audit.is_process_key(memory.erasure_key):
        print(
            "warning: no ERASURE_HASH_KEY (nor TELEMETRY_HASH_KEY) is set: the audit row's hash "
            "matches no other process's, and a turn running on a server is not stopped by it"
        )
    if not report.log_truncated:
        print(
            "note: the SQLite write-ahead log is still in use; it is emptied at its next checkpoint"
        )
    return 0


def cmd_purge(_args: argparse.Namespace) -> int:
    from app.conversations.service import ConversationService
    from app.erasure.retention import RetentionPolicy, purge
    from app.runtime import build_memory_service
    from app.sessions.store import delete_ended

    settings = get_settings()
    policy = RetentionPolicy(
        conversation_days=settings.retention_conversation_days,
        history_days=settings.retention_history_days,
        batch_size=settings.retention_batch_size,
        temporary_hours=settings.temporary_chat_hours,
    )
    try:
        with _database(settings) as engine:
            memory = build_memory_service(settings, engine)
            report = purge(engine, memory, ConversationService(engine), policy)
            ended_sessions = delete_ended(engine)
    except Exception as error:
        print(
            f"error: the purge stopped ({type(error).__name__}); what it removed stays removed, "
            "run it again to go on",
            file=sys.stderr,
        )
        return 1
    print(
        f"purged: conversations: {report.conversations} "
        f"(RETENTION_CONVERSATION_DAYS={policy.conversation_days or 'off'}), "
        f"history entries: {report.history_entries} "
        f"(RETENTION_HISTORY_DAYS={policy.history_days or 'off'}), "
        f"temporary chats: {report.temporary_chats} "
        f"(TEMPORARY_CHAT_HOURS={policy.temporary_hours}), "
        f"expired memory entries: {report.expired_entries}"
    )
    print(f"purged: ended browser sessions: {ended_sessions}")
    if report.unfinished_erasures:
        print(
            f"warning: {report.unfinished_erasures} erasure(s) did not finish; "
            "run `python -m app users erase SUBJECT` again for them"
        )
    return 0


def cmd_embeddings(args: argparse.Namespace) -> int:
    """Backfill, re-embed or report the vectors of semantic search (app/embeddings/)."""
    import asyncio

    from app.embeddings.backfill import Progress, backfill, status
    from app.embeddings.setup import build_embeddings

    settings = get_settings()
    if settings.embedding_base_url is None:
        return _fail("EMBEDDING_BASE_URL is not set: semantic search is off")
    with _database(settings) as engine:
        if args.embeddings_command == "status":
            for name, value in status(engine, settings).items():
                print(f"{name}: {value}")
            return 0
        working = settings.model_copy(update={"embedding_worker": True})
        embeddings = build_embeddings(working, engine)
        if embeddings is None or embeddings.worker is None:
            return _fail(f"{engine.dialect.name} stores no vectors: search there is lexical only")
        worker = embeddings.worker

        def report(progress: Progress) -> None:
            print(
                f"queued {progress.queued}, embedded {progress.embedded}, failed {progress.failed}",
                flush=True,
            )

        async def run() -> Progress:
            try:
                return await backfill(
                    worker,
                    reembed=args.embeddings_command == "reembed",
                    report=report,
                    everything=bool(getattr(args, "all", False)),
                )
            finally:
                await embeddings.aclose()

        done = asyncio.run(run())
    if done.waiting:
        print(f"{done.waiting} job(s) wait for a retry: the servers' workers will finish them")
    return 0


# -- parser ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m app",
        description="Agent memory backend. Settings come from the environment and .env "
        "(see .env.example).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    migrate = commands.add_parser(
        "migrate",
        help="bring DATABASE_URL to the latest migration",
        description="Bring the database named by DATABASE_URL to the latest migration.",
    )
    migrate.set_defaults(handler=cmd_migrate)

    serve = commands.add_parser(
        "serve",
        help="migrate if needed, then serve the API",
        description="Migrate the database if needed, then serve app.main:app with uvicorn. "
        "Defaults: SQLite under ./data, dev auth with a secret kept in ./data/dev-secret, "
        "the offline model, MEMORY_ENABLED=true and LOG_FORMAT=console unless set. "
        "The memory flag is stored in the database on first start (MEMORY_ENABLED), so that "
        "`flags get` and every process on the database report the flag this server follows.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn's log level (default info)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("WEB_CONCURRENCY", "1") or "1"),
        help="worker processes (default WEB_CONCURRENCY, else 1); one process per core "
        "is the usual choice, see docs/performance.md",
    )
    serve.set_defaults(handler=cmd_serve)

    flags = commands.add_parser(
        "flags",
        help="read or switch feature flags",
        description="Read or switch the feature flags stored in the database.",
    )
    flag_commands = flags.add_subparsers(dest="flags_command", required=True, metavar="ACTION")
    flag_get = flag_commands.add_parser(
        "get",
        help="print every flag and where it comes from",
        description="Print every flag and its source.",
    )
    flag_get.set_defaults(handler=cmd_flags)
    flag_set = flag_commands.add_parser(
        "set",
        help="switch a flag: set memory on|off",
        description="Switch a flag for every replica (they follow within FLAG_CACHE_SECONDS). "
        "Turning memory off deletes nothing.",
    )
    flag_set.add_argument("name", choices=["memory"], help="the flag")
    flag_set.add_argument("value", choices=["on", "off"], help="the new value")
    flag_set.set_defaults(handler=cmd_flags)

    audit = commands.add_parser(
        "audit",
        help="print the audit log, newest first (one JSON object a line)",
        description="Print operator actions (flag switches, ...) newest first: id, created_at, "
        "actor, action, target, before, after.",
    )
    audit.add_argument("--limit", type=int, default=50, help="entries to print (default 50)")
    audit.add_argument("--before", type=int, default=None, help="only entries older than this id")
    audit.set_defaults(handler=cmd_audit)

    token = commands.add_parser(
        "token",
        help="print a dev token (AUTH_MODE=dev)",
        description="Print an HS256 dev token signed with the dev secret (AUTH_MODE=dev only).",
    )
    token.add_argument("--sub", required=True, help="the subject (memory owner), e.g. alice")
    token.add_argument(
        "--role", action="append", default=[], help="a role to grant, e.g. operator (repeatable)"
    )
    token.add_argument("--ttl", type=int, default=None, help="lifetime in seconds")
    token.set_defaults(handler=cmd_token)

    users = commands.add_parser(
        "users",
        help="erase a user",
        description="Operator actions on one user.",
    )
    user_commands = users.add_subparsers(dest="users_command", required=True, metavar="ACTION")
    erase = user_commands.add_parser(
        "erase",
        help="erase every row about SUBJECT (one audit row stays)",
        description="Erase every row about SUBJECT: memory, history, proposals, settings, "
        "conversations, messages and their search index entries, and every other table keyed "
        "by subject. One audit row stays: a keyed hash of the subject (ERASURE_HASH_KEY) and "
        "when. Running it again finishes an erasure that was interrupted.",
    )
    erase.add_argument("subject", metavar="SUBJECT", help="the token's `sub` of the user")
    erase.set_defaults(handler=cmd_users_erase)

    purge = commands.add_parser(
        "purge",
        help="apply the retention settings",
        description="Delete conversations inactive for RETENTION_CONVERSATION_DAYS and memory "
        "history entries older than RETENTION_HISTORY_DAYS (0: kept), in batches of "
        "RETENTION_BATCH_SIZE. Idempotent and safe on every replica at once (e.g. from cron).",
    )
    purge.set_defaults(handler=cmd_purge)

    embeddings = commands.add_parser(
        "embeddings",
        help="backfill or re-embed the vectors of semantic search",
        description="Semantic search (EMBEDDING_BASE_URL; docs/conversation-search.md): make "
        "the vectors of stored messages in this process, sharing the queue with the servers.",
    )
    embedding_commands = embeddings.add_subparsers(
        dest="embeddings_command", required=True, metavar="ACTION"
    )
    embedding_commands.add_parser(
        "backfill",
        help="embed every message that has no vector yet",
        description="Queue and embed every stored message without a vector (e.g. after "
        "turning semantic search on, or messages a worker missed). Idempotent.",
    ).set_defaults(handler=cmd_embeddings)
    reembed = embedding_commands.add_parser(
        "reembed",
        help="embed again every message whose vector is of another model",
        description="After EMBEDDING_MODEL changed: vectors record their model, and a search "
        "compares only the configured model's, so until this ends search finds fewer messages "
        "by meaning (never fewer by words).",
    )
    reembed.add_argument(
        "--all",
        action="store_true",
        help="embed every message again, the configured model's too (e.g. after pgvector was "
        "installed: the vectors move into its column)",
    )
    reembed.set_defaults(handler=cmd_embeddings)
    embedding_commands.add_parser(
        "status",
        help="print how many messages have vectors and how many wait",
        description="Messages, vectors of the configured model and of others, queued jobs, "
        "and where vectors are stored (pgvector, bytes, none).",
    ).set_defaults(handler=cmd_embeddings)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except SettingsError as error:
        return _fail(str(error))
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
