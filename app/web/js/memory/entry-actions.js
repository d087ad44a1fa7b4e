// What an answer's sources do to a memory entry through the panel: "Wrong" (removes it), its
// Undo, and "History" (the panel opens at the entry).

// "Wrong" on an entry under an answer's sources: removed through the one way in, in the
// entry's own scope, with history source `sources`. Answers the change's id, for Undo (null:
// not removed; the notice says why).
export async function wrongEntry(panel, entry) {
  const where = entry.project_id ? `?project_id=${encodeURIComponent(entry.project_id)}` : "";
  try {
    const after = await panel.client.request(`/v1/memory/operations${where}`, { method: "POST",
      body: { source: "sources", operations: [{ target: entry.target, action: "remove", match: entry.text }] } });
    if ((entry.project_id || null) === panel.scope) panel.show(after);
    const recent = await panel.client.request(`/v1/memory/history${where}${where ? "&" : "?"}limit=5`);
    const change = recent.changes.find((item) => item.source === "sources"
      && item.operations.some((operation) => operation.before === entry.text));
    await panel.loadExtras();
    panel.notice.show("Removed from memory as wrong.", "success");
    return change ? change.id : null;
  } catch (error) {
    panel.refused(error, "Not removed");
    return null;
  }
}

// Undo of a "Wrong": the entry is back (true), or the notice says why not.
export async function undoWrong(panel, changeId, entry) {
  const where = entry.project_id ? `?project_id=${encodeURIComponent(entry.project_id)}` : "";
  try {
    const after = await panel.client.request(
      `/v1/memory/history/${encodeURIComponent(changeId)}/undo${where}`, { method: "POST" });
    if ((entry.project_id || null) === panel.scope) panel.show(after);
    await panel.loadExtras();
    panel.notice.show("Restored to memory.", "success");
    return true;
  } catch (error) {
    panel.refused(error, "Not restored");
    return false;
  }
}

// "History" on an entry under an answer: the panel opens at that entry, its history unfolded.
export function revealEntry(panel, entry) {
  panel.onReveal();
  const entries = panel.root.querySelectorAll(".entry-origin");
  const origin = [...entries].find((item) => item.dataset.target === entry.target
    && item.dataset.entry === entry.text);
  if (!origin) {
    panel.notice.show("That entry is no longer in this memory.", "info");
    return;
  }
  if (!origin.hidden) origin.open = true;
  const item = origin.closest(".entry");
  item.scrollIntoView({ block: "center" });
  item.classList.add("revealed");
  setTimeout(() => item.classList.remove("revealed"), 2000);
}
