// Where the person is, as an address: `/` is a new chat, `/c/<id>` one conversation and
// `/p/<id>` one project's page (its conversations, and a new chat in it), so that a reload,
// Back and Forward, a bookmark or a link (opened by the same person) return there. The server
// answers every `/c/<id>` and `/p/<id>` with this page; the page asks the API for the id.

const CONVERSATION_PATH = /^\/c\/([^/]+)\/?$/;
const PROJECT_PATH = /^\/p\/([^/]+)\/?$/;

function decoded(part) {
  try {
    return decodeURIComponent(part);
  } catch {
    return part; // a malformed escape is still an id the API will answer "not found" for
  }
}

export function conversationPath(id) {
  return id ? `/c/${encodeURIComponent(id)}` : "/";
}

export function projectPath(id) {
  return id ? `/p/${encodeURIComponent(id)}` : "/";
}

// The conversation id in a path, or null for any other path.
export function conversationInPath(pathname) {
  const match = CONVERSATION_PATH.exec(pathname);
  return match ? decoded(match[1]) : null;
}

// The project id in a path (a project's page), or null for any other path.
export function projectInPath(pathname) {
  const match = PROJECT_PATH.exec(pathname);
  return match ? decoded(match[1]) : null;
}

export class Router {
  // onRoute(conversationId | null, projectId | null) is called on Back and Forward with the
  // place the address names (both null: a new chat).
  constructor({ onRoute }) {
    this.onRoute = onRoute;
    window.addEventListener("popstate", () => this.onRoute(this.current(), this.project()));
  }

  current() {
    return conversationInPath(window.location.pathname);
  }

  project() {
    return projectInPath(window.location.pathname);
  }

  // The page now shows conversation `id` (null: a new chat, in `project` when given).
  // `replace`: the same place got its address (a new chat's first answer), not a new step for
  // Back.
  show(id, { replace = false, project = null } = {}) {
    const path = id ? conversationPath(id) : projectPath(project);
    if (window.location.pathname === path) return;
    if (replace) window.history.replaceState(null, "", path);
    else window.history.pushState(null, "", path);
  }
}
