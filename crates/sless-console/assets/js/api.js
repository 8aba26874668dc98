// The console's only way to the server: the public REST API under /v1 with
// the session's bearer token, and the public gateway under /fn.

import { token } from "./session.js";

/** An answer of 400 or more, carrying the API's message and the field it names. */
export class ApiError extends Error {
  constructor(status, body, fallback) {
    super(body?.error || fallback || `HTTP ${status}`);
    this.status = status;
    this.field = body?.field ?? null;
    this.body = body;
  }
}

let onUnauthorized = () => {};

/** Called once by the app: what to do when the token is refused (401). */
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

/** Encodes each path segment: `path("v1", "namespaces", ns)`. */
export function path(...segments) {
  return "/" + segments.map((s) => encodeURIComponent(String(s))).join("/");
}

export function ns(namespace, ...rest) {
  return path("v1", "namespaces", namespace, ...rest);
}

/**
 * Calls the API. `json` is sent as JSON; `body` as is. Resolves to the
 * parsed JSON (or null for an empty answer); rejects with ApiError.
 */
export async function api(method, url, { json, body, headers = {}, signal, bearer = token() } = {}) {
  const init = { method, headers: { ...headers }, signal, credentials: "omit", cache: "no-store" };
  if (bearer) init.headers.Authorization = `Bearer ${bearer}`;
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  } else if (body !== undefined) {
    init.body = body;
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, null, `cannot reach the server: ${e.message}`);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    if (response.status === 401 && bearer && bearer === token()) onUnauthorized();
    throw new ApiError(response.status, data, text.slice(0, 500));
  }
  return data;
}

export const get = (url, opts) => api("GET", url, opts);
export const post = (url, json) => api("POST", url, { json });
export const patch = (url, json) => api("PATCH", url, { json });
export const del = (url) => api("DELETE", url);
