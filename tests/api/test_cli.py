"""`python -m app` in subprocesses against a temporary SQLite database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jwt
import pytest

from app.db.engine import build_engine
from app.db.migrate import current_revision, head_revision
from app.identity.tokens import DEV_AUDIENCE, DEV_ISSUER
from app.memory.flags import read_flag
from tests.support.server import free_port

REPO = Path(__file__).resolve().parents[2]
SUBCOMMANDS = [
    [],
    ["migrate"],
    ["serve"],
    ["flags"],
    ["flags", "get"],
    ["flags", "set"],
    ["audit"],
    ["token"],
    ["users"],
    ["users", "erase"],
    ["purge"],
]


def _environment(workdir: Path, **extra: str) -> dict[str, str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AUTH_", "DATABASE_", "MEMORY_", "LLM_", "FLAG_"))
    }
    environment.update(
        PYTHONPATH=str(REPO),
        DATABASE_URL=f"sqlite:///{workdir / 'cli.db'}",
        AUTH_DEV_SECRET_FILE=str(workdir / "dev-secret"),
        LOG_FORMAT="console",
    )
    environment.update(extra)
    return environment


def run_cli(workdir: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        cwd=workdir,
        env=_environment(workdir, **extra),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("args", SUBCOMMANDS, ids=["top", *("_".join(a) for a in SUBCOMMANDS[1:])])
def test_every_command_has_help(args: list[str], tmp_path: Path) -> None:
    """`python -m app ... --help` works for every command, without touching a database."""
    result = run_cli(tmp_path, *args, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m app")
    assert not (tmp_path / "cli.db").exists()


def test_migrate_flags_and_token(tmp_path: Path) -> None:
    """migrate brings the database to head; flags set/get round-trip through the database;
    token prints a dev token that verifies with the server's secret."""
    (tmp_path / "dev-secret").write_text("s" * 48 + "\n")  # what `serve` made here
    migrated = run_cli(tmp_path, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert str(head_revision()) in migrated.stdout
    engine = build_engine(f"sqlite:///{tmp_path / 'cli.db'}")
    try:
        assert current_revision(engine) == head_revision()
        assert run_cli(tmp_path, "flags", "get").stdout.strip() == "memory: off (default)"
        switched = run_cli(tmp_path, "flags", "set", "memory", "on")
        assert switched.returncode == 0, switched.stderr
        assert read_flag(engine, "memory", False).enabled is True
        assert run_cli(tmp_path, "flags", "get").stdout.strip() == "memory: on (database)"
        run_cli(tmp_path, "flags", "set", "memory", "off")
        assert read_flag(engine, "memory", True).enabled is False
    finally:
        engine.dispose()

    issued = run_cli(tmp_path, "token", "--sub", "alice", "--role", "operator")
    assert issued.returncode == 0, issued.stderr
    secret = (tmp_path / "dev-secret").read_text().strip()
    assert len(secret) >= 32
    claims = jwt.decode(
        issued.stdout.strip(),
        secret,
        algorithms=["HS256"],
        issuer=DEV_ISSUER,
        audience=DEV_AUDIENCE,
    )
    assert claims["sub"] == "alice" and claims["roles"] == ["operator"]


def test_bad_arguments_fail_cleanly(tmp_path: Path) -> None:
    """Wrong flag values and dev tokens in oidc mode fail with a message and a non-zero exit."""
    bad_value = run_cli(tmp_path, "flags", "set", "memory", "maybe")
    assert bad_value.returncode == 2 and "invalid choice" in bad_value.stderr
    oidc = run_cli(
        tmp_path,
        "token",
        "--sub",
        "alice",
        AUTH_MODE="oidc",
        AUTH_JWKS_URL="http://127.0.0.1:9/jwks",
        AUTH_ISSUER="i",
        AUTH_AUDIENCE="a",
    )
    assert oidc.returncode != 0 and "AUTH_MODE=dev" in oidc.stderr


@pytest.mark.parametrize(
    ("subject", "reason"),
    [
        ("ali\x07ce", "control characters"),
        ("alice\n", "control characters"),
        ("a" * 129, "1 to 128 characters"),
        ("   ", "only whitespace"),
    ],
    ids=["bell", "newline", "129-characters", "only-spaces"],
)
def test_token_refuses_a_subject_the_service_would_refuse(
    subject: str, reason: str, tmp_path: Path
) -> None:
    """`token --sub` applies the token check's rule: a clear error, exit 2, no token printed."""
    result = run_cli(tmp_path, "token", "--sub", subject)
    assert result.returncode == 2, result
    assert result.stdout == ""
    assert result.stderr.startswith("error: --sub must") and reason in result.stderr


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({"AUTH_MODE": "bogus"}, "AUTH_MODE: Input should be 'dev' or 'oidc'"),
        ({"AUTH_DEV_SECRET": "short"}, "AUTH_DEV_SECRET must be at least 32 characters"),
        ({"AUTH_MODE": "oidc"}, "AUTH_MODE=oidc needs AUTH_JWKS_URL"),
    ],
    ids=["unknown_mode", "short_secret", "oidc_without_jwks"],
)
def test_serve_refuses_invalid_settings(
    environment: dict[str, str], expected: str, tmp_path: Path
) -> None:
    """`serve` with invalid settings exits non-zero with a one-line reason, and serves nothing."""
    result = run_cli(tmp_path, "serve", "--port", str(free_port()), **environment)
    assert result.returncode != 0
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_runs_the_embedded_defaults(tmp_path: Path) -> None:
    """`serve` migrates SQLite under ./data, generates the dev secret file, turns memory on by
    default, prints the URL and how to get a token, and serves the API."""
    port = free_port()
    environment = _environment(tmp_path)
    del environment["DATABASE_URL"], environment["AUTH_DEV_SECRET_FILE"]  # embedded defaults
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--log-level", "warning"],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()[1]
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve did not become ready"
            time.sleep(0.1)  # poll interval only; the outcome is checked above
        assert (tmp_path / "data" / "agent_memory.db").exists()
        assert (tmp_path / "data" / "dev-secret").exists()
        token = subprocess.run(
            [sys.executable, "-m", "app", "token", "--sub", "alice"],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        headers = {"Authorization": f"Bearer {token}"}
        response = httpx.post(
            f"{base}/v1/memory/operations",
            headers=headers,
            json={"operations": [{"target": "user", "action": "add", "content": "Prefers tea."}]},
        )
        assert response.status_code == 200, response.text
    finally:
        process.terminate()
        stdout, _stderr = process.communicate(timeout=30)
    assert base in stdout
    # The banner's command runs as printed: this interpreter, not a bare `python`.
    assert f"TOKEN=$({sys.executable} -m app token --sub alice)" in stdout


def test_flags_get_reports_the_flag_the_served_process_follows(tmp_path: Path) -> None:
    """`serve` turns memory on by default in its own environment only; it stores that flag in
    the database, so `flags get` from another shell (without MEMORY_ENABLED) reports the same
    effective flag as the server's /info, and a later `flags set` moves both together."""
    port = free_port()
    environment = _environment(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--log-level", "warning"],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"

    def served_flag() -> object:
        return httpx.get(f"{base}/info", timeout=10).json()["memory_enabled"]

    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()[1]
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve did not become ready"
            time.sleep(0.1)  # poll interval only; the outcome is checked above
        assert "MEMORY_ENABLED" not in environment  # the CLI's shell has no memory setting
        assert served_flag() is True
        assert run_cli(tmp_path, "flags", "get").stdout.strip() == "memory: on (database)"

        assert run_cli(tmp_path, "flags", "set", "memory", "off").returncode == 0
        assert run_cli(tmp_path, "flags", "get").stdout.strip() == "memory: off (database)"
        deadline = time.monotonic() + 30  # the server follows within FLAG_CACHE_SECONDS
        while served_flag() is not False:
            assert time.monotonic() < deadline, "the server never followed the stored flag"
            time.sleep(0.1)  # poll interval only
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_flags_get_fails_clearly_when_the_database_cannot_be_read(tmp_path: Path) -> None:
    """With the database unreachable, `flags get` exits non-zero with a reason instead of
    printing MEMORY_ENABLED as if it were the flag (a server there runs with memory off)."""
    down = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/down"
    result = run_cli(tmp_path, "flags", "get", DATABASE_URL=down, MEMORY_ENABLED="true")
    assert result.returncode == 1
    assert "cannot be read" in result.stderr and "Traceback" not in result.stderr
    assert "memory: on" not in result.stdout


def test_serve_bounds_the_shutdown_grace_of_open_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`serve` gives uvicorn a graceful-shutdown timeout: on SIGTERM an open turn's stream is
    cancelled once it has passed (tests/unit/test_sse_response.py shows the stream then ends),
    instead of the server waiting for every open stream without a bound."""
    import uvicorn

    from app.cli import SHUTDOWN_GRACE_SECONDS, main
    from app.settings import get_settings

    for name, value in _environment(tmp_path, MEMORY_ENABLED="true").items():
        monkeypatch.setenv(name, value)  # restored after the test, unlike serve's own defaults
    served: dict[str, object] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.update(options))
    try:
        assert main(["serve", "--port", str(free_port())]) == 0
    finally:
        get_settings.cache_clear()
    assert served["timeout_graceful_shutdown"] == SHUTDOWN_GRACE_SECONDS > 0


def test_token_outside_the_servers_directory_makes_no_key_and_says_where(tmp_path: Path) -> None:
    """`token` run where there is no dev signing key fails, naming the file it looked for,
    and creates none: a token signed with a new key would be refused by the server."""
    environment = _environment(tmp_path)
    del environment["AUTH_DEV_SECRET_FILE"]  # the default, relative to the working directory
    done = subprocess.run(
        [sys.executable, "-m", "app", "token", "--sub", "alice"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout
    assert done.stdout == ""
    assert str(tmp_path / "data" / "dev-secret") in done.stderr
    assert "AUTH_DEV_SECRET_FILE" in done.stderr
    assert not (tmp_path / "data").exists()


def test_invalid_settings_are_reported_one_line_per_problem(tmp_path: Path) -> None:
    """Two invalid settings: the command stops with a first line, then one line for each."""
    done = run_cli(tmp_path, "flags", "get", MAX_MESSAGE_CHARS="0", AUTH_MODE="nope")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0] == "error: Invalid settings:"
    assert sorted(line.split(":")[0].strip() for line in lines[1:]) == [
        "AUTH_MODE",
        "MAX_MESSAGE_CHARS",
    ]


@pytest.mark.parametrize(
    ("url", "extra"),
    [
        ("mysql+pymysql://root@127.0.0.1:3306/app", "mysql"),
        ("mariadb+pymysql://root@127.0.0.1/app", "mysql"),
        ("mssql+pyodbc://u:p@host/db?driver=ODBC+Driver+18+for+SQL+Server", "sqlserver"),
        ("postgresql+psycopg://postgres@127.0.0.1/app", ""),
        ("sqlite:///./data/agent_memory.db", ""),
        ("", ""),
    ],
    ids=["mysql", "mariadb", "sqlserver", "postgres", "sqlite", "unset"],
)
@pytest.mark.parametrize("where", ["environment", "dotenv"])
def test_serve_installs_the_driver_the_configured_database_needs(
    url: str, extra: str, where: str, tmp_path: Path
) -> None:
    """`scripts/serve` installs the package with the extra its DATABASE_URL's driver needs,
    read from the environment or from .env, so a MariaDB URL does not die on a missing
    module."""
    environment = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    if where == "environment":
        environment["DATABASE_URL"] = url
    else:
        (tmp_path / ".env").write_text(f"LOG_LEVEL=INFO\nDATABASE_URL='{url}'\n")
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "_extras.sh")],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout.strip() == extra
    assert (
        'source scripts/_venv.sh "$(bash scripts/_extras.sh)"'
        in (REPO / "scripts" / "serve").read_text()
    )
