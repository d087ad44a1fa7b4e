// Answers as markdown, rendered safely: `marked` parses, `DOMPurify` sanitizes, and raw HTML in
// an answer is shown as text, never parsed into elements.
//
// Three layers, so that no single slip lets markup run: the renderer escapes every raw-HTML token
// (an answer's `<img onerror>` or `<script>` is printed as those characters), DOMPurify then keeps
// only the tags markdown produces and only http(s)/mailto links, and the page's
// Content-Security-Policy refuses inline script and any foreign image or script anyway.

import { Marked } from "../vendor/marked/marked.esm.js";
import DOMPurify from "../vendor/dompurify/purify.es.mjs";
import { copyText, flashCopied } from "./clipboard.js";
import { button, el } from "./dom.js";
import { highlightCode, isHighlightClass } from "./highlight.js";

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (character) => ESCAPES[character]);

const marked = new Marked({
  gfm: true,
  renderer: {
    // Raw HTML, block or inline, is text.
    html: ({ text, block }) => (block ? `<p>${escapeHtml(text)}</p>` : escapeHtml(text)),
    // No images from answers: they would fetch from anywhere (tracking) and the policy blocks
    // them. The picture becomes a link to it, which the sanitizer checks like any link.
    image: ({ href, text }) => `<a href="${escapeHtml(href)}">${escapeHtml(text || href)}</a>`,
    // Task lists as characters rather than form controls.
    checkbox: ({ checked }) => (checked ? "☑ " : "☐ "),
  },
});

const ALLOWED_TAGS = [
  "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "li",
  "ol", "p", "pre", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
];
const PURIFY = {
  ALLOWED_TAGS,
  ALLOWED_ATTR: ["href", "title", "class", "start", "align"],
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:)/i,
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

DOMPurify.addHook("uponSanitizeAttribute", (node, data) => {
  // Only a code block's language survives as a class (and, in highlight.js's spans, its own).
  if (data.attrName === "class") {
    data.keepAttr = (node.nodeName === "CODE" && /^language-[\w+#.-]+$/.test(data.attrValue))
      || (node.nodeName === "SPAN" && isHighlightClass(data.attrValue));
  }
});
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.nodeName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

function languageOf(pre) {
  const code = pre.querySelector("code");
  const match = code && /language-([\w+#.-]+)/.exec(code.className);
  return match ? match[1] : "";
}

// A code block with its language and a Copy button; tables scroll sideways on their own; a
// link whose address the sanitizer removed (javascript:, data:...) is just its text.
function decorate(fragment) {
  for (const link of fragment.querySelectorAll("a:not([href])")) link.replaceWith(...link.childNodes);
  for (const pre of fragment.querySelectorAll("pre")) {
    const copy = button("Copy", null, { className: "copy-code", iconName: "copy",
      label: "Copy code" });
    // The code without the line break that ends every block.
    const code = () => pre.textContent.replace(/\n$/, "");
    copy.addEventListener("click", async () => flashCopied(copy, await copyText(code())));
    const head = el("div", { className: "code-head" },
      [el("span", { className: "code-language", text: languageOf(pre) || "code" }), copy]);
    const codeElement = pre.querySelector("code");
    if (codeElement) highlightCode(codeElement, languageOf(pre));
    const block = el("div", { className: "code-block" });
    pre.replaceWith(block);
    block.append(head, pre);
  }
  for (const table of fragment.querySelectorAll("table")) {
    const scroll = el("div", { className: "table-scroll" });
    table.replaceWith(scroll);
    scroll.append(table);
  }
  return fragment;
}

export function toFragment(markdown) {
  return decorate(DOMPurify.sanitize(marked.parse(markdown), PURIFY));
}

const rendered = new WeakMap(); // block element -> the markdown source it shows

function renderBlock(token, links) {
  const tokens = [token];
  tokens.links = links;
  const block = el("div", { className: "md-block" });
  block.append(decorate(DOMPurify.sanitize(marked.parser(tokens), PURIFY)));
  rendered.set(block, token.raw);
  return block;
}

// Renders `markdown` into `container`, one top-level block per element. While an answer
// streams, only the blocks whose source changed are rebuilt: earlier paragraphs and code
// blocks keep their nodes, so a selection or a focused Copy button survives the next token.
export function renderMarkdown(container, markdown) {
  const tokens = marked.lexer(markdown);
  const referenced = Object.keys(tokens.links || {}).length > 0;
  tokens.forEach((token, index) => {
    const existing = container.children[index];
    if (existing && !referenced && rendered.get(existing) === token.raw) return;
    const block = renderBlock(token, tokens.links);
    if (existing) existing.replaceWith(block);
    else container.append(block);
  });
  while (container.children.length > tokens.length) container.lastElementChild.remove();
}
