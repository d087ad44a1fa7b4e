// The memory panel's manage section: the save mode ("Ask before saving"), Export and Forget
// everything, with their requests; what they change is shown through the panel.

import { describe, isSessionEnd } from "../api.js";
import { confirmAction } from "../dialog.js";
import { $, focusQuietly } from "../dom.js";

export class ManageSection {
  // `panel`: the memory panel (its client, notice, extras and load).
  constructor({ root, panel }) {
    this.root = root;
    this.panel = panel;
    this.askFirst = $("ask-before-saving");
    this.askFirst.addEventListener("change", () => this.setSaveMode(this.askFirst.checked ? "ask" : "auto"));
    this.recall = $("recall-chats");
    this.recall.addEventListener("change", () => this.setRecall(this.recall.checked));
    $("export-memory").addEventListener("click", () => this.exportAll());
    $("forget").addEventListener("click", () => this.forget());
  }

  // The switch can be used once the stored mode is known: a click before that would be
  // undone by the load that answers after it.
  render({ saveMode, recallChats }) {
    if (!saveMode) return;
    this.askFirst.checked = saveMode === "ask";
    this.askFirst.disabled = false;
    this.recall.checked = Boolean(recallChats);
    this.recall.disabled = false;
  }

  // Recall of earlier chats (docs/conversation-search.md): a setting of the person's.
  async setRecall(on) {
    const { panel } = this;
    panel.modeWrites += 1;
    try {
      const settings = await panel.client.request("/v1/memory/settings",
        { method: "PUT", body: { recall_chats: on } });
      panel.extras = { ...panel.extras, recallChats: settings.recall_chats };
      panel.notice.show(settings.recall_chats
        ? "Answers may now use snippets of your earlier chats."
        : "Answers no longer recall your earlier chats.", "success");
    } catch (error) {
      if (!isSessionEnd(error)) panel.notice.show(`Not changed: ${describe(error)}`, "error");
    }
    this.render(panel.extras);
  }

  async setSaveMode(mode) {
    const { panel } = this;
    panel.modeWrites += 1;
    try {
      const settings = await panel.client.request("/v1/memory/settings",
        { method: "PUT", body: { save_mode: mode } });
      panel.extras = { ...panel.extras, saveMode: settings.save_mode };
      panel.notice.show(settings.save_mode === "ask"
        ? "The assistant will ask before saving anything."
        : "The assistant saves what it learns as it goes.", "success");
    } catch (error) {
      if (!isSessionEnd(error)) panel.notice.show(`Not changed: ${describe(error)}`, "error");
    }
    this.render(panel.extras);
  }

  async exportAll() {
    try {
      await saveDownload(await this.panel.client.fetch("/v1/memory/export"));
      this.panel.notice.show("Export downloaded: your memory, its history and your conversations.", "success");
    } catch (error) {
      if (!isSessionEnd(error)) this.panel.notice.show(`Could not export: ${describe(error)}`, "error");
    }
  }

  // Everywhere: the API's forget without a project deletes every project's notes too.
  async forget() {
    const { panel } = this;
    const confirmed = await confirmAction({
      title: "Forget everything?",
      text: "What is remembered everywhere (about you, your notes and every project's notes), "
        + "its history and pending proposals are deleted for good. Projects, conversations and "
        + "your save setting are kept.",
      confirm: "Forget everything",
    });
    if (!confirmed) return;
    try {
      await panel.client.request("/v1/memory", { method: "DELETE" });
    } catch (error) {
      if (!isSessionEnd(error)) panel.notice.show(`Could not forget: ${describe(error)}`, "error");
      return;
    }
    await panel.load();
    panel.notice.show("Everything was forgotten.", "success");
    focusQuietly($("forget"));
  }

  reset() {
    this.askFirst.checked = false;
    this.askFirst.disabled = true;
    this.recall.checked = false;
    this.recall.disabled = true;
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
