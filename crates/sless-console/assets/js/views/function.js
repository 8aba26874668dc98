// One function: a header with its phase, and tabs for the overview (spec,
// status, last build log), code, versions and aliases, invoke, live log,
// invocations and metrics.

import { h, replace, badge, facts, table } from "../dom.js";
import { get, del, ns } from "../api.js";
import { href, go } from "../router.js";
import { time, json } from "../format.js";
import { sleep } from "../async.js";
import { deployPanel } from "./deploy.js";
import { invokePanel } from "./invoke.js";
import { logsPanel } from "./logs.js";
import { invocationsPanel } from "./invocations.js";
import { metricsPanel } from "./metrics.js";
import { versionsPanel } from "./versions.js";

const TABS = [
  ["overview", "Overview"],
  ["code", "Code"],
  ["versions", "Versions"],
  ["invoke", "Invoke"],
  ["logs", "Live log"],
  ["invocations", "Invocations"],
  ["metrics", "Metrics"],
];

const busy = (fn) => ["Pending", "Building"].includes(fn.status?.phase) && fn.status?.code_hash;

/**
 * Re-reads the function every second while a build runs, calling `update`.
 * A function deleted meanwhile (404) calls `ctx.gone` before the error is
 * shown, so the page stops saying it builds.
 */
export async function watchBuild(ctx, fn, update) {
  while (busy(fn) && !ctx.signal.aborted) {
    await sleep(1000, ctx.signal);
    try {
      fn = await get(ns(ctx.namespace, "functions", ctx.name), { signal: ctx.signal });
    } catch (e) {
      if (e.status === 404) ctx.gone?.();
      throw e;
    }
    update(fn);
  }
  return fn;
}

function headerOf(ctx, fn) {
  const url = fn.status?.url;
  return h(
    "div",
    { class: "page-head" },
    h(
      "div",
      {},
      h("div", { class: "crumbs" }, h("a", { href: href("ns", ctx.namespace, "functions") }, "Functions"), " / "),
      h("h1", { id: "function-name" }, fn.name, " ", badge(fn.status?.phase), " ",
        fn.status?.version ? h("span", { class: "version" }, `v${fn.status.version}`) : null),
      url
        ? h("a", { class: "url", href: url, target: "_blank", rel: "noopener noreferrer" }, url)
        : null,
    ),
  );
}

function overview(fn) {
  const s = fn.status || {};
  const env = Object.entries(fn.env || {});
  return [
    h(
      "div",
      { class: "columns" },
      h(
        "section",
        { class: "card", id: "status-card" },
        h("h3", {}, "Status"),
        facts([
          ["Phase", badge(s.phase)],
          ["Version", s.version ? `v${s.version}` : "-"],
          ["Last built", time(s.last_built_at)],
          ["Code hash", h("code", { class: "hash" }, s.code_hash || "-")],
          ["Code check", s.validation],
          ["URL", s.url],
        ]),
      ),
      h(
        "section",
        { class: "card", id: "spec-card" },
        h("h3", {}, "Spec"),
        facts([
          ["Runtime", fn.runtime],
          ["Entrypoint", h("code", {}, fn.entrypoint)],
          ["Memory", `${fn.memory_mb} MB`],
          ["Timeout", `${fn.timeout_sec} s`],
          ["Concurrency", String(fn.concurrency)],
          ["Instances", fn.replicas != null ? `pinned to ${fn.replicas}` : `${fn.min_instances}–${fn.max_instances}`],
          ["Build timeout", `${fn.build_timeout_sec} s`],
        ]),
      ),
    ),
    h(
      "section",
      { class: "card", id: "env-card" },
      h("h3", {}, "Environment"),
      table([["Name", ([k]) => h("code", {}, k)], ["Value", ([, v]) => h("code", { class: "env-value" }, v)]], env, {
        empty: "No environment variables.",
      }),
    ),
    h(
      "section",
      { class: "card", id: "build-log" },
      h("h3", {}, s.phase === "Failed" ? "Build log (failed)" : "Last build message"),
      h("pre", { class: s.phase === "Failed" ? "log bad" : "log", id: "build-message" }, s.message || "-"),
    ),
    h("details", { class: "card raw" }, h("summary", {}, "Raw JSON"), h("pre", { class: "log" }, json(fn))),
  ];
}

export async function functionView(main, base) {
  const ctx = { ...base };
  let fn = await get(ns(ctx.namespace, "functions", ctx.name), { signal: ctx.signal });
  const head = h("div", {}, headerOf(ctx, fn));
  const tabs = h(
    "nav",
    { class: "tabs" },
    TABS.map(([id, label]) =>
      h("a", { href: href("ns", ctx.namespace, "functions", ctx.name, id), class: ctx.tab === id ? "active" : "", "data-tab": id }, label),
    ),
  );
  const panel = h("div", { class: "panel", id: `panel-${ctx.tab}` });
  const notice = h("div", { class: "notice error", role: "alert", hidden: true, id: "delete-error" });
  const remove = async (query, question) => {
    if (!confirm(question)) return;
    notice.hidden = true;
    try {
      await del(ns(ctx.namespace, "functions", fn.name) + query);
      go("ns", ctx.namespace, "functions");
    } catch (e) {
      // Triggers or jobs that name the function (409): the message lists
      // them, and deleting them too is one more, confirmed, click.
      const cascade =
        e.status === 409 && !query
          ? h("button", { type: "button", class: "danger small", id: "delete-cascade", onclick: () => remove("?cascade=true", `Delete function ${fn.name} and the triggers and jobs that name it?`) }, "Delete them too")
          : null;
      replace(notice, e.message || String(e), " ", cascade);
      notice.hidden = false;
    }
  };
  const danger = h(
    "button",
    {
      class: "danger small",
      type: "button",
      id: "delete-function",
      onclick: () => remove("", `Delete function ${fn.name}? Its code and records go too.`),
    },
    "Delete",
  );
  replace(main, head, h("div", { class: "tab-row" }, tabs, danger), notice, panel);
  const refreshHead = (next) => {
    fn = next;
    replace(head, headerOf(ctx, fn));
  };
  ctx.refresh = refreshHead;
  ctx.gone = () => {
    refreshHead({ ...fn, status: { ...fn.status, phase: "Deleted", url: null } });
    danger.disabled = true;
    panel.replaceChildren();
  };
  ctx.fn = () => fn;
  switch (ctx.tab) {
    case "overview": {
      replace(panel, overview(fn));
      await watchBuild(ctx, fn, (next) => {
        refreshHead(next);
        replace(panel, overview(next));
      });
      break;
    }
    case "code":
      await deployPanel(panel, ctx, fn);
      break;
    case "versions":
      await versionsPanel(panel, ctx);
      break;
    case "invoke":
      invokePanel(panel, ctx, fn);
      break;
    case "logs":
      await logsPanel(panel, ctx);
      break;
    case "invocations":
      await invocationsPanel(panel, ctx);
      break;
    case "metrics":
      await metricsPanel(panel, ctx);
      break;
    default:
      replace(panel, h("p", { class: "empty" }, "No such tab."));
  }
}
