// The web client: sign-in, conversations, a streamed chat with Stop, and the memory panel.
// Plain JS, no build step. The chat stream is read from fetch() (EventSource cannot POST).

const TOKEN_KEY = "agent-memory-token";
const $ = (id) => document.getElementById(id);

const state = {
  token: null,
  subject: null,
  info: null,
  conversationId: null,
  turn: null, // {controller, bubble, stopped, stagedOperations, memoryOutcome}
  memoryStatus: null, // "available" | "unavailable" | "disabled" | null (unknown yet)
  memoryEnabled: true, // the feature flag as last seen: /info, a turn's start event, or a 409
};

// ---------------------------------------------------------------- HTTP

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function errorFrom(response) {
  let code = `http_${response.status}`;
  let message = response.statusText || "The request failed.";
  try {
    const body = await response.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
    } else if (body && body.detail) {
      message = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
    }
  } catch {
    // Not JSON: keep the status text.
  }
  return new ApiError(response.status, code, message);
}

async function api(path, { method = "GET", body, signal, headers = {} } = {}) {
  const init = { method, signal, headers: { ...headers } };
  if (state.token) init.headers.authorization = `Bearer ${state.token}`;
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401 && state.token) {
    signOut("Your session has ended. Please sign in again.");
  }
  if (!response.ok) throw await errorFrom(response);
  if (response.status === 204) return null;
  const type = response.headers.get("content-type") || "";
  return type.includes("json") ? response.json() : null;
}

function describe(error) {
  if (error instanceof ApiError) return `${error.message} (${error.code}, HTTP ${error.status})`;
  if (error instanceof TypeError) return "The server could not be reached. Check your connection and try again.";
  return error && error.message ? error.message : String(error);
}

// ---------------------------------------------------------------- sign-in

function decodeSubject(token) {
  try {
    const payload = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const json = JSON.parse(atob(payload.padEnd(payload.length + ((4 - (payload.length % 4)) % 4), "=")));
    return typeof json.sub === "string" ? json.sub : null;
  } catch {
    return null;
  }
}

function takeTokenFromFragment() {
  // A front proxy or IdP redirect may hand the token in the fragment (never sent to servers).
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("access_token");
  if (token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    history.replaceState(null, "", location.pathname + location.search);
  }
}

async function loadInfo() {
  try {
    const response = await fetch("/info");
    if (response.ok) return await response.json();
  } catch {
    // Fall through to probing.
  }
  return { auth_mode: "dev", offline: null, memory_enabled: null };
}

function showBadge(info) {
  const badge = $("model-badge");
  if (info && info.offline) {
    badge.textContent = "Offline model answering";
    badge.title = "No language model is configured: the built-in offline model answers.";
    badge.hidden = false;
  } else if (info && info.model) {
    badge.textContent = `Model: ${info.model}`;
    badge.hidden = false;
  }
}

function showSignIn(message = "") {
  $("workspace").hidden = true;
  $("account").hidden = true;
  $("sign-in").hidden = false;
  const oidc = state.info && state.info.auth_mode === "oidc";
  $("dev-sign-in").hidden = oidc;
  $("token-sign-in").hidden = !oidc;
  $("sign-in-error").textContent = message;
  (oidc ? $("token-input") : $("dev-name")).focus();
}

async function signIn(token) {
  state.token = token;
  state.subject = decodeSubject(token) || "unknown user";
  sessionStorage.setItem(TOKEN_KEY, token);
  $("sign-in").hidden = true;
  $("workspace").hidden = false;
  $("account").hidden = false;
  $("account-name").textContent = state.subject;
  newConversation();
  await Promise.all([loadConversations(), loadMemory()]);
  $("message-input").focus();
}

function signOut(message = "") {
  if (state.turn) state.turn.controller.abort();
  state.token = null;
  state.subject = null;
  state.conversationId = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $("messages").replaceChildren();
  $("conversation-list").replaceChildren();
  showSignIn(message);
}

async function onDevSignIn(event) {
  event.preventDefault();
  const name = $("dev-name").value.trim();
  $("sign-in-error").textContent = "";
  try {
    const body = await api("/dev/token", { method: "POST", body: { sub: name } });
    await signIn(body.access_token);
  } catch (error) {
    $("sign-in-error").textContent = `Could not sign in: ${describe(error)}`;
  }
}

