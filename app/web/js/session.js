// The signed-in person's token: where it is kept (this tab only) and what it says about them.

const TOKEN_KEY = "agent-memory-token";

export function savedToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function keepToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function dropToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

// A front proxy or an identity provider may hand the token in the URL fragment, which is never
// sent to servers; it is moved to storage and removed from the address bar.
export function takeTokenFromFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("access_token");
  if (token) {
    keepToken(token);
    history.replaceState(null, "", location.pathname + location.search);
  }
}

// The token's `sub`, for display only: the server verifies the token, the page never does.
export function subjectOf(token) {
  try {
    const payload = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const padded = payload.padEnd(payload.length + ((4 - (payload.length % 4)) % 4), "=");
    const claims = JSON.parse(new TextDecoder().decode(
      Uint8Array.from(atob(padded), (character) => character.charCodeAt(0))));
    return typeof claims.sub === "string" ? claims.sub : null;
  } catch {
    return null;
  }
}
