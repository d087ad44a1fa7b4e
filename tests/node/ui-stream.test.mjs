// The backend's UI message stream, read by the real Vercel AI SDK (ai@6 from the lock file):
// its own parser and schema, its message assembly, and the AbstractChat that `useChat` wraps.
// Run by tests/e2e/test_ai_sdk_stream.py, which starts the backend and passes, in env:
//   BACKEND_URL, BACKEND_TOKEN (a user with empty memory), BACKEND_TOKEN_STOP (another user),
//   STAGING_URL, STAGING_TOKEN: a server whose scripted model stages a memory change in every
//   turn and then streams a long answer.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AbstractChat,
  DefaultChatTransport,
  parseJsonEventStream,
  readUIMessageStream,
  uiMessageChunkSchema,
} from "ai";

const BASE = process.env.BACKEND_URL;
const TOKEN = process.env.BACKEND_TOKEN;
const STOP_TOKEN = process.env.BACKEND_TOKEN_STOP;
const STAGING = process.env.STAGING_URL;
const STAGING_TOKEN = process.env.STAGING_TOKEN;
assert.ok(BASE && TOKEN && STOP_TOKEN && STAGING && STAGING_TOKEN,
  "BACKEND_URL, BACKEND_TOKEN, BACKEND_TOKEN_STOP, STAGING_URL and STAGING_TOKEN are required");

const REMEMBER = "remember that I prefer short answers";
const auth = (token) => ({ authorization: `Bearer ${token}` });

function userMessage(text, id = `u-${Math.random().toString(36).slice(2)}`) {
  return { id, role: "user", parts: [{ type: "text", text }] };
}

async function memoryOf(token, base = BASE) {
  const response = await fetch(`${base}/v1/memory`, { headers: auth(token) });
  assert.equal(response.status, 200);
  return response.json();
}

async function forget(token) {
  const response = await fetch(`${BASE}/v1/memory`, { method: "DELETE", headers: auth(token) });
  assert.equal(response.status, 204);
}

// What @ai-sdk/react's useChat keeps in React state, kept in plain fields instead.
class PlainChatState {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(message) { this.messages = this.messages.concat(message); }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), this.snapshot(message), ...this.messages.slice(index + 1)];
  }
  snapshot(thing) { return structuredClone(thing); }
}

class PlainChat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new PlainChatState() });
  }
}

test("the raw stream: v1 header, every chunk accepted by uiMessageChunkSchema, [DONE] last", async () => {
  await forget(TOKEN);
  const response = await fetch(`${BASE}/v1/chat`, {
    method: "POST",
    headers: { ...auth(TOKEN), "content-type": "application/json", "x-vercel-ai-ui-message-stream": "v1" },
    body: JSON.stringify({ id: "raw-chat", messages: [userMessage(REMEMBER)], trigger: "submit-message" }),
  });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("x-vercel-ai-ui-message-stream"), "v1");
  assert.match(response.headers.get("content-type"), /^text\/event-stream/);

  const [forText, forParser] = response.body.tee();
  const raw = new Response(forText).text();
  const chunks = [];
  for await (const result of parseJsonEventStream({ stream: forParser, schema: uiMessageChunkSchema })) {
    assert.ok(result.success, `a chunk the AI SDK rejects: ${result.success ? "" : result.error}`);
    chunks.push(result.value);
  }
  const body = await raw;
  assert.ok(body.trimEnd().endsWith("data: [DONE]"), "the stream ends with data: [DONE]");

  const types = chunks.map((chunk) => chunk.type);
  assert.equal(types[0], "start");
  assert.equal(types.at(-1), "finish");
  assert.equal(chunks.at(-1).finishReason, "stop");
  for (const type of ["start-step", "text-start", "text-delta", "text-end", "tool-input-available",
    "tool-output-available", "data-memory", "finish-step"]) {
    assert.ok(types.includes(type), `missing ${type} in ${types.join(",")}`);
  }
  assert.ok(types.indexOf("tool-output-available") < types.indexOf("data-memory"));

  const start = chunks[0];
  assert.equal(typeof start.messageId, "string");
  assert.equal(typeof start.messageMetadata.conversation_id, "string");
  assert.equal(start.messageMetadata.memory.status, "available");

  const toolInput = chunks.find((chunk) => chunk.type === "tool-input-available");
  assert.equal(toolInput.toolName, "memory_update");
  // The tool part shows that memory was touched, never what was written.
  assert.ok(!JSON.stringify(chunks.filter((c) => c.type.startsWith("tool-"))).includes("short answers"));
  const toolOutput = chunks.find((chunk) => chunk.type === "tool-output-available");
  assert.deepEqual(toolOutput.output, { outcome: "staged", operation_count: 1 });
  const memory = chunks.find((chunk) => chunk.type === "data-memory");
  assert.equal(memory.data.outcome, "committed");

  const after = await memoryOf(TOKEN);
  assert.equal(memory.data.user_characters, after.user.characters);
  assert.equal(after.user.entries.length, 1);
});

