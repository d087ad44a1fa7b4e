"""The UI message stream read by the real Vercel AI SDK (`ai@6`, pinned in tests/node).

Runs tests/node/ui-stream.test.mjs with `node --test` against the real server. The test command
(scripts/test) runs `npm ci` in tests/node first; without node_modules this test fails, never
skips, because the proof it gives is exactly the one that would be missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import token_for

pytestmark = pytest.mark.node

NODE_DIR = Path(__file__).resolve().parents[1] / "node"


def _pinned_ai_version() -> str:
    lock = json.loads((NODE_DIR / "package-lock.json").read_text())
    return str(lock["packages"]["node_modules/ai"]["version"])


def test_the_ai_sdk_parses_the_stream_and_use_chat_runs_on_it(server: str) -> None:
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
    assert "# fail 0" in result.stdout or "ℹ fail 0" in result.stdout, result.stdout
