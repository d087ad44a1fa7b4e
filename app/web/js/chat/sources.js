// The sources of an answer, under it: a quiet "Memory used" line that opens the list of what
// the answer was given (each memory entry with its text and a link to its history, each
// earlier conversation with its title and a link to it) and what it saved or proposed. The
// data is the `sources` event, or the stored answer's `sources` on a reload (docs/api.md).
//
// "Wrong" on an entry removes it in one click through the memory API (history source
// `sources`), with Undo; under "Ask before saving" it opens a proposal to remove it that the
// person confirms first. Every text here is user content: built as text nodes, never HTML.

import { button, el } from "../dom.js";
import { conversationPath } from "../router.js";

const STORES = { user: "About you", memory: "Agent notes", project: "Project notes" };
const DONE = { committed: "Saved", proposed: "Proposed" };
const ACTIONS = { add: "added", replace: "changed to", remove: "removed" };

function plural(count, one, many) {
  return `${count} ${count === 1 ? one : many}`;
}

// What the summary line says: "Memory used · 2 entries, 1 earlier chat".
function summaryText({ memory = [], conversations = [], changes = [] }) {
  const parts = [];
  if (memory.length) parts.push(plural(memory.length, "entry", "entries"));
  if (conversations.length) parts.push(plural(conversations.length, "earlier chat", "earlier chats"));
  if (changes.length) parts.push(plural(changes.length, "change", "changes"));
  return `Memory used · ${parts.join(", ")}`;
}

export function hasSources(sources) {
  return Boolean(sources && (sources.memory?.length || sources.conversations?.length
    || sources.changes?.length));
}

// `actions`: {wrong(entry) -> Promise<change id | null>, undo(changeId, entry) -> Promise<bool>,
// asks() -> bool (the save mode is "ask"), history(entry)}: the memory panel's, through the chat.
export function sourcesElement(sources, actions) {
  const list = el("div", { className: "sources-list" });
  const details = el("details", { className: "sources" }, [
    el("summary", { className: "sources-summary", text: summaryText(sources) }), list,
  ]);
  if (sources.memory?.length) {
    list.append(el("h3", { className: "sources-heading", text: "From memory" }),
      el("ul", { className: "sources-entries" }, sources.memory.map((entry) => entryItem(entry, actions))));
  }
  if (sources.conversations?.length) {
    list.append(el("h3", { className: "sources-heading", text: "From earlier chats" }),
      el("ul", { className: "sources-chats" }, sources.conversations.map(chatItem)));
  }
  if (sources.changes?.length) {
    list.append(el("h3", { className: "sources-heading", text: "Memory changes" }),
      el("ul", { className: "sources-changes" }, sources.changes.map((change) => el("li", {
        className: "small", text: `${DONE[change.outcome] || change.outcome}: ${STORES[change.target]
          || change.target} ${ACTIONS[change.action] || change.action} “${change.text}”` }))));
  }
  return details;
}

function entryItem(entry, actions) {
  const item = el("li", { className: "source-entry" });
  item.dataset.target = entry.target;
  const text = el("span", { className: "source-text", text: entry.text });
  const store = el("span", { className: "muted small", text: STORES[entry.target] || entry.target });
  const history = el("a", { className: "small source-history", text: "History",
    attrs: { href: "#memory" } });
  history.addEventListener("click", (event) => {
    event.preventDefault();
    actions.history(entry);
  });
  const wrong = button("Wrong", () => markWrong(item, entry, actions), { className: "secondary small source-wrong",
    label: `Wrong: ${entry.text}` });
  item.append(el("div", { className: "source-body" }, [text, el("div", { className: "source-meta" },
    [store, " · ", history])]), wrong);
  return item;
}

function chatItem(source) {
  const link = el("a", { className: "source-chat-link", text: source.title || "Untitled conversation",
    attrs: { href: conversationPath(source.conversation_id), "data-conversation": source.conversation_id,
      "data-message": String(source.message_id) } });
  const via = source.via === "recall" ? "recalled" : "searched";
  return el("li", { className: "source-chat" }, [link,
    el("span", { className: "muted small", text: ` · ${via}` }),
    el("p", { className: "small source-snippet", text: source.snippet })]);
}

// "Wrong": removed at once with Undo, or (ask before saving) a proposal to confirm first.
async function markWrong(item, entry, actions) {
  if (actions.asks()) {
    proposeRemoval(item, entry, actions);
    return;
  }
  await removeNow(item, entry, actions);
}

function proposeRemoval(item, entry, actions) {
  if (item.querySelector(".source-proposal")) return;
  const card = el("div", { className: "source-proposal", attrs: { role: "group",
    "aria-label": "Proposal: remove this entry" } }, [
    el("p", { className: "small", text: `Remove from ${STORES[entry.target] || entry.target}: “${entry.text}”?` }),
  ]);
  const remove = button("Remove", async () => {
    card.remove();
    await removeNow(item, entry, actions);
  }, { className: "primary small" });
  const keep = button("Keep", () => card.remove(), { className: "secondary small" });
  card.append(el("div", { className: "source-proposal-actions" }, [remove, keep]));
  item.append(card);
  remove.focus({ preventScroll: true });
}

async function removeNow(item, entry, actions) {
  const wrong = item.querySelector(".source-wrong");
  wrong.disabled = true;
  const changeId = await actions.wrong(entry);
  if (!changeId) {
    wrong.disabled = false;
    return;
  }
  item.classList.add("removed");
  const undo = button("Undo", async () => {
    undo.disabled = true;
    if (await actions.undo(changeId, entry)) {
      item.classList.remove("removed");
      status.remove();
      wrong.disabled = false;
      wrong.hidden = false;
      wrong.focus({ preventScroll: true });
    } else {
      undo.disabled = false;
    }
  }, { className: "secondary small source-undo" });
  const status = el("div", { className: "source-removed", attrs: { role: "status" } },
    [el("span", { className: "small", text: "Removed from memory. " }), undo]);
  wrong.hidden = true;
  item.append(status);
  undo.focus({ preventScroll: true });
}
