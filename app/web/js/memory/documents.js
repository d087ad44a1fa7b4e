// The memory panel's documents section: "About you", in a project "Project notes", and "Agent
// notes" (outside projects, or in a project that uses them), each labelled with where its
// entries apply, with its usage bar, its entries (edit, remove) and a field to add one. Every
// change goes through `apply`, which sends it to the API; this module only shows state and
// collects the person's edits.
//
// Entries are rendered as the chat renders answers (safe markdown: markdown.js). Each entry's
// origin line opens, on demand, every change that touched it.

import { $, button, el, focusQuietly } from "../dom.js";
import { renderMarkdown } from "../markdown.js";
import { timeElement } from "../time.js";
import { TARGETS, appliesText, scopeOf, shownTargets } from "./model.js";

const TITLES = { user: "About you", project: "Project notes", memory: "Agent notes" };

// Remember-until: the API's `expires_at` is when the entry leaves (a date's end, UTC); the
// panel shows and edits the last day it is kept.
export function lastDay(expiresAt) {
  const moment = new Date(expiresAt);
  const midnight = moment.getUTCHours() === 0 && moment.getUTCMinutes() === 0
    && moment.getUTCSeconds() === 0;
  if (midnight) moment.setUTCDate(moment.getUTCDate() - 1);
  return moment.toISOString().slice(0, 10);
}

function untilText(expiresAt) {
  const day = new Date(`${lastDay(expiresAt)}T00:00:00Z`);
  return `Kept until ${day.toLocaleDateString(undefined, { timeZone: "UTC", day: "numeric",
    month: "short", year: "numeric" })}`;
}

export class DocumentsSection {
  // apply(operations) -> Promise<boolean>: true when the API accepted the batch.
  // originOf(target, entry) -> string: where the entry came from ("" when not known).
  // historyOf(target, entry) -> [{text, createdAt, conversationId}]: every change to it.
  constructor({ root, apply, originOf = () => "", historyOf = () => [] }) {
    this.root = root;
    this.apply = apply;
    this.originOf = originOf;
    this.historyOf = historyOf;
    this.editors = 0;
    this.expiring = {}; // target -> Map(entry text -> expires_at)
    for (const form of root.querySelectorAll(".add-entry")) {
      form.addEventListener("submit", (event) => this.onAdd(event));
    }
  }

  // `projects`: the person's projects, for the labels (names, which use the general notes).
  render(state, projects = []) {
    const shown = shownTargets(state);
    // Unsaved edits stay over a re-render of the same place only, never into another project.
    const place = scopeOf(state).projectId;
    if (place !== this.place) this.dropDrafts();
    this.place = place;
    for (const target of TARGETS) {
      $(`doc-${target}`).hidden = !shown.includes(target);
      // A document of another place leaves the page, not only the view.
      if (shown.includes(target)) this.renderDocument(target, state[target]);
      else this.renderDocument(target, { entries: [], characters: 0, limit: 1 });
    }
    this.label(state, projects);
  }

  // Only the labels (the projects changed): the entries, and any editor open, stay as they are.
  label(state, projects) {
    const shown = shownTargets(state);
    for (const target of shown) {
      $(`doc-${target}-applies`).textContent = appliesText(target, state, projects);
    }
    const { projectId } = scopeOf(state);
    const project = projects.find((candidate) => candidate.id === projectId);
    $("doc-project-hint").textContent = project
      ? `Facts and conventions of “${project.name}”. Chats elsewhere never see them.`
      : "Facts and conventions of this project. Chats elsewhere never see them.";
    $("doc-memory-unused").hidden = projectId === null || shown.includes("memory");
  }

