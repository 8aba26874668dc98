// sless Node.js runtime shim: a warm, generic Node 20 process that the sless
// server starts before it knows the function, then loads one handler into and
// serves invocations over length-prefixed frames on stdin/stdout; a serving
// pod's shim (LOAD `serve`) also answers the gateways' TCP connections itself.
// The wire protocol is runtimes/PROTOCOL.md. Built-in modules only.
'use strict';

const fs = require('fs');
const net = require('net');
const path = require('path');
const util = require('util');
// Required in main(), not here: the server starts this shim from a startup
// snapshot taken after this file's top level (node --build-snapshot), and
// Node does not vouch for these two modules' state in a snapshot.
let Module = null;

const RUNTIME = 'nodejs20';
const SHIM_VERSION = '1';
const STDOUT = 1;
const STDERR = 2;
const FRAME = { HELLO: 0x48, LOAD: 0x4c, READY: 0x52, INVOKE: 0x49, OUTPUT: 0x4f, LOG: 0x47, ERROR: 0x45, DRAIN: 0x44, KEEPALIVE: 0x4b };

const JSON_TYPE = 'application/json';
// Marks an answer the shim made because the handler failed (the gateway
// hides its text from public callers unless the function exposes errors).
const ERROR_HEADER = 'x-sless-error';
const TEXT_TYPE = 'text/plain; charset=utf-8';
const BYTES_TYPE = 'application/octet-stream';
const NOT_SERIALIZABLE = 'handler returned a value that is not JSON-serializable: ';

// An invocation's key: its id (a number) when it came on the frame pipe, its
// ConnectionCall when it came on a connection (LOAD `serve`), since the ids
// of different connections may be equal. The key of the invocation that
// output written in the current async context belongs to (an
// AsyncLocalStorage, made in main()):
let invocation = null;
// Invocations without an OUTPUT yet: key -> request_id.
const inflight = new Map();
// The frame pipes: the driver starts the shim with them on fds 3 (in) and 4
// (out), fd 0 on /dev/null and fd 1 on stderr (PROTOCOL.md), so nothing a
// handler or its child processes write to stdout can pass for a frame. Node
// marks inherited fds above 2 close-on-exec: child processes do not get them.
const FRAMES_IN = 3;
const FRAMES_OUT = 4;
// process.stderr's own write (main() replaces it), for the shim's own words.
let writeDiagnostic = null;

// A whole frame, written synchronously (as Node writes stdout to a pipe).
function writeFrameBytes(bytes) {
  let offset = 0;
  while (offset < bytes.length) {
    try {
      offset += fs.writeSync(FRAMES_OUT, bytes, offset);
    } catch (err) {
      if (err.code !== 'EAGAIN') throw err;
    }
  }
}
let loaded = null;

class LoadError extends Error {}
class BadReturn extends Error {}

function encodeFrame(type, id, parts) {
  let size = 0;
  for (const part of parts) size += part.length;
  const frame = Buffer.allocUnsafe(9 + size);
  frame.writeUInt32BE(size + 5, 0);
  frame[4] = type;
  frame.writeUInt32BE(id, 5);
  let offset = 9;
  for (const part of parts) offset += part.copy(frame, offset);
  return frame;
}

// A frame on the pipe to the server.
function sendFrame(type, id, ...parts) {
  writeFrameBytes(encodeFrame(type, id, parts));
}

// A frame about the invocation `key`, wherever it came from.
function sendFrameFor(key, type, ...parts) {
  if (typeof key === 'number') writeFrameBytes(encodeFrame(type, key, parts));
  else key.send(type, parts);
}

function sendJson(type, value) {
  sendFrame(type, 0, Buffer.from(JSON.stringify(value)));
}

// Output goes in frames of at most this many bytes: a huge write never
// makes a frame the server refuses.
const LOG_CHUNK = 64 * 1024;

function sendLog(key, stream, bytes) {
  for (let at = 0; at < bytes.length; at += LOG_CHUNK) {
    sendFrameFor(key, FRAME.LOG, Buffer.of(stream), bytes.subarray(at, at + LOG_CHUNK));
  }
}

// The largest response body the server takes (LOAD's max_output_bytes).
let maxOutput = Infinity;

function currentKey() {
  return invocation.getStore() || 0;
}

