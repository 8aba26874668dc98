// Deploying code: a new function from a form, or new code for an existing
// one, either a zip file or a single-file handler written in the editor
// (zipped in the browser). The build is then watched until Ready or Failed.

import { h, replace, badge } from "../dom.js";
import { api, post, del, ns } from "../api.js";
import { field, form, input, select, textarea } from "../forms.js";
import { go, href } from "../router.js";
import { zipOf } from "../zip.js";
import { watchBuild } from "./function.js";

const TEMPLATES = {
  "python3.11": {
    file: "handler.py",
    text: `def handle(event, context):
    name = event.get("name", "world") if isinstance(event, dict) else "world"
    print("hello from", context.function, "to", name)
    return {"hello": name}
`,
  },
  nodejs20: {
    file: "handler.js",
    text: `exports.handle = async (event, context) => {
  const name = (event && event.name) || "world";
  console.log("hello from", context.function, "to", name);
  return { hello: name };
};
`,
  },
};

/**
 * KEY=VALUE lines as an object without a prototype (so `__proto__=x` is a
 * variable like any other); a bad line names the env field.
 */
function parseEnv(text) {
  const env = Object.create(null);
  for (const [i, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const at = line.indexOf("=");
    if (at <= 0) {
      const e = new Error(`line ${i + 1} is not KEY=VALUE`);
      e.field = "env";
      throw e;
    }
    env[line.slice(0, at).trim()] = line.slice(at + 1);
  }
  return env;
}

/**
 * The code chooser: editor (file name + text) or zip upload. Returns
 * {el, zip(), field()}: field() names the input a refused archive is about.
 */
function codeSource(runtime) {
  const template = TEMPLATES[runtime] || TEMPLATES["python3.11"];
  const mode = select([["editor", "Write a single-file handler"], ["zip", "Upload a zip"]], { id: "code-mode", value: "editor" });
  const fileName = input({ id: "code-file", value: template.file });
  const editor = textarea({ id: "code-editor", rows: 14, class: "code" });
  editor.value = template.text;
  editor.addEventListener("keydown", (e) => {
    if (e.key !== "Tab") return;
    e.preventDefault();
    editor.setRangeText("    ", editor.selectionStart, editor.selectionEnd, "end");
  });
  const file = h("input", { type: "file", id: "code-zip", accept: ".zip,application/zip" });
  const editorPart = h("div", { class: "stack" }, field("code_file", "File name", fileName), field("code", "Handler", editor));
  const zipPart = h("div", { class: "stack", hidden: true }, field("zip", "Zip archive", file, "At most the server's upload limit; dependencies in requirements.txt or package.json are installed at build time."));
  mode.addEventListener("change", () => {
    editorPart.hidden = mode.value !== "editor";
    zipPart.hidden = mode.value !== "zip";
  });
  return {
    el: h("div", { class: "stack" }, field("code_mode", "Code", mode), editorPart, zipPart),
    field: () => (mode.value === "zip" ? "zip" : "code"),
    setRuntime(next) {
      const t = TEMPLATES[next];
      if (!t) return;
      const pristine = Object.values(TEMPLATES).some((x) => x.text === editor.value);
      if (pristine) editor.value = t.text;
      if (Object.values(TEMPLATES).some((x) => x.file === fileName.value)) fileName.value = t.file;
    },
    async zip() {
      if (mode.value === "zip") {
        const chosen = file.files?.[0];
        if (!chosen) {
          const e = new Error("choose a zip file");
          e.field = "zip";
          throw e;
        }
        return new Uint8Array(await chosen.arrayBuffer());
      }
      const name = fileName.value.trim();
      if (!name || name.includes("..") || name.startsWith("/")) {
        const e = new Error("give the handler a relative file name, e.g. handler.py");
        e.field = "code_file";
        throw e;
      }
      return zipOf([{ name, text: editor.value }]);
    },
  };
}

/** PUT the zip as the function's code; a refused archive names `fieldName`. */
async function upload(namespace, name, bytes, fieldName) {
  try {
    return await api("PUT", ns(namespace, "functions", name, "code"), {
      body: bytes,
      headers: { "Content-Type": "application/zip" },
    });
  } catch (e) {
    if (e.status === 400 || e.status === 413) e.field = fieldName;
    throw e;
  }
}

function buildState(fn) {
  const s = fn.status || {};
  return h(
    "div",
    { class: "build-state", id: "build-state" },
    h("p", {}, "Build: ", badge(s.phase), s.version ? ` v${s.version}` : ""),
    h("pre", { class: s.phase === "Failed" ? "log bad" : "log", id: "build-output" }, s.message || ""),
  );
}

export async function deployPanel(panel, ctx, fn) {
  const source = codeSource(fn.runtime);
  const state = h("div", {}, buildState(fn));
  const deploy = form(
    {
      id: "deploy-form",
      class: "stack",
      onsubmit: async () => {
        const zip = await source.zip();
        const next = await upload(ctx.namespace, fn.name, zip, source.field());
        ctx.refresh(next);
        replace(state, buildState(next));
        const done = await watchBuild(ctx, next, (f) => {
          ctx.refresh(f);
          replace(state, buildState(f));
        });
        replace(state, buildState(done));
      },
    },
    source.el,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "deploy" }, "Deploy")),
  );
  replace(panel, h("div", { class: "columns wide-left" }, h("section", { class: "card" }, h("h3", {}, "New code"), deploy), h("section", { class: "card" }, h("h3", {}, "Last build"), state)));
  const done = await watchBuild(ctx, fn, (f) => {
    ctx.refresh(f);
    replace(state, buildState(f));
  });
  replace(state, buildState(done));
}

