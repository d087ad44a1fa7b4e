// The message list: the person's messages as plain text, the assistant's as rendered markdown,
// each with its local time; answers also carry activity chips, notes and a Copy button. The
// welcome shows while the list is empty.
//
// Each message knows its turn (`data-turn`). The person can edit any of their messages and
// regenerate the latest answer; what a new turn replaced stays on the page, folded under
// "Earlier version" (the transcript keeps what the person saw: docs/api.md).

import { copyText, flashCopied } from "../clipboard.js";
import { button, el } from "../dom.js";
import { renderMarkdown } from "../markdown.js";
import { timeElement } from "../time.js";

function avatar() {
  const image = el("img", { className: "avatar-mark", attrs: { src: "/static/favicon.svg", alt: "",
    width: "28", height: "28" } });
  return el("div", { className: "message-avatar", attrs: { "aria-hidden": "true" } }, [image]);
}

// One assistant answer, live while it streams.
export class Answer {
  constructor(view, { streaming }) {
    this.view = view;
    this.source = "";
    this.frame = 0;
    this.content = el("div", { className: "content markdown" });
    this.activity = el("div", { className: "activity" });
    this.notes = el("div", { className: "notes" });
    this.meta = el("div", { className: "message-meta" });
    this.typing = el("div", { className: "typing", attrs: { "aria-hidden": "true" } },
      [el("span"), el("span"), el("span")]);
    this.typing.hidden = !streaming;
    const body = el("div", { className: "message-body" }, [
      el("span", { className: "visually-hidden", text: "Assistant:" }),
      this.activity, this.content, this.typing, this.notes, this.meta,
    ]);
    this.element = el("li", { className: "message assistant" }, [avatar(), body]);
    this.setState(streaming ? "streaming" : "done");
  }

  append(text) {
    this.source += text;
    this.typing.hidden = true;
    if (!this.frame) this.frame = requestAnimationFrame(() => this.render());
  }

  setText(text) {
    this.source = text;
    this.render();
  }

  // Renders what has arrived now (at most once a frame while streaming).
  render() {
    cancelAnimationFrame(this.frame);
    this.frame = 0;
    renderMarkdown(this.content, this.source);
    this.view.changed();
  }

  setState(state) {
    this.element.dataset.state = state;
    for (const name of ["streaming", "done", "stopped", "failed"]) {
      this.element.classList.toggle(name, name === state);
    }
    if (state !== "streaming") this.typing.hidden = true;
  }

  // A small label above the answer for something done during the turn (a memory update, a
  // search); returned so that the turn can update it when the outcome is known.
  chip(text, kind = "") {
    const chip = el("span", { className: `chip ${kind}`.trim(), text });
    this.activity.append(chip);
    this.view.changed();
    return chip;
  }

  note(text, kind = "") {
    this.notes.append(el("p", { className: `note ${kind}`.trim(), text }));
    this.view.changed();
  }

  setTurn(turnId) {
    if (turnId) this.element.dataset.turn = turnId;
  }

  // The answer is final: its time, a Copy button for its text, and Regenerate (shown on the
  // latest answer only).
  finish(createdAt) {
    this.render();
    const parts = [timeElement(createdAt)];
    if (this.source.trim()) {
      const copy = button("Copy", null, { className: "copy-answer", iconName: "copy",
        label: "Copy answer" });
      copy.addEventListener("click", async () => flashCopied(copy, await copyText(this.source)));
      parts.push(copy);
    }
    parts.push(button("Regenerate", () => this.view.regenerate(this.element), {
      className: "regenerate", iconName: "refresh", iconOnly: true, label: "Regenerate answer" }));
    this.meta.replaceChildren(...parts);
    this.view.changed();
  }
}

function plural(count, one, many) {
  return `${count} ${count === 1 ? one : many}`;
}

export class MessageView {
  // regenerate(turnId, text) and edit(turnId, text) start the turn that replaces `turnId`.
  constructor({ list, welcome, follower, onRegenerate = () => {}, onEdit = () => {} }) {
    this.list = list;
    this.welcome = welcome;
    this.follower = follower;
    this.onRegenerate = onRegenerate;
    this.onEdit = onEdit;
    this.busy = false;
  }

  changed() {
    this.welcome.hidden = this.list.children.length > 0;
    this.markLatest();
    this.follower.contentChanged();
  }

  // Only the latest answer of the current transcript offers Regenerate.
  markLatest() {
    const answers = this.list.querySelectorAll(":scope > .message.assistant");
    answers.forEach((answer, index) => answer.classList.toggle("latest", index === answers.length - 1));
  }

  clear() {
    this.list.replaceChildren();
    this.list.removeAttribute("aria-busy");
    this.welcome.hidden = false;
    this.follower.reset();
  }

  userItem(text, createdAt, turnId) {
    const content = el("p", { className: "content", text });
    const bubble = el("div", { className: "bubble" }, [
      el("span", { className: "visually-hidden", text: "You:" }), content,
    ]);
    const item = el("li", { className: "message user" }, [bubble]);
    const edit = button("Edit", () => this.startEdit(item, content.textContent), {
      className: "edit-message", iconName: "edit", iconOnly: true, label: "Edit message" });
    item.append(el("div", { className: "message-meta" }, [timeElement(createdAt), edit]));
    if (turnId) item.dataset.turn = turnId;
    return item;
  }

  addUser(text, createdAt, turnId = null) {
    const item = this.userItem(text, createdAt, turnId);
    this.list.append(item);
    this.follower.reset();
    this.changed();
    return item;
  }

