// The message list: the person's messages as plain text, the assistant's as rendered markdown,
// each with its local time; answers also carry activity chips, notes and a Copy button. The
// welcome shows while the list is empty.

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

  // The answer is final: its time and, when there is text, a Copy button for all of it.
  finish(createdAt) {
    this.render();
    const parts = [timeElement(createdAt)];
    if (this.source.trim()) {
      const copy = button("Copy", null, { className: "copy-answer", iconName: "copy",
        label: "Copy answer" });
      copy.addEventListener("click", async () => flashCopied(copy, await copyText(this.source)));
      parts.push(copy);
    }
    this.meta.replaceChildren(...parts);
    this.view.changed();
  }
}

export class MessageView {
  constructor({ list, welcome, follower }) {
    this.list = list;
    this.welcome = welcome;
    this.follower = follower;
  }

  changed() {
    this.welcome.hidden = this.list.children.length > 0;
    this.follower.contentChanged();
  }

  clear() {
    this.list.replaceChildren();
    this.list.removeAttribute("aria-busy");
    this.welcome.hidden = false;
    this.follower.reset();
  }

  addUser(text, createdAt) {
    const bubble = el("div", { className: "bubble" }, [
      el("span", { className: "visually-hidden", text: "You:" }),
      el("p", { className: "content", text }),
    ]);
    const meta = el("div", { className: "message-meta" }, [timeElement(createdAt)]);
    const item = el("li", { className: "message user" }, [bubble, meta]);
    this.list.append(item);
    this.follower.reset();
    this.changed();
    return item;
  }

  addAnswer({ streaming = false } = {}) {
    const answer = new Answer(this, { streaming });
    this.list.append(answer.element);
    this.changed();
    return answer;
  }

  // A stored conversation, exactly as `GET /v1/conversations/{id}` returns its messages.
  showTranscript(messages) {
    this.clear();
    for (const message of messages) {
      if (message.role === "user") {
        this.addUser(message.content, message.created_at);
        continue;
      }
      const answer = this.addAnswer();
      answer.setText(message.content);
      if (message.status === "interrupted") {
        answer.setState("stopped");
        answer.note("Stopped: this answer is incomplete.", "warn");
      } else if (message.status === "failed") {
        answer.setState("failed");
        answer.note("This answer failed.", "bad");
      }
      answer.finish(message.created_at);
    }
    this.follower.reset();
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
    if (busy) this.list.setAttribute("aria-busy", "true");
    else this.list.removeAttribute("aria-busy");
  }
}