// Replaces stream.write so every write becomes a LOG frame for the current invocation.
function captureWrites(stream, streamNo) {
  stream.write = function write(chunk, encoding, callback) {
    if (typeof encoding === 'function') {
      callback = encoding;
      encoding = undefined;
    }
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk, encoding) : Buffer.from(chunk);
    if (bytes.length > 0) sendLog(currentKey(), streamNo, bytes);
    if (callback) process.nextTick(callback);
    return true;
  };
}

// Cuts the byte stream from the server into frames, however it is chunked.
class FrameReader {
  constructor(onFrame) {
    this.onFrame = onFrame;
    this.chunks = [];
    this.size = 0;
    this.needed = 9;
  }

  push(chunk) {
    this.chunks.push(chunk);
    this.size += chunk.length;
    if (this.size < this.needed) return;
    const buffer = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks, this.size);
    let offset = 0;
    this.needed = 9;
    while (buffer.length - offset >= 9) {
      const frameSize = 4 + buffer.readUInt32BE(offset);
      if (buffer.length - offset < frameSize) {
        this.needed = frameSize;
        break;
      }
      const type = buffer[offset + 4];
      const id = buffer.readUInt32BE(offset + 5);
      this.onFrame(type, id, buffer.subarray(offset + 9, offset + frameSize));
      offset += frameSize;
    }
    const rest = buffer.subarray(offset);
    this.chunks = rest.length > 0 ? [rest] : [];
    this.size = rest.length;
  }
}

// Lets bare require() of the handler find packages in the LOAD `path` entries.
function addModulePaths(entries) {
  const existing = process.env.NODE_PATH ? [process.env.NODE_PATH] : [];
  process.env.NODE_PATH = entries.concat(existing).join(path.delimiter);
  Module._initPaths();
}

