// Where memory came from, as words: pure functions over the history API's changes
// (`{"id", "created_at", "source", "conversation_id"?, "operations": [{"target", "action",
// "before"?, "after"?}]}`, newest first) and the conversation titles. No DOM, no requests.

import { parseTimestamp, relativeWhen } from "../time.js";

const TITLES = { user: "About you", memory: "Agent notes" };

function key(target, entry) {
  return `${target}\u0000${entry}`;
}

// The change that wrote each entry as it stands now: the newest one whose `after` is it.
export function originsOf(changes) {
  const origins = new Map();
  for (const change of changes) {
    for (const operation of change.operations) {
      if (operation.after === undefined) continue;
      const name = key(operation.target, operation.after);
      if (!origins.has(name)) origins.set(name, change);
    }
  }
  return origins;
}

export function originOf(origins, target, entry) {
  return origins.get(key(target, entry)) || null;
}

// "from “Trip planning”, 2 minutes ago"; "added by you, yesterday"; "undone by you, …".
export function originText(change, titles, now = new Date()) {
  const date = parseTimestamp(change.created_at);
  const when = date ? relativeWhen(date, now) : "";
  const where = sourceText(change, titles);
  return when ? `${where}, ${when}` : where;
}

export function sourceText(change, titles) {
  if (change.source === "api") return "added by you";
  if (change.source === "undo") return "undone by you";
  if (change.source === "mcp") return `from ${change.client || "another assistant"}`;
  if (change.source === "import") return "imported from another assistant";
  if (change.source === "proposal" && !change.turn_id) {
    return `${change.client ? `from ${change.client}` : "imported"}, approved by you`;
  }
  const title = change.conversation_id && titles.get(change.conversation_id);
  const from = title ? `from “${title}”` : "from a conversation";
  return change.source === "proposal" ? `${from}, approved by you` : from;
}

// One operation as a sentence: "Added to About you: …", "Changed in Agent notes: … → …".
export function operationText(operation) {
  const where = TITLES[operation.target] || operation.target;
  switch (operation.action) {
    case "add":
      return `Added to ${where}: ${operation.after ?? operation.content}`;
    case "remove":
      return `Removed from ${where}: ${operation.before ?? operation.match}`;
    default:
      return `Changed in ${where}: ${operation.before ?? operation.match} → ${operation.after ?? operation.content}`;
  }
}
