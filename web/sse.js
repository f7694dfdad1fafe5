// Server-Sent Events over fetch(). EventSource cannot POST or send an Authorization header, so the
// page reads the response body itself: frames are parsed line by line as the spec describes, comment
// lines (": keepalive") are dropped, and a stream that ends before its terminal frame is re-attached
// with Last-Event-ID so nothing is lost and nothing is shown twice.

import { ApiError } from "./api.js";

export const TERMINAL = new Set(["done", "cancelled", "error"]);

// Yields {id, event, data} for each frame and {retry} for a retry hint.
export async function* readEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let frame = { id: null, event: "", data: [] };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        let line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          if (frame.data.length || frame.event) {
            yield { id: frame.id, event: frame.event || "message", data: parse(frame.data.join("\n")) };
          }
          frame = { id: null, event: "", data: [] };
          continue;
        }
        if (line.startsWith(":")) continue; // a comment, e.g. the keepalive
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") frame.event = value;
        else if (field === "data") frame.data.push(value);
        else if (field === "id") frame.id = /^\d+$/.test(value) ? Number(value) : null;
        else if (field === "retry" && /^\d+$/.test(value)) yield { retry: Number(value) };
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

function parse(text) {
  try {
    return JSON.parse(text);
  } catch {
    return { raw: text };
  }
}

export class StreamError extends Error {
  constructor(message, code) {
    super(message);
    this.name = "StreamError";
    this.code = code;
  }
}

const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        reject(new DOMException("aborted", "AbortError"));
      },
      { once: true },
    );
  });

// Follow one run to its terminal frame.
//   open()                     -> Promise<Response>, the first response (a POST or an attach)
//   attach(runId, lastEventId) -> Promise<Response>, used to resume after a drop
//   onFrame(event, data, id)   called for every frame, terminal ones included
//   onReconnect(attempt)       called before each re-attach
// Resolves with the terminal frame {event, data}; rejects with ApiError / StreamError / AbortError.
export async function follow({ open, attach, onFrame, onReconnect, onRunId, signal, maxRetries = 10 }) {
  let response = await open();
  let runId = response.headers.get("X-Run-Id");
  if (runId) onRunId?.(runId);
  let lastEventId = 0;
  let attempt = 0;
  let retryMs = 1000;
  for (;;) {
    let handedOver = false; // the server ended this response on purpose and said when to come back
    if (response) {
      try {
        for await (const item of readEvents(response)) {
          if (item.retry !== undefined) {
            retryMs = item.retry;
            handedOver = true;
            continue;
          }
          if (item.id !== null && item.id > lastEventId) lastEventId = item.id;
          attempt = 0;
          if (item.event === "run" && item.data.run_id && item.data.run_id !== runId) {
            runId = item.data.run_id;
            onRunId?.(runId);
          }
          onFrame(item.event, item.data, item.id);
          if (TERMINAL.has(item.event)) return { event: item.event, data: item.data };
        }
      } catch (err) {
        if (signal?.aborted) throw err;
        // The connection broke mid-body: reconnect below.
      }
    }
    if (signal?.aborted) throw new DOMException("aborted", "AbortError");
    // A response cut short on purpose (a long-poll window, a Lambda nearing its limit) is the normal way
    // a long turn is delivered: come back after the hinted delay. Anything else counts as a failure.
    attempt = handedOver ? 0 : attempt + 1;
    if (!runId || attempt > maxRetries) {
      throw new StreamError(
        "The stream ended before the turn did, and reconnecting did not work. Reload to try again.",
        "stream_dropped",
      );
    }
    if (attempt) onReconnect?.(attempt);
    await sleep(handedOver ? retryMs : Math.min(retryMs * 2 ** (attempt - 1), 8000), signal);
    response = null;
    try {
      response = await attach(runId, lastEventId);
    } catch (err) {
      // A 4xx is an answer (the run is unknown to this token, the id is bad): stop. Anything else: retry.
      if (err instanceof ApiError && err.status >= 400 && err.status < 500 && err.status !== 429) throw err;
      if (err.name === "AbortError") throw err;
    }
  }
}