// The stack without the shim's and Node's own frames (and an emptied "Require stack:").
function userStack(err) {
  return String(err.stack)
    .split('\n')
    .filter((line) => !line.includes(__filename) && !/\(node:|at node:/.test(line))
    .join('\n')
    .replace(/\nRequire stack:(?=\n\s+at |\s*$)/, '');
}

// `base` as require resolves it (`.js`, `.json`, a directory), else with an
// ES module's or a CommonJS module's own extension: Lambda's console writes
// a Node function as `index.mjs`. Node 20 requires an ES module as any
// other, unless it awaits at its top level: that one is imported (below).
function handlerModule(load, base) {
  try {
    return load.resolve(base);
  } catch (err) {
    const found = ['.mjs', '.cjs'].map((ext) => base + ext).find((file) => fs.existsSync(file));
    if (found === undefined) throw err;
    return found;
  }
}

// Loads the handler LOAD names: what it is, or a promise of it for an ES
// module that awaits at its top level (Lambda's `index.mjs` often does, to
// read its configuration before the first call).
function loadFunction(spec) {
  for (const [name, value] of Object.entries(spec.env || {})) process.env[name] = String(value);
  process.chdir(spec.code_dir);
  addModulePaths(spec.path || []);
  const entrypoint = spec.entrypoint || '';
  const dot = entrypoint.lastIndexOf('.');
  if (dot <= 0 || dot === entrypoint.length - 1) {
    throw new LoadError(`entrypoint '${entrypoint}' must look like 'file.export'`);
  }
  const file = entrypoint.slice(0, dot);
  const cannotLoad = (err) => new LoadError(`cannot load module '${file}':\n${isError(err) ? userStack(err) : util.inspect(err)}`);
  let found;
  let mod;
  let awaitsAtTopLevel = false;
  try {
    // A require of the handler's directory: a shim started from a snapshot
    // has a require for built-in modules only.
    const load = Module.createRequire(path.join(spec.code_dir, '[sless]'));
    found = handlerModule(load, path.join(spec.code_dir, file));
    mod = load(found);
  } catch (err) {
    if (!awaitsAtTop(err)) throw cannotLoad(err);
    awaitsAtTopLevel = true;
  }
  if (!awaitsAtTopLevel) return handlerOf(spec, mod);
  return importModule(found).then(
    (imported) => handlerOf(spec, imported),
    (err) => {
      throw cannotLoad(err);
    },
  );
}

// Whether require() refused a module for awaiting at its top level. In a
// shim started from a snapshot node's errors carry no proper `code`: the
// message tells.
function awaitsAtTop(err) {
  if (!isError(err)) return false;
  return err.code === 'ERR_REQUIRE_ASYNC_MODULE' || String(err.message).includes('ESM graph with top-level await');
}

// import() of a file. A shim started from a snapshot has no loader for
// import() in its own code (ERR_VM_DYNAMIC_IMPORT_CALLBACK_MISSING); a
// script compiled now, with the main context's loader, has one.
function importModule(file) {
  const url = require('url').pathToFileURL(file).href;
  if (!startedFromSnapshot) return import(url);
  const vm = require('vm');
  const warn = process.emitWarning;
  process.emitWarning = () => {}; // "experimental": not the handler's to read in its log
  try {
    const options = { importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER };
    return new vm.Script('(url) => import(url)', options).runInThisContext()(url);
  } finally {
    process.emitWarning = warn;
  }
}

// The loaded function of a module, or a LoadError naming what it lacks.
function handlerOf(spec, mod) {
  const entrypoint = spec.entrypoint;
  const dot = entrypoint.lastIndexOf('.');
  const file = entrypoint.slice(0, dot);
  const exportName = entrypoint.slice(dot + 1);
  const handler = mod == null ? undefined : mod[exportName];
  if (handler === undefined) {
    throw new LoadError(`module '${file}' has no export '${exportName}' ${exportedFunctions(mod)}`);
  }
  if (typeof handler !== 'function') {
    throw new LoadError(`'${entrypoint}' is not a function (it is ${typeof handler})`);
  }
  return {
    handler,
    // Lambda's callback style: (event, context, callback) answers through
    // the callback, whatever the function returns.
    callback: handler.length >= 3,
    name: spec.function || '',
    namespace: spec.namespace || '',
    version: spec.version,
    memory: spec.memory_mb ? String(spec.memory_mb) : undefined,
  };
}

// What a module does export, for a load error naming an export it lacks.
function exportedFunctions(mod) {
  if (typeof mod === 'function') return '(the module itself is a function: export it by name, e.g. exports.handle = ...)';
  const names = mod == null ? [] : Object.keys(mod).filter((name) => typeof mod[name] === 'function');
  if (names.length === 0) return '(it exports no function)';
  return `(it exports: ${names.slice(0, 10).join(', ')})`;
}

function parseHttpEvent(text) {
  if (text === '') return {};
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function makeContext(header, kind, text, raw) {
  const deadline = header.deadline_ms == null ? Infinity : header.deadline_ms;
  const remaining = () => Math.max(0, deadline - Date.now());
  const rawQuery = header.query || '';
  return {
    trigger: kind,
    request_id: header.request_id || '',
    function: loaded.name,
    namespace: loaded.namespace,
    version: loaded.version,
    method: header.method || '',
    path: header.path || '',
    query: rawQuery ? Object.fromEntries(new URLSearchParams(rawQuery)) : {},
    raw_query: rawQuery,
    headers: header.headers || {},
    body: text,
    raw_body: raw,
    getRemainingTimeInMillis: remaining,
    remaining_time_ms: remaining,
    // Lambda's names for what handlers ported from it read.
    awsRequestId: header.request_id || '',
    functionName: loaded.name,
    functionVersion: String(loaded.version),
    memoryLimitInMB: loaded.memory,
  };
}

// The OUTPUT payload up to the body: u32 length and header JSON.
function outputHead(status, headers) {
  const head = Buffer.from(JSON.stringify({ status, headers }));
  const length = Buffer.allocUnsafe(4);
  length.writeUInt32BE(head.length, 0);
  return Buffer.concat([length, head]);
}

const JSON_200_HEAD = outputHead(200, { 'content-type': JSON_TYPE });

function toJson(value) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    throw new BadReturn(NOT_SERIALIZABLE + err.message);
  }
  if (text === undefined) throw new BadReturn(NOT_SERIALIZABLE + typeof value);
  return Buffer.from(text);
}

function isFullResponse(value) {
  return value !== null && typeof value === 'object' && Number.isInteger(value.statusCode);
}

// Standard base64 with its padding (whitespace removed first): what
// Buffer.from(text, 'base64') would decode without skipping anything.
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

// The bytes of a body a handler gave as base64 (`isBase64Encoded`, as
// Lambda's proxy integrations take binary answers).
function fromBase64(text) {
  const compact = text.replace(/\s+/g, '');
  if (!BASE64.test(compact)) {
    throw new BadReturn('handler returned isBase64Encoded with a body that is not base64 (standard alphabet, padded)');
  }
  return Buffer.from(compact, 'base64');
}

