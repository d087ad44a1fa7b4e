// Where memory came from, as words: pure functions over the history API's changes
// (`{"id", "created_at", "source", "conversation_id"?, "operations": [{"target", "action",
// "before"?, "after"?}]}`, newest first) and the conversation titles. No DOM, no requests.

import { parseTimestamp, relativeWhen } from "../time.js";

const TITLES = { user: "About you", project: "Project notes", memory: "Agent notes" };

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

// "from “Trip planning”, 2 minutes ago"; "edited by you, yesterday"; "undone by you, …".
// `entry` (optional): the entry this origin is for, so that the verb is the one that made it.
export function originText(change, titles, now = new Date(), entry = null) {
  const date = parseTimestamp(change.created_at);
  const when = date ? relativeWhen(date, now) : "";
  const where = sourceText(change, titles, entry);
  return when ? `${where}, ${when}` : where;
}

// What the person did, by the change's operations: a removal is never "added".
function yourVerb(operations) {
  const actions = new Set(operations.map((operation) => operation.action));
  if (actions.size !== 1) return "changed";
  return { add: "added", remove: "removed", replace: "edited" }[[...actions][0]] || "changed";
}

// Where a change came from. With `entry`, only the operation that wrote that entry counts (a
// batch that added one entry and edited another says "edited" for the edited one).
export function sourceText(change, titles, entry = null) {
  const operations = entry === null ? change.operations
    : change.operations.filter((operation) => operation.after === entry);
  if (change.source === "api") return `${yourVerb(operations.length ? operations : change.operations)} by you`;
  if (change.source === "undo") return "undone by you";
  if (change.source === "sources") return "removed by you as wrong, under an answer";
  if (change.source === "mcp") return `from ${change.client || "another assistant"}`;
  if (change.source === "import") return "imported from another assistant";
  if (change.source === "proposal" && !change.turn_id) {
    return `${change.client ? `from ${change.client}` : "imported"}, approved by you`;
  }
  const title = change.conversation_id && titles.get(change.conversation_id);
  const from = title ? `from “${title}”` : "from a conversation";
  return change.source === "proposal" ? `${from}, approved by you` : from;
}

// One operation as a sentence: "Added to About you: …", "Changed in Agent notes: … → …". A
// proposal's operations have not happened: `proposed` words them as what would be done.
export function operationText(operation, { proposed = false } = {}) {
  const where = TITLES[operation.target] || operation.target;
  const [add, remove, change] = proposed ? ["Add to", "Remove from", "Change in"]
    : ["Added to", "Removed from", "Changed in"];
  switch (operation.action) {
    case "add":
      return `${add} ${where}: ${operation.after ?? operation.content}`;
    case "remove":
      return `${remove} ${where}: ${operation.before ?? operation.match}`;
    default:
      return `${change} ${where}: ${operation.before ?? operation.match} → ${operation.after ?? operation.content}`;
  }
}

// The changes that made `entry` what it is, newest first: the one that wrote it, then, through
// each edit's `before`, the ones that wrote the earlier texts it replaced.
export function changesOf(changes, target, entry) {
  const chain = [];
  let text = entry;
  for (const change of changes) {
    const made = change.operations.find((operation) => operation.target === target
      && operation.after === text);
    if (!made) continue;
    chain.push({ change, operation: made });
    if (made.before === undefined || made.before === null) break;
    text = made.before;
  }
  return chain;
}

// The entry's full origin as lines for the panel: what each change did and who or what made it.
export function originHistory(changes, titles, target, entry) {
  return changesOf(changes, target, entry).map(({ change, operation }) => ({
    text: `${operationText(operation)} (${sourceText(change, titles, operation.after)})`,
    createdAt: change.created_at,
    conversationId: change.conversation_id || null,
  }));
}
