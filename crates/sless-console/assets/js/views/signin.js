// Sign in with a bearer token: checked against GET /v1/whoami before it is
// kept (in sessionStorage); then on to the page asked for before signing
// in, or to a namespace the user names (or the token's first).

import { h, replace } from "../dom.js";
import { get } from "../api.js";
import { field, form, input } from "../forms.js";
import { go } from "../router.js";
import * as session from "../session.js";

export async function signinView(main) {
  const notice = sessionStorage.getItem("sless.notice");
  sessionStorage.removeItem("sless.notice");
  const secret = input({ type: "password", id: "token", placeholder: "sless_…", autocomplete: "current-password" });
  const namespace = input({ id: "namespace", placeholder: "the token's first namespace" });
  const signin = form(
    {
      id: "signin-form",
      class: "stack",
      onsubmit: async () => {
        const token = secret.value.trim();
        if (!token) {
          const e = new Error("enter a token");
          e.field = "token";
          throw e;
        }
        let who;
        try {
          who = await get("/v1/whoami", { bearer: token });
        } catch (e) {
          if (e.status === 401) e.field = "token";
          throw e;
        }
        const wanted = namespace.value.trim();
        if (wanted && !who.admin && !who.namespaces.includes(wanted)) {
          const e = new Error(`token ${JSON.stringify(who.name)} does not cover namespace ${JSON.stringify(wanted)}`);
          e.field = "namespace";
          throw e;
        }
        session.signIn(token, who);
        const asked = session.takeRoute();
        if (asked && !wanted) location.hash = asked;
        else go("ns", wanted || who.namespaces[0] || "default", "functions");
      },
    },
    field("token", "Bearer token", secret, "Kept in this tab's session storage only; closing the tab forgets it."),
    field("namespace", "Namespace (optional)", namespace),
    h("button", { type: "submit", id: "sign-in", class: "primary" }, "Sign in"),
  );
  replace(
    main,
    h(
      "section",
      { class: "signin card" },
      h("div", { class: "signin-brand" }, h("span", { class: "logo big" }, "s"), h("h1", {}, "sless console")),
      h("p", { class: "muted" }, "Functions, triggers, jobs and what they did, over the sless REST API."),
      notice ? h("div", { class: "notice", role: "status" }, notice) : null,
      signin,
    ),
  );
  secret.focus();
}