function bodyAndType(body, base64) {
  if (body === undefined || body === null) return [Buffer.alloc(0), null];
  if (typeof body === 'string' && base64 === true) return [fromBase64(body), BYTES_TYPE];
  if (typeof body === 'string') return [Buffer.from(body), TEXT_TYPE];
  if (body instanceof Uint8Array) return [Buffer.from(body), BYTES_TYPE];
  return [toJson(body), JSON_TYPE];
}

// The values of a list given as headers, as strings (null and undefined left out).
function present(values) {
  return values.filter((value) => value !== undefined && value !== null).map(String);
}

// Lambda's other ways to give headers: `multiValueHeaders` (REST APIs: a
// header per value, in place of the same name in `headers`) and `cookies`
// (function URLs, HTTP APIs: a Set-Cookie each, besides those in
// `headers`). A name's value becomes a list: a header per value.
function setValues(headers, name, values, replace) {
  const key = Object.keys(headers).find((k) => k.toLowerCase() === name.toLowerCase()) ?? name;
  const before = replace || headers[key] === undefined ? [] : [].concat(headers[key]);
  headers[key] = before.concat(values);
}

function fullResponse(result) {
  const status = result.statusCode;
  if (status < 100 || status > 599) throw new BadReturn(`handler returned an invalid statusCode: ${status}`);
  const given = result.headers || {};
  if (typeof given !== 'object' || Array.isArray(given)) {
    throw new BadReturn("handler returned 'headers' that is not an object");
  }
  const headers = {};
  for (const [name, value] of Object.entries(given)) {
    if (value !== undefined && value !== null) headers[name] = String(value);
  }
  const multi = result.multiValueHeaders;
  if (multi !== undefined && multi !== null) {
    if (typeof multi !== 'object' || Array.isArray(multi) || !Object.values(multi).every(Array.isArray)) {
      throw new BadReturn("handler returned 'multiValueHeaders' that is not an object of lists");
    }
    for (const [name, values] of Object.entries(multi)) setValues(headers, name, present(values), true);
  }
  const cookies = result.cookies;
  if (cookies !== undefined && cookies !== null) {
    if (!Array.isArray(cookies)) throw new BadReturn("handler returned 'cookies' that is not a list");
    setValues(headers, 'set-cookie', present(cookies), false);
  }
  const [body, contentType] = bodyAndType(result.body, result.isBase64Encoded);
  if (contentType && !Object.keys(headers).some((name) => name.toLowerCase() === 'content-type')) {
    headers['content-type'] = contentType;
  }
  return [outputHead(status, headers), body];
}

function toResponse(result) {
  if (isFullResponse(result)) return fullResponse(result);
  return [JSON_200_HEAD, toJson(result === undefined ? null : result)];
}

// A 500 the shim answers; `failed` (the handler threw, or the call never
// reached it) marks it for the gateway, which hides the message from
// public callers.
function errorResponse(requestId, message, failed = false) {
  const headers = failed ? { 'content-type': JSON_TYPE, [ERROR_HEADER]: '1' } : { 'content-type': JSON_TYPE };
  return [outputHead(500, headers), Buffer.from(JSON.stringify({ error: message, request_id: requestId }))];
}

function isError(value) {
  return value instanceof Error || util.types.isNativeError(value);
}

// The most characters of an error's message an error answer carries (the
// server keeps 4 KiB of an error), and of a failed LOAD's reason (a stack;
// the server keeps 64 KiB): a message can be as large as what the handler
// was given, and escaped as JSON it could outgrow the largest frame.
const MAX_ERROR_CHARS = 4096;
const MAX_LOAD_ERROR_CHARS = 64 * 1024;

function clip(text, most) {
  return text.length > most ? `${text.slice(0, most)} [... cut]` : text;
}

function describeError(err) {
  if (!isError(err)) return `Error: ${clip(typeof err === 'string' ? err : util.inspect(err), MAX_ERROR_CHARS)}`;
  const type = err.name && err.name !== 'Error' ? err.name : (err.constructor && err.constructor.name) || 'Error';
  return err.message ? `${type}: ${clip(String(err.message), MAX_ERROR_CHARS)}` : type;
}

