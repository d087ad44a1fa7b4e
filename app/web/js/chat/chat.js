// The chat: the current conversation, its messages, the composer and the turn in flight. Its
// address follows the conversation shown (router.js). The chat is in a place: a project (the
// project of its conversation, or the project whose page is open) or outside projects; the
// memory panel follows that place.

import { ApiError, describe, isSessionEnd } from "../api.js";
import { Refusal } from "./refusal.js";
import { Turn } from "./turn.js";

export class Chat {
  // onPlace(conversationId, projectId) is called whenever the place changes.
  // `temporary`: the switch and banner of temporary chats (temporary.js).
  constructor({ view, composer, conversations, memory, notice, router, temporary, onNavigate = () => {},
    onStreaming = () => {}, onSettled = () => {}, onTitle = () => {}, onPlace = () => {} }) {
    this.view = view;
    this.composer = composer;
    this.conversations = conversations;
    this.memory = memory;
    this.notice = notice;
    this.onNavigate = onNavigate;
    this.onStreaming = onStreaming;
    this.onSettled = onSettled;
    this.onTitle = onTitle;
    this.onPlace = onPlace;
    this.router = router;
    this.temporary = temporary;
    this.client = null;
    this.conversationId = null;
    this.projectId = null; // the place's project (null: outside projects)
    this.turn = null;
    this.opening = 0; // the latest open request wins
    // Under each answer's sources: "Wrong" and its Undo, and "History", through the panel.
    view.sourceActions = {
      wrong: (entry) => memory.wrongEntry(entry),
      undo: (changeId, entry) => memory.undoWrong(changeId, entry),
      asks: () => memory.extras.saveMode === "ask",
      history: (entry) => memory.reveal(entry),
    };
    this.refusal = new Refusal({ element: document.getElementById("send-wait"), notice });
  }

  attach(client) {
    this.client = client;
  }

  get streaming() {
    return this.turn !== null;
  }

  // `fromAddress`: the address already says where we are (Back, Forward, a reload).
  // `projectId`: a new chat in that project (its page, /p/<id>).
  newConversation({ fromAddress = false, projectId = null } = {}) {
    if (this.turn) return;
    this.opening += 1;
    this.conversationId = null;
    this.view.clear();
    this.notice.clear();
    if (!fromAddress) this.router.show(null, { project: projectId });
    this.temporary.offer(!projectId);
    this.place(null, projectId);
    this.onTitle(null);
    this.onNavigate();
    this.composer.focus();
  }

  place(conversationId, projectId) {
    this.projectId = projectId || null;
    this.conversations.markCurrent(conversationId, this.projectId);
    this.memory.setScope(this.projectId);
    this.onPlace(conversationId, this.projectId);
  }

  // The address names a project that is not the person's (or no longer exists).
  projectNotFound() {
    if (this.turn || this.conversationId) return;
    this.place(null, null);
    this.view.showNotFound(() => this.newConversation(), { what: "Project" });
  }

  // `hit` opens the conversation at one message: a search result (its role and created_at) or
  // a message an answer's sources cite (`messageId`, its id), briefly highlighted there.
  // onNavigate gets the time the opening began: a drawer opened since stays open.
  async open(id, hit = null, { fromAddress = false } = {}) {
    if (this.turn) return;
    const began = performance.now();
    const ticket = ++this.opening;
    if (!fromAddress) this.router.show(id);
    let conversation;
    try {
      conversation = await this.client.request(`/v1/conversations/${encodeURIComponent(id)}`);
    } catch (error) {
      if (ticket !== this.opening || isSessionEnd(error)) return;
      if (error instanceof ApiError && error.status === 404) {
        // Another person's conversation, or a deleted one: a place that does not exist here.
        this.conversationId = null;
        this.place(null, null);
        this.onTitle(null);
        this.view.showNotFound(() => this.newConversation());
        this.onNavigate(began);
      } else {
        this.notice.show(`Could not open the conversation: ${describe(error)}`, "error");
      }
      return;
    }
    if (ticket !== this.opening || this.turn) return;
    this.conversationId = id;
    this.notice.clear();
    this.onTitle(conversation.title, id);
    this.temporary.opened(conversation.temporary);
    this.view.showTranscript(conversation.messages);
    this.place(id, conversation.project_id);
    this.memory.relabel();
    if (hit && hit.messageId !== undefined) {
      this.view.reveal(conversation.messages.findIndex((message) => message.id === hit.messageId),
        { flash: true });
    } else if (hit) {
      this.view.reveal(conversation.messages.findIndex(
        (message) => message.role === hit.role && message.created_at === hit.created_at));
    }
    this.onNavigate(began);
    this.composer.focus();
  }

