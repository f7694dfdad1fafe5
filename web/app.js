// The oberik playground: one page that uses the public API exactly as any client would.
//
// Streaming is SSE over fetch (see sse.js). A turn that pauses for a person (an approval or a question)
// is answered with POST /chat/stream carrying session_id plus approval_decisions / answers, and the page
// keeps streaming the resumed run. The open conversation lives in the URL hash, so a reload reopens it,
// asks GET /chat/sessions/{id}/run what is going on, and re-attaches to a running turn or shows the
// question that is still waiting.

import { Api, ApiError } from "./api.js";
import { renderCited } from "./cited.js";
import { ago, clock, h, iconButton, pretty, uid } from "./dom.js";
import { HandoffView } from "./handoff.js";
import { follow } from "./sse.js";

const TOKEN_KEY = "oberik.playground.token";
const BASE_KEY = "oberik.playground.base";
const NOTIFY_KEY = "oberik.playground.notify";
const PAGE_SIZE = 50;

const $ = (id) => document.getElementById(id);
const els = {
  banner: $("banner"),
  settings: $("settings"),
  settingsToggle: $("settings-toggle"),
  settingsForm: $("settings-form"),
  tokenInput: $("token-input"),
  baseInput: $("base-input"),
  forgetToken: $("forget-token"),
  notify: $("notify"),
  notifyNote: $("notify-note"),
  newChat: $("new-chat"),
  sessions: $("sessions"),
  sessionsEmpty: $("sessions-empty"),
  moreSessions: $("more-sessions"),
  plan: $("plan"),
  planSummary: $("plan-summary"),
  todos: $("todos"),
  scroller: $("scroller"),
  empty: $("empty"),
  transcript: $("transcript"),
  status: $("status"),
  pause: $("pause"),
  steerForm: $("steer-form"),
  steerInput: $("steer-input"),
  steerSend: $("steer-send"),
  steerResult: $("steer-result"),
  stop: $("stop"),
  composer: $("composer"),
  message: $("message"),
  send: $("send"),
};

const state = {
  api: null,
  sessionId: null,
  sessions: [],
  nextOffset: null,
  turn: null, // the run this page is following: {controller, runId, live, opened}
  waiting: null, // what a paused turn waits on: {approvals, questions, tool_calls}
  pausedLive: null, // the answer bubble of a paused turn, continued when it resumes
  answers: new Map(), // answer text -> its done payload, to keep pills and reasoning after a refresh
  loadSeq: 0,
};

// --- storage and connection ----------------------------------------------------------------------

const stored = {
  get(key) {
    try {
      return localStorage.getItem(key) || "";
    } catch {
      return "";
    }
  },
  set(key, value) {
    try {
      if (value) localStorage.setItem(key, value);
      else localStorage.removeItem(key);
    } catch {
      // storage unavailable (private mode): the page still works for this visit
    }
  },
};

function sameOriginBase() {
  return new URL(".", location.href).href.replace(/\/+$/, "");
}

function connect() {
  state.api = new Api({ base: stored.get(BASE_KEY) || sameOriginBase(), token: stored.get(TOKEN_KEY) });
}

// `make dev` prints a URL carrying ?token=: keep it, then take it out of the address bar.
function adoptTokenFromUrl() {
  const url = new URL(location.href);
  const token = url.searchParams.get("token");
  if (token === null) return;
  if (token.trim()) stored.set(TOKEN_KEY, token.trim());
  url.searchParams.delete("token");
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
}

function showSettings(open) {
  els.settings.hidden = !open;
  els.settingsToggle.setAttribute("aria-expanded", String(open));
  if (open) {
    els.tokenInput.value = state.api.token;
    els.baseInput.value = stored.get(BASE_KEY);
    els.tokenInput.focus();
  }
}

function saveSettings(event) {
  event.preventDefault();
  stored.set(TOKEN_KEY, els.tokenInput.value.trim());
  stored.set(BASE_KEY, els.baseInput.value.trim().replace(/\/+$/, ""));
  connect();
  showSettings(false);
  hideBanner();
  afterConnect();
}

function forgetToken() {
  stored.set(TOKEN_KEY, "");
  connect();
  state.sessions = [];
  renderSessions();
  navigate(null);
  checkPush();
  showSettings(true);
  banner("Token forgotten. Paste one to continue.", "info");
}

function afterConnect() {
  updateComposer();
  checkPush();
  if (!state.api.token) {
    showSettings(true);
    banner("Paste a token under Connection to start; the playground URL that make dev prints carries one.", "info");
    return;
  }
  loadSessions();
  openSession(sessionFromHash());
}

// --- banner and status ---------------------------------------------------------------------------

function banner(text, kind = "error") {
  els.banner.hidden = false;
  els.banner.className = `banner ${kind}`;
  els.banner.setAttribute("role", kind === "error" ? "alert" : "status");
  els.banner.replaceChildren(
    h("span", {}, text),
    h("button", { type: "button", "aria-label": "Dismiss this message", onclick: hideBanner }, "×"),
  );
}

function hideBanner() {
  els.banner.hidden = true;
  els.banner.replaceChildren();
}

function report(err) {
  if (err?.name === "AbortError") return;
  if (err instanceof ApiError && err.status === 401) {
    banner(`The API refused the token: ${err.message} Paste a fresh one under Connection.`);
    showSettings(true);
    return;
  }
  banner(err?.message || String(err));
}

function setStatus(text, busy = false) {
  els.status.textContent = text;
  els.status.classList.toggle("busy", busy && Boolean(text));
}

function updateComposer() {
  const running = Boolean(state.turn);
  const noToken = !state.api.token;
  els.message.disabled = noToken;
  els.send.disabled = noToken || running || Boolean(state.waiting);
  els.steerForm.hidden = !running;
  els.newChat.disabled = noToken;
}