  renderDocument(target, doc) {
    const { entries, characters, limit } = doc;
    this.expiring[target] = new Map((doc.expiring || []).map((item) => [item.text, item.expires_at]));
    const percent = Math.min(100, Math.round((characters * 100) / limit));
    const meter = $(`doc-${target}-meter`);
    meter.setAttribute("aria-valuemax", String(limit));
    meter.setAttribute("aria-valuenow", String(characters));
    meter.setAttribute("aria-valuetext", `${characters} of ${limit} characters used (${percent}%)`);
    meter.dataset.level = percent >= 90 ? "high" : percent >= 70 ? "medium" : "low";
    meter.querySelector(".usage-fill").style.width = `${percent}%`;
    $(`doc-${target}-usage`).textContent =
      `${characters.toLocaleString()} / ${limit.toLocaleString()} characters`;
    const list = $(`doc-${target}-entries`);
    const drafts = this.drafts(list);
    list.replaceChildren(...entries.map((entry) => this.entryItem(target, entry)));
    this.reopen(list, target, entries, drafts);
    $(`doc-${target}-empty`).hidden = entries.length > 0 && !list.querySelector(".editing");
  }

  // The edits open in `list`, unsaved: {entry, value, focused, start, end}.
  drafts(list) {
    return [...list.querySelectorAll(":scope > li.editing:not([data-saving])")].map((item) => {
      const input = item.querySelector("textarea");
      return { entry: item.dataset.entry, value: input.value,
        focused: document.activeElement === input, start: input.selectionStart, end: input.selectionEnd };
    });
  }

  // A re-render (a turn saved something, another tab changed memory) keeps each unsaved edit,
  // text, caret and focus: on its entry when it is still there, otherwise at the end, saying
  // that saving adds it as a new entry.
  reopen(list, target, entries, drafts) {
    for (const draft of drafts) {
      const index = entries.indexOf(draft.entry);
      let item = index >= 0 ? list.children[index] : null;
      if (!item) {
        item = el("li", { className: "entry" });
        list.append(item);
      }
      this.startEdit(item, target, draft.entry, { draft, gone: index < 0 });
    }
  }

  entryItem(target, entry) {
    const item = el("li", { className: "entry" });
    const edit = button("Edit", () => this.startEdit(item, target, entry), {
      iconName: "edit", iconOnly: true, label: `Edit: ${entry}` });
    const remove = button("Remove", () => this.apply([{ target, action: "remove", match: entry }]), {
      iconName: "trash", iconOnly: true, label: `Remove: ${entry}` });
    const summary = el("summary", { className: "muted small", text: this.originOf(target, entry) });
    const origin = el("details", { className: "entry-origin" }, [summary, el("ol", { className: "origin-list" })]);
    origin.dataset.target = target;
    origin.dataset.entry = entry;
    origin.hidden = !summary.textContent;
    origin.addEventListener("toggle", () => { if (origin.open) this.fillOrigin(origin); });
    const text = el("div", { className: "entry-text markdown" });
    renderMarkdown(text, entry);
    const expiresAt = this.expiryOf(target, entry);
    const until = el("p", { className: "entry-until muted small",
      text: expiresAt ? untilText(expiresAt) : "" });
    until.hidden = !expiresAt;
    const body = el("div", { className: "entry-body" }, [text, until, origin]);
    item.append(body, el("div", { className: "entry-actions" }, [edit, remove]));
    return item;
  }

  // The full origin, built when opened: each change to the entry with its exact time and a
  // link to its conversation.
  fillOrigin(origin) {
    const lines = this.historyOf(origin.dataset.target, origin.dataset.entry);
    origin.querySelector("ol").replaceChildren(...lines.map(({ text, createdAt, conversationId }) => {
      const parts = [`${text} · `, timeElement(createdAt)];
      if (conversationId) {
        parts.push(" · ", el("a", { text: "open conversation", attrs: {
          href: `/c/${encodeURIComponent(conversationId)}`, "data-conversation": conversationId } }));
      }
      return el("li", { className: "small" }, parts);
    }));
  }

  // The history arrived or changed: only the origin lines are rewritten, never the entries
  // (an editor opened meanwhile stays as it is).
  updateOrigins() {
    for (const origin of this.root.querySelectorAll(".entry-origin")) {
      const text = this.originOf(origin.dataset.target, origin.dataset.entry);
      origin.querySelector("summary").textContent = text;
      origin.hidden = !text;
      if (origin.open) this.fillOrigin(origin);
    }
  }

