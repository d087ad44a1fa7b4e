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
import { PAGE, fileButtons, pagePath, readPages } from "./conversation-actions.js";

export class ConversationList {
  // onOpen(id), onDeleted(id), onError(text) are the chat's; onLoaded() runs after each load
  // (projects and titles may have changed); `projectRows` draws the projects (projects.js).
  // `more` is the "Show more" button, `archiveToggle` the "Archived" view's switch.
  constructor({ container, empty, projectRows, onOpen, onDeleted, onError, onLoaded = () => {},
    more = null, archiveToggle = null }) {
    this.container = container;
    this.more = more;
    this.archiveToggle = archiveToggle;
    this.archived = false; // the Archived view is shown
    this.next = null; // the cursor of the next page (null: all loaded)
    if (more) more.addEventListener("click", () => this.loadMore());
    if (archiveToggle) archiveToggle.addEventListener("click", () => this.showArchived(!this.archived));
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
    this.titles = new Map(); // id -> title, from every page loaded
    this.conversations = [];
    this.projects = [];
    this.loaded = false; // the projects are known (a project missing from them is not the person's)
  }

  attach(client) {
    this.client = client;
  }

  // Reads the list again (as many rows as were shown, at least a page) and the projects.
  async load() {
    const client = this.client;
    const archived = this.archived;
    try {
      const [body, projects] = await Promise.all([
        readPages(client, { archived, atLeast: Math.max(PAGE, this.conversations.length) }),
        client.request("/v1/projects"),
      ]);
      if (client !== this.client || archived !== this.archived) return;
      this.next = body.next;
      // Added to, not replaced: the open conversation may be on no page shown (the Archived
      // view, a page not loaded yet) and its header still needs its title.
      for (const c of body.conversations) this.titles.set(c.id, c.title);
      this.conversations = body.conversations;
      this.projects = projects.projects;
      this.loaded = true;
      this.render(body.conversations);
      this.onLoaded();
    } catch (error) {
      if (!isSessionEnd(error)) this.onError(`Could not load conversations: ${describe(error)}`);
    }
  }

  // The next page, added below ("Show more").
  async loadMore() {
    const client = this.client;
    const { next, archived } = this;
    if (!client || !next) return;
    try {
      const body = await client.request(pagePath({ archived, before: next }));
      if (client !== this.client || archived !== this.archived || next !== this.next) return;
      this.next = body.next;
      this.conversations = [...this.conversations, ...body.conversations];
      for (const c of body.conversations) this.titles.set(c.id, c.title);
      this.render(this.conversations);
    } catch (error) {
      if (!isSessionEnd(error)) this.onError(`Could not load more conversations: ${describe(error)}`);
    }
  }

  // The Archived view lists the archived conversations in place of the others.
  async showArchived(archived) {
    this.archived = archived;
    this.conversations = [];
    this.next = null;
    if (this.archiveToggle) {
      this.archiveToggle.setAttribute("aria-pressed", String(archived));
      this.archiveToggle.querySelector(".label").textContent = archived ? "Back to conversations" : "Archived";
    }
    this.container.closest("#sidebar-lists")?.classList.toggle("archived-view", archived);
    await this.load();
  }

  async change(id, flags) {
    try {
      await this.client.request(`/v1/conversations/${encodeURIComponent(id)}`, { method: "PATCH", body: flags });
    } catch (error) {
      if (!isSessionEnd(error)) this.onError(`Could not change the conversation: ${describe(error)}`);
      return;
    }
    await this.load();
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
    // The Archived view lists every archived conversation, projects' too, in one list.
    const outside = conversations.filter((conversation) => this.archived
      || !this.project(conversation.project_id));
    for (const conversation of outside) {
      const when = parseTimestamp(conversation.updated_at) || now;
      const heading = this.archived ? "Archived" : conversation.pinned ? "Pinned" : dayGroup(when, now);
      if (!groups.has(heading)) groups.set(heading, []);
      groups.get(heading).push(this.item(conversation, when));
    }
    const sections = [...groups].map(([heading, items]) => el("section", { className: "group" }, [
      el("h3", { className: "group-title", text: heading }),
      el("ul", {}, items),
    ]));
    this.container.replaceChildren(...sections);
    this.empty.hidden = conversations.length > 0;
    this.empty.textContent = this.archived ? "No archived conversations."
      : "No conversations yet. Your chats appear here.";
    if (this.more) this.more.hidden = !this.next;
    this.projectRows.render(this.archived ? [] : this.projects, (project) => this.inProject(project.id)
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
    const filing = fileButtons(conversation, title, (id, flags) => this.change(id, flags));
    return el("li", { className: "conversation" }, [open, ...filing, remove]);
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

  showArchivedReset() {
    this.archived = false;
    if (this.archiveToggle) {
      this.archiveToggle.setAttribute("aria-pressed", "false");
      this.archiveToggle.querySelector(".label").textContent = "Archived";
    }
    this.container.closest("#sidebar-lists")?.classList.remove("archived-view");
  }

  reset() {
    this.client = null;
    this.titles = new Map();
    this.conversations = [];
    this.projects = [];
    this.loaded = false;
    this.next = null;
    if (this.archived) this.showArchivedReset();
    this.currentId = null;
    this.currentProject = null;
    this.busy = false;
    this.container.replaceChildren();
    this.projectRows.reset();
    this.empty.hidden = true;
    if (this.more) this.more.hidden = true;
  }
}