async function onTokenSignIn(event) {
  event.preventDefault();
  const token = $("token-input").value.trim();
  state.token = token;
  try {
    await api("/v1/conversations");
    await signIn(token);
  } catch (error) {
    state.token = null;
    $("sign-in-error").textContent = `This token was not accepted: ${describe(error)}`;
  }
}

// ---------------------------------------------------------------- conversations

function listOf(body, key) {
  if (Array.isArray(body)) return body;
  if (body && Array.isArray(body[key])) return body[key];
  if (body && Array.isArray(body.items)) return body.items;
  return [];
}

function conversationTitle(conversation) {
  return conversation.title || conversation.preview || "Conversation";
}

async function loadConversations() {
  let conversations;
  try {
    conversations = listOf(await api("/v1/conversations"), "conversations");
  } catch (error) {
    $("chat-error").textContent = `Could not load conversations: ${describe(error)}`;
    return;
  }
  const list = $("conversation-list");
  list.replaceChildren();
  for (const conversation of conversations) {
    const item = document.createElement("li");
    const title = conversationTitle(conversation);
    const open = button(title, () => openConversation(conversation.id), { className: "open" });
    open.dataset.id = conversation.id;
    if (conversation.id === state.conversationId) open.setAttribute("aria-current", "true");
    const remove = button("Delete", () => deleteConversation(conversation.id, title), {
      className: "delete",
      label: `Delete conversation: ${title}`,
    });
    item.append(open, remove);
    list.append(item);
  }
  $("conversations-empty").hidden = conversations.length > 0;
}

function markCurrent() {
  for (const button of document.querySelectorAll("#conversation-list .open")) {
    if (button.dataset.id === state.conversationId) button.setAttribute("aria-current", "true");
    else button.removeAttribute("aria-current");
  }
}

function newConversation() {
  if (state.turn) return;
  state.conversationId = null;
  $("messages").replaceChildren();
  $("chat-error").textContent = "";
  $("chat-status").textContent = "";
  markCurrent();
}

function messageText(message) {
  if (typeof message.content === "string") return message.content;
  if (typeof message.text === "string") return message.text;
  if (Array.isArray(message.parts)) {
    return message.parts.filter((part) => part.type === "text").map((part) => part.text).join("");
  }
  return "";
}

function wasStopped(message) {
  const status = message.status || message.state || "";
  return Boolean(message.cancelled || message.stopped || message.partial)
    || ["cancelled", "canceled", "stopped", "partial", "interrupted"].includes(status);
}

async function openConversation(id) {
  if (state.turn) return;
  let conversation;
  try {
    conversation = await api(`/v1/conversations/${encodeURIComponent(id)}`);
  } catch (error) {
    $("chat-error").textContent = `Could not open the conversation: ${describe(error)}`;
    return;
  }
  state.conversationId = id;
  $("chat-error").textContent = "";
  $("chat-status").textContent = "";
  const log = $("messages");
  log.replaceChildren();
  for (const message of listOf(conversation, "messages")) {
    const bubble = addMessage(message.role === "user" ? "user" : "assistant", messageText(message));
    if (wasStopped(message)) markStopped(bubble);
    else if (message.status === "failed") {
      bubble.classList.add("failed");
      bubble.dataset.state = "failed";
      addNote(bubble, "This answer failed.");
    }
  }
  markCurrent();
  $("message-input").focus();
}

async function deleteConversation(id, title) {
  if (state.turn) return;
  if (!window.confirm(`Delete the conversation “${title}”? Its messages are removed; memory is not.`)) return;
  try {
    await api(`/v1/conversations/${encodeURIComponent(id)}`, { method: "DELETE" });
  } catch (error) {
    $("chat-error").textContent = `Could not delete the conversation: ${describe(error)}`;
    return;
  }
  if (id === state.conversationId) newConversation();
  await loadConversations();
  $("new-conversation").focus();
}

// ---------------------------------------------------------------- chat

function addMessage(role, text) {
  const item = document.createElement("li");
  item.className = `message ${role}`;
  const label = document.createElement("span");
  label.className = "role";
  label.textContent = role === "user" ? "You" : "Assistant";
  const body = document.createElement("span");
  body.className = "text";
  body.textContent = text;
  item.append(label, body);
  $("messages").append(item);
  item.scrollIntoView({ block: "end" });
  return item;
}

function addNote(bubble, text) {
  const note = document.createElement("span");
  note.className = "note";
  note.textContent = text;
  bubble.append(note);
  return note;
}

function markStopped(bubble) {
  bubble.classList.add("stopped");
  bubble.dataset.state = "stopped";
  addNote(bubble, "Stopped: this answer is incomplete.");
}

