// The conversation list: the signed-in person's conversations grouped by day of last activity,
// each with a readable title (up to three lines, the whole title as a tooltip) and Delete.
//
// `render` takes any list of conversations in the API's shape, so a search over conversations
// can show its results through it.

import { describe, isSessionEnd } from "./api.js";
import { confirmAction } from "./dialog.js";
import { button, el } from "./dom.js";
import { dayGroup, fullWhen, parseTimestamp } from "./time.js";

export class ConversationList {
  // onOpen(id), onDeleted(id), onError(text) are the chat's; the list only shows and asks.
  constructor({ container, empty, onOpen, onDeleted, onError }) {
    this.container = container;
    this.empty = empty;
    this.onOpen = onOpen;
    this.onDeleted = onDeleted;
    this.onError = onError;
    this.client = null;
    this.currentId = null;
    this.busy = false;
    this.titles = new Map(); // id -> title, from the last full list
  }

  attach(client) {
    this.client = client;
  }

  async load() {
    try {
      const body = await this.client.request("/v1/conversations");
      this.titles = new Map(body.conversations.map((c) => [c.id, c.title]));
      this.render(body.conversations);
    } catch (error) {
      if (!isSessionEnd(error)) this.onError(`Could not load conversations: ${describe(error)}`);
    }
  }

  titleOf(id) {
    return this.titles.get(id) || null;
  }

  render(conversations) {
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
    return el("li", { className: "conversation" }, [open, remove]);
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
    this.currentId = null;
    this.busy = false;
    this.container.replaceChildren();
    this.empty.hidden = true;
  }
}
