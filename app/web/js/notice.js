// One message slot per area: a new message replaces the previous one instead of piling up.
//
// The slot holds two live regions, a polite one for news and an assertive one for errors; at
// most one of them has text at any time.

export class Notice {
  constructor(root) {
    this.root = root;
    this.status = root.querySelector("[role=status]");
    this.alert = root.querySelector("[role=alert]");
  }

  // kind: "info" | "success" | "error"
  show(text, kind = "info") {
    const target = kind === "error" ? this.alert : this.status;
    const other = kind === "error" ? this.status : this.alert;
    other.textContent = "";
    target.textContent = text;
    this.root.dataset.kind = text ? kind : "";
  }

  clear() {
    this.status.textContent = "";
    this.alert.textContent = "";
    this.root.dataset.kind = "";
  }

  get text() {
    return this.status.textContent || this.alert.textContent;
  }
}
