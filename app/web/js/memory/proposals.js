// The memory panel's proposals section: with "Ask before saving" on, what the assistant wanted
// to save waits here as cards, each with Accept and Reject. Decisions go through `decide`,
// which asks the API; this module only shows the proposals it is given.

import { button, el } from "../dom.js";
import { timeElement } from "../time.js";
import { operationText, sourceText } from "./origins.js";

export class ProposalsSection {
  // decide(proposal, "accept" | "reject") -> Promise<void>
  constructor({ root, decide }) {
    this.root = root;
    this.decide = decide;
    this.list = root.querySelector("ul");
  }

  render({ proposals, titles }) {
    this.list.replaceChildren(...proposals.map((proposal) => this.card(proposal, titles)));
    this.root.hidden = proposals.length === 0;
  }

  card(proposal, titles) {
    const lines = proposal.operations.map((operation) =>
      el("p", { className: "change-text", text: operationText(operation, { proposed: true }) }));
    const summary = lines.map((line) => line.textContent).join("; ");
    const from = proposal.source === "import" ? "Imported from another assistant"
      : `Proposed ${sourceText({ ...proposal, source: proposal.source || "turn" }, titles)}`;
    return el("li", { className: "proposal" }, [
      ...lines,
      el("p", { className: "change-meta muted small" },
        [`${from} · `, timeElement(proposal.created_at)]),
      el("div", { className: "proposal-actions" }, [
        button("Reject", () => this.decide(proposal, "reject"), {
          className: "secondary small", label: `Reject: ${summary}` }),
        button("Accept", () => this.decide(proposal, "accept"), {
          className: "primary small", label: `Accept: ${summary}` }),
      ]),
    ]);
  }

  reset() {
    this.list.replaceChildren();
    this.root.hidden = true;
  }
}