test("readUIMessageStream assembles the assistant message over DefaultChatTransport", async () => {
  await forget(TOKEN);
  const transport = new DefaultChatTransport({ api: `${BASE}/v1/chat?protocol=ai-sdk`, headers: auth(TOKEN) });
  const stream = await transport.sendMessages({
    chatId: "assembled-chat",
    messages: [userMessage(REMEMBER)],
    trigger: "submit-message",
    messageId: undefined,
    abortSignal: undefined,
  });
  let message;
  for await (const snapshot of readUIMessageStream({ stream, terminateOnError: true })) message = snapshot;

  assert.equal(message.role, "assistant");
  assert.equal(typeof message.metadata.conversation_id, "string");
  assert.equal(message.metadata.finish_reason, "stop");
  const tool = message.parts.find((part) => part.type === "tool-memory_update");
  assert.ok(tool, `no tool part in ${JSON.stringify(message.parts.map((p) => p.type))}`);
  assert.equal(tool.state, "output-available");
  assert.equal(tool.output.outcome, "staged");
  const text = message.parts.filter((part) => part.type === "text").map((part) => part.text).join("");
  assert.ok(text.length > 0);
  const memory = message.parts.find((part) => part.type === "data-memory");
  assert.equal(memory.data.outcome, "committed");
  assert.equal(message.parts.filter((part) => part.type === "step-start").length, 2);
});

test("AbstractChat (what useChat runs) keeps one server conversation across turns", async () => {
  await forget(TOKEN);
  const errors = [];
  const finished = [];
  const chat = new PlainChat({
    transport: new DefaultChatTransport({ api: `${BASE}/v1/chat?protocol=ai-sdk`, headers: auth(TOKEN) }),
    onError: (error) => errors.push(error),
    onFinish: (event) => finished.push(event),
  });

  await chat.sendMessage({ text: REMEMBER });
  assert.deepEqual(errors, []);
  assert.equal(chat.status, "ready");
  assert.equal(chat.messages.length, 2);
  const first = chat.messages[1];
  assert.equal(first.role, "assistant");
  const conversationId = first.metadata.conversation_id;
  assert.equal(typeof conversationId, "string");

  await chat.sendMessage({ text: "what do you remember?" });
  assert.deepEqual(errors, []);
  assert.equal(chat.messages.length, 4);
  const second = chat.messages[3];
  assert.equal(second.metadata.conversation_id, conversationId, "the second turn continued the conversation");
  const answer = second.parts.filter((part) => part.type === "text").map((part) => part.text).join("");
  assert.match(answer, /short answers/);
  assert.equal(finished.length, 2);
  assert.ok(finished.every((event) => !event.isError && !event.isAbort));

  const listed = await fetch(`${BASE}/v1/conversations/${encodeURIComponent(conversationId)}`, { headers: auth(TOKEN) });
  assert.equal(listed.status, 200);
});

async function transcriptOf(conversationId) {
  const response = await fetch(`${BASE}/v1/conversations/${encodeURIComponent(conversationId)}`, { headers: auth(TOKEN) });
  assert.equal(response.status, 200);
  return (await response.json()).messages;
}

const current = (messages) => messages.filter((message) => message.superseded_by === null);
const turnsOf = (messages) => [...new Set(messages.map((message) => message.turn_id))];

test("regenerate() and an edit (sendMessage with messageId) replace the server's turn", async () => {
  await forget(TOKEN);
  const errors = [];
  const chat = new PlainChat({
    transport: new DefaultChatTransport({ api: `${BASE}/v1/chat?protocol=ai-sdk`, headers: auth(TOKEN) }),
    onError: (error) => errors.push(error),
  });
  await chat.sendMessage({ text: "what is a quagga?" });
  await chat.sendMessage({ text: "and a zebra?" });
  const conversationId = chat.messages[1].metadata.conversation_id;
  const [first, second] = [chat.messages[1].metadata.turn_id, chat.messages[3].metadata.turn_id];
  assert.equal(chat.messages[3].id, `msg_${second}`, "the answer keeps the id of our start chunk");

  // regenerate() with no id: the last answer, named by its place.
  await chat.regenerate();
  assert.deepEqual(errors, []);
  assert.equal(chat.messages.length, 4);
  const regenerated = chat.messages[3].metadata.turn_id;
  assert.equal(chat.messages[3].metadata.conversation_id, conversationId);
  assert.notEqual(regenerated, second);
  let messages = await transcriptOf(conversationId);
  assert.deepEqual(turnsOf(current(messages)), [first, regenerated]);
  assert.deepEqual(current(messages).map((message) => message.role), ["user", "assistant", "user", "assistant"]);
  assert.equal(current(messages)[2].content, "and a zebra?", "regenerate sends the same question again");
  assert.deepEqual(messages.filter((message) => message.turn_id === second).map((message) => message.superseded_by),
    [regenerated, regenerated], "the replaced turn is kept, superseded by the new one");

  // regenerate({messageId}): the answer named by its id.
  await chat.regenerate({ messageId: chat.messages[3].id });
  const named = chat.messages[3].metadata.turn_id;
  messages = await transcriptOf(conversationId);
  assert.deepEqual(turnsOf(current(messages)), [first, named]);

  // An edit of the second message: the turn after the first answer, replaced by the new text.
  await chat.sendMessage({ text: "and an okapi?", messageId: chat.messages[2].id });
  assert.deepEqual(errors, []);
  assert.equal(chat.messages.length, 4);
  const edited = chat.messages[3].metadata.turn_id;
  assert.equal(chat.messages[3].metadata.conversation_id, conversationId);
  messages = await transcriptOf(conversationId);
  assert.deepEqual(turnsOf(current(messages)), [first, edited]);
  assert.equal(current(messages)[2].content, "and an okapi?");
  assert.equal(messages.length, 10, "four turns of two messages and the current two: nothing deleted");
});

