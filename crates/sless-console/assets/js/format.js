// How values read on screen: times, durations, sizes, JSON.

export function time(iso) {
  if (!iso) return "-";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

/** A compact time for tables: "Dec 3, 19:45:38". */
export function shortTime(iso) {
  if (!iso) return "-";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
}

/** "3 min ago" style, with the exact time left to a title. */
export function ago(iso) {
  if (!iso) return "-";
  const seconds = (Date.now() - new Date(iso).getTime()) / 1000;
  if (!Number.isFinite(seconds)) return String(iso);
  if (seconds < 5) return "just now";
  if (seconds < 60) return `${Math.round(seconds)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

export function ms(value) {
  if (value === null || value === undefined) return "-";
  if (value < 1) return `${(value * 1000).toFixed(0)} µs`;
  if (value < 100) return `${value.toFixed(1)} ms`;
  if (value < 10000) return `${Math.round(value)} ms`;
  return `${(value / 1000).toFixed(1)} s`;
}

export function bytes(n) {
  if (n === null || n === undefined) return "-";
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / (1 << 20)).toFixed(1)} MiB`;
}

export function json(value) {
  if (value === undefined) return "";
  return JSON.stringify(value, null, 2);
}

/** Text cut to `max` characters with a marker. */
export function cut(text, max = 200) {
  const s = String(text ?? "");
  return s.length > max ? `${s.slice(0, max)}…` : s;
}
