// The web client's start: the workspace, signing in and what ties them together, including the
// sign-out that leaves nothing of the previous person on the page.

import { AccountDeletion } from "./account.js";
import { ApiClient, describe, fetchInfo } from "./api.js";
import { Composer } from "./chat/composer.js";
import { Chat } from "./chat/chat.js";
import { Follower } from "./chat/follow.js";
import { MessageView } from "./chat/messages.js";
import { TemporaryChat } from "./chat/temporary.js";
import { ChatTitle } from "./chat/title.js";
import { ConversationList } from "./conversations.js";
import { ConversationSearch } from "./search.js";
import { closeDialogs } from "./dialog.js";
import { $, drawIcons, focusQuietly } from "./dom.js";
import { Drawers } from "./drawers.js";
import { ImportDialog } from "./memory/import.js";
import { MemoryPanel } from "./memory/panel.js";
import { relabelTurns } from "./memory/status.js";
import { Notice } from "./notice.js";
import { projectParts } from "./project-parts.js";
import { Router } from "./router.js";
import { announce, currentSession, endSession, onAnnouncement } from "./session.js";
import { MOD, wireShortcuts } from "./shortcuts.js";
import { showSignIn, signInNotice, signInProblem, wireSignIn } from "./sign-in.js";
import { wireTheme } from "./theme.js";

const SESSION_ENDED = "Your session has ended. Please sign in again.";
const ACCOUNT_DELETED = "Your account was deleted. Everything about you has been erased.";
const SIGNED_OUT_ELSEWHERE = "You signed out in another tab.";

let info = { auth_mode: "dev" };
let client = null;

const follower = new Follower($("message-scroller"), $("jump-latest"), {
  onJump: () => focusQuietly($("message-input")),
});
const drawers = new Drawers({
  workspace: $("workspace"),
  chat: $("chat"),
  scrim: $("scrim"),
  panels: {
    conversations: { element: $("conversations"), toggle: $("toggle-conversations") },
    memory: { element: $("memory"), toggle: $("toggle-memory") },
  },
});
const memory = new MemoryPanel({
  root: $("memory"),
  onStatus: (status) => { $("welcome").dataset.memory = status === "disabled" ? "off" : "on"; },
  onChanged: (extras, rejected) => relabelTurns($("messages"), extras, rejected),
});
const router = new Router({
  onRoute: (id, projectId) => {
    if (!client) return;
    if (id) chat.open(id, null, { fromAddress: true });
    else chat.newConversation({ fromAddress: true, projectId });
  },
});

// Imports go to the memory the panel shows: outside projects, or the chat's project.
const importDialog = new ImportDialog({ client: () => client, changed: () => memory.load(),
  scoped: (path) => memory.scoped(path), place: () => conversations.project(memory.scope) });
const chatNotice = new Notice($("chat-notice"));
// The header and the tab say which conversation is open; Rename is there.
const title = new ChatTitle({
  heading: $("chat-title"),
  renameButton: $("rename-conversation"),
  onRenamed: () => conversations.load(),
  onError: (text) => chatNotice.show(text, "error"),
});
// The project parts read the others from `parts`, filled in once the chat exists.
const parts = {};
const projects = projectParts(parts);
// The deleted account's conversation is gone: the address goes back to the start page.
const account = new AccountDeletion({ onDeleted: () => {
  router.show(null, { replace: true });
  leave(ACCOUNT_DELETED, "success");
} });
const conversations = new ConversationList({
  container: $("conversation-list"),
  empty: $("conversations-empty"),
  projectRows: projects.rows,
  onOpen: (id) => chat.open(id),
  onDeleted: (id) => chat.deleted(id),
  onError: (text) => chatNotice.show(text, "error"),
  onLoaded: () => projects.showPlace(),
  more: $("conversations-more"),
  archiveToggle: $("show-archived"),
});
const search = new ConversationSearch({
  form: $("conversation-search"),
  input: $("conversation-search-input"),
  results: $("search-results"),
  list: $("sidebar-lists"),
  empty: $("conversations-empty"),
  onOpen: (id, hit) => chat.open(id, hit),
  onError: (text) => chatNotice.show(text, "error"),
});
const composer = new Composer({
  form: $("composer"),
  input: $("message-input"),
  send: $("send"),
  stop: $("stop"),
  onSend: (text) => chat.send(text),
  onStop: () => chat.stop(),
});
const temporary = new TemporaryChat({
  field: $("temporary-field"), toggle: $("temporary-chat"), banner: $("temporary-banner") });
const chat = new Chat({
  temporary,
  view: new MessageView({ list: $("messages"), welcome: $("welcome"), follower,
    onRegenerate: (turnId, text) => chat.send(text, { replaces: turnId }),
    onEdit: (turnId, text) => chat.send(text, { replaces: turnId }) }),
  composer,
  conversations,
  memory,
  router,
  onTitle: (text, id) => title.show(text, id),
  onPlace: () => projects.showPlace(),
  notice: chatNotice,
  onNavigate: (began) => drawers.close({ restoreFocus: false, openedBefore: began }),
  onStreaming: (streaming) => {
    for (const id of ["new-conversation", "new-conversation-narrow"]) $(id).disabled = streaming;
  },
  // A turn is settled once its answer, the conversation list and memory are all shown: the
  // count is a stable thing for tests and the screenshot script to wait on.
  onSettled: () => { document.body.dataset.turns = String(Number(document.body.dataset.turns || 0) + 1); },
});
Object.assign(parts, { chat, conversations, memory, search, title, notice: chatNotice });
// "History" under an answer's sources shows the memory panel (app/web/js/chat/sources.js).
memory.onReveal = () => {
  if (drawers.narrow) drawers.show("memory");
  else if (drawers.memoryFolded) drawers.toggle("memory");
};