  expiryOf(target, entry) {
    const known = this.expiring[target];
    return known ? known.get(entry) || null : null;
  }

  // Enter saves, Shift+Enter starts a new line, Escape cancels (as the message editor).
  // `draft`: an unsaved edit carried over a re-render; `gone`: its entry changed meanwhile.
  startEdit(item, target, entry, { draft = null, gone = false } = {}) {
    const id = `edit-${target}-${crypto.randomUUID()}`;
    const input = el("textarea", { attrs: { id, rows: "3", required: "" } });
    input.value = draft ? draft.value : entry;
    // Remember until: the last day the entry is kept (empty: kept until removed).
    const expiresAt = gone ? null : this.expiryOf(target, entry);
    const kept = expiresAt ? lastDay(expiresAt) : "";
    const untilInput = el("input", { className: "until-input", attrs: { type: "date",
      id: `${id}-until`, min: new Date().toISOString().slice(0, 10) } });
    untilInput.value = kept;
    const restore = () => {
      if (gone) {
        item.remove();
        return;
      }
      const fresh = this.entryItem(target, entry);
      item.replaceWith(fresh);
      focusQuietly(fresh.querySelector("button"));
    };
    const parts = [
      el("label", { className: "visually-hidden", text: `Edit entry in “${TITLES[target]}”`,
        attrs: { for: id } }),
      input,
      el("label", { className: "until-field small", attrs: { for: `${id}-until` } },
        [el("span", { text: "Keep until" }), untilInput]),
      el("div", { className: "edit-actions" }, [
        button("Cancel", restore, { className: "secondary small" }),
        button("Save", null, { className: "primary small", type: "submit" }),
      ]),
    ];
    if (gone) {
      parts.unshift(el("p", { className: "small edit-gone", attrs: { role: "status" },
        text: "This entry was changed or removed meanwhile. Save adds your text as a new entry." }));
    }
    const form = el("form", { className: "edit-entry" }, parts);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const content = input.value.trim();
      const day = untilInput.value;
      if (!content || (content === entry && day === kept && !gone)) return restore();
      const operation = gone ? { target, action: "add", content }
        : { target, action: "replace", match: entry, content };
      if (gone ? day : day !== kept) operation.until = day || null; // cleared: kept until removed
      item.dataset.saving = "true"; // saved, the edit is no draft to keep over the re-render
      const saved = await this.apply([operation]);
      delete item.dataset.saving;
      if (saved && gone && item.isConnected) item.remove();
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.stopPropagation();
        restore();
      } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    item.replaceChildren(form);
    item.classList.add("editing");
    item.dataset.entry = entry;
    if (!draft || draft.focused) {
      focusQuietly(input);
      if (draft) input.setSelectionRange(draft.start, draft.end);
    }
  }

  async onAdd(event) {
    event.preventDefault();
    const form = event.currentTarget;
    const input = form.querySelector("input");
    const content = input.value.trim();
    if (!content) return;
    if (await this.apply([{ target: form.dataset.target, action: "add", content }])) {
      input.value = "";
      focusQuietly(input);
    }
  }

  // Every open editor closes, unsaved text and all (sign-out, another place).
  dropDrafts() {
    for (const target of TARGETS) $(`doc-${target}-entries`).replaceChildren();
  }

  reset() {
    this.dropDrafts();
    this.place = undefined;
    for (const target of TARGETS) {
      this.renderDocument(target, { entries: [], characters: 0, limit: 1 });
      $(`doc-${target}-usage`).textContent = "";
      $(`doc-${target}-applies`).textContent = "";
      $(`doc-${target}`).hidden = target === "project";
    }
    $("doc-memory-unused").hidden = true;
    for (const input of this.root.querySelectorAll("input")) input.value = "";
  }
}