function setStreaming(streaming) {
  $("send").disabled = streaming;
  $("stop").disabled = !streaming;
  $("new-conversation").disabled = streaming;
  for (const button of document.querySelectorAll("#conversation-list button")) button.disabled = streaming;
}

// Server-sent events from a fetch() body: blocks split by a blank line; `event:` and `data:` lines.
async function* readEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value.replace(/\r\n?/g, "\n");
      let boundary;
      while ((boundary = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, boundary);
        buffer = buffer.slice(boundary + 2);
        let name = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith(":")) continue; // comment / keep-alive ping
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const raw = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") name = raw;
          else if (field === "data") data.push(raw);
        }
        if (data.length) yield { name, data: JSON.parse(data.join("\n")) };
      }
    }
  } finally {
    reader.releaseLock();
  }
}

function outcomeText(turn) {
  if (turn.stopped) return { text: "Nothing saved: the turn was stopped.", bad: true };
  if (turn.failed) return { text: "Nothing saved: the turn failed.", bad: true };
  if (turn.status === "disabled") return { text: "Memory is switched off: nothing saved.", bad: true };
  if (turn.status === "unavailable") return { text: "Memory unavailable: nothing saved.", bad: true };
  if (!turn.memory) return { text: "", bad: false };
  if (turn.memory.outcome === "committed") {
    const count = turn.stagedOperations || 1;
    return { text: `Saved ${count} ${count === 1 ? "change" : "changes"}.`, bad: false };
  }
  if (turn.memory.outcome === "failed") return { text: "Nothing saved: memory could not be written.", bad: true };
  return { text: "No memory changes.", bad: false };
}

function showOutcome(turn) {
  const { text, bad } = outcomeText(turn);
  const element = $("memory-outcome");
  element.textContent = text ? `Last turn: ${text}` : "";
  element.classList.toggle("bad", bad);
}

function handleEvent(turn, event) {
  const { name, data } = event;
  switch (name) {
    case "start": {
      turn.status = data.memory && data.memory.status;
      if (data.conversation_id && data.conversation_id !== state.conversationId) {
        state.conversationId = data.conversation_id;
        turn.newConversation = true;
      }
      turn.bubble.dataset.turnId = data.turn_id || "";
      if (turn.status === "disabled") state.memoryEnabled = false;
      if (turn.status === "available") state.memoryEnabled = true;
      setMemoryStatus(turn.status);
      break;
    }
    case "delta":
      turn.text.textContent += data.text;
      break;
    case "tool": {
      if (data.outcome === "staged") turn.stagedOperations += data.operation_count || 0;
      const verb = { staged: "proposed", rejected: "was rejected", unavailable: "could not be saved" };
      addNote(turn.bubble, `Memory update ${verb[data.outcome] || data.outcome}`
        + ` (${data.operation_count} ${data.operation_count === 1 ? "change" : "changes"}).`);
      break;
    }
    case "memory":
      turn.memory = data;
      break;
    case "done":
      turn.done = true;
      if (data.finish_reason === "length") addNote(turn.bubble, "The answer reached its length limit.");
      if (data.finish_reason === "tool_limit") addNote(turn.bubble, "The answer stopped at the tool-call limit.");
      break;
    case "error":
      turn.failed = true;
      turn.bubble.classList.add("failed");
      turn.bubble.dataset.state = "failed";
      addNote(turn.bubble, `Error: ${data.message} (${data.code})`);
      $("chat-error").textContent = `The answer failed: ${data.message}`;
      break;
    default:
      break; // Unknown events are ignored, so the server can add new ones.
  }
}

