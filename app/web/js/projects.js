// The sidebar's projects: each project as a row that opens its page (/p/<id>), its
// conversations listed under it, and "New project" (a name, then its page opens).
//
// Rows only show and ask: the conversation rows are the conversation list's (conversations.js),
// and what opening or creating a project does is the page's.

import { describe, isSessionEnd } from "./api.js";
import { button, el, focusQuietly } from "./dom.js";

export class ProjectRows {
  // onOpen(projectId), onCreated(project) and onError(text) are the page's.
  constructor({ root, empty, newButton, form, input, onOpen, onCreated, onError }) {
    Object.assign(this, { root, empty, newButton, form, input, onOpen, onCreated, onError });
    this.client = null;
    newButton.addEventListener("click", () => this.showForm(this.form.hidden));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.create();
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.stopPropagation(); // the drawer stays open on a phone
        this.showForm(false);
      }
    });
  }

  attach(client) {
    this.client = client;
  }

  showForm(shown) {
    this.form.hidden = !shown;
    this.newButton.setAttribute("aria-expanded", String(shown));
    if (shown) focusQuietly(this.input);
    else {
      this.input.value = "";
      focusQuietly(this.newButton);
    }
  }

  // `conversationsOf(project)`: the list items of its conversations.
  render(projects, conversationsOf) {
    this.root.replaceChildren(...projects.map((project) => {
      const open = button(project.name, () => this.onOpen(project.id), {
        className: "open project-open", iconName: "folder" });
      open.dataset.project = project.id;
      open.title = project.name;
      // The same place as the row (the project's page is a new chat in it), named for what it does.
      const start = button("New chat", () => this.onOpen(project.id), { className: "new-in-project",
        iconName: "new-chat", iconOnly: true, label: `New chat in ${project.name}` });
      const items = conversationsOf(project);
      const row = el("li", { className: "project" },
        [el("div", { className: "conversation" }, [open, start])]);
      if (items.length) {
        row.append(el("ul", { className: "project-conversations",
          attrs: { "aria-label": `Conversations in ${project.name}` } }, items));
      }
      return row;
    }));
    this.empty.hidden = projects.length > 0;
  }

  markCurrent(projectId) {
    for (const open of this.root.querySelectorAll(".project-open")) {
      if (open.dataset.project === projectId) open.setAttribute("aria-current", "page");
      else open.removeAttribute("aria-current");
    }
  }

  async create() {
    const name = this.input.value.trim();
    if (!name || !this.client) return;
    let project;
    try {
      project = await this.client.request("/v1/projects", { method: "POST", body: { name } });
    } catch (error) {
      if (!isSessionEnd(error)) this.onError(`Could not create the project: ${describe(error)}`);
      return;
    }
    this.form.hidden = true;
    this.input.value = "";
    this.newButton.setAttribute("aria-expanded", "false");
    await this.onCreated(project);
  }

  reset() {
    this.client = null;
    this.root.replaceChildren();
    this.empty.hidden = true;
    this.form.hidden = true;
    this.input.value = "";
    this.newButton.setAttribute("aria-expanded", "false");
  }
}
