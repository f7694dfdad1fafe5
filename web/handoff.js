// The hand-off viewer: the agent's browser page (or the part of it that matters), live, and worked by the
// person looking at it. Frames are the whole viewport; the picture is scaled and offset inside a window the
// size of the crop, so a crop that moves (a puzzle overlay opening) re-aims the view without a new picture.
// Pointer and keys go back to the page in page pixels, with the origin of the crop they were aimed at.

import { h } from "./dom.js";
import { readEvents } from "./sse.js";

const MOVE_INTERVAL_MS = 1000 / 60; // pointermove fires far faster than a network carries
const SETTLE_MS = 600; // after a release, let the page settle before asking whether they are done
const MAX_WIDTH = 640; // the crop is shown at most this wide (scaled down, never up past 2x)

const NAMED_KEYS = new Set([
  "Enter", "Tab", "Backspace", "Delete", "Escape", "ArrowLeft", "ArrowUp", "ArrowRight", "ArrowDown",
  "Home", "End", "PageUp", "PageDown",
]);

const REGION_TEXT = {
  selector: "Showing the part of the page the agent picked.",
  detected: "Showing the check the agent found on the page.",
  viewport: "Showing the whole page.",
};

export class HandoffView {
  constructor(api, sessionId, handoff, { onEnded, onError } = {}) {
    this.api = api;
    this.sessionId = sessionId;
    this.handoff = handoff;
    this.onEnded = onEnded || (() => {});
    this.onError = onError || (() => {});
    this.clip = null;
    this.viewport = { width: 1280, height: 800 };
    this.focused = false;
    this.autoDone = !!handoff.auto_done;
    this.ended = false;
    this.pressed = false;
    this.lastMove = 0;
    this.abort = new AbortController();
    this.queue = Promise.resolve(null);
    this.flushing = false;
    this.build();
    this.listen();
    this.paintRegion(handoff.region || "viewport");
  }

  base() {
    return `/chat/sessions/${encodeURIComponent(this.sessionId)}`;
  }

  build() {
    const hint = this.handoff.interactive === false ? "Look only: the agent shared this page to be seen, not used." : "";
    this.img = h("img", { class: "handoff-frame", alt: "The agent's browser page", draggable: "false" });
    this.window = h(
      "div",
      {
        class: "handoff-window",
        tabindex: "0",
        role: "application",
        "aria-label": "The agent's browser page. Click to work it; keys go to the page.",
      },
      this.img,
    );
    this.regionNote = h("p", { class: "handoff-region" });
    this.keyboard = h("span", { class: "handoff-keys", "data-focused": "false" }, "The page is not taking keys");
    this.state = h("span", { class: "handoff-state" }, "Connecting…");
    this.doneButton = h("button", { type: "button", class: "primary", onclick: () => this.done() }, "Done");
    const blocking = !!this.handoff.blocking;
    this.el = h(
      "section",
      { class: "card handoff", "aria-label": "Hand-off" },
      h("h3", {}, blocking ? "The agent needs you to do this" : "The agent is showing you its page"),
      h("p", { class: "action" }, this.handoff.reason || ""),
      hint ? h("p", { class: "hint" }, hint) : null,
      this.regionNote,
      this.window,
      h("div", { class: "row handoff-bar" }, this.keyboard, this.state, blocking ? this.doneButton : null),
    );
  }

  paintRegion(region) {
    this.region = region;
    this.regionNote.textContent = REGION_TEXT[region] || REGION_TEXT.viewport;
    this.el.dataset.region = region;
  }

  setFocused(focused) {
    this.focused = !!focused;
    this.keyboard.dataset.focused = String(this.focused);
    this.keyboard.textContent = this.focused ? "Keys go to the page" : "The page is not taking keys";
  }

  // --- the picture ---------------------------------------------------------------------------------

  async listen() {
    const selector = this.handoff.selector;
    const query = selector ? `?selector=${encodeURIComponent(selector)}` : "";
    try {
      const response = await this.api.fetch("GET", `${this.base()}/browser/stream${query}`, {
        headers: { Accept: "text/event-stream" },
        signal: this.abort.signal,
      });
      for await (const frame of readEvents(response)) {
        if (frame.event === "clip") this.applyClip(frame.data);
        else if (frame.event === "frame") this.applyFrame(frame.data);
        else if (frame.event === "end") {
          this.finish(false, frame.data.reason);
          return;
        }
      }
    } catch (err) {
      if (err.name === "AbortError" || this.ended) return;
      this.state.textContent = "Live view lost; showing a still.";
      this.onError(err);
      this.still();
    }
  }

  async still() {
    try {
      const frame = await this.api.get(`${this.base()}/browser/frame`);
      this.applyClip(frame);
      this.applyFrame(frame);
    } catch (err) {
      this.onError(err);
    }
  }

  applyClip(data) {
    this.clip = data.clip;
    this.viewport = data.viewport || this.viewport;
    this.paintRegion(data.region);
    this.setFocused(data.focused);
    this.layout();
  }

  applyFrame(data) {
    if (data.clip) this.applyClip(data);
    this.img.src = `data:image/jpeg;base64,${data.image}`;
    this.el.dataset.live = "true";
    this.state.textContent = "Live";
  }

  // The crop's size on screen, and the whole-viewport picture positioned so only the crop shows.
  layout() {
    if (!this.clip) return;
    const scale = Math.min(2, MAX_WIDTH / this.clip.width);
    this.scale = scale;
    Object.assign(this.window.style, {
      width: `${Math.round(this.clip.width * scale)}px`,
      height: `${Math.round(this.clip.height * scale)}px`,
    });
    Object.assign(this.img.style, {
      width: `${Math.round(this.viewport.width * scale)}px`,
      height: `${Math.round(this.viewport.height * scale)}px`,
      left: `${-Math.round(this.clip.x * scale)}px`,
      top: `${-Math.round(this.clip.y * scale)}px`,
    });
  }

