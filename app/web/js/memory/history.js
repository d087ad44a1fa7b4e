// The memory panel's history section: each committed change, newest first, with where it came
// from and an Undo button. Undo goes through `undo(id)`, which asks the API; this module only
// shows the changes it is given.

import { button, el } from "../dom.js";
import { timeElement } from "../time.js";
import { operationText, sourceText } from "./origins.js";

export class HistorySection {
  // undo(change) -> Promise<void>; more() -> Promise<void> loads the next page.
  constructor({ root, undo, more }) {
    this.root = root;
    this.undo = undo;
    this.list = root.querySelector("ul");
    this.empty = root.querySelector(".empty");
    this.moreButton = root.querySelector("[data-action=more]");
    this.moreButton.addEventListener("click", () => more());
  }

  render({ changes, next, titles }) {
    // A change already undone says so instead of offering Undo again (the API would refuse).
    const undone = new Set(changes.map((change) => change.undoes).filter(Boolean));
    this.list.replaceChildren(...changes.map((change) => this.item(change, titles, undone.has(change.id))));
    this.empty.hidden = changes.length > 0;
    this.moreButton.hidden = !next;
  }

  item(change, titles, undone) {
    const lines = change.operations.map((operation) =>
      el("p", { className: "change-text", text: operationText(operation) }));
    const summary = lines.map((line) => line.textContent).join("; ");
    const undo = undone ? el("span", { className: "muted small undone", text: "Undone" })
      : button("Undo", () => this.undo(change), { className: "secondary small", label: `Undo: ${summary}` });
    const meta = el("p", { className: "change-meta muted small" },
      [`${capitalize(sourceText(change, titles))} · `, timeElement(change.created_at)]);
    return el("li", { className: "change", attrs: { "data-source": change.source } },
      [el("div", { className: "change-body" }, [...lines, meta]), undo]);
  }

  reset() {
    this.list.replaceChildren();
    this.empty.hidden = false;
    this.moreButton.hidden = true;
  }
}

function capitalize(text) {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