async function send(message) {
  $("chat-error").textContent = "";
  addMessage("user", message);
  const bubble = addMessage("assistant", "");
  bubble.dataset.state = "streaming";
  const turn = {
    controller: new AbortController(),
    bubble,
    text: bubble.querySelector(".text"),
    stopped: false,
    failed: false,
    done: false,
    status: null,
    memory: null,
    stagedOperations: 0,
    newConversation: false,
  };
  state.turn = turn;
  setStreaming(true);
  $("chat-status").textContent = "The assistant is answering…";
  $("memory-outcome").textContent = "";
  const body = { message };
  if (state.conversationId) body.conversation_id = state.conversationId;
  try {
    const response = await fetch("/v1/chat", {
      method: "POST",
      headers: {
        authorization: `Bearer ${state.token}`,
        "content-type": "application/json",
        accept: "text/event-stream",
      },
      body: JSON.stringify(body),
      signal: turn.controller.signal,
    });
    if (response.status === 401) signOut("Your session has ended. Please sign in again.");
    if (!response.ok) throw await errorFrom(response);
    for await (const event of readEvents(response.body)) handleEvent(turn, event);
    if (!turn.done && !turn.failed) {
      turn.failed = true;
      addNote(bubble, "The connection closed before the answer finished.");
      $("chat-error").textContent = "The connection closed before the answer finished.";
    }
  } catch (error) {
    if (turn.stopped || (error && error.name === "AbortError")) {
      turn.stopped = true;
    } else {
      turn.failed = true;
      bubble.classList.add("failed");
      addNote(bubble, `Error: ${describe(error)}`);
      $("chat-error").textContent = `The message could not be sent: ${describe(error)}`;
    }
  } finally {
    if (turn.stopped) markStopped(bubble);
    else if (!turn.failed) bubble.dataset.state = "done";
    state.turn = null;
    setStreaming(false);
    $("chat-status").textContent = turn.stopped ? "Stopped." : turn.failed ? "" : "Answer complete.";
    showOutcome(turn);
  }
  if (state.token) {
    await Promise.all([loadConversations(), loadMemory()]);
    markCurrent();
  }
}

function stop() {
  if (!state.turn) return;
  // Aborting the fetch closes the connection: the server sees the disconnect and commits nothing.
  state.turn.stopped = true;
  state.turn.controller.abort();
}

function onSubmit(event) {
  event.preventDefault();
  const input = $("message-input");
  const message = input.value.trim();
  if (!message || state.turn) return;
  input.value = "";
  send(message);
  input.focus();
}

function onComposerKey(event) {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  } else if (event.key === "Escape" && state.turn) {
    stop();
  }
}

// ---------------------------------------------------------------- memory panel

const DOCUMENTS = ["user", "memory"];

function setMemoryStatus(status) {
  state.memoryStatus = status;
  const panel = document.querySelector(".memory");
  const message = {
    disabled: "Memory is switched off by the operator. Saved entries are kept and you can still "
      + "view them or forget everything, but nothing new is saved.",
    unavailable: "Memory is unavailable right now: the assistant answers without it and nothing is saved.",
  }[status] || "";
  $("memory-state").textContent = message;
  panel.classList.toggle("off", status === "disabled" || status === "unavailable");
}

function renderDocument(target, doc) {
  const entries = (doc && doc.entries) || [];
  const characters = (doc && doc.characters) || 0;
  const limit = (doc && doc.limit) || 1;
  const meter = $(`doc-${target}-meter`);
  meter.max = limit;
  meter.value = characters;
  meter.low = limit * 0.7;
  meter.high = limit * 0.9;
  meter.optimum = 0;
  const percent = Math.round((characters * 100) / limit);
  $(`doc-${target}-usage`).textContent = `${characters.toLocaleString()} / ${limit.toLocaleString()} characters (${percent}%)`;
  const list = $(`doc-${target}-entries`);
  list.replaceChildren();
  entries.forEach((entry) => list.append(entryItem(target, entry)));
  $(`doc-${target}-empty`).hidden = entries.length > 0;
}

// A button with its text, an optional click handler, class, accessible name and type.
function button(text, onClick, { className = "", label = "", type = "button" } = {}) {
  const element = document.createElement("button");
  element.type = type;
  element.textContent = text;
  if (className) element.className = className;
  if (label) element.setAttribute("aria-label", label);
  if (onClick) element.addEventListener("click", onClick);
  return element;
}

function entryItem(target, entry) {
  const item = document.createElement("li");
  const text = document.createElement("span");
  text.className = "entry-text";
  text.textContent = entry;
  const actions = document.createElement("div");
  actions.className = "entry-actions";
  const edit = button("Edit", () => startEdit(item, target, entry), { label: `Edit: ${entry}` });
  const remove = button(
    "Remove",
    () => applyOperations([{ target, action: "remove", match: entry }], "Entry removed."),
    { label: `Remove: ${entry}` },
  );
  actions.append(edit, remove);
  item.append(text, actions);
  return item;
}