function nearBottom() {
  const s = els.scroller;
  return s.scrollHeight - s.scrollTop - s.clientHeight < 140;
}

function scrollDown(force = false) {
  if (force || nearBottom()) els.scroller.scrollTop = els.scroller.scrollHeight;
}

function showEmpty(empty) {
  els.empty.hidden = !empty;
  if (empty) {
    els.empty.textContent = state.sessionId
      ? "This conversation has no messages yet."
      : "Send a message to start a conversation.";
  }
}

// --- sessions sidebar ----------------------------------------------------------------------------

async function loadSessions({ more = false } = {}) {
  if (!state.api.token) return;
  const offset = more ? state.nextOffset || 0 : 0;
  try {
    const page = await state.api.get(`/chat/sessions?limit=${PAGE_SIZE}&offset=${offset}`);
    state.sessions = more ? [...state.sessions, ...page.items] : page.items;
    state.nextOffset = page.has_more ? page.next_offset : null;
    renderSessions();
  } catch (err) {
    report(err);
  }
}

function sessionName(s) {
  return s.title || "Untitled conversation";
}

function renderSessions() {
  els.sessions.replaceChildren(...state.sessions.map(sessionRow));
  els.sessionsEmpty.hidden = state.sessions.length > 0 || !state.api.token;
  els.moreSessions.hidden = state.nextOffset === null;
}

function sessionRow(s) {
  const current = s.id === state.sessionId;
  const li = h("li", {
    class: `session${s.title ? "" : " untitled"}${current ? " current" : ""}`,
    "data-session-id": s.id,
  });
  const open = h(
    "button",
    { type: "button", class: "open", "aria-current": current ? "page" : null, onclick: () => navigate(s.id) },
    h("span", { class: "title" }, sessionName(s)),
    h("span", { class: "when" }, ago(s.updated_at) + (s.forked_from ? " · fork" : "")),
  );
  const rename = iconButton("pencil", `Rename “${sessionName(s)}”`, () => startRename(li, s));
  const remove = iconButton("trash", `Delete “${sessionName(s)}”`, () => confirmDelete(remove, s));
  li.append(open, h("span", { class: "actions" }, rename, remove));
  return li;
}

function startRename(li, s) {
  const input = h("input", {
    type: "text",
    value: s.title || "",
    maxlength: 200,
    "aria-label": "New name for the conversation (leave empty to clear it)",
  });
  const form = h(
    "form",
    { class: "rename-form" },
    input,
    h("button", { type: "submit", class: "primary" }, "Save"),
    h("button", { type: "button", onclick: renderSessions }, "Cancel"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const title = input.value.trim() || null;
    try {
      const updated = await state.api.patch(`/chat/sessions/${s.id}`, { title });
      Object.assign(s, updated);
    } catch (err) {
      report(err);
    }
    renderSessions();
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape") renderSessions();
  });
  li.replaceChildren(form);
  input.focus();
  input.select();
}

function confirmDelete(button, s) {
  const confirm = h(
    "button",
    { type: "button", class: "danger solid confirm", "aria-label": `Confirm deleting “${sessionName(s)}”` },
    "Delete?",
  );
  const revert = setTimeout(() => confirm.replaceWith(button), 4000);
  confirm.addEventListener("click", async () => {
    clearTimeout(revert);
    try {
      await state.api.delete(`/chat/sessions/${s.id}`);
    } catch (err) {
      report(err);
      return;
    }
    state.sessions = state.sessions.filter((x) => x.id !== s.id);
    if (s.id === state.sessionId) navigate(null);
    renderSessions();
  });
  button.replaceWith(confirm);
  confirm.focus();
}

function rememberTitle(sessionId, title) {
  const s = state.sessions.find((x) => x.id === sessionId);
  if (s && title) {
    s.title = title;
    renderSessions();
  }
}

// --- navigation ----------------------------------------------------------------------------------

function sessionFromHash() {
  const match = /^#session=([\w-]+)$/.exec(location.hash);
  return match ? match[1] : null;
}

function navigate(id) {
  const hash = id ? `#session=${id}` : "";
  if (location.hash !== hash) history.pushState(null, "", location.pathname + location.search + hash);
  openSession(id);
}

// A turn started in a new chat has just created its conversation: show it as the open one.
function adoptSession(id) {
  state.sessionId = id;
  history.replaceState(null, "", `${location.pathname}${location.search}#session=${id}`);
  loadSessions();
}

function disconnect() {
  // Stop listening; the turn itself goes on, and reopening the conversation re-attaches to it.
  if (state.turn) {
    state.turn.controller.abort();
    state.turn = null;
  }
}

async function openSession(id) {
  disconnect();
  const seq = ++state.loadSeq;
  state.sessionId = id;
  state.waiting = null;
  state.pausedLive = null;
  hideBanner();
  clearPause();
  setStatus("");
  renderTodos([]);
  els.transcript.replaceChildren();
  renderSessions();
  updateComposer();
  if (!id) {
    showEmpty(true);
    els.message.focus();
    return;
  }
  els.empty.hidden = true;
  if (!state.api.token) return;
  setStatus("Loading the conversation…", true);
  try {
    const [transcript, plan] = await Promise.all([
      state.api.get(`/chat/sessions/${id}/messages`),
      state.api.get(`/chat/sessions/${id}/todos`).catch(() => null),
    ]);
    if (seq !== state.loadSeq) return;
    renderTranscript(transcript.messages);
    renderTodos(plan?.todos || []);
    setStatus("");
    scrollDown(true);
  } catch (err) {
    if (seq !== state.loadSeq) return;
    setStatus("");
    if (err instanceof ApiError && err.status === 404) {
      banner(`${err.message} It may have been deleted.`);
      history.replaceState(null, "", location.pathname + location.search);
      state.sessionId = null;
      showEmpty(true);
      return;
    }
    report(err);
    return;
  }
  await checkRun(id, seq);
}

