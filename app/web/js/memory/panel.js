// The memory panel: what the assistant remembers about the signed-in person, and their controls.
//
// The panel is a stack of sections, each its own module with `render(state)` and `reset()`:
// today the documents and the manage section (Forget everything). Pending proposals
// (Accept/Reject), history with Undo, the save-mode setting and Export join the same list.
// Every change is rendered from the API's answer, once; the panel never guesses the state.

import { ApiError, describe, fetchInfo, isSessionEnd } from "../api.js";
import { confirmAction } from "../dialog.js";
import { $, focusQuietly } from "../dom.js";
import { Notice } from "../notice.js";
import { DocumentsSection } from "./documents.js";
import { editOutcome, turnOutcome } from "./model.js";

const STATE_TEXT = {
  disabled: "Memory is switched off by the operator. Saved entries are kept and you can still "
    + "view them or forget everything, but nothing new is saved.",
  unavailable: "Memory is unavailable right now: the assistant answers without it and nothing is saved.",
};

class ManageSection {
  constructor({ root, forget }) {
    this.root = root;
    $("forget").addEventListener("click", forget);
  }

  render() {}

  reset() {}
}

export class MemoryPanel {
  constructor({ root, onStatus = () => {} }) {
    this.root = root;
    this.onStatus = onStatus;
    this.notice = new Notice($("memory-notice"));
    this.client = null;
    this.state = null; // the last state the API answered
    this.status = null; // "available" | "disabled" | "unavailable"
    this.sections = [
      new DocumentsSection({ root: root.querySelector("[data-section=documents]"),
        apply: (operations) => this.apply(operations) }),
      new ManageSection({ root: root.querySelector("[data-section=manage]"),
        forget: () => this.forget() }),
    ];
    $("memory-refresh").addEventListener("click", () => this.load());
  }

  attach(client) {
    this.client = client;
  }

  setStatus(status) {
    this.status = status;
    $("memory-state").textContent = STATE_TEXT[status] || "";
    this.root.classList.toggle("off", status === "disabled" || status === "unavailable");
    this.root.classList.toggle("unreadable", status === "unavailable" && !this.state);
    this.onStatus(status);
  }

  show(state) {
    this.state = state;
    for (const section of this.sections) section.render(state);
  }

  // Reads memory (and the flag: reading works while it is off, so the state alone may not say).
  async load() {
    try {
      const [state, info] = await Promise.all([this.client.request("/v1/memory"), fetchInfo()]);
      const disabled = state.status === "disabled" || info.memory_enabled === false;
      this.show(state);
      this.setStatus(disabled ? "disabled" : "available");
      return state;
    } catch (error) {
      if (isSessionEnd(error)) return null;
      if (error instanceof ApiError && error.status === 503) {
        // Unknown is not empty: the documents are not shown at all.
        this.state = null;
        this.setStatus("unavailable");
      } else {
        this.notice.show(`Could not load memory: ${describe(error)}`, "error");
      }
      return null;
    }
  }

  // Sends one batch; the answer is the new state, rendered once (a second read could wipe an
  // editor opened in between). Says "already saved" when the answer equals the state before.
  async apply(operations) {
    const before = this.state;
    try {
      const after = await this.client.request("/v1/memory/operations",
        { method: "POST", body: { operations } });
      this.show(after);
      this.setStatus("available");
      const { text, kind } = editOutcome(before, after);
      this.notice.show(text, kind);
      return true;
    } catch (error) {
      if (isSessionEnd(error)) return false;
      if (error instanceof ApiError && error.status === 409) {
        this.setStatus("disabled");
        this.notice.show("Memory is switched off: changes cannot be saved right now.", "error");
      } else if (error instanceof ApiError && error.status === 503) {
        this.notice.show("Memory is unavailable right now: nothing was changed.", "error");
      } else {
        this.notice.show(`Not saved: ${describe(error)}`, "error");
      }
      return false;
    }
  }

  async forget() {
    const confirmed = await confirmAction({
      title: "Forget everything?",
      text: "Both memory documents are deleted for good. Conversations are kept.",
      confirm: "Forget everything",
    });
    if (!confirmed) return;
    try {
      await this.client.request("/v1/memory", { method: "DELETE" });
    } catch (error) {
      if (!isSessionEnd(error)) this.notice.show(`Could not forget: ${describe(error)}`, "error");
      return;
    }
    await this.load();
    this.notice.show("Everything was forgotten.", "success");
    focusQuietly($("forget"));
  }

  // A turn begins: what it changes is judged against the state now.
  turnStarted() {
    this.notice.clear();
    return this.state;
  }

  // A turn ended: read the state it left and say what it did to memory; returns the outcome.
  async turnEnded(turn, before) {
    const after = await this.load();
    if (!this.client) return null; // signed out meanwhile
    const outcome = turnOutcome(turn, before, after);
    if (outcome) this.notice.show(`Last turn: ${outcome.text}`, outcome.kind);
    else this.notice.clear();
    return outcome;
  }

  // Nothing of the previous person stays: entries, usage, inputs, messages, status.
  reset() {
    this.client = null;
    this.state = null;
    this.notice.clear();
    for (const section of this.sections) section.reset();
    this.setStatus(null);
    this.root.classList.remove("unreadable");
  }
}
