// Where the person is, as an address: `/` is a new chat and `/c/<id>` one conversation, so that
// a reload, Back and Forward, a bookmark or a link (opened by the same person) return there.
// The server answers every `/c/<id>` with this page; the chat asks the API for the id.

const CONVERSATION_PATH = /^\/c\/([^/]+)\/?$/;

export function conversationPath(id) {
  return id ? `/c/${encodeURIComponent(id)}` : "/";
}

// The conversation id in a path, or null for any other path.
export function conversationInPath(pathname) {
  const match = CONVERSATION_PATH.exec(pathname);
  if (!match) return null;
  try {
    return decodeURIComponent(match[1]);
  } catch {
    return match[1]; // a malformed escape is still an id the API will answer "not found" for
  }
}

export class Router {
  // onRoute(id | null) is called on Back and Forward with the conversation the address names.
  constructor({ onRoute }) {
    this.onRoute = onRoute;
    window.addEventListener("popstate", () => this.onRoute(this.current()));
  }

  current() {
    return conversationInPath(window.location.pathname);
  }

  // The page now shows conversation `id` (null: a new chat). `replace`: the same place got its
  // address (a new chat's first answer), not a new step for Back.
  show(id, { replace = false } = {}) {
    const path = conversationPath(id);
    if (window.location.pathname === path) return;
    if (replace) window.history.replaceState(null, "", path);
    else window.history.pushState(null, "", path);
  }
}
