// The Import dialog: paste what another assistant says it remembers, see what would be added
// (and what was left out, and why) before anything is saved, then add it or cancel.
//
// Self-contained: it needs the signed-in API client, a callback that reloads the memory panel,
// and the panel's scope (`scoped(path)` adds `?project_id=` in a project, `place()` is that
// project). The preview is the server's proposal (POST /v1/memory/import, in that scope: in a
// project its facts about the work go to the project's notes); "Add to memory" accepts it, and
// closing the dialog without adding rejects it, so no import is left waiting unseen.

import { describe, isSessionEnd } from "../api.js";
import { $, el, focusQuietly } from "../dom.js";

const STORES = { user: "About you", project: "Project notes", memory: "Agent notes" };
const REASONS = {
  secret: "looks like a secret",
  instruction_like: "reads like an instruction to an assistant",
  duplicate: "already remembered",
  too_long: "too long for one entry",
  over_capacity: "no room left",
  invalid: "not plain text",
};

export class ImportDialog {
  // client() -> the signed-in ApiClient (or null); changed() reloads the memory panel;
  // scoped(path) -> the path in the panel's scope; place() -> its project ({name}) or null.
  constructor({ client, changed, scoped = (path) => path, place = () => null }) {
    this.client = client;
    this.changed = changed;
    this.scopeOf = scoped;
    this.place = place;
    this.query = ""; // the scope's query, fixed when the dialog opens: the proposal is that scope's
    this.dialog = $("import-dialog");
    this.text = $("import-text");
    this.preview = $("import-preview");
    this.accept = $("import-accept");
    this.status = $("import-status");
    this.proposal = null;
    $("import-memory").addEventListener("click", () => this.open());
    $("import-cancel").addEventListener("click", () => this.dialog.close());
    this.preview.addEventListener("click", () => this.runPreview());
    this.accept.addEventListener("click", () => this.runAccept());
    this.dialog.addEventListener("close", () => this.discard());
  }

  open() {
    this.clear();
    this.query = this.scopeOf("");
    const project = this.place();
    $("import-place").hidden = !project;
    $("import-place").textContent = project
      ? `Into “${project.name}”: facts about you go to About you, facts about the work to this project's notes.`
      : "";
    this.dialog.showModal();
    focusQuietly(this.text);
  }

  clear() {
    this.proposal = null;
    this.text.value = "";
    this.status.textContent = "";
    this.accept.hidden = true;
    this.preview.disabled = false;
    $("import-result").hidden = true;
    $("import-proposed").replaceChildren();
    $("import-dropped").replaceChildren();
  }

  async runPreview() {
    const client = this.client();
    const text = this.text.value.trim();
    if (!client || !text) {
      this.status.textContent = "Paste what the other assistant remembers about you first.";
      return;
    }
    await this.discard(); // a new preview replaces the previous one
    this.preview.disabled = true;
    this.status.textContent = "Reading…";
    try {
      const result = await client.request(`/v1/memory/import${this.query}`,
        { method: "POST", body: { text } });
      this.show(result);
    } catch (error) {
      if (!isSessionEnd(error)) this.status.textContent = `Could not import: ${describe(error)}`;
    } finally {
      this.preview.disabled = false;
    }
  }

  show({ proposal, dropped }) {
    this.proposal = proposal;
    const adds = proposal ? proposal.operations : [];
    $("import-proposed").replaceChildren(...adds.map((operation) =>
      el("li", {}, [el("span", { className: "import-store", text: STORES[operation.target] }),
        el("span", { text: operation.content })])));
    $("import-dropped").replaceChildren(...dropped.map((item) =>
      el("li", {}, [el("span", { text: item.text }),
        el("span", { className: "import-reason", text: ` (${REASONS[item.reason] || item.reason})` })])));
    $("import-proposed-title").hidden = adds.length === 0;
    $("import-dropped-title").hidden = dropped.length === 0;
    $("import-result").hidden = false;
    this.accept.hidden = !proposal;
    this.status.textContent = proposal
      ? `${adds.length} ${adds.length === 1 ? "fact" : "facts"} ready to add. Nothing is saved until you add them.`
      : "Nothing new to add.";
    if (proposal) focusQuietly(this.accept);
  }

  async runAccept() {
    const client = this.client();
    if (!client || !this.proposal) return;
    const { id } = this.proposal;
    this.accept.disabled = true;
    try {
      await client.request(`/v1/memory/proposals/${encodeURIComponent(id)}/accept${this.query}`,
        { method: "POST" });
      this.proposal = null;
      this.dialog.close();
      await this.changed();
    } catch (error) {
      if (!isSessionEnd(error)) this.status.textContent = `Could not add: ${describe(error)}`;
    } finally {
      this.accept.disabled = false;
    }
  }

  // Reject the previewed proposal that was not added (closing the dialog, a new preview).
  async discard() {
    const client = this.client();
    const proposal = this.proposal;
    this.proposal = null;
    this.accept.hidden = true;
    if (!client || !proposal) return;
    try {
      await client.request(`/v1/memory/proposals/${encodeURIComponent(proposal.id)}/reject${this.query}`,
        { method: "POST" });
    } catch {
      // Already gone (expired, or decided in the panel): nothing is left to discard.
    }
  }

  reset() {
    this.proposal = null; // signed out: the session's requests are aborted already
    if (this.dialog.open) this.dialog.close();
    this.clear();
  }
}
