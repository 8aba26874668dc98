// One function's versions (what each keeps on the server, which aliases
// point at it; one no longer needed deleted) and its aliases (pointed at a
// version, with an optional canary share to a second one; deleted).

import { h, replace, table, badge } from "../dom.js";
import { get, api, del, ns } from "../api.js";
import { field, form, input } from "../forms.js";
import { time, bytes } from "../format.js";

/** Why a version cannot be deleted, if it cannot (the server says so too). */
function kept(v) {
  if (v.latest) return "the version the function serves: deploy a newer one first";
  if (v.aliases.length) return `alias ${v.aliases.join(", ")} points at it: move or delete it first`;
  return null;
}

function canary(a) {
  const [other, share] = Object.entries(a.weights || {})[0] || [];
  return other ? `${Math.round(share * 100)}% to v${other}` : "";
}

function aliasForm(ctx, done) {
  const name = input({ id: "alias-name", placeholder: "live" });
  const version = input({ id: "alias-version", type: "number", min: "1" });
  const other = input({ id: "alias-canary-version", type: "number", min: "1" });
  const share = input({ id: "alias-canary-share", type: "number", min: "0", max: "1", step: "0.01", placeholder: "0.1" });
  return form(
    {
      id: "alias-form",
      class: "stack",
      onsubmit: async (el) => {
        if (!name.value.trim()) {
          const e = new Error("give the alias a name, e.g. live");
          e.field = "name";
          throw e;
        }
        const body = { version: Number(version.value) };
        if (other.value) body.weights = { [other.value]: Number(share.value || 0) };
        await api("PUT", ns(ctx.namespace, "functions", ctx.name, "aliases", name.value.trim()), { json: body });
        el.reset();
        await done();
      },
    },
    h(
      "div",
      { class: "grid-2" },
      field("name", "Alias", name, "A DNS label that starts with a letter (not latest: the plain URL is the newest); set again to move it."),
      field("version", "Version", version),
      field("weights", "Canary version", other, "Optional: a second version that gets a share of the calls."),
      field("share", "Canary share", share, "Between 0 and 1."),
    ),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "set-alias" }, "Set alias")),
  );
}

export async function versionsPanel(panel, ctx) {
  const notice = h("div", { class: "notice error", role: "alert", hidden: true, id: "versions-error" });
  const versions = h("section", { class: "card", id: "versions-card" }, h("p", { class: "empty" }, "Loading…"));
  const aliases = h("section", { class: "card", id: "aliases-card" });
  const side = h("section", { class: "card narrow-card" }, h("h3", {}, "Point an alias"));
  replace(panel, notice, versions, aliases, side);
  const showError = (e) => {
    notice.textContent = e.message;
    notice.hidden = false;
  };
  const fn = (...rest) => ns(ctx.namespace, "functions", ctx.name, ...rest);
  const removal = (label, url, what, disabledWhy) =>
    h(
      "button",
      {
        type: "button",
        class: "danger small",
        "data-delete": label,
        disabled: Boolean(disabledWhy),
        title: disabledWhy || undefined,
        onclick: async () => {
          if (!confirm(`Delete ${what}?`)) return;
          await del(url).catch(showError);
          await load();
        },
      },
      "Delete",
    );
  const load = async () => {
    notice.hidden = true;
    const [{ items: vs }, { items: as }] = await Promise.all([
      get(fn("versions"), { signal: ctx.signal }),
      get(fn("aliases"), { signal: ctx.signal }),
    ]);
    const held = vs.reduce((sum, v) => sum + (v.artifact_bytes || 0) + (v.archive_bytes || 0), 0);
    replace(
      versions,
      h("h3", {}, "Versions ", h("span", { class: "muted", id: "versions-size" }, `${bytes(held)} kept`)),
      table(
        [
          ["Version", (v) => [h("span", { class: "strong" }, `v${v.version}`), v.latest ? [" ", badge("latest", "ready")] : null]],
          ["Aliases", (v) => v.aliases.join(", ")],
          ["Size", (v) => bytes((v.artifact_bytes || 0) + (v.archive_bytes || 0))],
          ["Code", (v) => h("code", { class: "hash" }, v.code_hash.slice(0, 12))],
          ["Built", (v) => time(v.built_at)],
          ["", (v) => removal(`v${v.version}`, fn("versions", v.version), `version ${v.version} of ${ctx.name}`, kept(v))],
        ],
        vs,
        { empty: "No built version yet.", rowid: (v) => `v${v.version}` },
      ),
    );
    replace(
      aliases,
      h("h3", {}, "Aliases"),
      table(
        [
          ["Alias", (a) => h("span", { class: "strong" }, a.name)],
          ["Version", (a) => `v${a.version}`],
          ["Canary", canary],
          ["URL", (a) => h("code", {}, a.url)],
          ["Moved", (a) => time(a.updated_at)],
          ["", (a) => removal(a.name, fn("aliases", a.name), `alias ${a.name}`, null)],
        ],
        as,
        { empty: "No aliases: calls go to the newest version.", rowid: (a) => a.name },
      ),
    );
  };
  side.append(aliasForm(ctx, load));
  await load();
}
