// The memory panel: what the assistant remembers about the signed-in person, and their controls.
//
// The panel is a stack of sections, each its own module with `render(...)` and `reset()`: the
// documents (each entry with its origin), pending proposals (Accept/Reject), the history with
// Undo, and the manage section (save mode, Export, Forget everything). Every change is rendered
// from the API's answer, once; the panel never guesses the state.
//
// The panel shows the memory of the place the chat is in (its scope): outside projects, or one
// project (every memory request then carries `?project_id=`, and the state names its scope).

import { ApiError, describe, fetchInfo, isSessionEnd } from "../api.js";
import { $ } from "../dom.js";
import { Notice } from "../notice.js";
import { DocumentsSection } from "./documents.js";
import { revealEntry, undoWrong, wrongEntry } from "./entry-actions.js";
import { HistorySection } from "./history.js";
import { ManageSection } from "./manage.js";
import { CONFLICTS, STATE_TEXT, editOutcome, turnOutcome, undoOutcome } from "./model.js";
import { originHistory, originOf, originsOf, originText } from "./origins.js";
import { ProposalsSection } from "./proposals.js";

const HISTORY_PAGE = 50;
const NO_EXTRAS = { loaded: false, changes: [], next: null, proposals: [], saveMode: null,
  recallChats: false, titles: new Map() };

export class MemoryPanel {
  // onChanged(extras, rejected): history or proposals changed (accept, reject, undo, expiry,
  // a turn): the chat relabels its turns' memory chips.
  constructor({ root, onStatus = () => {}, onChanged = () => {} }) {
    this.root = root;
    this.onReveal = () => {}; // opens the panel (the drawers are main.js's)
    this.onStatus = onStatus;
    this.onChanged = onChanged;
    this.rejected = new Set(); // turns whose proposal the person rejected on this page
    this.notice = new Notice($("memory-notice"));
    this.client = null;
    this.state = null; // the last state the API answered
    this.status = null; // "available" | "disabled" | "unavailable"
    this.extras = NO_EXTRAS; // history, proposals, save mode and conversation titles
    this.modeWrites = 0; // save-mode changes sent, so that an older load does not undo one
    this.origins = new Map();
    this.scope = null; // the project whose memory is shown (null: outside projects)
    this.projects = [];
    this.documents = new DocumentsSection({ root: root.querySelector("[data-section=documents]"),
      apply: (operations) => this.apply(operations),
      originOf: (target, entry) => this.originOf(target, entry),
      historyOf: (target, entry) => this.historyOf(target, entry) });
    this.proposals = new ProposalsSection({ root: root.querySelector("[data-section=proposals]"),
      decide: (proposal, action) => this.decide(proposal, action) });
    this.history = new HistorySection({ root: root.querySelector("[data-section=history]"),
      undo: (change) => this.undo(change), more: () => this.loadExtras({ more: true }) });
    this.manage = new ManageSection({ root: root.querySelector("[data-section=manage]"), panel: this });
    this.sections = [this.documents, this.proposals, this.history, this.manage];
    $("memory-refresh").addEventListener("click", () => this.load());
  }

  attach(client) {
    this.client = client;
  }

  // The chat moved to another place: its memory is read (once per change of place).
  setScope(projectId) {
    if ((projectId || null) === this.scope) return null;
    this.scope = projectId || null;
    this.extras = NO_EXTRAS;
    this.notice.clear(); // what was said was about the other place's memory
    return this.client ? this.load() : null;
  }

  // The person's projects changed (names, which use the general notes): only labels change.
  setProjects(projects) {
    this.projects = projects;
    if (this.state) this.documents.label(this.state, projects);
  }

  // A memory path in the panel's scope.
  scoped(path) {
    if (!this.scope) return path;
    return `${path}${path.includes("?") ? "&" : "?"}project_id=${encodeURIComponent(this.scope)}`;
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
    this.documents.render(state, this.projects);
  }

  originOf(target, entry) {
    const change = originOf(this.origins, target, entry);
    return change ? originText(change, this.extras.titles, new Date(), entry) : "";
  }

  historyOf(target, entry) {
    return originHistory(this.extras.changes, this.extras.titles, target, entry);
  }

  showExtras() {
    this.origins = originsOf(this.extras.changes);
    this.documents.updateOrigins();
    this.proposals.render(this.extras);
    this.history.render(this.extras);
    this.manage.render(this.extras);
    this.relabel();
  }

  relabel() {
    this.onChanged(this.extras, this.rejected);
  }

