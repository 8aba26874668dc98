// Charts of a function's calls, errors and p50/p99 latency over a window,
// from GET .../functions/{name}/stats.

import { h, replace } from "../dom.js";
import { get, ns } from "../api.js";
import { select } from "../forms.js";
import { ms } from "../format.js";
import { statsCharts } from "../charts.js";

const WINDOWS = [
  ["900", "Last 15 minutes", 15],
  ["3600", "Last hour", 60],
  ["21600", "Last 6 hours", 300],
  ["86400", "Last 24 hours", 900],
];

export async function metricsPanel(panel, ctx) {
  const choice = select(WINDOWS.map(([v, label]) => [v, label]), { id: "stats-window", value: "3600" });
  const summary = h("div", { id: "stats-summary" });
  const charts = h("div", { class: "charts", id: "charts" });
  let remove = null;
  replace(panel, h("div", { class: "card-head" }, h("h3", {}, "Metrics"), h("div", { class: "spacer" }), choice), summary, charts);
  const load = async () => {
    const [window, , step] = WINDOWS.find(([v]) => v === choice.value);
    const stats = await get(`${ns(ctx.namespace, "functions", ctx.name, "stats")}?window=${window}&step=${step}`, { signal: ctx.signal });
    const tile = (label, value, id, bad = false) =>
      h("div", { class: "tile" }, h("div", { class: "label" }, label), h("div", { class: bad ? "value bad" : "value", id }, value));
    replace(
      summary,
      h(
        "div",
        { class: "tiles" },
        tile("Calls", String(stats.calls), "stats-calls"),
        tile("Errors", String(stats.errors), "stats-errors", stats.errors > 0),
        tile("p50 latency", ms(stats.p50_ms), "stats-p50"),
        tile("p99 latency", ms(stats.p99_ms), "stats-p99"),
      ),
      stats.truncated ? h("p", { class: "notice" }, `Only the newest ${stats.records_read} calls of this window were read.`) : null,
    );
    remove?.();
    charts.replaceChildren();
    remove = statsCharts(charts, stats);
  };
  choice.addEventListener("change", () => load().catch((e) => summary.append(h("div", { class: "notice error" }, e.message))));
  ctx.signal.addEventListener("abort", () => remove?.(), { once: true });
  await load();
}
