// What changed in memory and how to say it: pure functions over the API's memory state
// (`{"user": {"entries", "characters", "limit"}, "memory": {...}}`, and in a project's scope
// `"project": {...}` and `"scope": {"project_id", "general_memory"}`), no DOM, no requests.

export const TARGETS = ["user", "project", "memory"];

// What the panel says about memory's state, and about a change the API refused as a conflict.
export const STATE_TEXT = {
  disabled: "Memory is switched off by the operator. Saved entries are kept and you can still "
    + "view them or forget everything, but nothing new is saved.",
  unavailable: "Memory is unavailable right now: the assistant answers without it and nothing is saved.",
};

export const CONFLICTS = {
  stale_undo: "Cannot undo: that entry has changed since. Nothing was changed.",
  stale_match: "Not saved: memory has changed since this was proposed. You can reject it.",
};

export function entriesOf(state, target) {
  return state && state[target] ? state[target].entries : [];
}

// The project the state was read for (null outside projects), and whether it uses the general
// agent notes.
export function scopeOf(state) {
  const scope = (state && state.scope) || {};
  return { projectId: scope.project_id || null, generalMemory: Boolean(scope.general_memory) };
}

// The documents the panel shows for a state: the profile always, the project's notes in a
// project, the general notes outside projects or in a project that uses them.
export function shownTargets(state) {
  const { projectId, generalMemory } = scopeOf(state);
  return TARGETS.filter((target) => target === "user"
    || (target === "project" && projectId !== null && Boolean(state.project))
    || (target === "memory" && (projectId === null || generalMemory)));
}

// Where a document's entries apply, as the label the panel shows on it. `projects`: the
// person's projects (outside projects, the general notes also reach those that opted in).
export function appliesText(target, state, projects = []) {
  if (target === "user") return "All chats";
  if (target === "project") return "This project only";
  if (scopeOf(state).projectId !== null) return "Also in this project";
  const opted = projects.filter((project) => project.general_memory)
    .map((project) => `“${project.name}”`);
  if (!opted.length) return "Chats outside projects";
  const names = opted.length === 1 ? opted[0]
    : `${opted.slice(0, -1).join(", ")} and ${opted[opted.length - 1]}`;
  return `Chats outside projects, and in ${names}`;
}

// When each entry of a document expires (remember-until), by its text.
function expiriesOf(state, target) {
  const items = state && state[target] ? state[target].expiring || [] : [];
  return new Map(items.map((item) => [item.text, item.expires_at]));
}

// Entries added and removed per document between two states (entries are unique in a document),
// and those kept whose expiry changed (`retimed`).
export function diff(before, after) {
  const result = { changed: false };
  for (const target of TARGETS) {
    const old = new Set(entriesOf(before, target));
    const now = new Set(entriesOf(after, target));
    const added = [...now].filter((entry) => !old.has(entry));
    const removed = [...old].filter((entry) => !now.has(entry));
    const [was, is] = [expiriesOf(before, target), expiriesOf(after, target)];
    const retimed = [...now].filter((entry) => old.has(entry) && was.get(entry) !== is.get(entry));
    result[target] = { added, removed, retimed };
    if (added.length || removed.length || retimed.length) result.changed = true;
  }
  return result;
}

function plural(count, one, many) {
  return `${count} ${count === 1 ? one : many}`;
}

// "1 new entry, 1 entry updated": a replace shows as one entry gone and one new in its place.
export function summarize(difference) {
  let added = 0;
  let updated = 0;
  let removed = 0;
  for (const target of TARGETS) {
    const { added: plus, removed: minus, retimed = [] } = difference[target];
    const pairs = Math.min(plus.length, minus.length);
    updated += pairs + retimed.length;
    added += plus.length - pairs;
    removed += minus.length - pairs;
  }
  const parts = [];
  if (added) parts.push(plural(added, "new entry", "new entries"));
  if (updated) parts.push(plural(updated, "entry updated", "entries updated"));
  if (removed) parts.push(plural(removed, "entry removed", "entries removed"));
  return parts.join(", ");
}

export const ALREADY_SAVED = "Already saved: nothing changed.";

// What one edit from the panel did, from the states before it and in the API's answer.
export function editOutcome(before, after) {
  const difference = diff(before, after);
  if (!difference.changed) return { text: ALREADY_SAVED, kind: "info" };
  return { text: `Saved: ${summarize(difference)}.`, kind: "success" };
}

// What an undo did, in the undo's own words: undoing an addition removes the entry, undoing a
// removal restores it, undoing an edit changes it back.
export function undoOutcome(before, after) {
  const difference = diff(before, after);
  if (!difference.changed) return { text: "Undone: nothing needed to change.", kind: "info" };
  let restored = 0;
  let changedBack = 0;
  let removed = 0;
  for (const target of TARGETS) {
    const { added: plus, removed: minus } = difference[target];
    const pairs = Math.min(plus.length, minus.length);
    changedBack += pairs;
    restored += plus.length - pairs;
    removed += minus.length - pairs;
  }
  const parts = [];
  if (removed) parts.push(`${plural(removed, "entry", "entries")} removed`);
  if (restored) parts.push(`${plural(restored, "entry", "entries")} restored`);
  if (changedBack) parts.push(`${plural(changedBack, "entry", "entries")} changed back`);
  return { text: `Undone: ${parts.join(", ")}.`, kind: "success" };
}

const FAILURE_REASONS = {
  stale_match: "memory changed in the meantime, so the update no longer applied",
  project_deleted: "the project was deleted while the answer was written",
};

function discarded(text) {
  return { text, kind: "warning", short: "Memory update discarded" };
}

// What a turn did to memory. `turn` holds what its events said (`stopped`, `failed`, the start
// event's `status`, the memory event as `memory`, the `staged` operation count); `before` and
// `after` are the states read before and after it (`after` is null when it could not be read).
// Returns null when there is nothing worth saying; `short` labels the answer's memory chip.
export function turnOutcome(turn, before, after) {
  if (turn.stopped) return discarded("Nothing saved: the answer was stopped.");
  if (turn.failed) return discarded("Nothing saved: the answer failed.");
  if (turn.status === "disabled") return discarded("Memory is switched off: nothing saved.");
  if (turn.status === "unavailable") return discarded("Memory was unavailable: nothing saved.");
  const event = turn.memory;
  if (!event) return null;
  switch (event.outcome) {
    case "committed": {
      if (!after) {
        return { text: `Saved ${plural(turn.staged || 1, "change", "changes")}.`, kind: "success",
          short: "Memory updated" };
      }
      const difference = diff(before, after);
      if (!difference.changed) return { text: ALREADY_SAVED, kind: "info", short: "Already in memory" };
      return { text: `Saved: ${summarize(difference)}.`, kind: "success", short: "Memory updated" };
    }
    case "none":
      // Staged edits that changed nothing (a fact already remembered) end as `none` too.
      return turn.staged ? { text: ALREADY_SAVED, kind: "info", short: "Already in memory" } : null;
    case "proposed":
      return { text: `${plural(turn.staged || 1, "change is", "changes are")} waiting for your approval.`,
        kind: "info", short: "Waiting for your approval" };
    case "failed": {
      const reason = FAILURE_REASONS[event.reason] || "memory could not be written";
      return { text: `Not saved: ${reason}.`, kind: "error", short: "Memory not saved" };
    }
    default:
      return null;
  }
}
