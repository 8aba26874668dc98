// The functions of a namespace: phase, version, runtime, and calls and
// errors over the last hour (from the stats endpoint, as many at a time as
// the API allows a namespace).

import { h, replace, badge, table } from "../dom.js";
import { get, ns } from "../api.js";
import { href, go } from "../router.js";
import { ago } from "../format.js";

/** Reads of records a namespace may make at once (the API answers 429 beyond). */
const RECORD_READS = 2;

/** Runs `work` over `items` with at most `limit` at once. */
async function pool(items, limit, work, signal) {
  const queue = [...items];
  const runners = Array.from({ length: Math.min(limit, queue.length) }, async () => {
    while (queue.length && !signal.aborted) await work(queue.shift());
  });
  await Promise.all(runners);
}

export async function functionsView(main, { signal, namespace }) {
  const header = h(
    "div",
    { class: "page-head" },
    h("h1", {}, "Functions"),
    h("a", { class: "button primary", href: href("ns", namespace, "functions", "new"), id: "new-function" }, "New function"),
  );
  const body = h("div", { class: "card" }, h("p", { class: "empty" }, "Loading…"));
  replace(main, header, body);
  const { items } = await get(ns(namespace, "functions"), { signal });
  const cells = new Map();
  const statCell = (fn, key) => {
    const cell = h("span", { class: "num muted", "data-stat": key }, "…");
    cells.set(`${fn.name}/${key}`, cell);
    return cell;
  };
  replace(
    body,
    table(
      [
        ["Name", (f) => h("a", { href: href("ns", namespace, "functions", f.name), class: "strong" }, f.name)],
        ["Phase", (f) => badge(f.status?.phase)],
        ["Version", (f) => h("span", { class: "num" }, f.status?.version ? `v${f.status.version}` : "-")],
        ["Runtime", (f) => f.runtime],
        ["Calls (1 h)", (f) => statCell(f, "calls")],
        ["Errors (1 h)", (f) => statCell(f, "errors")],
        ["Last built", (f) => ago(f.status?.last_built_at)],
      ],
      items,
      {
        empty: "No functions in this namespace yet. Create one with “New function”.",
        rowid: (f) => f.name,
        onrow: (f) => go("ns", namespace, "functions", f.name),
      },
    ),
  );
  await pool(
    items,
    RECORD_READS,
    async (fn) => {
      try {
        const stats = await get(`${ns(namespace, "functions", fn.name, "stats")}?window=3600&step=60`, { signal });
        for (const key of ["calls", "errors"]) {
          const cell = cells.get(`${fn.name}/${key}`);
          cell.textContent = String(stats[key]);
          cell.classList.remove("muted");
          if (key === "errors" && stats.errors > 0) cell.classList.add("bad");
        }
      } catch (e) {
        if (e.name === "AbortError") return;
        for (const key of ["calls", "errors"]) cells.get(`${fn.name}/${key}`).textContent = "?";
      }
    },
    signal,
  );
}
