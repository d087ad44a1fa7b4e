// The search box over the conversation list: the signed-in person's messages that match, best
// first, each with its conversation's title and a snippet; choosing one opens the conversation
// at that message. While a query is typed the results replace the list; clearing it brings the
// list back. In a project (its page, or one of its conversations) the search reads that
// project's conversations by default, as the placeholder says; the results offer the rest.
//
// Snippets arrive with matched words between « and » (the API's marking; those characters in a
// message itself come as ‹ ›). They are split here and built as text nodes and <mark> elements:
// no user text is ever parsed as HTML.

import { describe, isSessionEnd } from "./api.js";
import { button, el } from "./dom.js";

const DEBOUNCE_MS = 250;
const LIMIT = 20;

// "a «b» c" -> [text "a ", <mark>b</mark>, text " c"]
export function snippetNodes(snippet) {
  const nodes = [];
  for (const [index, part] of snippet.split(/[«»]/).entries()) {
    if (!part) continue;
    nodes.push(index % 2 ? el("mark", { text: part }) : document.createTextNode(part));
  }
  return nodes;
}

export class ConversationSearch {
  // onOpen(conversationId, hit) opens a conversation at a hit ({role, created_at}).
  constructor({ form, input, results, list, empty, onOpen, onError }) {
    Object.assign(this, { form, input, results, list, empty, onOpen, onError });
    this.client = null;
    this.timer = 0;
    this.ticket = 0;
    this.project = null; // {id, name} of the chat's project, searched by default
    this.everywhere = false; // the person asked for every conversation instead
    form.addEventListener("submit", (event) => { event.preventDefault(); this.run(); });
    input.addEventListener("input", () => {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.run(), DEBOUNCE_MS);
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") this.clear();
    });
  }

  attach(client) {
    this.client = client;
  }

  // The chat moved: into a project (or another one), or out of projects.
  setProject(project) {
    const next = project ? { id: project.id, name: project.name } : null;
    if (next?.id === this.project?.id && next?.name === this.project?.name) return;
    const moved = next?.id !== this.project?.id;
    this.project = next;
    if (moved) this.everywhere = false;
    this.input.placeholder = next ? `Search in “${next.name}”` : "Search conversations";
    if (moved && this.input.value.trim()) this.run();
  }

  scoped() {
    return this.project && !this.everywhere ? this.project : null;
  }

  showing(searching) {
    this.results.hidden = !searching;
    this.list.hidden = searching;
    if (searching) this.empty.hidden = true;
  }

  async run() {
    const query = this.input.value.trim();
    const ticket = ++this.ticket;
    if (!query || !this.client) {
      this.showing(false);
      this.results.replaceChildren();
      return;
    }
    let body;
    try {
      const params = new URLSearchParams({ q: query, limit: String(LIMIT) });
      const project = this.scoped();
      if (project) params.set("project_id", project.id);
      body = await this.client.request(`/v1/conversations/search?${params}`);
    } catch (error) {
      if (!isSessionEnd(error)) this.onError(`Could not search: ${describe(error)}`);
      return;
    }
    if (ticket !== this.ticket) return; // a newer query is on its way
    this.render(body.results);
  }

  // In a project, which conversations were searched, and the way to the others.
  scopeLine() {
    if (!this.project) return [];
    const inProject = !this.everywhere;
    const toggle = button(inProject ? "Search all conversations" : `Only “${this.project.name}”`,
      () => { this.everywhere = inProject; this.run(); }, { className: "search-scope-toggle" });
    return [el("p", { className: "muted search-scope" }, [
      el("span", { text: inProject ? `In “${this.project.name}”. ` : "In all conversations. " }),
      toggle,
    ])];
  }

  render(results) {
    this.showing(true);
    if (!results.length) {
      this.results.replaceChildren(...this.scopeLine(), el("p", { className: "muted sidebar-empty",
        text: "No message matches." }));
      return;
    }
    const items = results.map((hit) => {
      const open = el("button", { className: "open search-hit", attrs: { type: "button" } }, [
        el("span", { className: "search-title", text: hit.title || "New conversation" }),
        el("span", { className: "search-snippet" }, snippetNodes(hit.snippet)),
      ]);
      open.dataset.id = hit.conversation_id;
      open.addEventListener("click", () => this.onOpen(hit.conversation_id, hit));
      return el("li", { className: "conversation" }, [open]);
    });
    this.results.replaceChildren(...this.scopeLine(),
      el("ul", { attrs: { "aria-label": "Search results" } }, items));
  }

  clear() {
    this.input.value = "";
    this.ticket += 1;
    this.showing(false);
    this.results.replaceChildren();
  }

  reset() {
    this.client = null;
    this.setProject(null);
    this.clear();
    this.list.hidden = false;
  }
}