  addAnswer({ streaming = false, turnId = null } = {}) {
    const answer = new Answer(this, { streaming });
    answer.setTurn(turnId);
    this.list.append(answer.element);
    this.changed();
    return answer;
  }

  answerItem(message) {
    const answer = new Answer(this, { streaming: false });
    answer.setTurn(message.turn_id);
    answer.setText(message.content);
    if (message.status === "interrupted") {
      answer.setState("stopped");
      answer.note("Stopped: this answer is incomplete.", "warn");
    } else if (message.status === "failed") {
      answer.setState("failed");
      answer.note("This answer failed.", "bad");
    }
    answer.finish(message.created_at);
    return answer.element;
  }

  // A stored conversation, exactly as `GET /v1/conversations/{id}` returns its messages: the
  // current transcript, with what each turn replaced folded just before it.
  showTranscript(messages) {
    this.clear();
    const replaced = new Map(); // replacing turn -> the items it replaced, in order
    const firstOfTurn = new Map();
    const items = [];
    for (const message of messages) {
      const item = message.role === "user"
        ? this.userItem(message.content, message.created_at, message.turn_id)
        : this.answerItem(message);
      if (!firstOfTurn.has(message.turn_id)) firstOfTurn.set(message.turn_id, item);
      if (message.superseded_by) {
        if (!replaced.has(message.superseded_by)) replaced.set(message.superseded_by, []);
        replaced.get(message.superseded_by).push(item);
      } else {
        items.push(item);
      }
    }
    this.list.replaceChildren(...items);
    for (const [turnId, earlier] of replaced) {
      const anchor = firstOfTurn.get(turnId);
      const fold = this.fold(earlier);
      if (anchor && anchor.parentElement) anchor.before(fold);
      else this.list.append(fold);
    }
    this.changed();
    this.follower.reset();
  }

  // Earlier versions, folded: a details element in the list holding the replaced items.
  fold(items) {
    const summary = items.length > 2
      ? `Earlier version (${plural(items.length, "message", "messages")}, replaced)`
      : "Earlier version (replaced)";
    const list = el("ol", { className: "messages earlier" }, items);
    return el("li", { className: "earlier-versions" }, [
      el("details", {}, [el("summary", { text: summary }), list]),
    ]);
  }

  // A new turn replaces `turnId`: that turn and every later one in the current transcript are
  // folded away (kept on the page, as the server keeps them).
  supersede(turnId) {
    const children = [...this.list.children];
    const start = children.findIndex((item) => item.dataset.turn === turnId);
    if (start < 0) return;
    const marker = el("li");
    children[start].before(marker);
    marker.replaceWith(this.fold(children.slice(start)));
    this.changed();
  }

  regenerate(answerElement) {
    if (this.busy) return;
    const turnId = answerElement.dataset.turn;
    const question = this.list.querySelector(`:scope > .message.user[data-turn="${CSS.escape(turnId || "")}"] .content`);
    if (turnId && question) this.onRegenerate(turnId, question.textContent);
  }

  // The person's message becomes an editor; Send starts the turn that replaces this one.
  startEdit(item, text) {
    if (this.busy || !item.dataset.turn) return;
    const id = `edit-${crypto.randomUUID()}`;
    const input = el("textarea", { attrs: { id, rows: "3", required: "" } });
    input.value = text;
    const parts = [...item.children];
    const restore = () => {
      item.replaceChildren(...parts);
      item.classList.remove("editing");
      parts[1].querySelector(".edit-message")?.focus({ preventScroll: true });
    };
    const form = el("form", { className: "edit-message-form" }, [
      el("label", { className: "visually-hidden", text: "Edit your message", attrs: { for: id } }),
      input,
      el("div", { className: "edit-actions" }, [
        button("Cancel", restore, { className: "secondary small" }),
        button("Send", null, { className: "primary small", type: "submit" }),
      ]),
    ]);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const edited = input.value.trim();
      if (!edited || this.busy) return;
      restore();
      this.onEdit(item.dataset.turn, edited);
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.stopPropagation();
        restore();
      } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    item.replaceChildren(form);
    item.classList.add("editing");
    input.focus({ preventScroll: true });
  }

  // The address names a conversation that is not the person's (or no longer exists).
  showNotFound(onNew) {
    this.clear();
    this.welcome.hidden = true;
    const view = el("li", { className: "not-found", attrs: { role: "status" } }, [
      el("h2", { text: "Conversation not found" }),
      el("p", { className: "muted", text: "It may have been deleted, or it belongs to another "
        + "account. Your own conversations are listed under Conversations." }),
      button("Start a new chat", onNew, { className: "primary", iconName: "new-chat" }),
    ]);
    this.list.append(view);
  }

  // A search hit: the message at `index` of the transcript, scrolled to and marked (following
  // stops, so the view stays there until the person scrolls or jumps to the latest).
  reveal(index) {
    const item = this.list.children[index];
    if (!item) return;
    item.classList.add("search-hit-message");
    this.follower.pinned = false;
    item.scrollIntoView({ block: "center" });
    this.follower.lastTop = this.follower.scroller.scrollTop;
    this.follower.update();
  }

  // While an answer streams the log is busy: screen readers announce it once it is complete
  // rather than token by token.
  setBusy(busy) {
    this.busy = busy;
    if (busy) this.list.setAttribute("aria-busy", "true");
    else this.list.removeAttribute("aria-busy");
    for (const control of this.list.querySelectorAll(".edit-message, .regenerate")) control.disabled = busy;
  }
}