  // The conversation was deleted: a conversation in a project gives way to the project's page.
  async deleted(id) {
    if (id === this.conversationId) this.newConversation({ projectId: this.projectId });
  }

  // `replaces`: the turn this message regenerates or edits; it and the turns after it fold
  // away as earlier versions.
  async send(message, { replaces = null } = {}) {
    if (this.turn) return;
    this.notice.clear();
    this.refusal.clear();
    this.opening += 1;
    if (replaces) this.view.supersede(replaces);
    const now = new Date().toISOString();
    const question = this.view.addUser(message, now);
    const answer = this.view.addAnswer({ streaming: true });
    const turn = new Turn({
      client: this.client,
      message,
      conversationId: this.conversationId,
      projectId: this.projectId,
      replaces,
      temporary: !this.conversationId && this.temporary.wanted,
      answer,
      onStart: (conversationId, status, turnId) => {
        question.dataset.turn = turnId;
        if (conversationId && conversationId !== this.conversationId) {
          this.conversationId = conversationId;
          this.router.show(conversationId, { replace: true }); // the new chat got its address
          this.onPlace(conversationId, this.projectId);
        }
        // A temporary chat's `disabled` is the chat's, not memory's: the panel keeps its own.
        if (this.temporary.active) this.temporary.opened(true);
        else this.memory.setStatus(status);
      },
      onError: (text) => this.notice.show(text, "error"),
      // A proposal waits for the person: its card shows at once, while the answer streams on.
      onMemory: (event) => { if (event.outcome === "proposed") this.memory.proposalsChanged(); },
    });
    this.turn = turn;
    const before = this.memory.turnStarted();
    this.setStreaming(true);
    try {
      await turn.run();
    } finally {
      if (this.turn === turn) {
        this.turn = null;
        this.setStreaming(false);
      }
    }
    if (turn.ended || !this.client) return;
    if (turn.refused) {
      this.refused(turn, message, question, answer);
      return;
    }
    await this.conversations.load();
    this.conversations.markCurrent(this.conversationId, this.projectId);
    if (!this.temporary.active) {
      this.onTitle(this.conversations.titleOf(this.conversationId), this.conversationId);
    }
    turn.labelMemory(await this.memory.turnEnded(turn, before));
    this.memory.relabel(); // labelled as a reload labels it (memory/status.js)
    this.onSettled();
  }

  // A limit refused the message before its turn began: nothing was stored, so the page shows
  // nothing of it either (as after a reload); the text goes back into the message box (unless
  // the person already typed something new) and the countdown says when to send it again.
  refused(turn, message, question, answer) {
    question.remove();
    answer.element.remove();
    this.view.changed();
    if (!this.composer.input.value.trim()) this.composer.fill(message);
    this.refusal.show(turn.refused);
    // A refused regenerate or edit replaced nothing: the stored transcript is shown again.
    if (turn.replaces && this.conversationId) this.open(this.conversationId, null, { fromAddress: true });
  }

  stop() {
    if (this.turn) this.turn.stop();
  }

  setStreaming(streaming) {
    this.composer.setStreaming(streaming);
    this.view.setBusy(streaming);
    this.conversations.setBusy(streaming);
    this.onStreaming(streaming);
  }

  // The session ended: abort the turn and drop everything shown.
  reset() {
    if (this.turn) {
      this.turn.ended = true;
      this.turn.controller.abort();
      this.turn = null;
    }
    this.client = null;
    this.conversationId = null;
    this.projectId = null;
    this.opening += 1;
    this.setStreaming(false);
    this.view.clear();
    this.notice.clear();
    this.refusal.clear();
    this.composer.reset();
    this.temporary.reset();
  }
}
