// The open conversation's title in the chat's header, and Rename: the title becomes a field,
// Enter saves it (`PATCH /v1/conversations/{id}`), Escape cancels. The tab's title follows.
// Beside it, the project the chat is in (a link to the project's page) and "Move to a project".

import { describe, isSessionEnd } from "../api.js";
import { $, el } from "../dom.js";
import { icon } from "../icons.js";

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
    this.project = null;
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
    this.heading.title = title || ""; // the whole title, where the header has to cut it
    this.heading.hidden = false;
    this.tabTitle();
    this.renameButton.hidden = !id;
    $("chat-head").classList.toggle("titled", Boolean(title));
    this.closeEditor();
  }

  // `project`: the project the chat is in ({id, name}, or null); `conversationId`: the open
  // conversation, which can be moved (null: a new chat).
  showProject(project, conversationId) {
    const link = $("chat-project");
    link.hidden = !project;
    link.replaceChildren();
    if (project) {
      link.append(icon("folder"), el("span", { className: "label", text: project.name }));
      link.href = `/p/${encodeURIComponent(project.id)}`;
      link.dataset.project = project.id;
      link.title = `Project: ${project.name}`;
      link.setAttribute("aria-label", `Project: ${project.name}`);
    } else {
      delete link.dataset.project;
    }
    $("move-conversation").hidden = !conversationId;
    this.project = project;
    this.tabTitle();
  }

  // The tab says where the person is: the conversation, else the project whose page is open.
  tabTitle() {
    const shown = this.title || (this.project ? this.project.name : null);
    document.title = shown ? `${shown} · ${APP}` : APP;
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
    this.showProject(null, null);
    this.show(null);
  }
}