// What is going on in this conversation right now: attach to a running turn, or show what a
// paused one waits on.
async function checkRun(id, seq = state.loadSeq) {
  let run;
  try {
    run = await state.api.get(`/chat/sessions/${id}/run`);
  } catch (err) {
    report(err);
    return;
  }
  if (seq !== state.loadSeq || state.sessionId !== id || state.turn) return;
  if (run.run_id) {
    attachTo(run.run_id);
  } else if (run.waiting) {
    showWaiting(run.waiting);
  } else if (run.status === "lost") {
    banner(
      "The last turn was interrupted when the server running it went away, and nothing of it was saved. Send it again.",
      "info",
    );
  } else if (run.status === "elsewhere") {
    banner("A turn is running on another worker that this one cannot follow; reload in a moment.", "info");
  }
}

// --- transcript ----------------------------------------------------------------------------------

function textOf(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (part?.type === "text" ? part.text : part?.type ? `[${part.type.replace(/_url$/, "")}]` : ""))
      .join("");
  }
  return "";
}

const TOOL_WORDS = {
  request_approval: "Asked for approval",
  ask_user: "Asked a question",
  todo_write: "Updated the plan",
  todo_update: "Updated the plan",
  todo_remove: "Updated the plan",
};

function renderTranscript(messages) {
  const results = new Map(messages.filter((m) => m.role === "tool").map((m) => [m.tool_call_id, m]));
  els.transcript.replaceChildren();
  messages.forEach((m, i) => {
    if (m.role === "tool" || m.role === "system") return;
    els.transcript.append(messageItem(m, { results, previous: messages[i - 1] }));
  });
  showEmpty(messages.length === 0);
}

function messageItem(m, { results = new Map(), previous = null, pending = false } = {}) {
  const text = textOf(m.content);
  const li = h("li", { class: `msg ${m.role}`, "data-message-id": m.id || null });
  if (m.role === "assistant" && !text.trim() && m.tool_calls?.length) {
    li.classList.add("tool-row");
    li.append(toolList(m.tool_calls, results));
    return li;
  }
  const meta = h("div", { class: "meta" }, h("span", { class: "who" }, m.role === "user" ? "You" : "Agent"));
  if (m.created_at) meta.append(h("time", {}, clock(m.created_at)));
  if (m.extra?.steered) meta.append(h("span", { class: "tag" }, "steered mid-turn"));
  if (m.extra?.turn_abandoned) {
    li.classList.add("abandoned");
    meta.append(h("span", { class: "tag warn" }, "not answered"));
  }
  if (m.id && !pending) meta.append(forkButton(m, previous));
  const bubble = h("div", { class: "bubble" });
  if (m.tool_calls?.length) bubble.append(toolList(m.tool_calls, results));
  const payload = m.role === "assistant" ? state.answers.get(text) : null;
  if (payload?.reasoning) bubble.append(reasoningBlock(payload.reasoning, false));
  bubble.append(...answerNodes(text, payload));
  li.append(meta, bubble);
  return li;
}

function forkButton(m, previous) {
  if (m.role === "user") {
    // "Edit and try again": a new conversation holding everything before this message, with the
    // message in the box to change and resend. The original conversation is left as it was.
    return iconButton(
      "edit",
      "Edit this message in a fork",
      () => forkFrom(previous?.id || null, textOf(m.content)),
      "fork",
    );
  }
  return iconButton("fork", "Fork the conversation from this message", () => forkFrom(m.id, ""), "fork");
}

async function forkFrom(upTo, prefill) {
  if (!upTo) {
    navigate(null);
    els.message.value = prefill;
    els.message.focus();
    return;
  }
  let copy;
  try {
    copy = await state.api.post(`/chat/sessions/${state.sessionId}/fork`, { up_to_message_id: upTo });
  } catch (err) {
    report(err);
    return;
  }
  state.sessions = [copy, ...state.sessions.filter((s) => s.id !== copy.id)];
  navigate(copy.id);
  banner("Forked into a new conversation; the original is unchanged.", "info");
  if (prefill) {
    els.message.value = prefill;
    els.message.focus();
  }
  loadSessions();
}

function toolList(calls, results) {
  return h(
    "ul",
    { class: "tools" },
    calls.map((call) => {
      const name = call.function?.name || call.name || "tool";
      const args = call.function?.arguments ?? call.args ?? call.arguments;
      const result = results.get(call.id);
      return h(
        "li",
        { class: "tool" },
        h(
          "details",
          {},
          h("summary", {}, TOOL_WORDS[name] || `Used ${name}`),
          h("pre", { "aria-label": "Arguments" }, pretty(args ?? {})),
          result ? h("pre", { "aria-label": "Result" }, pretty(result.content)) : null,
        ),
      );
    }),
  );
}

function reasoningBlock(text, live) {
  return h(
    "details",
    { class: "reasoning" },
    h("summary", {}, live ? "Thinking…" : "Reasoning"),
    h("div", { class: "trace" }, text),
  );
}

// The answer, split into cited segments when the turn attributed its sentences.
function answerNodes(text, payload) {
  const content = h("div", { class: "content" });
  const citations = payload?.citations || [];
  if (!payload || (!payload.claims?.length && !citations.length)) {
    content.textContent = text;
    return [content];
  }
  const opened = h("div", { class: "opened-sources" }); // a pill's source opens here, below the prose
  for (const segment of renderCited({ ...payload, content: text })) {
    const span = h("span", { class: "segment" }, segment.text);
    content.append(span);
    for (const citation of segment.citations) span.append(pill(citation, opened));
  }
  return [content, opened, sourcesList(citations)];
}

