// The live log: what the handler printed, history first, then new lines as
// they happen (the SSE follow stream of GET .../logs?follow=true).

import { h, replace } from "../dom.js";
import { ns } from "../api.js";
import { follow } from "../sse.js";

/** Lines kept on screen; older ones scroll away. */
const KEPT_LINES = 2000;
/** The most of one line shown; the rest is counted, not shown (the invocation's detail has it). */
const SHOWN_CHARS = 2000;
/** Characters kept on screen in all: a handler printing long lines scrolls older ones away sooner. */
const KEPT_CHARS = 500_000;

/**
 * An event as it waits to be drawn: its text cut to SHOWN_CHARS at once, so
 * lines piling up while nothing is drawn (a background tab gets no
 * animation frames) hold no more than what will be shown.
 */
function cut(event) {
  const text = String(event.text ?? "");
  return { ...event, text: text.slice(0, SHOWN_CHARS), more: Math.max(0, text.length - SHOWN_CHARS) };
}

/** A line's text, with a marker saying how much is left out. */
function shown(event) {
  if (!event.more) return event.text;
  return [event.text, h("span", { class: "more" }, ` … (${event.more} more characters)`)];
}

function lineOf(event) {
  return h(
    "div",
    { class: `line ${event.stream === "stderr" ? "stderr" : ""}`, "data-invocation": event.invocation },
    h("span", { class: "t" }, event.time ? new Date(event.time).toLocaleTimeString() : ""),
    h("span", { class: "rid", title: event.request_id || "" }, (event.request_id || "").slice(0, 8)),
    h("span", { class: "stream" }, event.stream || ""),
    h("span", { class: "text" }, shown(event)),
  );
}

export async function logsPanel(panel, ctx) {
  const state = h("span", { class: "badge badge-pending", id: "log-state" }, "connecting");
  const lines = h("div", { class: "log live", id: "live-log", role: "log", "aria-live": "polite" });
  const empty = h("p", { class: "empty", id: "log-empty" }, "No lines yet: invoke the function and what it prints shows here.");
  let running = null;
  // Lines arrive faster than the page can lay them out: they wait here and
  // are added once per animation frame, which reads the scroll position once.
  let pending = [];
  let pendingChars = 0;
  let sizes = [];
  let kept = 0;
  let frame = null;
  const clear = () => {
    lines.replaceChildren();
    pending = [];
    pendingChars = 0;
    sizes = [];
    kept = 0;
  };
  const button = h("button", { type: "button", class: "secondary small", id: "log-toggle" }, "Pause");
  const clearButton = h("button", { type: "button", class: "secondary small", id: "log-clear", onclick: clear }, "Clear");
  replace(
    panel,
    h("section", { class: "card" }, h("div", { class: "card-head" }, h("h3", {}, "Live log"), state, h("div", { class: "spacer" }), button, clearButton), empty, lines),
  );
  const setState = (text, kind) => {
    state.textContent = text;
    state.className = `badge badge-${kind}`;
  };
  const flush = () => {
    frame = null;
    if (!pending.length) return;
    empty.hidden = true;
    const stick = lines.scrollTop + lines.clientHeight >= lines.scrollHeight - 4;
    const batch = document.createDocumentFragment();
    for (const line of pending.map(lineOf)) {
      const size = line.textContent.length;
      sizes.push(size);
      kept += size;
      batch.append(line);
    }
    pending = [];
    pendingChars = 0;
    lines.append(batch);
    while (sizes.length > 1 && (sizes.length > KEPT_LINES || kept > KEPT_CHARS)) {
      kept -= sizes.shift();
      lines.firstElementChild.remove();
    }
    if (stick) lines.scrollTop = lines.scrollHeight;
  };
  const add = (event) => {
    const line = cut(event);
    pending.push(line);
    pendingChars += line.text.length;
    // Lines that would scroll away at once are never drawn.
    while (pending.length > 1 && (pending.length > KEPT_LINES || pendingChars > KEPT_CHARS)) {
      pendingChars -= pending.shift().text.length;
    }
    frame ??= requestAnimationFrame(flush);
  };
  ctx.signal.addEventListener("abort", () => frame !== null && cancelAnimationFrame(frame), { once: true });
  const start = () => {
    const controller = new AbortController();
    ctx.signal.addEventListener("abort", () => controller.abort(), { once: true });
    running = controller;
    button.textContent = "Pause";
    setState("connecting", "pending");
    follow(`${ns(ctx.namespace, "functions", ctx.name, "logs")}?follow=true&tail=200`, {
      signal: controller.signal,
      onopen: () => setState("live", "ready"),
      onevent: add,
    })
      .then(() => setState("ended", "skipped"))
      .catch((e) => {
        if (e.name === "AbortError") setState("paused", "skipped");
        else setState(`error: ${e.message}`, "failed");
      })
      .finally(() => {
        if (running === controller) {
          running = null;
          button.textContent = "Resume";
        }
      });
  };
  button.addEventListener("click", () => {
    if (running) {
      running.abort();
      running = null;
      button.textContent = "Resume";
    } else {
      clear();
      start();
    }
  });
  start();
}
