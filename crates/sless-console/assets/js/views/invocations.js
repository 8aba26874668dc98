// A function's invocations, newest first, a page at a time, and one
// record's detail: timing, status, error and what the handler printed.

import { h, replace, badge, facts, table } from "../dom.js";
import { get, ns } from "../api.js";
import { time, shortTime, ms, bytes } from "../format.js";
import { newestOnly } from "../async.js";

const PAGE = 25;

function statusBadge(status) {
  const code = Number(status);
  const kind = status === "error" || code >= 500 ? "failed" : code >= 400 ? "warn" : "ready";
  return h("span", { class: `badge badge-${kind}` }, status);
}

function detail(record) {
  return [
    h("h3", {}, "Invocation ", h("code", {}, record.id)),
    facts([
      ["Request id", h("code", {}, record.request_id)],
      ["Started", time(record.started_at)],
      ["Duration", ms(record.duration_ms)],
      ["Status", statusBadge(record.status)],
      ["Trigger", record.trigger],
      ["Version", `v${record.version}`],
      ["Cold start", record.cold_start ? "yes" : "no"],
      ["Bytes in / out", `${bytes(record.bytes_in)} / ${bytes(record.bytes_out)}`],
    ]),
    record.error ? [h("h4", {}, "Error"), h("pre", { class: "log bad", id: "invocation-error" }, record.error)] : null,
    h("h4", {}, "Output"),
    record.logs.length
      ? h(
          "div",
          { class: "log", id: "invocation-logs" },
          record.logs.map((l) => h("div", { class: `line ${l.stream === "stderr" ? "stderr" : ""}` }, h("span", { class: "stream" }, l.stream), h("span", { class: "text" }, l.text))),
          record.logs_truncated ? h("div", { class: "line muted" }, "… output cut at the per-call limit") : null,
        )
      : h("p", { class: "empty" }, "It printed nothing."),
  ];
}

export async function invocationsPanel(panel, ctx) {
  const cursors = [null];
  let page = 0;
  const notice = h("div", { class: "notice error", role: "alert", hidden: true, id: "invocations-error" });
  const list = h("section", { class: "card" }, h("p", { class: "empty" }, "Loading…"));
  const side = h("section", { class: "card", id: "invocation-detail" }, h("p", { class: "empty" }, "Pick an invocation to see its detail."));
  replace(panel, notice, h("div", { class: "columns wide-left" }, list, side));
  const newest = newestOnly();

  // The page number and cursors move only once a page has arrived: a
  // failed load leaves the page shown as it was, with the error above.
  const load = (next) => {
    const before = cursors[next];
    const query = `?limit=${PAGE}${before ? `&before=${encodeURIComponent(before)}` : ""}`;
    const answer = get(ns(ctx.namespace, "functions", ctx.name, "invocations") + query, { signal: ctx.signal });
    return newest(answer, (result) => {
      page = next;
      cursors[next + 1] = result.next_before ?? null;
      notice.hidden = true;
      render(result);
    });
  };
  const show = (next) =>
    load(next).catch((e) => {
      if (e.name === "AbortError") return;
      notice.textContent = e.message;
      notice.hidden = false;
    });
  const render = (result) => {
    const newer = h("button", { type: "button", class: "secondary small", id: "page-newer", disabled: page === 0, onclick: () => show(page - 1) }, "← Newer");
    const older = h("button", { type: "button", class: "secondary small", id: "page-older", disabled: !result.next_before, onclick: () => show(page + 1) }, "Older →");
    const refresh = h("button", { type: "button", class: "secondary small", id: "page-refresh", onclick: () => show(0) }, "Refresh");
    replace(
      list,
      h("div", { class: "card-head" }, h("h3", {}, "Invocations"), h("span", { class: "muted" }, `page ${page + 1}`), h("div", { class: "spacer" }), refresh, newer, older),
      table(
        [
          ["Started", (r) => h("span", { class: "nowrap", title: time(r.started_at) }, shortTime(r.started_at))],
          ["Trigger", (r) => r.trigger],
          ["Status", (r) => statusBadge(r.status)],
          ["Duration", (r) => h("span", { class: "num" }, ms(r.duration_ms))],
          ["Version", (r) => `v${r.version}`],
          ["Cold", (r) => (r.cold_start ? "cold" : "")],
          ["Output", (r) => h("span", { class: "muted cut" }, r.logs[0]?.text?.slice(0, 60) ?? "")],
        ],
        result.items,
        {
          empty: "No invocations yet.",
          rowid: (r) => r.id,
          onrow: (r) => replace(side, detail(r)),
        },
      ),
    );
  };
  await load(0);
}