function pill(citation, opened) {
  const button = h(
    "button",
    {
      type: "button",
      class: "pill",
      "aria-expanded": "false",
      "aria-label": `Source ${citation.marker}: ${citation.title || citation.kind || "citation"}`,
      title: citation.title || "",
    },
    String(citation.marker),
  );
  let card = null;
  button.addEventListener("click", () => {
    if (card) {
      card.remove();
      card = null;
    } else {
      card = sourceCard(citation);
      opened.append(card);
    }
    button.setAttribute("aria-expanded", String(Boolean(card)));
  });
  return button;
}

function safeUrl(url) {
  try {
    const parsed = new URL(url);
    return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
  } catch {
    return null;
  }
}

function sourceCard(c) {
  const url = c.url && safeUrl(c.url);
  const title = c.title || c.url || `Source ${c.marker}`;
  const extras = [];
  if (c.page !== undefined && c.page !== null) extras.push(`page ${c.page}`);
  if (c.kind === "memory") extras.push("you told me this");
  if (c.kind === "tool" && c.tool) extras.push(c.tool);
  return h(
    "div",
    { class: "source" },
    h("span", { class: "kind" }, c.kind || "source"),
    url ? h("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, title) : h("strong", {}, title),
    extras.length ? h("span", { class: "hint" }, ` (${extras.join(", ")})`) : null,
    c.quote ? h("blockquote", {}, c.quote) : null,
  );
}

function sourcesList(citations) {
  if (!citations.length) return null;
  return h(
    "details",
    { class: "sources" },
    h("summary", {}, `Sources (${citations.length})`),
    h(
      "ol",
      {},
      citations.map((c) =>
        h(
          "li",
          { class: c.used === false ? "unused" : null, value: Number(c.marker) || null },
          c.title || c.url || c.kind || "source",
          c.used === false ? " (shown to the agent, not used)" : "",
        ),
      ),
    ),
  );
}

// --- the plan ------------------------------------------------------------------------------------

function renderTodos(todos) {
  els.plan.hidden = !todos.length;
  const done = todos.filter((t) => t.status === "done").length;
  els.planSummary.textContent = todos.length ? `Plan: ${done} of ${todos.length} done` : "Plan";
  els.todos.replaceChildren(
    ...todos.map((t) =>
      h(
        "li",
        { class: t.status || "pending" },
        h("span", { class: "n" }, `${t.n}.`),
        h("span", { class: "box", role: "img", "aria-label": (t.status || "pending").replace("_", " ") }),
        h("span", { class: "text" }, t.text),
      ),
    ),
  );
}

// --- the answer being written ----------------------------------------------------------------------

class LiveAnswer {
  constructor() {
    this.text = "";
    this.reasoningText = "";
    this.runningTools = [];
    this.el = h("li", { class: "msg assistant live", "aria-busy": "true" });
    this.bubble = h("div", { class: "bubble" });
    this.activity = h("div", { class: "activity" }); // reasoning and tool calls, in the order they happen
    this.tools = null;
    this.reasoning = null;
    this.content = h("div", { class: "content" });
    this.textNode = document.createTextNode("");
    this.content.append(this.textNode);
    this.bubble.append(this.activity, this.content);
    this.el.append(h("div", { class: "meta" }, h("span", { class: "who" }, "Agent")), this.bubble);
    els.empty.hidden = true;
    els.transcript.append(this.el);
    scrollDown(true);
  }

  token(delta) {
    const stick = nearBottom();
    if (this.reasoning && this.reasoning.dataset.live) {
      delete this.reasoning.dataset.live;
      this.reasoning.querySelector("summary").textContent = "Reasoning";
    }
    this.text += delta;
    this.textNode.appendData(delta);
    if (stick) scrollDown(true);
  }

  think(delta) {
    if (!this.reasoning) {
      this.reasoning = reasoningBlock("", true);
      this.reasoning.dataset.live = "1";
      this.activity.append(this.reasoning);
      this.tools = null; // a later tool call starts a new row below the reasoning
    }
    this.reasoningText += delta;
    this.reasoning.querySelector(".trace").textContent = this.reasoningText;
    if (this.reasoning.dataset.live) {
      const tail = this.reasoningText.replace(/\s+/g, " ").trim().slice(-90);
      this.reasoning.querySelector("summary").textContent = `Thinking… ${tail}`;
    }
    scrollDown();
  }

  toolStart(name, input) {
    if (!this.tools) {
      this.tools = h("ul", { class: "tools" });
      this.activity.append(this.tools);
    }
    const summary = h("summary", {}, `Running ${name}…`);
    const item = h(
      "li",
      { class: "tool running" },
      h("details", {}, summary, h("pre", { "aria-label": "Arguments" }, pretty(input ?? {}))),
    );
    item.summary = summary;
    item.toolName = name;
    this.runningTools.push(item);
    this.tools.append(item);
    scrollDown();
  }

  toolEnd(name, output) {
    const index = this.runningTools.findIndex((item) => item.toolName === name);
    if (index < 0) return;
    const [item] = this.runningTools.splice(index, 1);
    item.classList.remove("running");
    item.summary.textContent = TOOL_WORDS[name] || `Used ${name}`;
    item.querySelector("details").append(h("pre", { "aria-label": "Result" }, pretty(output)));
  }

  steered(text) {
    this.content.append(h("span", { class: "steer-marker" }, `You steered: ${text}`));
    this.textNode = document.createTextNode("");
    this.content.append(this.textNode);
  }

  ui(frame) {
    this.bubble.append(
      h(
        "div",
        { class: "ui-card" },
        h("strong", {}, `Component ${frame.name || ""}`),
        h("pre", {}, pretty(frame.props ?? frame)),
      ),
    );
  }

  note(text, error = false) {
    this.bubble.append(h("p", { class: `notice${error ? " error" : ""}` }, text));
  }

  settle(kind) {
    this.el.classList.add(kind);
    this.el.removeAttribute("aria-busy");
  }

  resume() {
    this.el.classList.remove("waiting");
    this.el.setAttribute("aria-busy", "true");
    for (const note of this.bubble.querySelectorAll(":scope > .notice")) note.remove();
  }
}

// --- running a turn --------------------------------------------------------------------------------

async function runTurn(open, { live = null, onOpenError = report } = {}) {
  const controller = new AbortController();
  const turn = { controller, runId: null, live: live || new LiveAnswer(), opened: false };
  if (live) live.resume();
  state.turn = turn;
  state.pausedLive = null;
  els.steerResult.textContent = "";
  els.stop.disabled = false;
  els.stop.textContent = "Stop";
  updateComposer();
  setStatus("Starting…", true);
  try {
    const end = await follow({
      open: async () => {
        const response = await open(controller.signal);
        turn.opened = true;
        return response;
      },
      attach: (runId, lastEventId) => state.api.attach(runId, lastEventId, controller.signal),
      onRunId: (runId) => {
        turn.runId = runId;
      },
      onFrame: (event, data) => onFrame(turn, event, data),
      onReconnect: (attempt) => setStatus(`The connection dropped; reconnecting (attempt ${attempt})…`, true),
      signal: controller.signal,
    });
    if (state.turn === turn) await onEnd(turn, end);
  } catch (err) {
    if (err?.name === "AbortError" || state.turn !== turn) return;
    setStatus("");
    if (!turn.opened) {
      if (!live) turn.live.el.remove();
      else turn.live.settle("waiting");
      onOpenError(err);
      return;
    }
    turn.live.settle("stopped");
    turn.live.note(err.message, true);
    if (err instanceof ApiError && err.status === 401) report(err);
  } finally {
    if (state.turn === turn) {
      state.turn = null;
      updateComposer();
    }
  }
}

function onFrame(turn, event, data) {
  const live = turn.live;
  switch (event) {
    case "run":
      turn.runId = data.run_id || turn.runId;
      break;
    case "start":
      if (data.session_id && data.session_id !== state.sessionId) adoptSession(data.session_id);
      setStatus("Thinking…", true);
      break;
    case "reasoning":
      live.think(data.delta || "");
      setStatus("Thinking…", true);
      break;
    case "token":
      live.token(data.delta || "");
      setStatus("Writing…", true);
      break;
    case "tool_start":
      live.toolStart(data.name, data.input);
      setStatus(`Running ${data.name}…`, true);
      break;
    case "tool_end":
      live.toolEnd(data.name, data.output);
      setStatus("Thinking…", true);
      break;
    case "todos":
      renderTodos(data.todos || []);
      break;
    case "title":
      rememberTitle(state.sessionId, data.title);
      break;
    case "ui":
      live.ui(data);
      break;
    case "questions":
      setStatus("The agent has a question for you.");
      break;
    case "approvals":
      setStatus("The agent is asking for your approval.");
      break;
    case "browser_handoff":
      showHandoff(data);
      break;
    default:
      break; // frames this page does not draw (attachments, subagents, …) arrive whole on `done`
  }
}

async function onEnd(turn, { event, data }) {
  const live = turn.live;
  if (event === "done" && data.requires_action) {
    live.settle("waiting");
    live.note(
      data.approvals?.length
        ? "Paused: waiting for your approval below."
        : data.questions?.length
          ? "Paused: waiting for your answer below."
          : data.handoff?.blocking
            ? "Paused: the agent handed you its page below."
            : "Paused: waiting on a client tool.",
    );
    state.pausedLive = live;
    showWaiting(data);
    notifyStopped("The agent is waiting for you.");
    loadSessions();
    return;
  }
  if (event === "done") {
    if (data.content) state.answers.set(data.content, data);
    if (data.todos?.length) renderTodos(data.todos);
    if (data.title) rememberTitle(data.session_id, data.title);
    live.settle("finished");
    await refreshTranscript();
    if (!data.content) {
      setStatus(
        data.finish_reason
          ? `The turn ended without an answer (${data.finish_reason}).`
          : "The turn ended without an answer; try sending it again.",
      );
    } else if (data.steered?.length) {
      setStatus(`Done. The agent read your correction${data.steered.length > 1 ? "s" : ""}.`);
    } else {
      setStatus("");
    }
    notifyStopped("The answer is ready.");
    loadSessions();
    return;
  }
  if (event === "cancelled") {
    live.settle("stopped");
    live.note("Stopped. What had been written so far is shown here but was not saved.");
    setStatus("Stopped.");
    await refreshTranscript({ keep: live });
    loadSessions();
    return;
  }
  // event === "error"
  if (data.code === "stream_expired") {
    live.el.remove();
    await refreshTranscript();
    setStatus("That turn finished a while ago; its answer is shown from the conversation.");
    return;
  }
  live.settle("stopped");
  live.note(data.detail || "The turn failed.", true);
  setStatus("");
  await refreshTranscript({ keep: live });
}

async function refreshTranscript({ keep = null } = {}) {
  const id = state.sessionId;
  if (!id) return;
  try {
    const transcript = await state.api.get(`/chat/sessions/${id}/messages`);
    if (state.sessionId !== id) return;
    renderTranscript(transcript.messages);
    if (keep) {
      keep.el.classList.remove("live");
      els.transcript.append(keep.el);
      els.empty.hidden = true;
    }
    scrollDown(true);
  } catch (err) {
    report(err);
  }
}

function attachTo(runId) {
  setStatus("Re-attaching to the running turn…", true);
  runTurn((signal) => state.api.attach(runId, 0, signal));
}

function titleFrom(text) {
  const line = text.split("\n").find((l) => l.trim()) || text;
  const flat = line.replace(/\s+/g, " ").trim();
  if (flat.length <= 60) return flat;
  const cut = flat.slice(0, 60);
  const space = cut.lastIndexOf(" ");
  return `${(space > 30 ? cut.slice(0, space) : cut).trimEnd()}…`;
}

function send(event) {
  event?.preventDefault();
  const text = els.message.value.trim();
  if (!text || state.turn || state.waiting || !state.api.token) return;
  const body = { message: text };
  if (state.sessionId) body.session_id = state.sessionId;
  else body.title = titleFrom(text);
  els.message.value = "";
  hideBanner();
  const mine = messageItem({ role: "user", content: text, created_at: Date.now() / 1000 }, { pending: true });
  els.empty.hidden = true;
  els.transcript.append(mine);
  runTurn((signal) => state.api.stream(body, signal), {
    onOpenError: (err) => {
      mine.remove();
      if (!els.message.value) els.message.value = text;
      report(err);
      // A turn already running (another tab) or one paused on a question: show that instead.
      if (err instanceof ApiError && err.status === 409 && state.sessionId) checkRun(state.sessionId);
    },
  });
}

function resume(fields) {
  const waiting = state.waiting;
  const body = { session_id: state.sessionId, ...fields };
  const live = state.pausedLive && state.pausedLive.el.isConnected ? state.pausedLive : null;
  state.waiting = null;
  clearPause();
  runTurn((signal) => state.api.stream(body, signal), {
    live,
    onOpenError: (err) => {
      report(err);
      if (err instanceof ApiError && err.status === 409) checkRun(state.sessionId);
      else if (waiting) showWaiting(waiting);
    },
  });
}

async function stop() {
  const turn = state.turn;
  if (!turn?.runId) return;
  els.stop.disabled = true;
  els.stop.textContent = "Stopping…";
  try {
    const result = await state.api.post(`/chat/stream/${turn.runId}/cancel`, {});
    if (result.status !== "cancelled" && result.status !== "running") {
      setStatus(`The turn had already ended (${result.status}).`);
    }
  } catch (err) {
    report(err);
    els.stop.disabled = false;
    els.stop.textContent = "Stop";
  }
}

async function steer(event) {
  event.preventDefault();
  const text = els.steerInput.value.trim();
  const turn = state.turn;
  if (!text || !turn?.runId) return;
  els.steerSend.disabled = true;
  const result = (message, kind) => {
    els.steerResult.textContent = message;
    els.steerResult.className = `steer-result ${kind}`;
  };
  try {
    const { landed } = await state.api.post(`/chat/stream/${turn.runId}/steer`, { message: text });
    els.steerInput.value = "";
    if (landed) {
      result(`Delivered: the agent reads “${text}” before this turn ends.`, "ok");
      turn.live.steered(text);
    } else {
      result("Not delivered: the turn had already ended. Your text is back in the message box; send it as a new message.", "warn");
      els.message.value = text;
    }
  } catch (err) {
    result(
      err instanceof ApiError && err.status === 403
        ? "This token may not steer turns (it lacks the steer capability)."
        : err.message,
      "error",
    );
  } finally {
    els.steerSend.disabled = false;
  }
}

// --- pauses: approvals and questions -----------------------------------------------------------------

function clearPause() {
  els.pause.replaceChildren();
}

function showWaiting(waiting) {
  const approvals = waiting.approvals || [];
  const questions = waiting.questions || [];
  const toolCalls = waiting.tool_calls || [];
  state.waiting = { approvals, questions, tool_calls: toolCalls };
  clearPause();
  for (const approval of approvals) els.pause.append(approvalCard(approval));
  if (questions.length) els.pause.append(questionCard(questions[0]));
  if (toolCalls.length) els.pause.append(clientToolCard(toolCalls));
  if (waiting.handoff?.blocking) {
    state.waiting.handoff = waiting.handoff;
    showHandoff(waiting.handoff);
  }
  if (approvals.length) setStatus("Waiting for your decision. Nothing proceeds until you decide.");
  else if (questions.length) setStatus("Waiting for your answer.");
  else if (waiting.handoff?.blocking) setStatus("Waiting for you to finish on the agent's page.");
  else setStatus("Waiting on a client tool.");
  updateComposer();
  els.pause.querySelector("button, input, textarea")?.focus();
}

// A hand-off: the agent's page, live, for the person to work. Re-announcing the same one keeps the view.
function showHandoff(handoff) {
  const current = state.handoffView;
  if (current && !current.ended && current.handoff.id === handoff.id) {
    current.update(handoff);
    if (!current.el.isConnected && handoff.active !== false) els.pause.append(current.el);
    return;
  }
  if (handoff.active === false) return;
  current?.close();
  current?.el.remove();
  const view = new HandoffView(state.api, handoff.session_id || state.sessionId, handoff, {
    onEnded: ({ resume: carryOn }) => {
      if (state.handoffView === view) state.handoffView = null;
      if (carryOn) resume({ handoff_done: true });
    },
    onError: report,
  });
  state.handoffView = view;
  view.attach();
  els.pause.append(view.el);
}

function approvalCard(approval) {
  const heading = uid("approval");
  const noteId = uid("note");
  const note = h("textarea", { id: noteId, rows: 2, placeholder: "For example: no, use the other address" });
  const decide = (approved) => {
    const decision = { approved, tool_call_id: approval.tool_call_id };
    if (note.value.trim()) decision.note = note.value.trim();
    resume({ approval_decisions: [decision] });
  };
  return h(
    "section",
    { class: "card approval", role: "dialog", "aria-labelledby": heading },
    h("h3", { id: heading }, "The agent asks for your approval"),
    h("p", { class: "action" }, approval.action || "Go ahead with the next step?"),
    approval.detail ? h("pre", {}, approval.detail) : null,
    approval.consequence ? h("p", { class: "consequence" }, `Consequence: ${approval.consequence}`) : null,
    approval.tool
      ? h("p", { class: "hint" }, `Tool: ${approval.tool}`, approval.arguments ? ` ${pretty(approval.arguments)}` : "")
      : null,
    h("label", { for: noteId }, "Note for the agent (optional)"),
    note,
    h(
      "div",
      { class: "row" },
      h("button", { type: "button", class: "primary", onclick: () => decide(true) }, "Approve"),
      h("button", { type: "button", class: "danger", onclick: () => decide(false) }, "Refuse"),
    ),
  );
}

function optionLabel(option) {
  return typeof option === "string" ? option : option?.label || "";
}

function questionCard(batch) {
  const heading = uid("question");
  const questions = batch.questions || [];
  const error = h("p", { class: "error", role: "alert" });
  const readers = [];
  const fieldsets = questions.map((q, qi) => {
    const name = uid(`q${qi}`);
    const multi = Boolean(q.multi_select);
    const boxes = (q.options || []).map((option) => {
      const id = uid("opt");
      const input = h("input", { type: multi ? "checkbox" : "radio", name, id, value: optionLabel(option) });
      return {
        input,
        node: h(
          "label",
          { class: "option", for: id },
          input,
          h(
            "span",
            {},
            optionLabel(option),
            option?.description ? h("small", {}, ` ${option.description}`) : null,
          ),
        ),
      };
    });
    const otherId = uid("other");
    const other =
      q.allow_other === false
        ? null
        : h("input", { type: "text", id: otherId, placeholder: boxes.length ? "Optional" : "Your answer" });
    readers.push(() => {
      const answer = { question_id: q.id ?? q.header };
      const selected = boxes.filter((b) => b.input.checked).map((b) => b.input.value);
      if (selected.length) answer.selected = selected;
      if (other && other.value.trim()) answer.text = other.value.trim();
      return answer;
    });
    return h(
      "fieldset",
      {},
      h("legend", {}, q.header || `Question ${qi + 1}`),
      q.question ? h("p", { class: "question-text" }, q.question) : null,
      multi && boxes.length ? h("p", { class: "hint" }, "Pick any that apply.") : null,
      boxes.map((b) => b.node),
      other ? h("label", { for: otherId }, boxes.length ? "Something else, or a note" : "Your answer") : null,
      other,
    );
  });
  const form = h(
    "form",
    { class: "card question", role: "dialog", "aria-labelledby": heading },
    h("h3", { id: heading }, questions.length > 1 ? "The agent has some questions" : "The agent has a question"),
    fieldsets,
    error,
    h(
      "div",
      { class: "row" },
      h("button", { type: "submit", class: "primary" }, "Send answer"),
      h(
        "button",
        {
          type: "button",
          title: "Drop the question and keep talking",
          onclick: () => resume({ answers: { tool_call_id: batch.tool_call_id, chat_instead: true } }),
        },
        "Just chat",
      ),
    ),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const answers = readers.map((read) => read());
    const missing = answers.findIndex((a) => !a.selected && !a.text);
    if (missing >= 0) {
      error.textContent = `Pick an option or write an answer for “${questions[missing].header || questions[missing].question}”.`;
      return;
    }
    resume({ answers: { tool_call_id: batch.tool_call_id, answers } });
  });
  return form;
}

