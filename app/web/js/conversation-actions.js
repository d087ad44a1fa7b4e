// Pin and archive, a conversation row's two filing controls, and the sidebar's "Show more" and
// "Archived" view. Pinned conversations list first (the API's order); archived ones leave the
// list for the Archived view and stay searchable (docs/api.md).

import { button } from "./dom.js";

// The row's Pin/Unpin and Archive/Restore buttons; `change(id, flags)` sends the PATCH.
export function fileButtons(conversation, title, change) {
  const pinned = conversation.pinned;
  const archived = conversation.archived;
  const pin = button(pinned ? "Unpin" : "Pin", () => change(conversation.id, { pinned: !pinned }), {
    className: `pin${pinned ? " on" : ""}`, iconName: "pin", iconOnly: true,
    label: `${pinned ? "Unpin" : "Pin"} conversation: ${title}` });
  pin.setAttribute("aria-pressed", String(pinned));
  const archive = button(archived ? "Restore" : "Archive",
    () => change(conversation.id, { archived: !archived }), {
      className: "archive", iconName: "archive", iconOnly: true,
      label: `${archived ? "Restore" : "Archive"} conversation: ${title}` });
  return archived ? [archive] : [pin, archive];
}

// The list's pages: `limit` at a time, `next` the cursor of the one after (null: no more).
export const PAGE = 30;

export function pagePath({ archived = false, before = null } = {}) {
  const query = new URLSearchParams({ limit: String(PAGE) });
  if (archived) query.set("archived", "true");
  if (before) query.set("before", before);
  return `/v1/conversations?${query}`;
}

// Reads pages until at least `atLeast` conversations (or the end): a reload of the list keeps
// as many rows as the person had loaded with "Show more".
export async function readPages(client, { archived = false, atLeast = PAGE } = {}) {
  const conversations = [];
  let next = null;
  do {
    const body = await client.request(pagePath({ archived, before: next }));
    conversations.push(...body.conversations);
    next = body.next;
  } while (next && conversations.length < atLeast);
  return { conversations, next };
}
