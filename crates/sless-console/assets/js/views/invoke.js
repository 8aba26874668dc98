// The invoke panel: a request through the public gateway (`/fn/{ns}/{name}`),
// answered with status, headers, body and how long it took.

import { h, replace, table } from "../dom.js";
import { path } from "../api.js";
import { field, form, input, select, textarea } from "../forms.js";
import { ms, bytes } from "../format.js";

/** The most of an answer's body the panel shows. */
const SHOWN_BYTES = 256 * 1024;

function parseHeaders(text) {
  const headers = new Headers();
  for (const [i, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (!line) continue;
    const at = line.indexOf(":");
    if (at <= 0) {
      const e = new Error(`line ${i + 1} is not "Name: value"`);
      e.field = "headers";
      throw e;
    }
    try {
      headers.append(line.slice(0, at).trim(), line.slice(at + 1).trim());
    } catch (err) {
      const e = new Error(`line ${i + 1}: ${err.message}`);
      e.field = "headers";
      throw e;
    }
  }
  return headers;
}

function pretty(text, contentType) {
  if (!/json/i.test(contentType || "")) return text;
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

export function invokePanel(panel, ctx, fn) {
  const method = select(["POST", "GET", "PUT", "PATCH", "DELETE"], { id: "invoke-method", value: "POST" });
  const subpath = input({ id: "invoke-path", placeholder: "/optional/path?query=1" });
  const headers = textarea({ id: "invoke-headers", rows: 3, class: "code", placeholder: "Content-Type: application/json" });
  headers.value = "Content-Type: application/json";
  const body = textarea({ id: "invoke-body", rows: 8, class: "code" });
  body.value = '{"name": "console"}';
  const result = h("div", { id: "invoke-result" }, h("p", { class: "empty" }, "Send a request to see the answer."));
  const send = form(
    {
      id: "invoke-form",
      class: "stack",
      onsubmit: async () => {
        let rest = subpath.value.trim();
        if (rest && !rest.startsWith("/") && !rest.startsWith("?")) rest = `/${rest}`;
        const url = path("fn", ctx.namespace, fn.name) + rest;
        const init = { method: method.value, headers: parseHeaders(headers.value), credentials: "omit", cache: "no-store", signal: ctx.signal };
        if (!["GET", "HEAD"].includes(method.value)) init.body = body.value;
        replace(result, h("p", { class: "empty" }, "Waiting for the answer…"));
        const started = performance.now();
        let response;
        try {
          response = await fetch(url, init);
        } catch (e) {
          if (e.name === "AbortError") throw e;
          throw new Error(`the request did not complete: ${e.message}`);
        }
        const buffer = new Uint8Array(await response.arrayBuffer());
        const took = performance.now() - started;
        const text = new TextDecoder().decode(buffer.subarray(0, SHOWN_BYTES));
        const contentType = response.headers.get("content-type");
        replace(
          result,
          h(
            "div",
            { class: "stack" },
            h(
              "div",
              { class: "invoke-summary" },
              h("span", { class: `status-code s${String(response.status)[0]}xx`, id: "invoke-status" }, String(response.status)),
              h("span", { class: "muted" }, response.statusText),
              h("span", { id: "invoke-duration" }, ms(took)),
              h("span", { class: "muted" }, bytes(buffer.length)),
            ),
            h("h4", {}, "Body"),
            h("pre", { class: "log", id: "invoke-response-body" }, pretty(text, contentType), buffer.length > SHOWN_BYTES ? "\n… (cut)" : ""),
            h("h4", {}, "Headers"),
            table([["Name", ([k]) => h("code", {}, k)], ["Value", ([, v]) => v]], [...response.headers.entries()], { empty: "No headers." }),
          ),
        );
      },
    },
    h("div", { class: "grid-2 narrow" }, field("method", "Method", method), field("path", "Path", subpath, `After /fn/${ctx.namespace}/${fn.name}`)),
    field("headers", "Headers", headers, "One “Name: value” per line."),
    field("body", "Body", body),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "invoke-send" }, "Send")),
  );
  replace(panel, h("div", { class: "columns" }, h("section", { class: "card" }, h("h3", {}, "Request"), send), h("section", { class: "card" }, h("h3", {}, "Response"), result)));
}
