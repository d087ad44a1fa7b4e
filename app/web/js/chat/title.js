// The open conversation's title in the chat's header, and Rename: the title becomes a field,
// Enter saves it (`PATCH /v1/conversations/{id}`), Escape cancels. The tab's title follows.

import { describe, isSessionEnd } from "../api.js";
import { $, el } from "../dom.js";

const APP = "Agent memory chat";

export class ChatTitle {
  // onRenamed(id, title) and onError(text) are the page's.
  constructor({ heading, renameButton, onRenamed, onError }) {
    this.heading = heading;
    this.renameButton = renameButton;
    this.onRenamed = onRenamed;
    this.onError = onError;
    this.client = null;
    this.conversationId = null;
    this.title = null;
    renameButton.addEventListener("click", () => this.startRename());
  }

  attach(client) {
    this.client = client;
  }

  // `id`: the conversation shown (null: a new chat or a not-found place, nothing to rename).
  show(title, id = null) {
    this.title = title;
    this.conversationId = id;
    this.heading.textContent = title || APP;
    this.heading.hidden = false;
    document.title = title ? `${title} · ${APP}` : APP;
    this.renameButton.hidden = !id;
    $("chat-head").classList.toggle("titled", Boolean(title));
    this.closeEditor();
  }

  startRename() {
    if (!this.conversationId || this.editor) return;
    const id = this.conversationId;
    const input = el("input", { className: "rename-input", attrs: { maxlength: "200",
      "aria-label": "Conversation title", autocomplete: "off" } });
    input.value = this.title || "";
    input.addEventListener("keydown", async (event) => {
      if (event.key === "Escape") {
        event.stopPropagation();
        this.closeEditor({ focus: true });
      } else if (event.key === "Enter") {
        event.preventDefault();
        const wanted = input.value.trim();
        if (!wanted || wanted === this.title) return this.closeEditor({ focus: true });
        await this.rename(id, wanted);
      }
    });
    input.addEventListener("blur", () => this.closeEditor());
    this.editor = input;
    this.heading.hidden = true;
    this.renameButton.hidden = true;
    this.heading.after(input);
    input.focus();
    input.select();
  }

  closeEditor({ focus = false } = {}) {
    if (!this.editor) return;
    const editor = this.editor;
    this.editor = null;
    editor.remove();
    this.heading.hidden = false;
    this.renameButton.hidden = !this.conversationId;
    if (focus) this.renameButton.focus({ preventScroll: true });
  }

  async rename(id, title) {
    try {
      const renamed = await this.client.request(`/v1/conversations/${encodeURIComponent(id)}`,
        { method: "PATCH", body: { title } });
      if (id === this.conversationId) this.show(renamed.title, id);
      await this.onRenamed(id, renamed.title);
    } catch (error) {
      if (!isSessionEnd(error)) this.onError(`Could not rename the conversation: ${describe(error)}`);
      this.closeEditor();
    }
  }

  reset() {
    this.client = null;
    this.show(null);
  }
}
