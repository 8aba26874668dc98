// Server-Sent Events over fetch(): EventSource cannot send an Authorization
// header, so the console reads the stream itself and splits it into events.

import { token } from "./session.js";
import { ApiError } from "./api.js";

/**
 * Streams `url` as SSE, calling `onevent(parsedJson)` per `data:` event
 * until `signal` aborts or the server closes. Resolves when the stream ends.
 */
export async function follow(url, { signal, onevent, onopen }) {
  const response = await fetch(url, {
    headers: { Accept: "text/event-stream", Authorization: `Bearer ${token()}` },
    credentials: "omit",
    cache: "no-store",
    signal,
  });
  if (!response.ok) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    throw new ApiError(response.status, body);
  }
  onopen?.();
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (!data) continue;
      try {
        onevent(JSON.parse(data));
      } catch {
        onevent({ text: data });
      }
    }
    // A runaway line without a separator is not kept forever.
    if (buffer.length > 1 << 20) buffer = "";
  }
}
