// The conversation list: the signed-in person's projects, each with its conversations, then the
// conversations outside projects grouped by day of last activity; each with a readable title
// (up to three lines, the whole title as a tooltip) and Delete.
//
// The list is also where the page learns the person's projects (`projects`, `project(id)`):
// the project rows are drawn by projects.js, the conversation rows here.

import { describe, isSessionEnd } from "./api.js";
import { confirmAction } from "./dialog.js";
import { button, el } from "./dom.js";
import { conversationPath } from "./router.js";
import { dayGroup, fullWhen, parseTimestamp } from "./time.js";

export class ConversationList {
  // onOpen(id), onDeleted(id), onError(text) are the chat's; onLoaded() runs after each load
  // (projects and titles may have changed); `projectRows` draws the projects (projects.js).
  constructor({ container, empty, projectRows, onOpen, onDeleted, onError, onLoaded = () => {} }) {
    this.container = container;
    this.empty = empty;
    this.projectRows = projectRows;
    this.onOpen = onOpen;
    this.onDeleted = onDeleted;
    this.onError = onError;
    this.onLoaded = onLoaded;
    this.client = null;
    this.currentId = null;
    this.currentProject = null;
    this.busy = false;
    this.titles = new Map(); // id -> title, from the last full list
    this.conversations = [];
    this.projects = [];
    this.loaded = false; // the projects are known (a project missing from them is not the person's)
  }

  attach(client) {
    this.client = client;
  }

  async load() {
    const client = this.client;
    try {
      const [body, projects] = await Promise.all([
        client.request("/v1/conversations"),
        client.request("/v1/projects"),
      ]);
      if (client !== this.client) return;
      this.titles = new Map(body.conversations.map((c) => [c.id, c.title]));
      this.conversations = body.conversations;
      this.projects = projects.projects;
      this.loaded = true;
      this.render(body.conversations);
      this.onLoaded();
    } catch (error) {
      if (!isSessionEnd(error)) this.onError(`Could not load conversations: ${describe(error)}`);
    }
  }

  titleOf(id) {
    return this.titles.get(id) || null;
  }

  project(id) {
    return (id && this.projects.find((project) => project.id === id)) || null;
  }

  // The conversations of one project (newest first, as the API lists them).
  inProject(projectId) {
    return this.conversations.filter((conversation) => conversation.project_id === projectId);
  }

  render(conversations) {
    const now = new Date();
    const groups = new Map();
    const outside = conversations.filter((conversation) => !this.project(conversation.project_id));
    for (const conversation of outside) {
      const when = parseTimestamp(conversation.updated_at) || now;
      const heading = dayGroup(when, now);
      if (!groups.has(heading)) groups.set(heading, []);
      groups.get(heading).push(this.item(conversation, when));
    }
    const sections = [...groups].map(([heading, items]) => el("section", { className: "group" }, [
      el("h3", { className: "group-title", text: heading }),
      el("ul", {}, items),
    ]));
    this.container.replaceChildren(...sections);
    this.empty.hidden = conversations.length > 0;
    this.projectRows.render(this.projects, (project) => this.inProject(project.id)
      .map((conversation) => this.item(conversation, parseTimestamp(conversation.updated_at) || now)));
    this.markCurrent(this.currentId, this.currentProject);
    this.setBusy(this.busy);
  }

  item(conversation, when) {
    const title = conversation.title || "New conversation";
    // A real link: "open in new tab", "copy link" and a middle click work; a plain click opens
    // it in place.
    const open = el("a", { className: "open", attrs: { href: conversationPath(conversation.id) } },
      [el("span", { className: "label", text: title })]);
    open.addEventListener("click", (event) => {
      if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return;
      event.preventDefault();
      if (!this.busy) this.onOpen(conversation.id);
    });
    open.title = `${title}\n${fullWhen(when)}`;
    open.dataset.id = conversation.id;
    const remove = button("Delete", () => this.remove(conversation.id, title), {
      className: "delete", iconName: "trash", iconOnly: true,
      label: `Delete conversation: ${title}` });
    return el("li", { className: "conversation" }, [open, remove]);
  }

  // `id`: the open conversation; `projectId`: the project whose page is open (no conversation).
  markCurrent(id, projectId = null) {
    this.currentId = id;
    this.currentProject = id ? null : projectId;
    for (const root of [this.container, this.projectRows.root]) {
      for (const open of root.querySelectorAll(".conversation .open")) {
        if (open.dataset.id === id) open.setAttribute("aria-current", "page");
        else open.removeAttribute("aria-current");
      }
    }
    this.projectRows.markCurrent(this.currentProject);
  }

  // While an answer streams, switching or deleting conversations waits.
  setBusy(busy) {
    this.busy = busy;
    for (const root of [this.container, this.projectRows.root]) {
      for (const control of root.querySelectorAll("button")) control.disabled = busy;
      for (const link of root.querySelectorAll(".conversation a.open")) {
        if (busy) link.setAttribute("aria-disabled", "true");
        else link.removeAttribute("aria-disabled");
      }
    }
  }

  async remove(id, title) {
    const confirmed = await confirmAction({
      title: "Delete this conversation?",
      text: `“${title}” and its messages are removed. Memory is not touched.`,
      confirm: "Delete",
    });
    if (!confirmed) return;
    try {
      await this.client.request(`/v1/conversations/${encodeURIComponent(id)}`, { method: "DELETE" });
    } catch (error) {
      if (!isSessionEnd(error)) this.onError(`Could not delete the conversation: ${describe(error)}`);
      return;
    }
    await this.onDeleted(id);
    await this.load();
  }

  reset() {
    this.client = null;
    this.titles = new Map();
    this.conversations = [];
    this.projects = [];
    this.loaded = false;
    this.currentId = null;
    this.currentProject = null;
    this.busy = false;
    this.container.replaceChildren();
    this.projectRows.reset();
    this.empty.hidden = true;
  }
}
