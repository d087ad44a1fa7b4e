"""The MCP server read by the TypeScript SDK's own client (`@modelcontextprotocol/sdk`, pinned in
tests/node): one round trip over Streamable HTTP through the real server.

Runs tests/node/mcp.test.mjs with `node --test`. Like tests/e2e/test_ai_sdk_stream.py it fails,
never skips, when tests/node/node_modules is missing (`npm ci` in tests/node installs it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import token_for

pytestmark = pytest.mark.node

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
PACKAGE = "@modelcontextprotocol/sdk"


def test_the_typescript_sdk_round_trips_through_mcp(server: str) -> None:
    """The other official SDK lists the tools, saves and reads an entry, and gets a refused
    edit back as a tool error with the API's code; without a token it is refused."""
    node = shutil.which("node")
    assert node is not None, "Node.js is needed for this test"
    installed = NODE_DIR / "node_modules" / PACKAGE / "package.json"
    assert installed.exists(), "tests/node/node_modules is missing: run `npm ci` in tests/node"
    lock = json.loads((NODE_DIR / "package-lock.json").read_text())
    pinned = lock["packages"][f"node_modules/{PACKAGE}"]["version"]
    assert json.loads(installed.read_text())["version"] == pinned, "run `npm ci` in tests/node"

    env = {**os.environ, "BACKEND_URL": server, "BACKEND_TOKEN": token_for(server, "mcp-node")}
    result = subprocess.run(
        [node, "--test", "--test-reporter=spec", "mcp.test.mjs"],
        cwd=NODE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"node --test failed:\n{result.stdout}\n{result.stderr}"
    summary = dict(
        re.findall(r"^ℹ (tests|pass|fail|skipped|todo|cancelled) (\d+)$", result.stdout, re.M)
    )
    assert summary.get("tests") == summary.get("pass") == "2", result.stdout
