// A confirmation dialog for destructive actions: modal, keyboard-friendly (Escape cancels),
// and focus goes back to where it was when it closes.

import { $ } from "./dom.js";

// Asks with up to two ways forward; resolves with "ok", "alt" (the second way, when `alternative`
// names it) or null (Cancel, Escape).
export function chooseAction({ title, text, confirm, alternative = "" }) {
  const dialog = $("confirm");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = confirm;
  $("confirm-alt").textContent = alternative;
  $("confirm-alt").hidden = !alternative;
  return new Promise((resolve) => {
    const finish = (answer) => {
      $("confirm-ok").removeEventListener("click", onOk);
      $("confirm-alt").removeEventListener("click", onAlt);
      $("confirm-cancel").removeEventListener("click", onCancel);
      dialog.removeEventListener("close", onClose);
      if (dialog.open) dialog.close();
      resolve(answer);
    };
    const onOk = () => finish("ok");
    const onAlt = () => finish("alt");
    const onCancel = () => finish(null);
    const onClose = () => finish(null); // Escape
    $("confirm-ok").addEventListener("click", onOk);
    $("confirm-alt").addEventListener("click", onAlt);
    $("confirm-cancel").addEventListener("click", onCancel);
    dialog.addEventListener("close", onClose);
    dialog.showModal();
    $("confirm-cancel").focus();
  });
}

export async function confirmAction({ title, text, confirm }) {
  return (await chooseAction({ title, text, confirm })) === "ok";
}

export function closeDialogs() {
  for (const id of ["confirm", "move-dialog"]) {
    const dialog = $(id);
    if (dialog.open) dialog.close();
  }
}
