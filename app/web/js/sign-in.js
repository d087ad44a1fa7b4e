// The sign-in screen: the dev and provider sign-in, its notices, and the problems a sign-in
// redirect reports.

import { describe } from "./api.js";
import { $, focusQuietly } from "./dom.js";
import { Notice } from "./notice.js";
import { announce, devSignIn, providerSignIn } from "./session.js";

// What the server's sign-in redirect reports in `?sign_in=` when it did not complete.
const SIGN_IN_PROBLEMS = {
  failed: "Sign-in did not complete. Please try again.",
  unavailable: "The identity provider cannot be reached. Please try again in a moment.",
};
const NO_BROWSER_SIGN_IN = "This server has no browser sign-in configured (AUTH_CLIENT_ID). "
  + "API clients use Bearer tokens.";

export const signInNotice = new Notice($("sign-in-notice"));

// `info`: what the server says of itself (its auth mode, whether browser sign-in is set up).
export function showSignIn(info, message = "", kind = "error") {
  $("workspace").hidden = true;
  $("sign-in").hidden = false;
  const oidc = info.auth_mode === "oidc";
  $("dev-sign-in").hidden = oidc;
  $("provider-sign-in").hidden = !oidc || !info.browser_sign_in;
  if (oidc && !info.browser_sign_in && !message) [message, kind] = [NO_BROWSER_SIGN_IN, "status"];
  if (message) signInNotice.show(message, kind);
  else signInNotice.clear();
  focusQuietly(oidc ? $("provider-sign-in-button") : $("dev-name"));
}

// Where the server's sign-in redirect left a problem (`?sign_in=failed`): its words, once; the
// address keeps only its path.
export function signInProblem() {
  const params = new URLSearchParams(location.search);
  const problem = params.get("sign_in");
  if (problem === null) return "";
  history.replaceState(null, "", location.pathname);
  return SIGN_IN_PROBLEMS[problem] || SIGN_IN_PROBLEMS.failed;
}

// The dev form and the provider button; `signIn(session)` opens the workspace once the server
// has signed the person in.
export function wireSignIn(signIn) {
  $("dev-sign-in").addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = $("dev-name").value.trim();
    signInNotice.clear();
    try {
      const session = await devSignIn(name);
      $("dev-name").value = "";
      await signIn(session);
      announce("signed-in");
    } catch (error) {
      signInNotice.show(`Could not sign in: ${describe(error)}`, "error");
    }
  });
  $("provider-sign-in-button").addEventListener("click", () => providerSignIn());
}
