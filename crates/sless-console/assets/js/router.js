// Hash routes (`#/ns/{ns}/functions/{name}/invoke`): deep links work, the
// server serves one page, and nothing sensitive ever appears in a URL.

/**
 * The current route as decoded segments: "#/ns/a/functions" -> ["ns", "a",
 * "functions"]; null when a segment does not decode (a mangled link).
 */
export function current() {
  const hash = location.hash.replace(/^#\/?/, "");
  try {
    return hash ? hash.split("/").map((s) => decodeURIComponent(s)) : [];
  } catch {
    return null;
  }
}

/** The hash for segments, each encoded. */
export function href(...segments) {
  return "#/" + segments.map((s) => encodeURIComponent(String(s))).join("/");
}

export function go(...segments) {
  const next = href(...segments);
  if (location.hash === next) window.dispatchEvent(new HashChangeEvent("hashchange"));
  else location.hash = next;
}
