// A small client for the oberik HTTP API: bearer auth, JSON in and out, and errors as ApiError
// carrying the server's own sentence ({detail, code}).

export class ApiError extends Error {
  constructor(status, detail, code, body) {
    super(detail);
    this.name = "ApiError";
    this.status = status;
    this.code = code || null;
    this.body = body || null;
  }
}

export class Api {
  constructor({ base, token }) {
    this.base = (base || "").replace(/\/+$/, "");
    this.token = token || "";
  }

  url(path) {
    return this.base + path;
  }

  headers(extra = {}) {
    const h = { ...extra };
    if (this.token) h.Authorization = `Bearer ${this.token}`;
    return h;
  }

  async fetch(method, path, { body, headers = {}, signal, auth = true } = {}) {
    const init = { method, signal, headers: auth ? this.headers(headers) : { ...headers } };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers["Content-Type"] = "application/json";
    }
    let response;
    try {
      response = await fetch(this.url(path), init);
    } catch (err) {
      if (err.name === "AbortError") throw err;
      throw new ApiError(0, `Could not reach the API at ${this.base || location.origin} (${err.message}).`, "network");
    }
    if (!response.ok) throw await errorOf(response);
    return response;
  }

  async json(method, path, options) {
    const response = await this.fetch(method, path, options);
    if (response.status === 204) return null;
    const text = await response.text();
    return text ? JSON.parse(text) : null;
  }

  get(path, options) {
    return this.json("GET", path, options);
  }
  post(path, body, options = {}) {
    return this.json("POST", path, { ...options, body });
  }
  patch(path, body, options = {}) {
    return this.json("PATCH", path, { ...options, body });
  }
  delete(path, options) {
    return this.json("DELETE", path, options);
  }

  // POST /chat/stream: the Response whose body carries the turn's frames.
  stream(body, signal) {
    return this.fetch("POST", "/chat/stream", {
      body,
      signal,
      headers: { Accept: "text/event-stream" },
    });
  }

  // GET /chat/stream/{run_id}: replay after lastEventId (from the start with 0), then follow live.
  attach(runId, lastEventId, signal) {
    const headers = { Accept: "text/event-stream" };
    if (lastEventId) headers["Last-Event-ID"] = String(lastEventId);
    return this.fetch("GET", `/chat/stream/${encodeURIComponent(runId)}`, { headers, signal });
  }
}

async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: fall through to the status line
  }
  const detail =
    (body && typeof body.detail === "string" && body.detail) ||
    `The API answered ${response.status} ${response.statusText || ""}`.trim() + ".";
  return new ApiError(response.status, detail, body && body.code, body);
}