export async function newFunctionView(main, { namespace }) {
  const name = input({ id: "fn-name", placeholder: "hello" });
  const runtime = select(["python3.11", "nodejs20"], { id: "fn-runtime", value: "python3.11" });
  const entrypoint = input({ id: "fn-entrypoint", placeholder: "handler.handle" });
  const memory = input({ id: "fn-memory", type: "number", placeholder: "256" });
  const timeout = input({ id: "fn-timeout", type: "number", placeholder: "30" });
  const env = textarea({ id: "fn-env", rows: 3, placeholder: "GREETING=hello", class: "code" });
  const source = codeSource(runtime.value);
  runtime.addEventListener("change", () => source.setRuntime(runtime.value));
  const create = form(
    {
      id: "new-function-form",
      class: "stack",
      onsubmit: async () => {
        const body = { name: name.value.trim(), runtime: runtime.value };
        if (entrypoint.value.trim()) body.entrypoint = entrypoint.value.trim();
        if (memory.value) body.memory_mb = Number(memory.value);
        if (timeout.value) body.timeout_sec = Number(timeout.value);
        const vars = parseEnv(env.value);
        if (Object.keys(vars).length) body.env = vars;
        const zip = await source.zip();
        await post(ns(namespace, "functions"), body);
        try {
          await upload(namespace, body.name, zip, source.field());
        } catch (e) {
          // One step for the user: code the server refuses leaves no
          // function behind, and the form (still filled in) can be sent again.
          await del(ns(namespace, "functions", body.name)).catch((gone) => {
            e.message += ` (the function was created without code; deleting it failed: ${gone.message})`;
          });
          throw e;
        }
        go("ns", namespace, "functions", body.name, "overview");
      },
    },
    h(
      "div",
      { class: "grid-2" },
      field("name", "Name", name, "A DNS label: lowercase letters, digits and '-'."),
      field("runtime", "Runtime", runtime),
      field("entrypoint", "Entrypoint", entrypoint, "module.function (Python) or file.export (Node); default handler.handle."),
      field("memory_mb", "Memory (MB)", memory),
      field("timeout_sec", "Timeout (s)", timeout),
      field("env", "Environment", env, "One KEY=VALUE per line."),
    ),
    source.el,
    h("div", { class: "actions" }, h("a", { class: "button secondary", href: href("ns", namespace, "functions") }, "Cancel"), h("button", { type: "submit", class: "primary", id: "create-function" }, "Create and deploy")),
  );
  replace(main, h("div", { class: "page-head" }, h("h1", {}, "New function")), h("section", { class: "card" }, create));
}
