// Jobs of a namespace: list, create, run again (raise run_id) and watch the
// phase change; one job's event, result and error beside the form.

import { h, replace, badge, facts, table } from "../dom.js";
import { get, post, patch, del, ns } from "../api.js";
import { field, form, input, select, textarea, parseJson } from "../forms.js";
import { time, shortTime, json, cut } from "../format.js";
import { sleep, newestOnly } from "../async.js";

const ACTIVE = ["Pending", "Running"];

function jobDetail(job) {
  const s = job.status || {};
  return [
    h("h3", {}, "Job ", job.name),
    facts([
      ["Function", job.function],
      ["Phase", badge(s.phase)],
      ["Run", String(s.run_id ?? job.run_id)],
      ["Started", time(s.started_at)],
      ["Finished", time(s.finished_at)],
    ]),
    h("h4", {}, "Event"),
    h("pre", { class: "log", id: "job-event" }, json(job.event ?? {})),
    s.result !== undefined && s.result !== null ? [h("h4", {}, "Result"), h("pre", { class: "log", id: "job-result" }, json(s.result))] : null,
    s.error ? [h("h4", {}, "Error"), h("pre", { class: "log bad", id: "job-error" }, s.error)] : null,
  ];
}

function resultSummary(s) {
  if (!s) return "";
  if (s.result !== undefined && s.result !== null) return cut(JSON.stringify(s.result), 80);
  return s.result_bytes ? `${s.result_bytes} bytes (pick the job to see it)` : "";
}

function createForm(namespace, functions, done) {
  const name = input({ id: "job-name" });
  const fn = select(functions.length ? functions : [["", "(no functions yet)"]], { id: "job-function" });
  const event = textarea({ id: "job-event-input", rows: 4, class: "code", placeholder: '{"name": "job"}' });
  const now = h("input", { type: "checkbox", id: "job-run-now", checked: true });
  return form(
    {
      id: "job-form",
      class: "stack",
      onsubmit: async (el) => {
        const body = { name: name.value.trim(), function: fn.value, run_id: now.checked ? 1 : 0 };
        const parsed = parseJson(event.value, "event");
        if (parsed !== undefined) body.event = parsed;
        if (!body.function) delete body.function;
        await post(ns(namespace, "jobs"), body);
        el.reset();
        await done();
      },
    },
    field("name", "Name", name),
    field("function", "Function", fn),
    field("event", "Event (JSON)", event),
    h("label", { class: "check" }, now, " Run it now (run_id 1; otherwise it is only recorded)"),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "create-job" }, "Create job")),
  );
}

export async function jobsView(main, { signal, namespace }) {
  const notice = h("div", { class: "notice error", role: "alert", hidden: true, id: "job-error-notice" });
  const list = h("section", { class: "card" }, h("p", { class: "empty" }, "Loading…"));
  const side = h("div", { class: "columns" });
  const detailCard = h("section", { class: "card", id: "job-detail" }, h("p", { class: "empty" }, "Pick a job to see its event, result and error."));
  replace(main, h("div", { class: "page-head" }, h("h1", {}, "Jobs")), notice, list, side);
  let selected = null;
  let watchUntil = 0;
  const showError = (e) => {
    notice.textContent = e.message;
    notice.hidden = false;
  };
  const rerun = async (job) => {
    const next = Math.max(job.run_id ?? 0, job.status?.run_id ?? 0) + 1;
    try {
      await patch(ns(namespace, "jobs", job.name), { run_id: next });
      selected = job.name;
      watchUntil = Date.now() + 3000;
      await load();
    } catch (e) {
      showError(e);
    }
  };
  // A list leaves out a result over 8 KiB (result_bytes): the job's own
  // answer has it.
  // The last job picked wins over a slower answer for one picked before.
  const newest = newestOnly();
  const showDetail = (j) =>
    newest(j.status?.result_bytes ? get(ns(namespace, "jobs", j.name), { signal }) : j, (job) => replace(detailCard, jobDetail(job)));
  const load = async () => {
    const { items } = await get(ns(namespace, "jobs"), { signal });
    replace(
      list,
      table(
        [
          ["Name", (j) => h("span", { class: "strong" }, j.name)],
          ["Function", (j) => j.function],
          ["Phase", (j) => badge(j.status?.phase)],
          ["Run", (j) => h("span", { class: "num", "data-run": j.name }, String(j.status?.run_id ?? j.run_id))],
          ["Finished", (j) => h("span", { class: "nowrap", title: time(j.status?.finished_at) }, shortTime(j.status?.finished_at))],
          ["Result / error", (j) => (j.status?.error ? h("span", { class: "bad cut" }, cut(j.status.error, 80)) : h("span", { class: "cut" }, resultSummary(j.status)))],
          [
            "",
            (j) =>
              h(
                "div",
                { class: "row-actions" },
                h("button", { type: "button", class: "secondary small", "data-rerun": j.name, disabled: ACTIVE.includes(j.status?.phase), onclick: () => rerun(j) }, "Run again"),
                h(
                  "button",
                  {
                    type: "button",
                    class: "danger small",
                    onclick: async () => {
                      if (!confirm(`Delete job ${j.name}?`)) return;
                      await del(ns(namespace, "jobs", j.name)).catch(showError);
                      await load();
                    },
                  },
                  "Delete",
                ),
              ),
          ],
        ],
        items,
        {
          empty: "No jobs yet.",
          rowid: (j) => j.name,
          onrow: (j) => {
            selected = j.name;
            showDetail(j).catch(showError);
          },
        },
      ),
    );
    const current = items.find((j) => j.name === selected);
    if (current) await showDetail(current);
    return items;
  };
  const { items: functions } = await get(ns(namespace, "functions"), { signal });
  side.append(detailCard, h("section", { class: "card" }, h("h3", {}, "New job"), createForm(namespace, functions.map((f) => f.name), async () => {
    watchUntil = Date.now() + 3000;
    await load();
  })));
  let items = await load();
  // Watch phases change while a run is pending or running.
  for (;;) {
    await sleep(1000, signal);
    if (items.some((j) => ACTIVE.includes(j.status?.phase)) || Date.now() < watchUntil) items = await load();
  }
}
