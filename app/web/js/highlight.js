// Syntax colours for an answer's code blocks, by highlight.js (vendored: vendor/README.md). A
// block is coloured only when its language is named and known; its text stays exactly the
// code. highlight.js escapes the code it wraps in spans; the spans pass the sanitizer once
// more (only `span` with highlight.js's own classes), so nothing else can come through.

import hljs from "../vendor/highlight/highlight.min.js";
import DOMPurify from "../vendor/dompurify/purify.es.mjs";

const SPANS = { ALLOWED_TAGS: ["span"], ALLOWED_ATTR: ["class"], RETURN_DOM_FRAGMENT: true };

// highlight.js's class names: `hljs-keyword`, `hljs-title function_` and the like.
export function isHighlightClass(value) {
  return value.split(/\s+/).every((name) => /^(?:hljs-[\w-]+|[a-z]+_+)$/.test(name));
}

// Colours `code` (a <code> holding plain text) when `language` is one highlight.js knows.
export function highlightCode(code, language) {
  if (!language || !hljs.getLanguage(language)) return;
  const { value } = hljs.highlight(code.textContent, { language, ignoreIllegals: true });
  code.replaceChildren(DOMPurify.sanitize(value, SPANS));
  code.classList.add("hljs");
}
