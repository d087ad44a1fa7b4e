// One assistant answer on the page, live while it streams: rendered markdown, activity chips
// above it, notes, and its time, Copy and Regenerate below it.

import { copyText, flashCopied } from "../clipboard.js";
import { button, el } from "../dom.js";
import { renderMarkdown } from "../markdown.js";
import { timeElement } from "../time.js";
import { hasSources, sourcesElement } from "./sources.js";

function avatar() {
  const image = el("img", { className: "avatar-mark", attrs: { src: "/static/favicon.svg", alt: "",
    width: "28", height: "28" } });
  return el("div", { className: "message-avatar", attrs: { "aria-hidden": "true" } }, [image]);
}

// Each answer element's Answer (its markdown source), for the version switcher (messages.js).
export const answerOf = new WeakMap();

// One assistant answer, live while it streams.
export class Answer {
  constructor(view, { streaming }) {
    this.view = view;
    this.source = "";
    this.frame = 0;
    this.content = el("div", { className: "content markdown" });
    this.activity = el("div", { className: "activity" });
    this.notes = el("div", { className: "notes" });
    this.meta = el("div", { className: "message-meta" });
    this.typing = el("div", { className: "typing", attrs: { "aria-hidden": "true" } },
      [el("span"), el("span"), el("span")]);
    this.typing.hidden = !streaming;
    const body = el("div", { className: "message-body" }, [
      el("span", { className: "visually-hidden", text: "Assistant:" }),
      this.activity, this.content, this.typing, this.notes, this.meta,
    ]);
    this.element = el("li", { className: "message assistant" }, [avatar(), body]);
    answerOf.set(this.element, this);
    this.setState(streaming ? "streaming" : "done");
  }

  append(text) {
    this.source += text;
    this.typing.hidden = true;
    if (!this.frame) this.frame = requestAnimationFrame(() => this.render());
  }

  setText(text) {
    this.source = text;
    this.render();
  }

  // Renders what has arrived now (at most once a frame while streaming).
  render() {
    cancelAnimationFrame(this.frame);
    this.frame = 0;
    renderMarkdown(this.content, this.source);
    this.view.changed();
  }

  setState(state) {
    this.element.dataset.state = state;
    for (const name of ["streaming", "done", "stopped", "failed"]) {
      this.element.classList.toggle(name, name === state);
    }
    if (state !== "streaming") this.typing.hidden = true;
  }

  // A small label above the answer for something done during the turn (a memory update, a
  // search); returned so that the turn can update it when the outcome is known.
  chip(text, kind = "") {
    const chip = el("span", { className: `chip ${kind}`.trim(), text });
    this.activity.append(chip);
    this.view.changed();
    return chip;
  }

  // A stored answer's memory chip (memory/status.js `storedLabel`), as the turn left it: the
  // panel's history and proposals relabel it as they do a live one.
  memoryChip({ text, kind, outcome }) {
    const chip = this.chip(text);
    chip.className = `chip memory-chip ${kind}`.trim();
    chip.dataset.outcome = outcome;
    if (this.element.dataset.turn) chip.dataset.turn = this.element.dataset.turn;
  }

  note(text, kind = "") {
    this.notes.append(el("p", { className: `note ${kind}`.trim(), text }));
    this.view.changed();
  }

  // What the answer was given and did: the quiet "Memory used" line below it.
  showSources(sources) {
    this.sources?.remove();
    this.sources = null;
    if (!hasSources(sources) || !this.view.sourceActions) return;
    this.sources = sourcesElement(sources, this.view.sourceActions);
    this.meta.before(this.sources);
    this.view.changed();
  }

  setTurn(turnId) {
    if (turnId) this.element.dataset.turn = turnId;
  }

  // The answer is final: its time, a Copy button for its text, and Regenerate (shown on the
  // latest answer only).
  finish(createdAt) {
    this.render();
    const parts = [timeElement(createdAt)];
    if (this.source.trim()) {
      const copy = button("Copy", null, { className: "copy-answer", iconName: "copy",
        label: "Copy answer" });
      copy.addEventListener("click", async () => flashCopied(copy, await copyText(this.source)));
      parts.push(copy);
    }
    parts.push(button("Regenerate", () => this.view.regenerate(this.element), {
      className: "regenerate", iconName: "refresh", iconOnly: true, label: "Regenerate answer" }));
    this.meta.replaceChildren(...parts);
    this.view.changed();
    this.view.markVersions();
  }

  // Shows `source` (an earlier version's text) in place of this answer's own, or, with null,
  // this answer again.
  showVersion(source) {
    const earlier = source !== null;
    renderMarkdown(this.content, earlier ? source : this.source);
    this.element.classList.toggle("showing-earlier", earlier);
    this.activity.hidden = earlier;
    this.view.changed();
  }
}