// What goes to the invocation's log (stream 2) for a thrown value.
function errorReport(err) {
  return Buffer.from(isError(err) ? userStack(err) : `Uncaught ${util.inspect(err)}`);
}

function sendOutput(key, [head, body]) {
  if (typeof key === 'number') sendFrame(FRAME.OUTPUT, key, head, body);
  else key.answer(head, body);
}

function reply(key, result) {
  const requestId = inflight.get(key);
  if (!inflight.delete(key)) return;
  let response;
  try {
    response = toResponse(result);
  } catch (err) {
    response = errorResponse(requestId, err instanceof BadReturn ? err.message : NOT_SERIALIZABLE + err.message);
  }
  if (response[1].length > maxOutput) {
    const message = `handler returned a response body of ${response[1].length} bytes, more than the limit of ${maxOutput}`;
    response = errorResponse(requestId, message);
  }
  sendOutput(key, response);
}

function replyError(key, err) {
  const requestId = inflight.get(key);
  if (!inflight.delete(key)) return;
  sendLog(key, STDERR, errorReport(err));
  sendOutput(key, errorResponse(requestId, describeError(err), true));
}

function callHandler(key, event, context) {
  if (loaded.callback) {
    callWithCallback(key, event, context);
    return;
  }
  let result;
  try {
    result = loaded.handler(event, context);
  } catch (err) {
    replyError(key, err);
    return;
  }
  if (result !== null && typeof result === 'object' && typeof result.then === 'function') {
    result.then((value) => reply(key, value), (err) => replyError(key, err));
  } else {
    reply(key, result);
  }
}

// A handler of three arguments answers once: by its callback (an error
// first, Lambda's way; a value that is not an Error is its message), or by
// the promise it returns, if it is async; what a sync one returns is not
// the answer. One that does neither is answered by the timeout.
function callWithCallback(key, event, context) {
  let answered = false;
  const once = (answer) => {
    if (answered) return;
    answered = true;
    answer();
  };
  const callback = (err, value) => {
    if (err === null || err === undefined) once(() => reply(key, value));
    else once(() => replyError(key, isError(err) ? err : new Error(String(err))));
  };
  let result;
  try {
    result = loaded.handler(event, context, callback);
  } catch (err) {
    once(() => replyError(key, err));
    return;
  }
  if (result !== null && typeof result === 'object' && typeof result.then === 'function') {
    result.then(
      (value) => once(() => reply(key, value)),
      (err) => once(() => replyError(key, err)),
    );
  }
}

function invoke(key, payload) {
  let requestId = '';
  let event;
  let context;
  try {
    const headerLength = payload.readUInt32BE(0);
    const header = JSON.parse(payload.toString('utf8', 4, 4 + headerLength));
    requestId = header.request_id || '';
    if (loaded === null) throw new Error('no function loaded');
    const kind = header.kind || 'http';
    const text = payload.toString('utf8', 4 + headerLength);
    event = kind === 'http' ? parseHttpEvent(text) : header.event ?? null;
    // A view of the frame's bytes: the reader never writes over a chunk.
    context = makeContext(header, kind, text, payload.subarray(4 + headerLength));
  } catch (err) {
    sendOutput(key, errorResponse(requestId, loaded === null ? err.message : `bad INVOKE: ${err.message}`, true));
    return;
  }
  inflight.set(key, requestId);
  invocation.run(key, callHandler, key, event, context);
}

// Serving the gateways' connections (LOAD `serve`, PROTOCOL.md): calls come
// on TCP connections accepted on an inherited listening socket and are
// answered on the connection they came on.

// How often a serving shim tells `sless instance` (a K frame on the pipe) that
// its event loop turns: a handler that never yields stops it, and `sless
// instance` ends a shim silent past its timeout.
const KEEPALIVE_MS = 1000;
// How long an `E` frame may take to leave before the shim exits anyway.
const EXIT_FLUSH_MS = 1000;
// A connection whose peer leaves this many bytes of frames unread is closed
// (its frames dropped), so a gateway that stops reading cannot grow the shim
// without bound. A reading gateway is far below it: answers are at most
// max_output_bytes each.
const MAX_UNREAD = 256 * 1024 * 1024;

