// One round trip with the TypeScript MCP SDK's own client (@modelcontextprotocol/sdk from the
// lock file) over Streamable HTTP: list the tools, save an entry with memory_update, read it
// back with memory_view, and see a refused edit come back as a tool error with the API's code.
// Run by tests/e2e/test_mcp_typescript_client.py, which starts the backend and passes, in env:
//   BACKEND_URL, BACKEND_TOKEN (a user with empty memory).

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const BASE = process.env.BACKEND_URL;
const TOKEN = process.env.BACKEND_TOKEN;
assert.ok(BASE && TOKEN, "BACKEND_URL and BACKEND_TOKEN are required");

async function connect(token) {
  const client = new Client({ name: "node-round-trip", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`${BASE}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return client;
}

test("the TypeScript SDK lists the tools and round-trips a memory change", async () => {
  const client = await connect(TOKEN);
  try {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((tool) => tool.name).sort(),
      ["conversation_search", "memory_update", "memory_view"]);
    const update = tools.find((tool) => tool.name === "memory_update");
    assert.deepEqual(update.inputSchema.required, ["operations"]);

    const saved = await client.callTool({
      name: "memory_update",
      arguments: { operations: [{ target: "user", action: "add", content: "Likes tea." }] },
    });
    assert.notEqual(saved.isError, true);
    assert.equal(saved.structuredContent.status, "committed");

    const view = await client.callTool({ name: "memory_view", arguments: {} });
    assert.deepEqual(view.structuredContent.user.entries, ["Likes tea."]);
    assert.equal(JSON.parse(view.content[0].text).user.entries[0], "Likes tea.");

    const refused = await client.callTool({
      name: "memory_update",
      arguments: { operations: [{ target: "user", action: "remove", match: "coffee" }] },
    });
    assert.equal(refused.isError, true);
    assert.equal(refused.structuredContent.error.code, "match_not_found");
  } finally {
    await client.close();
  }
});

test("a request without a token is refused with 401 before any protocol message", async () => {
  const client = new Client({ name: "node-no-token", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`${BASE}/mcp`));
  await assert.rejects(client.connect(transport), /401|Unauthorized|invalid_token|missing/i);
});