function showModelBadge() {
  for (const badge of document.querySelectorAll(".model-badge")) {
    if (info.offline) {
      badge.textContent = "Offline model answering";
      badge.title = "No language model is configured: the built-in offline model answers.";
      badge.classList.add("offline");
      badge.hidden = false;
    } else if (info.model) {
      badge.textContent = info.model;
      badge.title = `Model: ${info.model}`;
      badge.hidden = false;
    }
  }
}

// `session`: what GET /auth/session says (the cookie itself never reaches the page).
async function signIn(session) {
  client = new ApiClient(session.csrf_token, { onUnauthorized: () => signOut(SESSION_ENDED) });
  const subject = session.subject;
  const { rows, projectPage, move } = projects;
  for (const part of [conversations, rows, projectPage, move, search, memory, chat, title]) part.attach(client);
  account.attach(client, subject);
  $("account-name").textContent = subject;
  $("account-avatar").textContent = subject.slice(0, 1).toUpperCase();
  $("account").hidden = false;
  $("sign-in").hidden = true;
  $("workspace").hidden = false;
  signInNotice.clear();
  // A reload, a bookmark or a link opens the conversation its address names.
  const addressed = router.current();
  if (addressed) chat.open(addressed, null, { fromAddress: true });
  else chat.newConversation({ fromAddress: true, projectId: router.project() });
  await Promise.all([conversations.load(), memory.load()]);
}

// Sign-out, or a 401 from an ended session: every request of the session is aborted and every
// trace of the person leaves the page (name, conversations, messages, memory, statuses, drafts).
// An expired session keeps the address, so that signing in again returns there; signing out
// leaves it too (the next person starts with a new chat).
function signOut(message = "", kind = "error") {
  if (client) client.close();
  if (!message) router.show(null, { replace: true });
  title.reset();
  $("conversation-scroll").scrollTop = 0;
  client = null;
  closeDialogs();
  account.reset();
  chat.reset();
  conversations.reset();
  projects.projectPage.reset();
  projects.move.reset();
  projects.showPlace(); // the header, the page and the composer's hint forget the projects
  search.reset();
  memory.reset();
  importDialog.reset();
  chatNotice.clear();
  drawers.close({ restoreFocus: false });
  $("account-name").textContent = "";
  $("account-avatar").textContent = "";
  $("account").hidden = true;
  for (const form of document.querySelectorAll("#sign-in form")) form.reset();
  showSignIn(info, message, kind);
}

// The person signs out (or deleted their account): the page forgets them at once, the server
// ends the session (so a copy of the cookie stops working), the other tabs are told, and with
// an identity provider its end-session page follows.
async function leave(message = "", kind = "error") {
  const csrfToken = client ? client.csrfToken : "";
  signOut(message, kind);
  const target = await endSession(csrfToken);
  announce("signed-out");
  if (target) location.assign(target);
}

// Another tab signed in or out: the server's session decides what this tab shows.
async function onOtherTab() {
  let session = null;
  try {
    session = await currentSession();
  } catch {
    return; // unreachable now: this tab's next request will find out
  }
  const shown = $("account-name").textContent;
  if (client && (!session || session.subject !== shown)) signOut(SIGNED_OUT_ELSEWHERE, "status");
  if (!client && session) await signIn(session);
}

// Ctrl/⌘+K: the search box (in its drawer on a narrow screen).
function focusSearch() {
  if (!client) return;
  if (drawers.narrow && drawers.open !== "conversations") drawers.show("conversations");
  focusQuietly($("conversation-search-input"));
  $("conversation-search-input").select();
}

function wire() {
  drawIcons();
  wireTheme($("theme-select"));
  wireShortcuts({
    newChat: () => { if (client) chat.newConversation(); },
    search: focusSearch,
    dialog: $("shortcuts-dialog"),
    opener: $("show-shortcuts"),
    closer: $("shortcuts-close"),
  });
  wireSignIn(signIn);
  $("sign-out").addEventListener("click", () => leave());
  onAnnouncement(() => onOtherTab());
  for (const id of ["new-conversation", "new-conversation-narrow"]) {
    $(id).addEventListener("click", () => chat.newConversation());
    $(id).title = `New chat (${MOD}+Shift+O)`;
  }
  $("conversation-search-input").title = `Search conversations (${MOD}+K)`;
  // Links to a conversation inside the page (a memory entry's origin) open it in place.
  // So do links to a project's page (the header's project).
  document.addEventListener("click", (event) => {
    const link = event.target.closest("a[data-conversation], a[data-project]");
    if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
    event.preventDefault();
    // A message an answer's sources cite (data-message): opened there, briefly highlighted.
    const cited = link.dataset.message ? { messageId: Number(link.dataset.message) } : null;
    if (link.dataset.conversation) chat.open(link.dataset.conversation, cited);
    else chat.newConversation({ projectId: link.dataset.project });
  });
  for (const suggestion of document.querySelectorAll(".suggestion")) {
    suggestion.addEventListener("click", () => composer.fill(suggestion.textContent.trim()));
  }
}

async function main() {
  wire();
  let problem = signInProblem();
  info = await fetchInfo();
  showModelBadge();
  let session = null;
  try {
    session = await currentSession();
  } catch (error) {
    problem = `Could not reach the server: ${describe(error)}`;
  }
  if (session) await signIn(session);
  else showSignIn(info, problem);
  document.body.dataset.ready = "true";
}

main();
