// A project's page (/p/<id>), shown where a new chat's welcome is: its name (Rename), Delete,
// the switch that lets it use the general agent notes, and its conversations. Writing in the
// composer there starts a conversation in the project.
//
// Deleting a project that has conversations asks what becomes of them: deleted with it, or
// moved out (they become conversations outside projects), as the API requires
// (`?conversations=delete|detach`, 409 `project_not_empty` otherwise).

import { ApiError, describe, isSessionEnd } from "./api.js";
import { chooseAction, confirmAction } from "./dialog.js";
import { $, el, focusQuietly } from "./dom.js";
import { fullWhen, parseTimestamp, relativeWhen } from "./time.js";

function plural(count, one, many) {
  return `${count} ${count === 1 ? one : many}`;
}

export class ProjectPage {
  // onOpen(conversationId); onChanged(project) after a rename or a settings change;
  // onDeleted(projectId, choice) with choice "delete" | "detach" | null (it was empty);
  // onError(text).
  constructor({ welcome, onOpen, onChanged, onDeleted, onError }) {
    Object.assign(this, { welcome, onOpen, onChanged, onDeleted, onError });
    this.root = $("project-home");
    this.heading = $("project-home-title");
    this.general = $("project-general-memory");
    this.client = null;
    this.project = null;
    this.editor = null;
    $("rename-project").addEventListener("click", () => this.startRename());
    $("delete-project").addEventListener("click", () => this.remove());
    this.general.addEventListener("change", () => this.setGeneralMemory(this.general.checked));
  }

  attach(client) {
    this.client = client;
  }

  // `project`: the project whose page is shown (null: the ordinary welcome); `conversations`:
  // its conversations in the API's shape.
  show(project, conversations = []) {
    const same = this.project && project && this.project.id === project.id;
    this.project = project;
    this.root.hidden = !project;
    this.welcome.classList.toggle("in-project", Boolean(project));
    this.welcome.setAttribute("aria-labelledby", project ? "project-home-title" : "welcome-title");
    if (!project) {
      this.closeEditor();
      return;
    }
    if (!same) this.closeEditor();
    this.heading.textContent = project.name;
    this.general.checked = Boolean(project.general_memory);
    const now = new Date();
    $("project-chats").replaceChildren(...conversations.map((conversation) => {
      const title = conversation.title || "New conversation";
      const when = parseTimestamp(conversation.updated_at) || now;
      const open = el("button", { className: "project-chat",
        attrs: { type: "button", title: fullWhen(when) } }, [
        el("span", { className: "project-chat-title", text: title }),
        el("span", { className: "muted small", text: relativeWhen(when, now) }),
      ]);
      open.addEventListener("click", () => this.onOpen(conversation.id));
      return el("li", {}, [open]);
    }));
    $("project-chats-empty").hidden = conversations.length > 0;
  }

  startRename() {
    if (!this.project || this.editor) return;
    const id = this.project.id;
    const input = el("input", { className: "rename-input", attrs: { maxlength: "100",
      "aria-label": "Project name", autocomplete: "off" } });
    input.value = this.project.name;
    input.addEventListener("keydown", async (event) => {
      if (event.key === "Escape") {
        event.stopPropagation();
        this.closeEditor({ focus: true });
      } else if (event.key === "Enter") {
        event.preventDefault();
        const wanted = input.value.trim();
        if (!wanted || wanted === this.project.name) return this.closeEditor({ focus: true });
        await this.save(id, { name: wanted }, "Could not rename the project");
        this.closeEditor({ focus: true });
      }
    });
    input.addEventListener("blur", () => this.closeEditor());
    this.editor = input;
    this.heading.hidden = true;
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
    if (focus) focusQuietly($("rename-project"));
  }

  async setGeneralMemory(on) {
    if (!this.project) return;
    const saved = await this.save(this.project.id, { general_memory: on },
      "Could not change the project's settings");
    if (!saved) this.general.checked = Boolean(this.project && this.project.general_memory);
  }

