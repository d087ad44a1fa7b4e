// The API client: the session cookie (with its CSRF token on writes), one error shape, and the
// end of a session on a 401.
//
// The API answers every error as {"error": {"code", "message"}}; the client relies on that shape
// and on nothing else. A client belongs to one signed-in person: closing it (sign-out, an expired
// session) aborts everything it still has in flight, so no late answer can reach the next person.

export class ApiError extends Error {
  constructor(status, code, message, retryAfter = null, details = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter; // seconds, from Retry-After (a limit was hit)
    this.details = details; // the error object's other fields (409 project_not_empty: conversations)
  }
}

// Thrown instead of an answer once the client was closed: views ignore it.
export class SessionEnded extends Error {
  constructor() {
    super("The session has ended.");
    this.name = "SessionEnded";
  }
}

export function isSessionEnd(error) {
  return error instanceof SessionEnded;
}

export async function errorFrom(response) {
  let code = `http_${response.status}`;
  let message = response.statusText || "The request failed.";
  let details = {};
  try {
    const body = await response.json();
    code = body.error.code;
    message = body.error.message;
    details = body.error;
  } catch {
    // Not the API's error body (a proxy's page, an empty body): keep the HTTP status.
  }
  const retryAfter = Number.parseInt(response.headers.get("retry-after") || "", 10);
  return new ApiError(response.status, code, message, Number.isFinite(retryAfter) ? retryAfter : null,
    details);
}

// A per-user limit (429 rate_limited) in words a person can act on, or null for other errors.
export function limitMessage(error) {
  if (!(error instanceof ApiError) || error.code !== "rate_limited") return null;
  const seconds = error.retryAfter;
  const plural = (count, unit) => `${count} ${unit}${count === 1 ? "" : "s"}`;
  let wait = "in a moment";
  if (seconds !== null && seconds < 120) wait = `in ${plural(seconds, "second")}`;
  else if (seconds !== null && seconds < 5400) wait = `in about ${plural(Math.ceil(seconds / 60), "minute")}`;
  else if (seconds !== null) wait = `in about ${plural(Math.round(seconds / 3600), "hour")}`;
  return `Limit reached: ${error.message} You can send it again ${wait}.`;
}

export function describe(error) {
  if (error instanceof ApiError) return `${error.message} (${error.code})`;
  if (error instanceof TypeError) return "The server could not be reached. Check your connection and try again.";
  return error && error.message ? error.message : String(error);
}

async function jsonOrNull(response) {
  if (response.status === 204) return null;
  const type = response.headers.get("content-type") || "";
  return type.includes("json") ? response.json() : null;
}

export class ApiClient {
  // `csrfToken`: the session's, sent with every write (GET /auth/session hands it over).
  constructor(csrfToken, { onUnauthorized = () => {} } = {}) {
    this.csrfToken = csrfToken;
    this.onUnauthorized = onUnauthorized;
    this.controller = new AbortController();
  }

  get closed() {
    return this.controller.signal.aborted;
  }

  close() {
    this.controller.abort();
  }

  async fetch(path, { method = "GET", body, signal, accept = "application/json" } = {}) {
    if (this.closed) throw new SessionEnded();
    const headers = { accept };
    if (method !== "GET" && method !== "HEAD") headers["x-csrf-token"] = this.csrfToken;
    const init = { method, headers, signal: signal
      ? AbortSignal.any([this.controller.signal, signal]) : this.controller.signal };
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      if (this.closed) throw new SessionEnded();
      throw error;
    }
    if (this.closed) throw new SessionEnded();
    if (response.status === 401) {
      const error = await errorFrom(response);
      this.onUnauthorized(error);
      throw new SessionEnded();
    }
    if (!response.ok) throw await errorFrom(response);
    return response;
  }

  // A JSON request; the parsed answer, or null for 204.
  async request(path, options = {}) {
    const response = await this.fetch(path, options);
    const body = await jsonOrNull(response);
    if (this.closed) throw new SessionEnded();
    return body;
  }
}

// Before sign-in: the public facts the page needs (sign-in mode, offline model, memory flag).
export async function fetchInfo() {
  try {
    const response = await fetch("/info");
    if (response.ok) return await response.json();
  } catch {
    // The page still offers a sign-in; requests will say what is wrong.
  }
  return { auth_mode: "dev", offline: null, model: null, memory_enabled: null };
}
