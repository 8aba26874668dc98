// Building DOM nodes without markup strings: every value becomes a text
// node or a property, never parsed HTML. This is what keeps a function
// named or printing `<img src=x onerror=...>` plain text on the page.

/**
 * h("div", {class: "card", onclick: fn}, "text", child, [more])
 * Props: `class`, `text`, `on<event>` (a function), `dataset` (object),
 * `hidden`/`disabled`/`checked`/`value`/`selected` (properties),
 * anything else an attribute (never `style` or `on*` strings).
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = String(value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "checked") el.checked = el.defaultChecked = value;
    else if (key === "selected") el.selected = el.defaultSelected = value;
    else if (["hidden", "disabled", "value", "multiple", "required"].includes(key)) el[key] = value;
    else if (key === "style" || key.startsWith("on")) throw new Error(`refusing attribute ${key}`);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

/** Appends strings (as text), nodes and arrays of them. */
export function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

/** Replaces an element's children. */
export function replace(parent, ...children) {
  parent.replaceChildren();
  return append(parent, children);
}

/** A phase or state as a coloured badge. */
export function badge(text, kind = String(text || "").toLowerCase()) {
  return h("span", { class: `badge badge-${kind}`, "data-testid": "badge" }, text ?? "-");
}

/** A definition list from [label, value] pairs (value: text or node). */
export function facts(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs.filter(Boolean).map(([label, value]) => [h("dt", {}, label), h("dd", {}, value ?? "-")]),
  );
}

/** A table: columns are [header, (row) => text | node]. */
export function table(columns, rows, { empty = "Nothing here yet.", onrow, rowid } = {}) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  return h(
    "div",
    { class: "table-wrap" },
    h(
    "table",
    { class: onrow ? "grid clickable" : "grid" },
    h("thead", {}, h("tr", {}, columns.map(([title]) => h("th", {}, title)))),
    h(
      "tbody",
      {},
      rows.map((row) =>
        h(
          "tr",
          {
            onclick: onrow
              ? (e) => {
                  if (!e.target.closest("a, button, input, select, label")) onrow(row);
                }
              : undefined,
            "data-row": rowid ? rowid(row) : undefined,
          },
          columns.map(([, cell]) => h("td", {}, cell(row))),
        ),
      ),
    ),
    ),
  );
}