  // PATCH /v1/projects/{id}; the project as the API answered it, or null (the error is shown).
  async save(id, changes, failure) {
    let project;
    try {
      project = await this.client.request(`/v1/projects/${encodeURIComponent(id)}`,
        { method: "PATCH", body: changes });
    } catch (error) {
      if (!isSessionEnd(error)) this.onError(`${failure}: ${describe(error)}`);
      return null;
    }
    if (this.project && this.project.id === id) {
      this.project = { ...this.project, ...project };
      this.heading.textContent = project.name;
      this.general.checked = Boolean(project.general_memory);
    }
    await this.onChanged(project);
    return project;
  }

  // What becomes of the project's conversations, asked in the person's words.
  async ask(project, count) {
    if (!count) {
      const confirmed = await confirmAction({
        title: `Delete the project “${project.name}”?`,
        text: "Its notes and their history are deleted for good. Your profile and your "
          + "general agent notes are not touched.",
        confirm: "Delete project",
      });
      return confirmed ? "empty" : null;
    }
    const [them, they] = count === 1 ? ["it", "it stays"] : ["them", "they stay"];
    const answer = await chooseAction({
      title: `Delete the project “${project.name}”?`,
      text: `Its notes and their history are deleted for good. It has ${plural(count,
        "conversation", "conversations")}: delete ${them} too, or move ${them} out of the `
        + `project (${they}, outside projects, without its notes).`,
      confirm: count === 1 ? "Delete its conversation" : `Delete its ${count} conversations`,
      alternative: `Move ${them} out`,
    });
    return { ok: "delete", alt: "detach" }[answer] || null;
  }

  async remove(count = null) {
    const project = this.project;
    if (!project || !this.client) return;
    const choice = await this.ask(project, count ?? project.conversation_count ?? 0);
    if (!choice) return;
    const query = choice === "empty" ? "" : `?conversations=${choice}`;
    try {
      await this.client.request(`/v1/projects/${encodeURIComponent(project.id)}${query}`,
        { method: "DELETE" });
    } catch (error) {
      if (isSessionEnd(error)) return;
      if (error instanceof ApiError && error.code === "project_not_empty") {
        // A conversation started in it meanwhile (another tab): ask again, with the count.
        const conversations = error.details && error.details.conversations;
        return this.remove(Number.isInteger(conversations) && conversations > 0 ? conversations : 1);
      }
      this.onError(`Could not delete the project: ${describe(error)}`);
      return;
    }
    await this.onDeleted(project.id, choice === "empty" ? null : choice);
  }

  reset() {
    this.client = null;
    this.show(null);
    this.heading.textContent = "";
    this.general.checked = false;
    $("project-chats").replaceChildren();
  }
}

// "Move to a project": the open conversation's project, chosen from the person's projects
// (or none); PATCH /v1/conversations/{id} with `project_id`.
export class MoveDialog {
  // onMoved(conversationId, projectId | null) and onError(text) are the page's.
  constructor({ onMoved }) {
    this.onMoved = onMoved;
    this.dialog = $("move-dialog");
    this.select = $("move-project");
    this.status = $("move-status");
    this.client = null;
    this.conversationId = null;
    $("move-cancel").addEventListener("click", () => this.dialog.close());
    $("move-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.move();
    });
  }

  attach(client) {
    this.client = client;
  }

  open(conversationId, projectId, projects) {
    if (!this.client || !conversationId) return;
    this.conversationId = conversationId;
    const options = [el("option", { text: "No project (chats outside projects)", attrs: { value: "" } }),
      ...projects.map((project) => el("option", { text: project.name, attrs: { value: project.id } }))];
    this.select.replaceChildren(...options);
    this.select.value = projectId || "";
    this.status.textContent = "";
    this.dialog.showModal();
    focusQuietly(this.select);
  }

  async move() {
    const id = this.conversationId;
    const projectId = this.select.value || null;
    $("move-ok").disabled = true;
    try {
      await this.client.request(`/v1/conversations/${encodeURIComponent(id)}`,
        { method: "PATCH", body: { project_id: projectId } });
    } catch (error) {
      if (!isSessionEnd(error)) this.status.textContent = `Could not move it: ${describe(error)}`;
      return;
    } finally {
      $("move-ok").disabled = false;
    }
    this.dialog.close();
    await this.onMoved(id, projectId);
  }

  reset() {
    this.client = null;
    this.conversationId = null;
    if (this.dialog.open) this.dialog.close();
    this.select.replaceChildren(); // the person's project names leave the page too
  }
}
