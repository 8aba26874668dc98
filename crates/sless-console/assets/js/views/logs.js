// The live log: what the handler printed, history first, then new lines as
// they happen (the SSE follow stream of GET .../logs?follow=true).

import { h, replace } from "../dom.js";
import { ns } from "../api.js";
import { follow } from "../sse.js";

/** Lines kept on screen; older ones scroll away. */
const KEPT_LINES = 2000;

export async function logsPanel(panel, ctx) {
  const state = h("span", { class: "badge badge-pending", id: "log-state" }, "connecting");
  const lines = h("div", { class: "log live", id: "live-log", role: "log", "aria-live": "polite" });
  const empty = h("p", { class: "empty", id: "log-empty" }, "No lines yet: invoke the function and what it prints shows here.");
  let running = null;
  const button = h("button", { type: "button", class: "secondary small", id: "log-toggle" }, "Pause");
  const clear = h("button", { type: "button", class: "secondary small", onclick: () => lines.replaceChildren() }, "Clear");
  replace(
    panel,
    h("section", { class: "card" }, h("div", { class: "card-head" }, h("h3", {}, "Live log"), state, h("div", { class: "spacer" }), button, clear), empty, lines),
  );
  const setState = (text, kind) => {
    state.textContent = text;
    state.className = `badge badge-${kind}`;
  };
  const add = (event) => {
    empty.hidden = true;
    const stick = lines.scrollTop + lines.clientHeight >= lines.scrollHeight - 4;
    lines.append(
      h(
        "div",
        { class: `line ${event.stream === "stderr" ? "stderr" : ""}`, "data-invocation": event.invocation },
        h("span", { class: "t" }, event.time ? new Date(event.time).toLocaleTimeString() : ""),
        h("span", { class: "rid", title: event.request_id || "" }, (event.request_id || "").slice(0, 8)),
        h("span", { class: "stream" }, event.stream || ""),
        h("span", { class: "text" }, event.text ?? ""),
      ),
    );
    while (lines.childElementCount > KEPT_LINES) lines.firstElementChild.remove();
    if (stick) lines.scrollTop = lines.scrollHeight;
  };
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
      lines.replaceChildren();
      start();
    }
  });
  start();
}