// The listening socket is close-on-exec like every fd Node inherits (it marks
// them all at start-up) and accepted connections are too (accept4 with
// SOCK_CLOEXEC), so a handler's child processes hold none of them.
class Serving {
  constructor(spec) {
    const { fd, hello, timeout_ms: timeoutMs } = spec;
    const bad = (what) => new LoadError(`bad LOAD: serve.${what}`);
    if (!Number.isInteger(fd) || fd < 0) throw bad(`fd must be a descriptor, not ${JSON.stringify(fd)}`);
    if (hello === null || typeof hello !== 'object') throw bad('hello must be an object');
    if (typeof timeoutMs !== 'number' || !(timeoutMs > 0)) {
      throw bad(`timeout_ms must be a positive number, not ${JSON.stringify(timeoutMs)}`);
    }
    let isSocket;
    try {
      isSocket = fs.fstatSync(fd).isSocket();
    } catch (err) {
      throw bad(`fd ${fd}: ${err.message}`);
    }
    if (!isSocket) throw bad(`fd ${fd} is not a socket`);
    this.fd = fd;
    this.hello = encodeFrame(FRAME.HELLO, 0, [Buffer.from(JSON.stringify(hello))]);
    this.timeoutMs = timeoutMs;
    this.timeoutReason = `no answer within ${Math.max(1, Math.floor(timeoutMs / 1000))}s; the instance restarts`;
    // Calls from connections without an answer, in the order they were read
    // (so the oldest comes first).
    this.calls = new Set();
    // Due when the oldest call's time is up (none while no call is in flight).
    this.timeoutTimer = null;
    this.lastAnswer = -Infinity;
    this.quietMs = null; // set by a D frame
    this.drainFrom = 0;
    this.drainTimer = null;
  }

  // Called once READY ok is sent: connections waiting in the backlog are accepted now.
  start() {
    const server = net.createServer((connection) => this.accept(connection));
    server.on('error', (err) => {
      writeDiagnostic(`sless shim: serving on fd ${this.fd}: ${err.message}\n`);
      if (!server.listening) process.exit(1);
    });
    server.listen({ fd: this.fd });
    setInterval(() => sendFrame(FRAME.KEEPALIVE, 0), KEEPALIVE_MS);
  }

  accept(connection) {
    connection.setNoDelay(true);
    connection.write(this.hello);
    const reader = new FrameReader((type, id, payload) => this.onFrame(connection, type, id, payload));
    connection.on('data', (chunk) => reader.push(chunk));
    // EOF or an error closes the connection; its calls still running finish
    // unheard (ConnectionCall.send drops their frames).
    connection.on('end', () => connection.destroy());
    connection.on('error', () => connection.destroy());
  }

  onFrame(connection, type, id, payload) {
    if (connection.destroyed) return;
    if (type !== FRAME.INVOKE) {
      writeDiagnostic(`sless shim: closing a connection that sent a frame of type ${String.fromCharCode(type)}\n`);
      connection.destroy();
      return;
    }
    const call = new ConnectionCall(this, connection, id);
    this.calls.add(call);
    if (this.timeoutTimer === null) this.armTimeout(call);
    invoke(call, payload);
  }

  answered(call) {
    if (!this.calls.delete(call)) return false; // timed out: it had its E
    this.lastAnswer = performance.now();
    if (this.quietMs !== null && this.calls.size === 0) this.armDrain();
    return true;
  }

  // The timeout check runs when `oldest` is due: at once, not on a polling
  // tick, and never while no call from a connection is in flight.
  armTimeout(oldest) {
    const due = oldest.readAt + this.timeoutMs - performance.now();
    this.timeoutTimer = setTimeout(() => this.checkTimeouts(), Math.max(1, Math.ceil(due)));
    this.timeoutTimer.unref();
  }

  // A stuck handler cannot be taken back: every call past its time gets an
  // E on its connection, then the shim exits 1 and its pod restarts it.
  checkTimeouts() {
    this.timeoutTimer = null;
    const now = performance.now();
    const overdue = [];
    for (const call of this.calls) {
      if (now - call.readAt < this.timeoutMs) {
        if (overdue.length === 0) this.armTimeout(call);
        break;
      }
      overdue.push(call);
    }
    if (overdue.length > 0) this.timeOut(overdue);
  }