function clientToolCard(calls) {
  const names = [...new Set(calls.map((c) => c.name || c.function?.name))].join(", ");
  return h(
    "section",
    { class: "card", role: "note" },
    h("h3", {}, "Waiting on a client tool"),
    h(
      "p",
      { class: "hint" },
      `The turn waits for ${names}, which the client that started it declared. This page declares no tools, ` +
        "so it cannot run it; answer it from that client with tool_results.",
    ),
  );
}

// --- notifications -------------------------------------------------------------------------------------

// Two notifications for two situations. While this tab is open in the background, the page itself shows one
// when a turn it follows stops. Once the tab is closed only web push reaches the person: the switch registers
// sw.js, subscribes with the deployment's VAPID public key (GET /push/key; blank means push is off) and hands
// the subscription to POST /push/subscribe. The deployment's /push/hook, which the project's webhook_url
// points at, then pushes a notification when a turn stops. Both carry the conversation's tag, so the
// browser shows one of them, not two.
const SW_URL = "sw.js"; // served at the root, so the worker's scope covers the page
const push = { key: "" };

function notifySay(text) {
  els.notifyNote.textContent = text;
}

function keyBytes(base64url) {
  const base64 = base64url.replace(/-/g, "+").replace(/_/g, "/");
  const raw = atob(base64 + "=".repeat((4 - (base64.length % 4)) % 4));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

function subscribedWith(subscription, key) {
  const used = subscription?.options?.applicationServerKey;
  if (!used) return false;
  const a = new Uint8Array(used);
  const b = keyBytes(key);
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

function whyNot(err) {
  if (err instanceof ApiError) return err.message;
  const text = err?.message || String(err);
  if (/push service/i.test(text)) return `this browser has no push service to subscribe with (${text}).`;
  if (err?.name === "NotAllowedError" || /permission/i.test(text)) {
    return `the browser refused (${text}). Allow notifications for this site, then try again.`;
  }
  return `the browser could not subscribe (${err?.name ? `${err.name}: ` : ""}${text}).`;
}

async function checkPush() {
  const toggle = els.notify;
  const box = toggle.closest(".notify");
  toggle.disabled = true;
  toggle.checked = false;
  push.key = "";
  box.title = "";
  if (!state.api.token) return notifySay("Notifications need a token first.");
  let listed = true;
  try {
    const description = await state.api.get("/openapi.json", { auth: false });
    listed = Boolean(description?.paths?.["/push/key"]);
  } catch {
    listed = true; // no description to read: ask the route itself
  }
  let key = "";
  if (listed) {
    try {
      const answer = await state.api.get("/push/key");
      key = String(answer?.key ?? "").trim();
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 404)) {
        return notifySay(`Could not check for notifications: ${err.message}`);
      }
    }
  }
  if (!key) {
    box.title =
      "Web push needs a VAPID key pair on the deployment (VAPID_PUBLIC_KEY and VAPID_PRIVATE_KEY); GET /push/key hands out the public half.";
    return notifySay("Unavailable: this deployment has no web push key.");
  }
  if (!("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) {
    return notifySay("This browser cannot receive web push notifications.");
  }
  if (!window.isSecureContext) {
    return notifySay("Web push needs a secure page: open the playground over https or on localhost.");
  }
  push.key = key;
  toggle.disabled = false;
  let subscription = null;
  try {
    const registration = await navigator.serviceWorker.getRegistration(SW_URL);
    subscription = registration ? await registration.pushManager.getSubscription() : null;
  } catch {
    subscription = null;
  }
  if (!subscription || stored.get(NOTIFY_KEY) !== "on" || !subscribedWith(subscription, key)) {
    return notifySay("Off. Switch on to be notified when a turn stops, even with this tab closed.");
  }
  toggle.checked = true;
  try {
    // Hand it over again: the token, and so the subject it belongs to, may have changed since.
    await state.api.post("/push/subscribe", subscription.toJSON());
    notifySay("On: this browser is told when a turn stops, even with the tab closed.");
  } catch (err) {
    notifySay(`On in this browser, but the deployment did not take the subscription: ${whyNot(err)}`);
  }
}

async function toggleNotify() {
  const toggle = els.notify;
  toggle.disabled = true;
  try {
    if (toggle.checked) await pushOn();
    else await pushOff();
  } finally {
    toggle.disabled = !push.key;
  }
}

async function pushOn() {
  notifySay("Subscribing this browser…");
  try {
    const registration = await navigator.serviceWorker.register(SW_URL);
    await navigator.serviceWorker.ready;
    let subscription = await registration.pushManager.getSubscription();
    if (subscription && !subscribedWith(subscription, push.key)) {
      await subscription.unsubscribe(); // made with another key: the push service would refuse our pushes
      subscription = null;
    }
    if (!subscription) {
      subscription = await registration.pushManager.subscribe({
        userVisibleOnly: true,
        applicationServerKey: keyBytes(push.key),
      });
    }
    await state.api.post("/push/subscribe", subscription.toJSON());
    stored.set(NOTIFY_KEY, "on");
    notifySay("On: this browser is told when a turn stops, even with the tab closed.");
  } catch (err) {
    els.notify.checked = false;
    stored.set(NOTIFY_KEY, "");
    notifySay(`Could not turn notifications on: ${whyNot(err)}`);
  }
}

async function pushOff() {
  stored.set(NOTIFY_KEY, "");
  try {
    const registration = await navigator.serviceWorker.getRegistration(SW_URL);
    const subscription = registration ? await registration.pushManager.getSubscription() : null;
    if (subscription) await subscription.unsubscribe();
    // The deployment forgets it the next time the push service answers that it is gone.
    notifySay("Off: this browser is unsubscribed.");
  } catch (err) {
    notifySay(`Off here, but unsubscribing failed: ${err?.message || err}`);
  }
}

// What sw.js tells open pages: a push it showed, or a click on one to open a conversation.
function onWorkerMessage(event) {
  const message = event.data || {};
  if (message.type === "oberik.push") {
    notifySay(
      message.shown ? `Notified: ${message.title}` : `A notification arrived (${message.title}) but could not be shown.`,
    );
  } else if (message.type === "oberik.open" && message.url) {
    const target = new URL(message.url, location.href);
    if (target.hash && target.hash !== location.hash) location.hash = target.hash;
  }
}

function notifyStopped(text) {
  if (!els.notify.checked || !document.hidden || !("Notification" in window)) return;
  if (Notification.permission !== "granted") return;
  try {
    // Same tag as the pushed notification for this conversation: whichever comes second replaces the first.
    new Notification("oberik", { body: text, tag: state.sessionId ? `oberik-${state.sessionId}` : "oberik" });
  } catch {
    // some browsers only allow notifications from a service worker; web push still covers this case
  }
}

// --- wiring --------------------------------------------------------------------------------------------

function init() {
  adoptTokenFromUrl();
  connect();
  els.settingsToggle.addEventListener("click", () => showSettings(els.settings.hidden));
  els.settingsForm.addEventListener("submit", saveSettings);
  els.forgetToken.addEventListener("click", forgetToken);
  els.newChat.addEventListener("click", () => navigate(null));
  els.moreSessions.addEventListener("click", () => loadSessions({ more: true }));
  els.composer.addEventListener("submit", send);
  els.message.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) send(event);
  });
  els.steerForm.addEventListener("submit", steer);
  els.stop.addEventListener("click", stop);
  els.notify.addEventListener("change", toggleNotify);
  navigator.serviceWorker?.addEventListener("message", onWorkerMessage);
  window.addEventListener("hashchange", () => {
    const id = sessionFromHash();
    if (id !== state.sessionId) openSession(id);
  });
  afterConnect();
}

init();
