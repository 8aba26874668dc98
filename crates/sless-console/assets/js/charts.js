// Time-series charts of a function's stats (uPlot, vendored).

import uPlot from "../vendor/uPlot.esm.js";
import { h } from "./dom.js";

const COLORS = {
  calls: "#2563eb",
  errors: "#dc2626",
  p50: "#059669",
  p99: "#d97706",
};

function size(container) {
  return { width: Math.max(320, container.clientWidth - 8), height: 220 };
}

/** Charts for `stats.points` in `container`; returns a function that removes them. */
export function statsCharts(container, stats) {
  const xs = stats.points.map((p) => new Date(p.start).getTime() / 1000);
  // Empty steps draw no bar (null), rather than a flat line at zero.
  const calls = stats.points.map((p) => p.calls || null);
  const errors = stats.points.map((p) => p.errors || null);
  const p50 = stats.points.map((p) => p.p50_ms);
  const p99 = stats.points.map((p) => p.p99_ms);
  const bars = uPlot.paths.bars({ size: [0.7, 40], gap: 1 });
  // The whole window, the last step included.
  const xrange = () => [xs[0], xs[xs.length - 1] + stats.step];

  const countsBox = h("div", { class: "chart", "data-chart": "calls" });
  const latencyBox = h("div", { class: "chart", "data-chart": "latency" });
  container.append(
    h("section", { class: "card" }, h("h3", {}, "Calls and errors"), countsBox),
    h("section", { class: "card" }, h("h3", {}, "Latency (p50 / p99)"), latencyBox),
  );
  const axes = (unit) => [
    { stroke: "#64748b", grid: { stroke: "#e2e8f0" } },
    { stroke: "#64748b", grid: { stroke: "#e2e8f0" }, size: 56, values: (u, vals) => vals.map((v) => v + unit) },
  ];
  const charts = [
    new uPlot(
      {
        ...size(countsBox),
        scales: { x: { time: true, range: xrange }, y: { range: (u, min, max) => [0, Math.max(1, max ?? 1)] } },
        axes: axes(""),
        series: [
          {},
          { label: "calls", stroke: COLORS.calls, fill: "rgba(37,99,235,0.35)", paths: bars, points: { show: false } },
          { label: "errors", stroke: COLORS.errors, fill: "rgba(220,38,38,0.55)", paths: bars, points: { show: false } },
        ],
      },
      [xs, calls, errors],
      countsBox,
    ),
    new uPlot(
      {
        ...size(latencyBox),
        scales: { x: { time: true, range: xrange }, y: { range: (u, min, max) => [0, Math.max(1, max ?? 1)] } },
        axes: axes(" ms"),
        series: [
          {},
          { label: "p50", stroke: COLORS.p50, width: 2, spanGaps: false, value: (u, v) => (v == null ? "-" : `${v.toFixed(2)} ms`) },
          { label: "p99", stroke: COLORS.p99, width: 2, spanGaps: false, value: (u, v) => (v == null ? "-" : `${v.toFixed(2)} ms`) },
        ],
      },
      [xs, p50, p99],
      latencyBox,
    ),
  ];
  const onresize = () => {
    charts[0].setSize(size(countsBox));
    charts[1].setSize(size(latencyBox));
  };
  window.addEventListener("resize", onresize);
  return () => {
    window.removeEventListener("resize", onresize);
    charts.forEach((c) => c.destroy());
  };
}
