// The signed-in person, as the server's session says: the page never holds a token. The session
// lives in an HttpOnly cookie (the page cannot read it); the page keeps only what
// `GET /auth/session` tells it: who is signed in and the CSRF token its writes carry.
//
// Tabs of one browser share the cookie, so they share the session: a tab that signs in or out
// tells the others (BroadcastChannel), and each of them asks the server before it believes it.

import { errorFrom } from "./api.js";

const CHANNEL = "agent-memory-session";
const channel = typeof BroadcastChannel === "function" ? new BroadcastChannel(CHANNEL) : null;

// The session the cookie names ({subject, roles, csrf_token, expires_at}), or null.
export async function currentSession() {
  const response = await fetch("/auth/session", { headers: { accept: "application/json" } });
  if (response.status === 401 || response.status === 404) return null;
  if (!response.ok) throw await errorFrom(response);
  return response.json();
}

// Dev mode: the server signs the name in and sets the cookie.
export async function devSignIn(name) {
  const response = await fetch("/auth/dev/login", {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json" },
    body: JSON.stringify({ sub: name }),
  });
  if (!response.ok) throw await errorFrom(response);
  return response.json();
}

// oidc mode: the provider's sign-in page, coming back to `path`.
export function providerSignIn(path = location.pathname) {
  location.assign(`/auth/login?next=${encodeURIComponent(path)}`);
}

// Ends the session on the server (a copy of the cookie is worthless from now on); where to go
// next: the provider's end-session page, or null to stay.
export async function endSession(csrfToken) {
  try {
    const response = await fetch("/auth/logout", {
      method: "POST",
      headers: { accept: "application/json", "x-csrf-token": csrfToken || "" },
    });
    if (!response.ok) return null;
    const { redirect_to: target } = await response.json();
    return target && target !== "/" ? target : null;
  } catch {
    return null; // offline: the page still forgets the person; the cookie ends with its lifetime
  }
}

export function announce(event) {
  if (channel) channel.postMessage(event);
}

// `listener("signed-in" | "signed-out")` when another tab of this browser says so.
export function onAnnouncement(listener) {
  if (channel) channel.addEventListener("message", (message) => listener(message.data));
}