  timeOut(overdue) {
    const payload = [Buffer.from(JSON.stringify({ error: 'timeout', reason: this.timeoutReason }))];
    writeDiagnostic(`sless shim: ${overdue.length} call(s) had no answer within ${this.timeoutMs} ms; exiting\n`);
    let unsent = overdue.length;
    const sent = () => {
      if (--unsent === 0) process.exit(1);
    };
    for (const call of overdue) {
      this.calls.delete(call);
      call.open = false;
      if (call.connection.writable) call.connection.write(encodeFrame(FRAME.ERROR, call.id, payload), sent);
      else sent();
    }
    setTimeout(() => process.exit(1), EXIT_FLUSH_MS);
  }

  // D: go on serving, and exit 0 once no call from a connection has been in
  // flight for quiet_ms, counted from now or the last answer.
  drain(payload) {
    let quietMs;
    try {
      quietMs = JSON.parse(payload.toString('utf8')).quiet_ms;
    } catch {
      quietMs = undefined;
    }
    if (typeof quietMs !== 'number' || !(quietMs >= 0)) {
      writeDiagnostic(`sless shim: ignoring a D frame without a quiet_ms: ${payload.toString('utf8')}\n`);
      return;
    }
    this.quietMs = quietMs;
    this.drainFrom = performance.now();
    this.armDrain();
  }

  quietLeft() {
    return Math.max(this.drainFrom, this.lastAnswer) + this.quietMs - performance.now();
  }

  // Never exits at once: the answer that armed it goes out first.
  armDrain() {
    clearTimeout(this.drainTimer);
    if (this.calls.size > 0) return; // the last answer arms it again
    this.drainTimer = setTimeout(() => this.drainDue(), Math.max(0, Math.ceil(this.quietLeft())));
  }

  drainDue() {
    if (this.calls.size > 0) return;
    if (this.quietLeft() <= 0) process.exit(0);
    this.armDrain();
  }
}

// A call read from a connection: the key of its invocation.
class ConnectionCall {
  constructor(serving, connection, id) {
    this.serving = serving;
    this.connection = connection;
    this.id = id;
    this.readAt = performance.now();
    this.open = true; // false once it has timed out
  }

  // Frames of a call whose connection has closed, or that has timed out, are
  // dropped. What one turn of the event loop writes to a connection (a call's
  // G frames and O, the answers to calls read together) leaves in one write.
  send(type, parts) {
    const connection = this.connection;
    if (!this.open || !connection.writable) return;
    if (connection.writableLength > MAX_UNREAD) {
      writeDiagnostic(`sless shim: closing a connection that left ${connection.writableLength} bytes unread\n`);
      connection.destroy();
      return;
    }
    if (connection.writableCorked === 0) {
      connection.cork();
      setImmediate(uncork, connection);
    }
    connection.write(encodeFrame(type, this.id, parts));
  }

  answer(head, body) {
    if (this.serving.answered(this)) this.send(FRAME.OUTPUT, [head, body]);
  }
}

function uncork(connection) {
  connection.uncork();
}

let serving = null;

let loading = false;

function load(payload) {
  if (loaded !== null || loading) {
    sendJson(FRAME.READY, { ok: false, error: 'a function is already loaded' });
    return;
  }
  let spec;
  let toServe = null;
  const failed = (err) => {
    loading = false;
    const error = err instanceof LoadError ? clip(err.message, MAX_LOAD_ERROR_CHARS) : `bad LOAD: ${describeError(err)}`;
    sendJson(FRAME.READY, { ok: false, error });
  };
  const ready = (function_) => {
    loading = false;
    loaded = function_;
    if (Number.isInteger(spec.max_output_bytes) && spec.max_output_bytes > 0) maxOutput = spec.max_output_bytes;
    sendJson(FRAME.READY, { ok: true });
    if (toServe !== null) {
      serving = toServe;
      serving.start();
    }
  };
  let function_;
  try {
    spec = JSON.parse(payload.toString('utf8'));
    if (spec.serve != null) toServe = new Serving(spec.serve);
    function_ = loadFunction(spec);
  } catch (err) {
    failed(err);
    return;
  }
  if (function_ instanceof Promise) {
    loading = true;
    function_.then(ready, failed);
  } else {
    ready(function_);
  }
}

function onFrame(type, id, payload) {
  if (type === FRAME.INVOKE) invoke(id, payload);
  else if (type === FRAME.LOAD) load(payload);
  else if (type === FRAME.DRAIN && serving !== null) serving.drain(payload);
  else writeDiagnostic(`sless shim: ignoring frame of type ${String.fromCharCode(type)}\n`);
}

