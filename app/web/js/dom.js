// Small DOM helpers shared by every view: lookup, element building and buttons with icons.

import { icon } from "./icons.js";

export const $ = (id) => document.getElementById(id);

// An element with optional class, text, attributes and children; text is always text, never HTML.
export function el(tag, { className = "", text = null, attrs = {} } = {}, children = []) {
  const element = document.createElement(tag);
  if (className) element.className = className;
  if (text !== null) element.textContent = text;
  for (const [name, value] of Object.entries(attrs)) element.setAttribute(name, value);
  element.append(...children);
  return element;
}

// A button with its text (or, with `iconOnly`, an accessible name and tooltip instead of text),
// an optional icon, click handler, class and type.
export function button(text, onClick, { className = "", label = "", type = "button",
  iconName = "", iconOnly = false } = {}) {
  const element = document.createElement("button");
  element.type = type;
  if (className) element.className = className;
  if (iconName) element.append(icon(iconName));
  if (iconOnly) {
    element.setAttribute("aria-label", label || text);
    element.title = text;
    element.classList.add("icon-button");
  } else {
    element.append(el("span", { className: "label", text }));
    if (label) element.setAttribute("aria-label", label);
  }
  if (onClick) element.addEventListener("click", onClick);
  return element;
}

// Static buttons in the page name their icon in `data-icon`; it is drawn once at start-up.
export function drawIcons(root = document) {
  for (const element of root.querySelectorAll("[data-icon]")) {
    element.prepend(icon(element.dataset.icon));
    element.removeAttribute("data-icon");
  }
}

// Moves focus without scrolling the page: every scrolling area manages its own position.
export function focusQuietly(element) {
  if (element) element.focus({ preventScroll: true });
}