test("an error is delivered to useChat's onError, with status error", async () => {
  const errors = [];
  const chat = new PlainChat({
    transport: new DefaultChatTransport({
      api: `${BASE}/v1/chat?protocol=ai-sdk`,
      headers: auth(TOKEN),
      // A conversation that is not the caller's: the server answers 404 before streaming.
      body: { conversation_id: "not-a-conversation-of-this-user" },
    }),
    onError: (error) => errors.push(error),
  });
  await chat.sendMessage({ text: "hello" });
  assert.equal(chat.status, "error");
  assert.equal(errors.length, 1);
});

test("chat.stop() aborts the request: the server commits nothing", async () => {
  await forget(STOP_TOKEN);
  const before = await memoryOf(STOP_TOKEN);
  let sawText;
  const textArrived = new Promise((resolve) => { sawText = resolve; });
  const state = new PlainChatState();
  const chat = new (class extends AbstractChat {})({
    state,
    transport: new DefaultChatTransport({ api: `${BASE}/v1/chat?protocol=ai-sdk`, headers: auth(STOP_TOKEN) }),
  });
  // Watch the streamed message the way React re-renders would.
  const replace = state.replaceMessage.bind(state);
  state.replaceMessage = (index, message) => {
    replace(index, message);
    if (message.role === "assistant" && message.parts.some((part) => part.type === "text" && part.text.length > 0)) {
      sawText();
    }
  };
  const push = state.pushMessage.bind(state);
  state.pushMessage = (message) => {
    push(message);
    if (message.role === "assistant" && message.parts.some((part) => part.type === "text" && part.text.length > 0)) {
      sawText();
    }
  };

  const sending = chat.sendMessage({ text: "tell me a long story" });
  await textArrived;
  await chat.stop();
  await sending;
  assert.equal(chat.status, "ready");
  const partial = chat.messages.at(-1);
  assert.equal(partial.role, "assistant");
  const conversationId = partial.metadata.conversation_id;

  // The server saw the disconnect: it keeps the partial answer marked interrupted, and no memory.
  const deadline = Date.now() + 15_000;
  let last;
  for (;;) {
    const response = await fetch(`${BASE}/v1/conversations/${encodeURIComponent(conversationId)}`, {
      headers: auth(STOP_TOKEN),
    });
    assert.equal(response.status, 200);
    last = (await response.json()).messages.at(-1);
    if (last.role === "assistant" && last.status === "interrupted") break;
    assert.ok(Date.now() < deadline, `the turn was not marked interrupted: ${JSON.stringify(last)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.deepEqual(await memoryOf(STOP_TOKEN), before);
});

test("stop() after the model staged a change: the change is never committed", async () => {
  const before = await memoryOf(STAGING_TOKEN, STAGING);
  assert.deepEqual(before.user.entries, []);
  let staged;
  const stagedAndTalking = new Promise((resolve) => { staged = resolve; });
  const state = new PlainChatState();
  const chat = new (class extends AbstractChat {})({
    state,
    transport: new DefaultChatTransport({ api: `${STAGING}/v1/chat?protocol=ai-sdk`, headers: auth(STAGING_TOKEN) }),
  });
  const watch = (message) => {
    const tool = message.parts.find((part) => part.type === "tool-memory_update");
    const text = message.parts.some((part) => part.type === "text" && part.text.length > 0);
    if (message.role === "assistant" && tool && tool.output?.outcome === "staged" && text) staged(message);
  };
  for (const method of ["pushMessage", "replaceMessage"]) {
    const original = state[method].bind(state);
    state[method] = (...args) => { original(...args); watch(args.at(-1)); };
  }

  const sending = chat.sendMessage({ text: "remember that I like tea, then talk for a while" });
  const message = await stagedAndTalking;
  await chat.stop();
  await sending;
  assert.ok(!chat.messages.at(-1).parts.some((part) => part.type === "data-memory"), "the turn did not reach its commit");

  const conversationId = message.metadata.conversation_id;
  const deadline = Date.now() + 15_000;
  for (;;) {
    const response = await fetch(`${STAGING}/v1/conversations/${encodeURIComponent(conversationId)}`, {
      headers: auth(STAGING_TOKEN),
    });
    const last = (await response.json()).messages.at(-1);
    if (last.role === "assistant" && last.status === "interrupted") break;
    assert.ok(Date.now() < deadline, `the turn was not marked interrupted: ${JSON.stringify(last)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.deepEqual(await memoryOf(STAGING_TOKEN, STAGING), before);
});
