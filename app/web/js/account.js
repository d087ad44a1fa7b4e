// "Delete my account": export offered first, then the person types their own name to confirm;
// the account is erased (DELETE /v1/account) and the page signs them out. Self-contained: its
// own dialog (#delete-account-dialog) and its own export download.

import { describe, isSessionEnd } from "./api.js";
import { $, focusQuietly } from "./dom.js";

function exportName(response) {
  const match = /filename="([^"]+)"/.exec(response.headers.get("content-disposition") || "");
  return match ? match[1] : "memory-export.json";
}

export class AccountDeletion {
  // onDeleted(): the account is gone; the page signs the person out.
  constructor({ onDeleted }) {
    this.onDeleted = onDeleted;
    this.client = null;
    this.subject = "";
    this.dialog = $("delete-account-dialog");
    this.input = $("delete-account-confirm");
    this.submit = $("delete-account-ok");
    this.status = $("delete-account-status");
    $("delete-account").addEventListener("click", () => this.open());
    $("delete-account-export").addEventListener("click", () => this.exportFirst());
    $("delete-account-cancel").addEventListener("click", () => this.close());
    this.input.addEventListener("input", () => this.check());
    $("delete-account-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.erase();
    });
  }

  attach(client, subject) {
    this.client = client;
    this.subject = subject;
  }

  reset() {
    this.close();
    this.client = null;
    this.subject = "";
  }

  open() {
    if (!this.client) return;
    $("delete-account-name").textContent = this.subject;
    this.input.value = "";
    this.say("");
    this.check();
    this.dialog.showModal();
    focusQuietly($("delete-account-export"));
  }

  close() {
    if (this.dialog.open) this.dialog.close();
  }

  // Only the exact name enables the button: a typo, or another person's name, never erases.
  check() {
    this.submit.disabled = this.input.value !== this.subject;
  }

  say(text, kind = "") {
    this.status.textContent = text;
    this.status.dataset.kind = kind;
  }

  async exportFirst() {
    try {
      const response = await this.client.fetch("/v1/memory/export");
      const url = URL.createObjectURL(await response.blob());
      const link = document.createElement("a");
      link.href = url;
      link.download = exportName(response);
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
      this.say("Export downloaded: your memory, its history and your conversations.", "success");
    } catch (error) {
      if (!isSessionEnd(error)) this.say(`Could not export: ${describe(error)}`, "error");
    }
  }

  async erase() {
    if (this.input.value !== this.subject) return;
    this.submit.disabled = true;
    this.say("Deleting…");
    try {
      await this.client.request("/v1/account", {
        method: "DELETE",
        body: { confirm: this.subject },
      });
    } catch (error) {
      if (!isSessionEnd(error)) this.say(`Could not delete the account: ${describe(error)}`, "error");
      this.check();
      return;
    }
    this.close();
    this.onDeleted();
  }
}