function startEdit(item, target, entry) {
  const form = document.createElement("form");
  form.className = "edit-entry";
  const id = `edit-${target}-${Math.random().toString(36).slice(2)}`;
  const label = document.createElement("label");
  label.htmlFor = id;
  label.textContent = "Edit entry";
  const input = document.createElement("textarea");
  input.id = id;
  input.rows = 3;
  input.required = true;
  input.value = entry;
  const actions = document.createElement("div");
  actions.className = "entry-actions";
  const save = button("Save", null, { type: "submit" });
  const cancel = button("Cancel", () => loadMemory());
  actions.append(save, cancel);
  form.append(label, input, actions);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const content = input.value.trim();
    if (content === entry) return loadMemory();
    applyOperations([{ target, action: "replace", match: entry, content }], "Entry saved.");
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape") loadMemory();
  });
  item.replaceChildren(form);
  input.focus();
}

async function loadMemory() {
  $("memory-error").textContent = "";
  let memory;
  try {
    const [body, info] = await Promise.all([api("/v1/memory"), loadInfo()]);
    memory = body;
    if (typeof info.memory_enabled === "boolean") state.memoryEnabled = info.memory_enabled;
  } catch (error) {
    if (error instanceof ApiError && error.status === 503) {
      // Not "empty": the documents could not be read, so they are not shown at all.
      setMemoryStatus("unavailable");
      document.querySelector(".memory").classList.add("unreadable");
      return;
    }
    $("memory-error").textContent = `Could not load memory: ${describe(error)}`;
    return;
  }
  if (!memory) return;
  document.querySelector(".memory").classList.remove("unreadable");
  // Reading works while the flag is off, so the flag comes from what this page saw last.
  setMemoryStatus(memory.status === "disabled" || !state.memoryEnabled ? "disabled" : "available");
  DOCUMENTS.forEach((target) => renderDocument(target, memory[target]));
}

async function applyOperations(operations, done) {
  $("memory-error").textContent = "";
  try {
    const memory = await api("/v1/memory/operations", { method: "POST", body: { operations } });
    // The answer is the new state: render it once. Re-reading memory here rendered a second
    // time, later, and could wipe an editor the user had opened in between.
    if (memory) {
      document.querySelector(".memory").classList.remove("unreadable");
      setMemoryStatus("available");
      DOCUMENTS.forEach((target) => renderDocument(target, memory[target]));
    }
    $("memory-outcome").classList.remove("bad");
    $("memory-outcome").textContent = done;
  } catch (error) {
    if (error instanceof ApiError && error.status === 409) {
      state.memoryEnabled = false;
      setMemoryStatus("disabled");
      $("memory-error").textContent = "Memory is switched off: changes cannot be saved right now.";
    } else if (error instanceof ApiError && error.status === 503) {
      setMemoryStatus("unavailable");
      $("memory-error").textContent = "Memory is unavailable right now: nothing was changed.";
    } else {
      $("memory-error").textContent = `Not saved: ${describe(error)}`;
    }
    return false;
  }
  return true;
}

async function forgetEverything() {
  const confirmed = window.confirm(
    "Forget everything? Both memory documents are deleted for good. Conversations are kept.");
  if (!confirmed) return;
  try {
    await api("/v1/memory", { method: "DELETE" });
  } catch (error) {
    $("memory-error").textContent = `Could not forget: ${describe(error)}`;
    return;
  }
  await loadMemory();
  $("memory-outcome").classList.remove("bad");
  $("memory-outcome").textContent = "Everything was forgotten.";
  $("forget").focus();
}

async function onAddEntry(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const input = form.querySelector("input");
  const content = input.value.trim();
  if (!content) return;
  if (await applyOperations([{ target: form.dataset.target, action: "add", content }], "Entry added.")) {
    input.value = "";
    input.focus();
  }
}

// ---------------------------------------------------------------- start

async function main() {
  $("dev-sign-in").addEventListener("submit", onDevSignIn);
  $("token-sign-in").addEventListener("submit", onTokenSignIn);
  $("sign-out").addEventListener("click", () => signOut());
  $("new-conversation").addEventListener("click", () => {
    newConversation();
    $("message-input").focus();
  });
  $("composer").addEventListener("submit", onSubmit);
  $("message-input").addEventListener("keydown", onComposerKey);
  $("stop").addEventListener("click", stop);
  $("memory-refresh").addEventListener("click", loadMemory);
  $("forget").addEventListener("click", forgetEverything);
  for (const form of document.querySelectorAll(".add-entry")) form.addEventListener("submit", onAddEntry);

  takeTokenFromFragment();
  state.info = await loadInfo();
  state.memoryEnabled = state.info.memory_enabled !== false;
  showBadge(state.info);
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) await signIn(saved);
  else showSignIn();
  document.body.dataset.ready = "true";
}

main();