// An error thrown from a handler's callback or a promise nobody awaited: it
// fails its invocation if that is still running, else it goes to the log.
function onUncaught(err) {
  const key = currentKey();
  if (inflight.has(key)) {
    replyError(key, err);
  } else {
    sendLog(key, STDERR, errorReport(err));
  }
}

// A shim started from the snapshot has compiled none of its functions nor
// Node's (node keeps no compiled code in a snapshot): its first LOAD and
// call would compile the module loader's and the call's as they go, about
// 1.5 and 0.8 ms. Waiting in the pool, it runs them once instead: it cuts
// a frame from bytes as the server's are, loads a module of its own
// (sless_warm.js, beside the snapshot, which the server writes there) as a
// handler's is loaded, and makes a call to a handler of its own whose
// answer goes nowhere. None of it is kept.
// The Node zygote (sless_zygote.js) runs it once before it forks, so its
// forks share that compiled code; `dir` holds sless_warm.js.
function warmUp(dir) {
  if (loaded !== null) return;
  try {
    const warmRequire = Module.createRequire(path.join(dir, '[sless]'));
    const file = path.join(dir, 'sless_warm');
    warmRequire(file);
    delete Module._cache[warmRequire.resolve(file)];
  } catch {
    // A shim dir without the module: the call below still warms.
  }
  const header = Buffer.from(JSON.stringify({ kind: 'http', request_id: '', method: 'GET', headers: {} }));
  const length = Buffer.allocUnsafe(4);
  length.writeUInt32BE(header.length, 0);
  new FrameReader(() => {}).push(encodeFrame(FRAME.KEEPALIVE, 0, [Buffer.from('{}')]));
  const nowhere = { answer() {} };
  loaded = { handler: async (event, context) => ({ event, context }), name: '', namespace: '', version: 0 };
  try {
    invoke(nowhere, Buffer.concat([length, header, Buffer.from('{}')]));
  } finally {
    loaded = null;
  }
}

// What main() needs that no process holds of its own: the zygote makes it
// once for all its forks.
function prepare() {
  Module = require('module');
  invocation = new (require('async_hooks').AsyncLocalStorage)();
}

// Whether this shim was started from the startup snapshot (main() says).
let startedFromSnapshot = false;

function main(fromSnapshot) {
  startedFromSnapshot = fromSnapshot === true;
  if (Module === null) prepare();
  writeDiagnostic = process.stderr.write.bind(process.stderr);
  captureWrites(process.stdout, STDOUT);
  captureWrites(process.stderr, STDERR);
  process.on('uncaughtException', onUncaught);
  process.on('unhandledRejection', onUncaught);
  let frames;
  try {
    frames = new net.Socket({ fd: FRAMES_IN, readable: true, writable: false });
    fs.fstatSync(FRAMES_OUT);
  } catch (err) {
    writeDiagnostic(`sless shim: frames come on fd ${FRAMES_IN} and go to fd ${FRAMES_OUT} (see PROTOCOL.md): ${err.message}\n`);
    process.exit(2);
  }
  const reader = new FrameReader(onFrame);
  frames.on('data', (chunk) => reader.push(chunk));
  frames.on('end', () => process.exit(0));
  frames.on('error', () => process.exit(0));
  sendJson(FRAME.HELLO, { runtime: RUNTIME, shim_version: SHIM_VERSION, pid: process.pid });
  // 250 ms for a shim a cold start waits for (launcher.rs), which a LOAD
  // takes at once; 5 ms for one that waits in the pool.
  const warmUpMs = Number(process.env.SLESS_WARM_UP_MS) || 5;
  delete process.env.SLESS_WARM_UP_MS;
  if (fromSnapshot === true) {
    const blob = process.execArgv[process.execArgv.indexOf('--snapshot-blob') + 1];
    setTimeout(() => warmUp(path.dirname(String(blob))), warmUpMs).unref();
  }
}

// Building a startup snapshot (launcher.rs, --build-snapshot-config) stops
// before main(): a shim started from it runs main() first.
// Required by the Node zygote instead, it exports what its forks run.
if (process.execArgv.some((arg) => arg.startsWith('--build-snapshot'))) require('v8').startupSnapshot.setDeserializeMainFunction(() => main(true));
else if (require.main === module) main();
else module.exports = { prepare, warmUp, main };
