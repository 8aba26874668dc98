// Forms whose API errors land next to the field they name: the API answers
// `{"error": "...", "field": "schedule"}`, and the message is shown under
// the input for `schedule` (or above the form when it names no field here).

import { h, replace } from "./dom.js";

/** A labelled input wrapper; `name` is the API field it edits. */
export function field(name, label, input, hint) {
  input.name = name;
  input.id ||= `f-${name}-${Math.random().toString(36).slice(2, 8)}`;
  return h(
    "div",
    { class: "field", "data-field": name },
    h("label", { for: input.id }, label),
    input,
    hint ? h("p", { class: "hint" }, hint) : null,
    h("p", { class: "field-error", role: "alert", hidden: true }),
  );
}

export function input(props = {}) {
  return h("input", { type: "text", autocomplete: "off", spellcheck: "false", ...props });
}

export function textarea(props = {}) {
  return h("textarea", { spellcheck: "false", autocomplete: "off", ...props });
}

export function select(options, props = {}) {
  return h(
    "select",
    props,
    options.map((o) => {
      const [value, label] = Array.isArray(o) ? o : [o, o];
      return h("option", { value, selected: props.value === value }, label);
    }),
  );
}

/** A form with a form-level error box; `onsubmit(form)` may throw an ApiError. */
export function form(props, ...children) {
  const box = h("div", { class: "form-error", role: "alert", hidden: true });
  const el = h("form", { ...props, novalidate: true, onsubmit: undefined }, box, ...children);
  el.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(el);
    const buttons = el.querySelectorAll("button");
    buttons.forEach((b) => (b.disabled = true));
    try {
      await props.onsubmit(el);
    } catch (e) {
      showError(el, e);
    } finally {
      buttons.forEach((b) => (b.disabled = false));
    }
  });
  return el;
}

export function clearErrors(formEl) {
  for (const p of formEl.querySelectorAll(".field-error, .form-error")) {
    p.hidden = true;
    p.replaceChildren();
  }
  for (const f of formEl.querySelectorAll(".field.invalid")) f.classList.remove("invalid");
}

/**
 * Puts the error's message next to its field, or in the form's box. A 409
 * names no field, but what conflicts with an existing one is its name.
 */
export function showError(formEl, error) {
  const message = error?.message || String(error);
  const name = error?.field ?? (error?.status === 409 ? "name" : null);
  const target = name && [...formEl.querySelectorAll(".field")].find((f) => f.dataset.field === name);
  if (target) {
    target.classList.add("invalid");
    const p = target.querySelector(".field-error");
    replace(p, message);
    p.hidden = false;
    target.querySelector("input, select, textarea")?.focus();
  } else {
    const box = formEl.querySelector(".form-error");
    replace(box, message);
    box.hidden = false;
  }
}

/** Parses a JSON text area; a parse error names the field, like the API would. */
export function parseJson(text, fieldName) {
  if (!text.trim()) return undefined;
  try {
    return JSON.parse(text);
  } catch (e) {
    const error = new Error(`${fieldName} is not valid JSON: ${e.message}`);
    error.field = fieldName;
    throw error;
  }
}
