// Copying text for the person: the Clipboard API where the page may use it, else a selection.

export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // Denied (no permission, no focus): fall back to the selection below.
    }
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.className = "offscreen";
  document.body.append(area);
  area.select();
  const copied = document.execCommand("copy");
  area.remove();
  return copied;
}

// A copy button's feedback: "Copied" for a moment, then its own label again.
export function flashCopied(buttonElement, copied) {
  const label = buttonElement.querySelector(".label");
  const original = buttonElement.dataset.label || (label ? label.textContent : "");
  buttonElement.dataset.label = original;
  if (label) label.textContent = copied ? "Copied" : "Copy failed";
  buttonElement.classList.toggle("copied", copied);
  clearTimeout(Number(buttonElement.dataset.timer || 0));
  buttonElement.dataset.timer = String(setTimeout(() => {
    if (label) label.textContent = original;
    buttonElement.classList.remove("copied");
  }, 2000));
}
