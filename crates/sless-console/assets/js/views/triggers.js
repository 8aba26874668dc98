// Triggers of a namespace: list, create, enable/disable in place, delete.

import { h, replace, table } from "../dom.js";
import { get, post, patch, del, ns } from "../api.js";
import { field, form, input, select, textarea, parseJson } from "../forms.js";
import { ago, cut } from "../format.js";

function details(t) {
  if (t.type === "cron") return [h("code", {}, t.schedule), ` ${t.timezone || "UTC"}`, t.event !== undefined ? h("div", { class: "muted cut block" }, cut(JSON.stringify(t.event), 80)) : null];
  if (t.type === "amqp") return [h("code", {}, t.queue), h("div", { class: "muted" }, `prefetch ${t.prefetch ?? 1}, retries ${t.retry_limit ?? 3}`)];
  return t.status?.url ? h("code", {}, t.status.url) : "-";
}

function toggle(namespace, trigger, onerror) {
  const box = h("input", { type: "checkbox", checked: trigger.enabled, class: "switch", "data-trigger": trigger.name, "aria-label": `enable ${trigger.name}` });
  const label = h("span", { class: "switch-label nowrap" }, trigger.enabled ? "enabled" : "disabled");
  box.addEventListener("change", async () => {
    box.disabled = true;
    try {
      const next = await patch(ns(namespace, "triggers", trigger.name), { enabled: box.checked });
      box.checked = next.enabled;
      label.textContent = next.enabled ? "enabled" : "disabled";
    } catch (e) {
      box.checked = !box.checked;
      onerror(e);
    } finally {
      box.disabled = false;
    }
  });
  return h("label", { class: "switch-wrap" }, box, label);
}

function createForm(namespace, functions, done) {
  const name = input({ id: "trigger-name" });
  const type = select(["cron", "http", "amqp"], { id: "trigger-type", value: "cron" });
  const fn = select(functions.length ? functions : [["", "(no functions yet)"]], { id: "trigger-function" });
  const schedule = input({ id: "trigger-schedule", placeholder: "*/5 * * * *" });
  const timezone = input({ id: "trigger-timezone", placeholder: "UTC" });
  const event = textarea({ id: "trigger-event", rows: 3, class: "code", placeholder: '{"name": "cron"}' });
  const broker = input({ id: "trigger-broker", placeholder: "amqp://guest:guest@127.0.0.1:5672/%2f" });
  const queue = input({ id: "trigger-queue" });
  const prefetch = input({ id: "trigger-prefetch", type: "number", placeholder: "1" });
  const retries = input({ id: "trigger-retries", type: "number", placeholder: "3" });
  const cronPart = h("div", { class: "grid-2" }, field("schedule", "Schedule", schedule, "5 fields, or 6 with seconds first."), field("timezone", "Time zone", timezone), field("event", "Event (JSON)", event));
  const amqpPart = h("div", { class: "grid-2" }, field("broker_url", "Broker URL", broker), field("queue", "Queue", queue), field("prefetch", "Prefetch", prefetch), field("retry_limit", "Retries", retries));
  const show = () => {
    cronPart.hidden = type.value !== "cron";
    amqpPart.hidden = type.value !== "amqp";
  };
  type.addEventListener("change", show);
  show();
  return form(
    {
      id: "trigger-form",
      class: "stack",
      onsubmit: async (el) => {
        const body = { name: name.value.trim(), type: type.value, function: fn.value };
        if (type.value === "cron") {
          body.schedule = schedule.value.trim();
          if (timezone.value.trim()) body.timezone = timezone.value.trim();
          const parsed = parseJson(event.value, "event");
          if (parsed !== undefined) body.event = parsed;
        }
        if (type.value === "amqp") {
          body.broker_url = broker.value.trim();
          body.queue = queue.value.trim();
          if (prefetch.value) body.prefetch = Number(prefetch.value);
          if (retries.value) body.retry_limit = Number(retries.value);
        }
        for (const [k, v] of Object.entries(body)) if (v === "") delete body[k];
        await post(ns(namespace, "triggers"), body);
        el.reset();
        show();
        await done();
      },
    },
    h("div", { class: "grid-2" }, field("name", "Name", name), field("type", "Type", type), field("function", "Function", fn)),
    cronPart,
    amqpPart,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "create-trigger" }, "Create trigger")),
  );
}

export async function triggersView(main, { signal, namespace }) {
  const notice = h("div", { class: "notice error", role: "alert", hidden: true, id: "trigger-error" });
  const list = h("section", { class: "card" }, h("p", { class: "empty" }, "Loading…"));
  const side = h("section", { class: "card narrow-card" }, h("h3", {}, "New trigger"));
  replace(main, h("div", { class: "page-head" }, h("h1", {}, "Triggers")), notice, list, side);
  const showError = (e) => {
    notice.textContent = e.message;
    notice.hidden = false;
  };
  const load = async () => {
    notice.hidden = true;
    const { items } = await get(ns(namespace, "triggers"), { signal });
    replace(
      list,
      table(
        [
          ["Name", (t) => h("span", { class: "strong" }, t.name)],
          ["Type", (t) => h("span", { class: "badge badge-type" }, t.type)],
          ["Function", (t) => t.function],
          ["Details", details],
          ["Enabled", (t) => toggle(namespace, t, showError)],
          ["Last fired", (t) => ago(t.status?.last_fired_at)],
          ["Last error", (t) => (t.status?.last_error ? h("span", { class: "bad cut" }, cut(t.status.last_error, 120)) : "")],
          [
            "",
            (t) =>
              h(
                "button",
                {
                  type: "button",
                  class: "danger small",
                  onclick: async () => {
                    if (!confirm(`Delete trigger ${t.name}?`)) return;
                    await del(ns(namespace, "triggers", t.name)).catch(showError);
                    await load();
                  },
                },
                "Delete",
              ),
          ],
        ],
        items,
        { empty: "No triggers yet.", rowid: (t) => t.name },
      ),
    );
  };
  const { items: functions } = await get(ns(namespace, "functions"), { signal });
  side.append(createForm(namespace, functions.map((f) => f.name), load));
  await load();
}