  // History (a page, or the next one), proposals, the save mode and conversation titles: what
  // the panel shows beside the documents. A failure here leaves the documents as they are.
  async loadExtras({ more = false } = {}) {
    const client = this.client;
    const scope = this.scope;
    if (!client) return;
    const before = more && this.extras.next ? `&before=${encodeURIComponent(this.extras.next)}` : "";
    const modeWrites = this.modeWrites;
    try {
      const [history, proposals, settings, conversations] = await Promise.all([
        client.request(this.scoped(`/v1/memory/history?limit=${HISTORY_PAGE}${before}`)),
        client.request(this.scoped("/v1/memory/proposals")),
        client.request("/v1/memory/settings"),
        client.request("/v1/conversations"),
      ]);
      if (client !== this.client || scope !== this.scope) return;
      this.extras = {
        loaded: true,
        changes: more ? [...this.extras.changes, ...history.changes] : history.changes,
        next: history.next,
        proposals: proposals.proposals,
        // A save-mode change sent while this load ran is newer than what the load read.
        saveMode: modeWrites === this.modeWrites ? settings.save_mode : this.extras.saveMode,
        recallChats: modeWrites === this.modeWrites ? settings.recall_chats : this.extras.recallChats,
        titles: new Map(conversations.conversations.map((c) => [c.id, c.title])),
      };
      this.showExtras();
    } catch (error) {
      if (!isSessionEnd(error) && scope === this.scope) {
        this.notice.show(`Could not load the history: ${describe(error)}`, "error");
      }
    }
  }

  // A change the API refused: one message, and the switched-off state when that is why.
  refused(error, what) {
    if (isSessionEnd(error)) return;
    if (error instanceof ApiError && error.code === "memory_disabled") {
      this.setStatus("disabled");
      this.notice.show("Memory is switched off: changes cannot be saved right now.", "error");
    } else if (error instanceof ApiError && CONFLICTS[error.code]) {
      this.notice.show(CONFLICTS[error.code], "error");
    } else {
      this.notice.show(`${what}: ${describe(error)}`, "error");
    }
  }

  async undo(change) {
    const before = this.state;
    try {
      const after = await this.client.request(
        this.scoped(`/v1/memory/history/${encodeURIComponent(change.id)}/undo`), { method: "POST" });
      this.show(after);
      const { text, kind } = undoOutcome(before, after);
      await this.loadExtras();
      this.notice.show(text, kind);
    } catch (error) {
      this.refused(error, "Not undone");
      await this.loadExtras();
    }
  }

  async decide(proposal, action) {
    const before = this.state;
    const path = `/v1/memory/proposals/${encodeURIComponent(proposal.id)}/${action}`;
    try {
      const after = await this.client.request(this.scoped(path), { method: "POST" });
      if (after) this.show(after);
      if (action === "reject" && proposal.turn_id) this.rejected.add(proposal.turn_id);
      await this.loadExtras();
      if (action === "reject") this.notice.show("Proposal rejected: nothing was saved.", "info");
      else this.notice.show(editOutcome(before, after).text, "success");
    } catch (error) {
      this.refused(error, action === "accept" ? "Not saved" : "Not rejected");
      await this.loadExtras();
    }
  }

  // What an answer's sources do to an entry (Wrong, its Undo, History): ./entry-actions.js.
  wrongEntry(entry) { return wrongEntry(this, entry); }
  undoWrong(changeId, entry) { return undoWrong(this, changeId, entry); }
  reveal(entry) { revealEntry(this, entry); }

  // A turn's memory event said `proposed`: show the new card now, not after the answer.
  proposalsChanged() {
    return this.loadExtras();
  }

  // Reads memory (and the flag: reading works while it is off, so the state alone may not say).
  // A load for a scope the chat has left meanwhile shows nothing and answers null.
  async load() {
    const scope = this.scope;
    try {
      const [state, info] = await Promise.all([this.client.request(this.scoped("/v1/memory")), fetchInfo()]);
      if (scope !== this.scope) return null;
      const disabled = state.status === "disabled" || info.memory_enabled === false;
      this.show(state);
      this.setStatus(disabled ? "disabled" : "available");
      await this.loadExtras();
      return state;
    } catch (error) {
      if (isSessionEnd(error) || scope !== this.scope) return null;
      if (error instanceof ApiError && error.status === 404) {
        // A project that is not (or no longer) the person's: the chat says so.
        this.state = null;
        return null;
      }
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
      const after = await this.client.request(this.scoped("/v1/memory/operations"),
        { method: "POST", body: { operations } });
      this.show(after);
      this.setStatus("available");
      const { text, kind } = editOutcome(before, after);
      await this.loadExtras(); // the new change's history entry, and the entry's origin
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
    this.scope = null;
    this.projects = [];
    this.extras = NO_EXTRAS;
    this.rejected = new Set();
    $("memory-scroll").scrollTop = 0; // the next person starts at the top, not where this one was
    this.origins = new Map();
    this.notice.clear();
    for (const section of this.sections) section.reset();
    this.setStatus(null);
    this.root.classList.remove("unreadable");
  }
}
