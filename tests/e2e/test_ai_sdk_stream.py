"""The UI message stream read by the real Vercel AI SDK (`ai@6`, pinned in tests/node).

Runs tests/node/ui-stream.test.mjs with `node --test` against the real server. The test command
(scripts/test) runs `npm ci` in tests/node first; without node_modules this test fails, never
skips, because the proof it gives is exactly the one that would be missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.main import create_app
from app.offline.transport import ChatCompletionsTransport
from app.offline.wire import ChatRequest
from tests.e2e.conftest import e2e_settings, sqlite_file, token_for
from tests.support.scripted import Reply, Text, memory_call
from tests.support.server import live_server

pytestmark = pytest.mark.node

NODE_DIR = Path(__file__).resolve().parents[1] / "node"


def _pinned_ai_version() -> str:
    lock = json.loads((NODE_DIR / "package-lock.json").read_text())
    return str(lock["packages"]["node_modules/ai"]["version"])


async def stage_then_talk_long(request: ChatRequest) -> Reply:
    """Every turn stages one memory change, then streams a long answer (time to press Stop)."""
    if request.messages and request.messages[-1].get("role") == "tool":
        return Text(" ".join(f"word{number}" for number in range(400)))
    return memory_call({"target": "user", "action": "add", "content": "The user likes tea."})


@pytest.fixture
def staging_server(tmp_path: Path) -> Iterator[str]:
    app = create_app(
        e2e_settings(sqlite_file(tmp_path)),
        model_transport=ChatCompletionsTransport(stage_then_talk_long, delay_seconds=0.04),
    )
    with live_server(app) as base:
        yield base


def test_the_ai_sdk_parses_the_stream_and_use_chat_runs_on_it(
    server: str, staging_server: str
) -> None:
    """ai@6's own parser, schema, message assembly and AbstractChat accept the backend's stream."""
    node = shutil.which("node")
    assert node is not None, "Node.js is needed for this test (Node 20 runs ai@6)"
    installed = NODE_DIR / "node_modules" / "ai" / "package.json"
    assert installed.exists(), "tests/node/node_modules is missing: run `npm ci` in tests/node"
    version = json.loads(installed.read_text())["version"]
    assert version == _pinned_ai_version(), "node_modules does not match the lock: run `npm ci`"
    assert version.startswith("6."), "the lock must pin ai@6 (ai@7 needs Node 22)"

    env = {
        **os.environ,
        "BACKEND_URL": server,
        "BACKEND_TOKEN": token_for(server, "sdk-user"),
        "BACKEND_TOKEN_STOP": token_for(server, "sdk-stopper"),
        "STAGING_URL": staging_server,
        "STAGING_TOKEN": token_for(staging_server, "sdk-staged"),
    }
    result = subprocess.run(
        [node, "--test", "--test-reporter=spec", "ui-stream.test.mjs"],
        cwd=NODE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, f"node --test failed:\n{result.stdout}\n{result.stderr}"
    summary = dict(
        re.findall(r"^ℹ (tests|pass|fail|skipped|todo|cancelled) (\d+)$", result.stdout, re.M)
    )
    assert summary.get("tests") == summary.get("pass") != "0", result.stdout
    assert summary.get("skipped") == summary.get("todo") == "0", result.stdout
