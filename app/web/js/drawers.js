// The two side panels: columns beside the chat on a wide screen, drawers over it on a narrow
// one. On a wide screen the memory panel can be folded away; on a narrow one at most one drawer
// is open, the chat behind it is inert, and Escape or the backdrop closes it.

import { focusQuietly } from "./dom.js";

const NARROW = window.matchMedia("(max-width: 900px)");
const PANEL_PREFERENCE = "agent-memory-panel"; // a device preference, not personal data

export class Drawers {
  constructor({ workspace, chat, scrim, panels }) {
    this.workspace = workspace;
    this.chat = chat;
    this.scrim = scrim;
    this.panels = panels; // {name: {element, toggle}}
    this.open = null; // the open drawer on a narrow screen
    this.openedAt = -Infinity; // when the person last opened one (performance.now())
    this.memoryFolded = localStorage.getItem(PANEL_PREFERENCE) === "folded";
    for (const [name, { element, toggle }] of Object.entries(panels)) {
      toggle.addEventListener("click", () => this.toggle(name));
      for (const close of element.querySelectorAll("[data-close]")) {
        close.addEventListener("click", () => (this.narrow ? this.close() : this.toggle(name)));
      }
    }
    scrim.addEventListener("click", () => this.close());
    document.addEventListener("keydown", (event) => {
      // Escape in a dialog over the drawer closes the dialog only.
      if (event.key === "Escape" && this.open && !event.defaultPrevented
        && !event.target.closest("dialog")) this.close();
    });
    NARROW.addEventListener("change", () => {
      this.open = null;
      this.apply();
    });
    this.apply();
  }

  get narrow() {
    return NARROW.matches;
  }

  toggle(name) {
    if (!this.narrow) {
      if (name === "memory") {
        this.memoryFolded = !this.memoryFolded;
        localStorage.setItem(PANEL_PREFERENCE, this.memoryFolded ? "folded" : "shown");
        this.apply();
      }
      return;
    }
    if (this.open === name) this.close();
    else this.show(name);
  }

  show(name) {
    this.open = name;
    this.openedAt = performance.now();
    this.apply();
    focusQuietly(this.panels[name].element.querySelector("[data-close]"));
  }

  // Closes the open drawer (narrow screens); focus goes back to the button that opened it.
  // `openedBefore`: a navigation that began then closes only a drawer opened before it, never
  // one the person opened while it loaded (a tap right after a reload).
  close({ restoreFocus = true, openedBefore = Infinity } = {}) {
    if (!this.open || this.openedAt > openedBefore) return;
    const { toggle } = this.panels[this.open];
    this.open = null;
    this.apply();
    if (restoreFocus) focusQuietly(toggle);
  }

  apply() {
    const narrow = this.narrow;
    for (const [name, { toggle }] of Object.entries(this.panels)) {
      const shown = narrow ? this.open === name : !(name === "memory" && this.memoryFolded);
      this.workspace.dataset[name] = shown ? "open" : "closed";
      toggle.setAttribute("aria-expanded", String(shown));
    }
    const covering = narrow && this.open !== null;
    this.scrim.hidden = !covering;
    this.chat.inert = covering;
  }
}
