// What a turn's memory chip says, kept true after the turn: a proposal accepted, rejected or
// expired, a change undone. `turnLabel` is pure (the API's history and proposals in, words
// out); `relabelTurns` applies it to the answers on the page, adding a chip to a stored answer
// whose turn touched memory.

import { el } from "../dom.js";

// `extras`: the panel's `{changes, proposals, next}` (`next`: history reaches further back than
// `changes`); `rejected`: turn ids whose proposal the person rejected in this page. `outcome`:
// the turn's memory event outcome when the page saw it.
// Returns `{text, kind}`, or null when nothing is known (the history page may not reach back).
export function turnLabel(turnId, outcome, { changes, proposals, next = null }, rejected = new Set()) {
  if (proposals.some((proposal) => proposal.turn_id === turnId)) {
    return { text: "Waiting for your approval", kind: "pending", outcome: "proposed" };
  }
  const change = changes.find((candidate) => candidate.turn_id === turnId
    && (candidate.source === "turn" || candidate.source === "proposal"));
  if (change) {
    const undone = changes.some((candidate) => candidate.undoes === change.id);
    const saved = change.source === "proposal" ? "Saved after your approval" : "Memory updated";
    return undone ? { text: `${saved}, then undone`, kind: "" } : { text: saved, kind: "success" };
  }
  if (outcome === "proposed") {
    // History read only in part (an older answer): an approval may lie beyond the page read.
    if (next && !rejected.has(turnId)) return { text: "Proposal no longer waiting", kind: "" };
    return rejected.has(turnId)
      ? { text: "Not saved: you rejected it", kind: "" }
      : { text: "Not saved: the proposal was rejected or expired", kind: "" };
  }
  return null;
}

// The memory chip of a stored answer, labelled as the live chip was when its turn ended
// (model.js `turnOutcome`): from what became of the edits the memory tool staged
// (`sources.memory_update`), or, for an answer stored before that was kept, from the changes
// its sources list. Null when the turn staged nothing. The panel's history and proposals then
// relabel it as they do a live chip.
const STORED_CHIPS = {
  committed: { text: "Memory updated", kind: "success" },
  none: { text: "Already in memory", kind: "info" },
  proposed: { text: "Waiting for your approval", kind: "pending" },
  failed: { text: "Memory not saved", kind: "error" },
};

export function storedLabel(sources) {
  let outcome = sources?.memory_update?.outcome;
  if (!outcome) {
    const listed = new Set((sources?.changes || []).map((change) => change.outcome));
    outcome = ["proposed", "committed"].find((candidate) => listed.has(candidate));
  }
  return STORED_CHIPS[outcome] ? { ...STORED_CHIPS[outcome], outcome } : null;
}

export function relabelTurns(list, extras, rejected) {
  if (!extras.loaded) return; // history and proposals not read yet: nothing is known
  for (const answer of list.querySelectorAll(".message.assistant[data-turn]")) {
    const chip = answer.querySelector(".memory-chip");
    const label = turnLabel(answer.dataset.turn, chip ? chip.dataset.outcome : null, extras, rejected);
    if (!label) continue;
    const shown = chip || el("span");
    shown.textContent = label.text;
    shown.className = `chip memory-chip ${label.kind}`.trim();
    shown.dataset.turn = answer.dataset.turn;
    // Remembered, so that a rejection or expiry later reads as such on a reloaded answer too.
    if (label.outcome) shown.dataset.outcome = label.outcome;
    if (!chip) answer.querySelector(".activity").append(shown);
  }
}
