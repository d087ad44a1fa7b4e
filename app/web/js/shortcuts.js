// Keyboard shortcuts for what a person does most: a new chat (Ctrl/⌘+Shift+O) and searching
// the conversations (Ctrl/⌘+K). They are listed in the Keyboard shortcuts dialog, and the
// buttons they stand for name them in their tooltips.

const MAC = /Mac|iPhone|iPad/.test(navigator.platform || navigator.userAgent);
export const MOD = MAC ? "⌘" : "Ctrl";

// `newChat()` and `search()` do the work; `dialog` lists the shortcuts, `opener` opens it.
export function wireShortcuts({ newChat, search, dialog, opener, closer }) {
  for (const key of dialog.querySelectorAll("kbd[data-mod]")) key.textContent = MOD;
  opener.addEventListener("click", () => dialog.showModal());
  closer.addEventListener("click", () => dialog.close());
  document.addEventListener("keydown", (event) => {
    if (!(event.ctrlKey || event.metaKey) || event.altKey || event.isComposing) return;
    if (document.querySelector("dialog[open]")) return; // a dialog keeps the keyboard
    const key = event.key.toLowerCase();
    if (key === "o" && event.shiftKey) {
      event.preventDefault();
      newChat();
    } else if (key === "k" && !event.shiftKey) {
      event.preventDefault();
      search();
    }
  });
}
