// The console's only way to the server: the public REST API under /v1 with
// the session's bearer token, and the public gateway under /fn.

import { token } from "./session.js";
import { sleep } from "./async.js";

/** How often a GET refused with 429 is tried again, each after its Retry-After. */
const RETRIES = 4;

/** An answer of 400 or more, carrying the API's message and the field it names. */
export class ApiError extends Error {
  constructor(status, body, fallback, retryAfter = null) {
    super(body?.error || fallback || `HTTP ${status}`);
    this.status = status;
    this.field = body?.field ?? null;
    this.body = body;
    /** Seconds to wait before asking again (with 429 and 503). */
    this.retryAfter = retryAfter;
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
 * parsed JSON (or null for an empty answer); rejects with ApiError. A GET
 * the server is too busy for (429, e.g. more reads of records at once
 * than a namespace may make) is tried again after the Retry-After it names.
 */
export async function api(method, url, options = {}) {
  for (let attempt = 0; ; attempt += 1) {
    try {
      return await call(method, url, options);
    } catch (e) {
      if (method !== "GET" || e.status !== 429 || attempt >= RETRIES) throw e;
      await sleep(1000 * Math.min(e.retryAfter ?? 1, 10), options.signal);
    }
  }
}

async function call(method, url, { json, body, headers = {}, signal, bearer = token() } = {}) {
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
    const retryAfter = Number(response.headers.get("retry-after")) || null;
    throw new ApiError(response.status, data, text.slice(0, 500), retryAfter);
  }
  return data;
}

export const get = (url, opts) => api("GET", url, opts);
export const post = (url, json) => api("POST", url, { json });
export const patch = (url, json) => api("PATCH", url, { json });
export const del = (url) => api("DELETE", url);
