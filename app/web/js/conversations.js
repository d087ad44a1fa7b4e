// The conversation list: the signed-in person's conversations grouped by day of last activity,
// each with a readable title (up to three lines, the whole title as a tooltip), Rename and
// Delete.
//
// `render` takes any list of conversations in the API's shape, so a search over conversations
// can show its results through it.

import { describe, isSessionEnd } from "./api.js";
import { confirmAction } from "./dialog.js";
import { button, el } from "./dom.js";
import { dayGroup, fullWhen, parseTimestamp } from "./time.js";

export class ConversationList {
  // onOpen(id), onDeleted(id), onError(text) are the chat's; the list only shows and asks.
  constructor({ container, empty, onOpen, onDeleted, onError, onRenamed = () => {} }) {
    this.container = container;
    this.onRenamed = onRenamed;
    this.titles = new Map();
    this.empty = empty;
    this.onOpen = onOpen;
    this.onDeleted = onDeleted;
    this.onError = onError;
    this.client = null;
    this.currentId = null;
    this.busy = false;
  }

  attach(client) {
    this.client = client;
  }

  async load() {
    try {
      const body = await this.client.request("/v1/conversations");
      this.lastLoaded = body.conversations;
      this.render(body.conversations);
    } catch (error) {
      if (!isSessionEnd(error)) this.onError(`Could not load conversations: ${describe(error)}`);
    }
  }

  titleOf(id) {
    return this.titles.get(id) || null;
  }

  render(conversations) {
    // The API's list also feeds the titles (a search's subset leaves them as they are).
    if (conversations === this.lastLoaded) this.titles = new Map(conversations.map((c) => [c.id, c.title]));
    const now = new Date();
    const groups = new Map();
    for (const conversation of conversations) {
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
    this.markCurrent(this.currentId);
    this.setBusy(this.busy);
  }

  item(conversation, when) {
    const title = conversation.title || "New conversation";
    const open = button(title, () => this.onOpen(conversation.id), { className: "open" });
    open.title = `${title}\n${fullWhen(when)}`;
    open.dataset.id = conversation.id;
    const remove = button("Delete", () => this.remove(conversation.id, title), {
      className: "delete", iconName: "trash", iconOnly: true,
      label: `Delete conversation: ${title}` });
    const item = el("li", { className: "conversation" }, [open]);
    const rename = button("Rename", () => this.startRename(item, conversation.id, title), {
      className: "rename", iconName: "edit", iconOnly: true, label: `Rename conversation: ${title}` });
    item.append(rename, remove);
    return item;
  }

  // The title becomes a field: Enter saves it (PATCH), Escape or leaving the field cancels.
  startRename(item, id, title) {
    if (this.busy) return;
    const parts = [...item.children];
    const input = el("input", { className: "rename-input", attrs: { maxlength: "200",
      "aria-label": "Conversation title", autocomplete: "off" } });
    input.value = title;
    let done = false;
    const restore = () => {
      if (done) return;
      done = true;
      item.replaceChildren(...parts);
      parts[1].focus({ preventScroll: true });
    };
    input.addEventListener("keydown", async (event) => {
      if (event.key === "Escape") {
        event.stopPropagation();
        restore();
      } else if (event.key === "Enter") {
        event.preventDefault();
        const wanted = input.value.trim();
        if (!wanted || wanted === title) return restore();
        done = true;
        await this.rename(id, wanted);
      }
    });
    input.addEventListener("blur", restore);
    item.replaceChildren(input);
    input.focus();
    input.select();
  }

  async rename(id, title) {
    try {
      const renamed = await this.client.request(`/v1/conversations/${encodeURIComponent(id)}`,
        { method: "PATCH", body: { title } });
      this.onRenamed(id, renamed.title);
    } catch (error) {
      if (!isSessionEnd(error)) this.onError(`Could not rename the conversation: ${describe(error)}`);
    }
    await this.load();
  }

  markCurrent(id) {
    this.currentId = id;
    for (const open of this.container.querySelectorAll(".open")) {
      if (open.dataset.id === id) open.setAttribute("aria-current", "page");
      else open.removeAttribute("aria-current");
    }
  }

  // While an answer streams, switching or deleting conversations waits.
  setBusy(busy) {
    this.busy = busy;
    for (const control of this.container.querySelectorAll("button")) control.disabled = busy;
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
    this.lastLoaded = null;
    this.currentId = null;
    this.busy = false;
    this.container.replaceChildren();
    this.empty.hidden = true;
  }
}
