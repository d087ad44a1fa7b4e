// A confirmation dialog for destructive actions: modal, keyboard-friendly (Escape cancels),
// and focus goes back to where it was when it closes.

import { $ } from "./dom.js";

export function confirmAction({ title, text, confirm }) {
  const dialog = $("confirm");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = confirm;
  return new Promise((resolve) => {
    const finish = (answer) => {
      $("confirm-ok").removeEventListener("click", onOk);
      $("confirm-cancel").removeEventListener("click", onCancel);
      dialog.removeEventListener("close", onClose);
      if (dialog.open) dialog.close();
      resolve(answer);
    };
    const onOk = () => finish(true);
    const onCancel = () => finish(false);
    const onClose = () => finish(false); // Escape
    $("confirm-ok").addEventListener("click", onOk);
    $("confirm-cancel").addEventListener("click", onCancel);
    dialog.addEventListener("close", onClose);
    dialog.showModal();
    $("confirm-cancel").focus();
  });
}

export function closeDialogs() {
  const dialog = $("confirm");
  if (dialog.open) dialog.close();
}
