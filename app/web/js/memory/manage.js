// The memory panel's manage section: the save mode ("Ask before saving"), Export and Forget
// everything. The requests are the panel's; this module wires the controls and shows the mode.

import { $ } from "../dom.js";

export class ManageSection {
  // setSaveMode("auto" | "ask"), exportAll() and forget() are the panel's.
  constructor({ root, setSaveMode, exportAll, forget }) {
    this.root = root;
    this.askFirst = $("ask-before-saving");
    this.askFirst.addEventListener("change", () => setSaveMode(this.askFirst.checked ? "ask" : "auto"));
    $("export-memory").addEventListener("click", exportAll);
    $("forget").addEventListener("click", forget);
  }

  // The switch can be used once the stored mode is known: a click before that would be
  // undone by the load that answers after it.
  render({ saveMode }) {
    if (!saveMode) return;
    this.askFirst.checked = saveMode === "ask";
    this.askFirst.disabled = false;
  }

  reset() {
    this.askFirst.checked = false;
    this.askFirst.disabled = true;
  }
}

function exportName(response) {
  const match = /filename="([^"]+)"/.exec(response.headers.get("content-disposition") || "");
  return match ? match[1] : "memory-export.json";
}

// The export's answer, saved as the file the server names.
export async function saveDownload(response) {
  const url = URL.createObjectURL(await response.blob());
  const link = document.createElement("a");
  link.href = url;
  link.download = exportName(response);
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