  // Displayed pixels -> pixels of the crop, in page units. The server adds the origin.
  point(event) {
    const box = this.window.getBoundingClientRect();
    const shown = box.width / this.clip.width;
    return { x: (event.clientX - box.left) / shown, y: (event.clientY - box.top) / shown };
  }

  // --- what the person does --------------------------------------------------------------------------

  // Inputs go one at a time, in order: a release must never overtake its press on the way to the page.
  send(body) {
    if (this.ended || this.handoff.interactive === false) return Promise.resolve(null);
    const next = this.queue.then(async () => {
      // Ended from elsewhere (the agent, the page closing): nothing is left to play this into.
      if (this.ended && !this.flushing) return null;
      try {
        const answer = await this.api.post(`${this.base()}/browser/input`, body);
        if (answer && "focused" in answer) this.setFocused(answer.focused);
        return answer;
      } catch (err) {
        this.onError(err);
        return null;
      }
    });
    this.queue = next;
    return next;
  }

  pointer(type, event) {
    if (!this.clip) return null;
    const { x, y } = this.point(event);
    const body = { type, x, y, origin: { x: this.clip.x, y: this.clip.y }, want_frame: false };
    if (type !== "pointer_move") body.button = ["left", "middle", "right"][event.button] || "left";
    return this.send(body);
  }

  attach() {
    const w = this.window;
    w.addEventListener("contextmenu", (e) => e.preventDefault());
    w.addEventListener("pointerdown", (e) => {
      e.preventDefault();
      w.focus();
      w.setPointerCapture?.(e.pointerId);
      this.pressed = true;
      this.pointer("pointer_down", e);
    });
    w.addEventListener("pointermove", (e) => {
      if (!this.pressed) return;
      const now = performance.now();
      if (now - this.lastMove < MOVE_INTERVAL_MS) return;
      this.lastMove = now;
      this.pointer("pointer_move", e);
    });
    w.addEventListener("pointerup", async (e) => {
      if (!this.pressed) return;
      this.pressed = false;
      await this.pointer("pointer_up", e);
      this.checkSoon();
    });
    w.addEventListener(
      "wheel",
      (e) => {
        e.preventDefault();
        if (!this.clip) return;
        const { x, y } = this.point(e);
        this.send({ type: "wheel", x, y, delta_x: e.deltaX, delta_y: e.deltaY, origin: { x: this.clip.x, y: this.clip.y } });
      },
      { passive: false },
    );
    w.addEventListener("keydown", (e) => this.keydown(e));
    w.addEventListener("paste", (e) => {
      // The page's own clipboard is empty: what the person pastes is read here and sent as text.
      const text = e.clipboardData?.getData("text/plain");
      if (text) {
        e.preventDefault();
        this.send({ type: "type", text });
      }
    });
    return () => this.close();
  }

  keydown(e) {
    const mod = e.ctrlKey || e.metaKey;
    // AltGr: its own modifier state on some systems, Ctrl+Alt on others (Windows)
    const altGr = e.getModifierState?.("AltGraph") || (e.ctrlKey && e.altKey && !e.metaKey);
    if (e.key.length === 1 && (altGr || !mod)) {
      e.preventDefault(); // a character, whatever layout and modifier made it, goes in as text
      this.send({ type: "type", text: e.key });
    } else if (mod && ["a", "z"].includes(e.key.toLowerCase())) {
      e.preventDefault(); // select-all and undo belong to the page
      this.send({ type: "key", key: e.key.toLowerCase(), modifiers: [e.metaKey ? "Meta" : "Control"] });
    } else if (!mod && NAMED_KEYS.has(e.key)) {
      e.preventDefault();
      this.send({ type: "key", key: e.key, modifiers: e.shiftKey ? ["Shift"] : [] });
    }
    // anything else (Cmd-R, Cmd-T, copy, cut; paste arrives as its own event) stays with the viewer's browser
  }

  // --- ending ------------------------------------------------------------------------------------

  checkSoon() {
    if (!this.autoDone || this.ended) return;
    clearTimeout(this.checkTimer);
    this.checkTimer = setTimeout(() => this.check(), SETTLE_MS);
  }

  async check() {
    this.el.dataset.checking = "true";
    try {
      const r = await this.api.post(`${this.base()}/handoff/check`, {});
      if (r.done) this.done();
      else if (!r.will_check_again) this.autoDone = false; // the Done button is the way out now
    } catch (err) {
      this.onError(err);
    } finally {
      this.el.dataset.checking = "false";
    }
  }

  update(handoff) {
    if (handoff.active === false) {
      this.finish(false, "closed_by_agent");
      return;
    }
    this.handoff = handoff;
    this.autoDone = !!handoff.auto_done;
  }

  done() {
    this.finish(!!this.handoff.blocking, "done");
  }

  finish(resume, reason) {
    if (this.ended) return;
    this.ended = true;
    // Keys typed just before Done may still be on their way to the page: the turn carries on once they land.
    this.flushing = resume;
    clearTimeout(this.checkTimer);
    this.abort.abort();
    this.el.remove();
    (resume ? this.queue : Promise.resolve()).then(() => this.onEnded({ resume, reason }));
  }

  close() {
    this.ended = true;
    this.abort.abort();
  }
}
