// The console's entry point: the top bar, the routes and the view switch.
// Each view renders into <main> and gets an AbortSignal that fires when the
// user navigates away (streams and polling stop there).

import { h, replace } from "./dom.js";
import { current, go, href } from "./router.js";
import * as session from "./session.js";
import { setUnauthorizedHandler } from "./api.js";
import { signinView } from "./views/signin.js";
import { functionsView } from "./views/functions.js";
import { functionView } from "./views/function.js";
import { newFunctionView } from "./views/deploy.js";
import { triggersView } from "./views/triggers.js";
import { jobsView } from "./views/jobs.js";

const main = document.getElementById("main");
const topbar = document.getElementById("topbar");
let leaving = null;

setUnauthorizedHandler(() => {
  session.signOut();
  sessionStorage.setItem("sless.notice", "The server refused the token; sign in again.");
  toSignin();
});

/** To the sign-in page, which leads back to the page asked for (a deep link, say). */
function toSignin() {
  if (location.hash && location.hash !== "#/signin") session.keepRoute(location.hash);
  go("signin");
}

function signOut() {
  session.signOut();
  go("signin");
}

function renderTopbar(namespace, section) {
  const who = session.whoami();
  if (!who) {
    topbar.hidden = true;
    return;
  }
  const known = session.namespaces();
  const choices = known.includes(namespace) ? known : [namespace, ...known];
  let picker;
  if (who.admin) {
    const list = h("datalist", { id: "ns-list" }, choices.map((n) => h("option", { value: n })));
    const box = h("input", {
      id: "ns-input",
      value: namespace,
      list: "ns-list",
      "aria-label": "Namespace",
      spellcheck: "false",
      autocomplete: "off",
    });
    picker = h(
      "form",
      {
        class: "ns-picker",
        onsubmit: (e) => {
          e.preventDefault();
          const next = box.value.trim();
          if (next) go("ns", next, section || "functions");
        },
      },
      h("span", { class: "ns-label" }, "namespace"),
      box,
      list,
    );
    box.addEventListener("change", () => picker.requestSubmit());
  } else {
    const sel = h(
      "select",
      { id: "ns-select", "aria-label": "Namespace" },
      choices.map((n) => h("option", { value: n, selected: n === namespace }, n)),
    );
    sel.addEventListener("change", () => go("ns", sel.value, section || "functions"));
    picker = h("div", { class: "ns-picker" }, h("span", { class: "ns-label" }, "namespace"), sel);
  }
  const link = (name, label) =>
    h("a", { href: href("ns", namespace, name), class: section === name ? "active" : "", "data-nav": name }, label);
  replace(
    topbar,
    h("a", { class: "brand", href: href("ns", namespace, "functions") }, h("span", { class: "logo" }, "s"), "sless"),
    picker,
    h("nav", {}, link("functions", "Functions"), link("triggers", "Triggers"), link("jobs", "Jobs")),
    h(
      "div",
      { class: "who" },
      h("span", { class: "token-name", id: "token-name", title: "Signed in with this token" }, who.name),
      who.admin ? h("span", { class: "badge badge-admin" }, "admin") : null,
      h("button", { class: "secondary", id: "sign-out", type: "button", onclick: signOut }, "Sign out"),
    ),
  );
  topbar.hidden = false;
}

function noSuchPage(namespace) {
  return h("p", { class: "empty", id: "no-such-page" }, "No such page. ", h("a", { href: href("ns", namespace, "functions") }, "To the functions"));
}

async function render() {
  leaving?.abort();
  const controller = new AbortController();
  leaving = controller;
  const route = current();
  const who = session.whoami();
  if (!session.token() || !who) {
    if (route?.[0] !== "signin") return toSignin();
    topbar.hidden = true;
    return signinView(main, { signal: controller.signal });
  }
  if (!route) {
    const first = session.namespaces()[0] || "default";
    renderTopbar(first, null);
    return replace(main, noSuchPage(first));
  }
  if (route[0] !== "ns" || !route[1]) {
    const first = session.namespaces()[0] || "default";
    return go("ns", first, "functions");
  }
  const [, namespace, section = "functions", name, ...rest] = route;
  renderTopbar(namespace, section);
  const ctx = { signal: controller.signal, namespace };
  main.replaceChildren();
  try {
    if (section === "functions" && !name) await functionsView(main, ctx);
    else if (section === "functions" && name === "new") await newFunctionView(main, ctx);
    else if (section === "functions") await functionView(main, { ...ctx, name, tab: rest[0] || "overview", rest: rest.slice(1) });
    else if (section === "triggers") await triggersView(main, ctx);
    else if (section === "jobs") await jobsView(main, ctx);
    else replace(main, noSuchPage(namespace));
  } catch (e) {
    if (e.name === "AbortError" || controller.signal.aborted) return;
    main.append(h("div", { class: "notice error", role: "alert", id: "page-error" }, e.message || String(e)));
  }
}

window.addEventListener("hashchange", render);
render();
