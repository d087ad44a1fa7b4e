// The message list: the person's messages as plain text, the assistant's as rendered markdown,
// each with its local time; answers also carry activity chips, notes and a Copy button. The
// welcome shows while the list is empty.
//
// Each message knows its turn (`data-turn`). The person can edit any of their messages and
// regenerate the latest answer; what a new turn replaced stays on the page, folded under
// "Earlier version" (the transcript keeps what the person saw: docs/api.md).

import { button, el } from "../dom.js";
import { timeElement } from "../time.js";
import { storedLabel } from "../memory/status.js";
import { Answer, answerOf } from "./answer.js";

// How long a message an answer cited stays highlighted once its link opened it.
const CITED_MS = 2500;

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
    this.sourceActions = null; // what "Wrong" and "History" under an answer do (set by the chat)
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

  // A regenerated answer offers `< 2/2 >`: the answers it replaced (earlier versions of the
  // same question, folded just above it) shown in its place, one at a time.
  markVersions() {
    for (const answer of this.list.querySelectorAll(":scope > .message.assistant")) {
      const question = answer.previousElementSibling;
      if (!question || !question.classList.contains("user")) continue;
      const text = question.querySelector(".content").textContent;
      const earlier = [];
      for (let fold = question.previousElementSibling; fold && fold.classList.contains("earlier-versions");
        fold = fold.previousElementSibling) {
        const [asked, answered, ...rest] = fold.querySelectorAll(":scope > details > ol > li");
        if (rest.length || !answered || !asked.classList.contains("user")
          || !answered.classList.contains("assistant")
          || asked.querySelector(".content").textContent !== text) break;
        earlier.unshift(answered);
      }
      this.offerVersions(answer, earlier);
    }
  }

  offerVersions(answer, earlier) {
    const meta = answer.querySelector(".message-meta");
    const shown = meta.querySelector(":scope > .versions");
    if (!earlier.length || (shown && Number(shown.dataset.count) === earlier.length + 1)) return;
    if (shown) shown.remove();
    const versions = [...earlier.map((item) => answerOf.get(item).source), null];
    const count = el("span", { className: "version-count", attrs: { "aria-live": "polite" } });
    let index = versions.length - 1;
    const show = (next) => {
      index = Math.max(0, Math.min(versions.length - 1, next));
      count.textContent = `${index + 1}/${versions.length}`;
      previous.disabled = index === 0;
      following.disabled = index === versions.length - 1;
      answerOf.get(answer).showVersion(versions[index]);
    };
    const previous = button("Previous version", () => show(index - 1), {
      className: "version-previous", iconName: "chevron-left", iconOnly: true });
    const following = button("Next version", () => show(index + 1), {
      className: "version-next", iconName: "chevron-right", iconOnly: true });
    const group = el("span", { className: "versions",
      attrs: { role: "group", "aria-label": "Versions of this answer" } }, [previous, count, following]);
    group.dataset.count = String(versions.length);
    meta.prepend(group);
    count.textContent = `${versions.length}/${versions.length}`;
    previous.disabled = false;
    following.disabled = true;
  }

  clear() {
    this.transcript = [];
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
    if (message.sources) answer.showSources(message.sources);
    const memory = storedLabel(message.sources);
    if (memory) answer.memoryChip(memory);
    return answer.element;
  }

  // A stored conversation, exactly as `GET /v1/conversations/{id}` returns its messages: the
  // page replays the turns in order, as it showed them live: where a turn replaced earlier
  // ones, everything from the first replaced message on folds away before the turn's own
  // messages (so a fold stays just above the version that replaced it, across reloads).
  showTranscript(messages) {
    this.clear();
    const firstReplaced = new Map(); // replacing turn -> the first item it replaced
    const items = messages.map((message) => (message.role === "user"
      ? this.userItem(message.content, message.created_at, message.turn_id)
      : this.answerItem(message)));
    messages.forEach((message, index) => {
      const by = message.superseded_by;
      if (by && !firstReplaced.has(by)) firstReplaced.set(by, items[index]);
    });
    const seen = new Set();
    messages.forEach((message, index) => {
      if (!seen.has(message.turn_id)) {
        seen.add(message.turn_id);
        const first = firstReplaced.get(message.turn_id);
        if (first && first.parentElement === this.list) this.foldFrom(first);
      }
      this.list.append(items[index]);
    });
    this.transcript = items;
    this.markVersions();
    this.changed();
    this.follower.reset();
  }

  // Folds `item` and every later item of the current transcript into one earlier version.
  foldFrom(item) {
    const children = [...this.list.children];
    const start = children.indexOf(item);
    const marker = el("li");
    item.before(marker);
    marker.replaceWith(this.fold(children.slice(start)));
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
    const item = [...this.list.children].find((child) => child.dataset.turn === turnId);
    if (!item) return;
    this.foldFrom(item);
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

  // The address names a conversation (or, with `what`, a project) that is not the person's or
  // no longer exists.
  showNotFound(onNew, { what = "Conversation" } = {}) {
    this.clear();
    this.welcome.hidden = true;
    const view = el("li", { className: "not-found", attrs: { role: "status" } }, [
      el("h2", { text: `${what} not found` }),
      el("p", { className: "muted", text: "It may have been deleted, or it belongs to another "
        + (what === "Conversation" ? "account. Your own conversations are listed under Conversations."
          : "account. Your own projects are listed under Projects.") }),
      button("Start a new chat", onNew, { className: "primary", iconName: "new-chat" }),
    ]);
    this.list.append(view);
  }

  // A search hit: the message at `index` of the transcript, scrolled to and marked (following
  // stops, so the view stays there until the person scrolls or jumps to the latest). A hit in
  // an earlier version opens its fold. `flash`: a cited message, highlighted for a moment.
  reveal(index, { flash = false } = {}) {
    const item = (this.transcript || [])[index];
    if (!item) return;
    const fold = item.closest("details");
    if (fold) fold.open = true;
    if (flash) {
      item.classList.add("cited-message");
      setTimeout(() => item.classList.remove("cited-message"), CITED_MS);
    } else {
      item.classList.add("search-hit-message");
    }
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
