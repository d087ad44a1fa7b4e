// One turn: posts the message, reads the native event stream (start, delta, tool, memory,
// sources, done or error) and shows each event on the answer. Stop aborts the request: the server sees the
// disconnect and commits nothing.

import { describe, isSessionEnd, limitMessage } from "../api.js";
import { readEvents } from "../sse.js";

function plural(count, one, many) {
  return `${count} ${count === 1 ? one : many}`;
}

const TOOL_CHIPS = {
  memory_update: {
    staged: (data) => [`Saving ${plural(data.operation_count, "change", "changes")} to memory…`, "pending"],
    rejected: () => ["Memory update refused", "bad"],
    unavailable: () => ["Memory unavailable", "bad"],
  },
  conversation_search: {
    found: (data) => [`Searched past conversations: ${plural(data.result_count, "match", "matches")}`, ""],
    none: () => ["Searched past conversations: nothing found", ""],
    rejected: () => ["Search refused", "bad"],
  },
};

export class Turn {
  // onStart(conversationId, memoryStatus), onError(text) and onMemory(event) are the chat's.
  // `replaces`: the turn this one regenerates or edits (docs/api.md).
  // `projectId`: the project a new conversation starts in (ignored for an existing one: the
  // server takes its project from the conversation).
  // `temporary`: the message starts a temporary chat (a new conversation only).
  constructor({ client, message, conversationId, projectId = null, replaces = null,
    temporary = false, answer, onStart, onError, onMemory = () => {} }) {
    this.client = client;
    this.message = message;
    this.conversationId = conversationId;
    this.projectId = projectId;
    this.replaces = replaces;
    this.temporary = temporary;
    this.turnId = null;
    this.answer = answer;
    this.onStart = onStart;
    this.onError = onError;
    this.onMemory = onMemory;
    this.controller = new AbortController();
    this.stopped = false;
    this.failed = false;
    this.done = false;
    this.ended = false; // the session ended under it: show nothing more
    this.refused = null; // the ApiError of a limit that refused the message before the turn
    this.status = null;
    this.memory = null;
    this.staged = 0;
    this.memoryChips = [];
  }

  stop() {
    this.stopped = true;
    this.controller.abort();
  }

  async run() {
    const body = { message: this.message };
    if (this.conversationId) body.conversation_id = this.conversationId;
    else if (this.projectId) body.project_id = this.projectId;
    if (this.replaces) body.replaces = this.replaces;
    if (this.temporary) body.temporary = true;
    try {
      const response = await this.client.fetch("/v1/chat", { method: "POST", body,
        signal: this.controller.signal, accept: "text/event-stream" });
      for await (const event of readEvents(response.body)) this.handle(event);
      if (!this.done && !this.failed) this.fail("The connection closed before the answer finished.");
    } catch (error) {
      if (isSessionEnd(error)) this.ended = true;
      else if (this.stopped || error.name === "AbortError") this.stopped = true;
      else if (limitMessage(error)) this.refused = error; // never started: the chat says so

      else this.fail(`The message could not be sent: ${describe(error)}`, `Error: ${describe(error)}`);
    }
    if (this.ended || this.refused) return;
    if (this.stopped) {
      this.answer.setState("stopped");
      this.answer.note("Stopped: this answer is incomplete.", "warn");
    } else if (!this.failed) {
      this.answer.setState("done");
    }
    this.answer.finish(new Date().toISOString());
  }

  fail(text, note = text, kind = "bad") {
    this.failed = true;
    this.answer.setState("failed");
    this.answer.note(note, kind);
    this.onError(text);
  }

  handle({ name, data }) {
    switch (name) {
      case "start":
        this.status = data.memory.status;
        this.turnId = data.turn_id;
        this.answer.setTurn(data.turn_id);
        this.onStart(data.conversation_id, this.status, data.turn_id);
        break;
      case "delta":
        this.answer.append(data.text);
        break;
      case "tool": {
        const chip = TOOL_CHIPS[data.name] && TOOL_CHIPS[data.name][data.outcome];
        if (data.name === "memory_update" && data.outcome === "staged") this.staged += data.operation_count;
        if (chip) {
          const [text, kind] = chip(data);
          const element = this.answer.chip(text, kind);
          if (data.name === "memory_update" && data.outcome === "staged") {
            // The turn's memory chip from the start, so that a relabel finds it (status.js).
            element.classList.add("memory-chip");
            if (this.turnId) element.dataset.turn = this.turnId;
            this.memoryChips.push(element);
          }
        }
        break;
      }
      case "memory":
        this.memory = data;
        this.onMemory(data);
        break;
      case "sources":
        this.answer.showSources(data);
        break;
      case "done":
        this.done = true;
        if (data.finish_reason === "length") this.answer.note("The answer reached its length limit.", "warn");
        if (data.finish_reason === "tool_limit") this.answer.note("The answer stopped at the tool-call limit.", "warn");
        break;
      case "error":
        this.fail(`The answer failed: ${data.message}`, `Error: ${data.message} (${data.code})`);
        break;
      default:
        break; // Unknown events are ignored, so the server can add new ones.
    }
  }

  // The memory outcome is known (from the panel's reading after the turn): label the chips.
  // The chip keeps its turn and the event's outcome, so that a later accept, reject, undo or
  // expiry relabels it (memory/status.js).
  labelMemory(outcome) {
    if (!this.memoryChips.length) return;
    const [first, ...rest] = this.memoryChips;
    rest.forEach((chip) => chip.remove());
    first.textContent = outcome && outcome.short ? outcome.short : "Memory unchanged";
    first.className = `chip memory-chip ${outcome ? outcome.kind : ""}`.trim();
    if (this.turnId) first.dataset.turn = this.turnId;
    if (this.memory) first.dataset.outcome = this.memory.outcome;
  }
}
