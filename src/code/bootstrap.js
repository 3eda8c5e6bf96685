// Runs in every fresh sandbox before the program. It receives the three native functions,
// which stay in this closure (the program cannot reach them), installs `gatehouse` and
// `console`, removes code generation from strings, freezes every built-in, and hands the
// host a small interface: start(fn), settle(id, ok, json), poll().
(function install(host, log, emit) {
  "use strict";
  const { stringify, parse } = JSON;
  const { defineProperty, freeze, getPrototypeOf, getOwnPropertyDescriptor, keys } = Object;
  const { ownKeys } = Reflect;
  const TypeErr = TypeError;
  const pending = new Map();

  const json = (value, what) => {
    const text = stringify(value === undefined ? null : value);
    if (text === undefined) throw new TypeErr(what + " must be JSON");
    return text;
  };
  const show = (value) => {
    if (typeof value === "string") return value;
    try {
      const text = stringify(value);
      return text === undefined ? String(value) : text;
    } catch {
      try { return String(value); } catch { return "[value]"; }
    }
  };

  class GatehouseError extends Error {}
  defineProperty(GatehouseError.prototype, "name", { value: "GatehouseError" });
  const toError = (e, site) => {
    const error = new GatehouseError(String(e.message));
    defineProperty(error, "stack", { value: site, writable: true, configurable: true });
    for (const k of keys(e)) {
      if (k !== "message") defineProperty(error, k, { value: e[k], enumerable: true, writable: true, configurable: true });
    }
    return error;
  };

  const request = (kind, payload) =>
    new Promise((resolve, reject) => {
      const id = host(kind, json(payload, "the arguments"));
      // Where the call was made, for the line of an error nobody catches.
      pending.set(id, { resolve, reject, site: new Error().stack });
    });
  const option = (options, name) => (options === undefined || options === null ? undefined : options[name]);

  const gatehouse = {
    search: (opts) => request("search", opts === undefined ? {} : opts),
    describe: (opts) => request("describe", opts === undefined ? {} : opts),
    call: (address, args, options) =>
      request("call", { address, args: args === undefined ? {} : args, timeoutMs: option(options, "timeoutMs") }),
    result: (id, options) =>
      request("result", { id, offset: option(options, "offset"), maxBytes: option(options, "maxBytes") }),
    skill: (name) => request("skill", { name: name === undefined ? "usage" : name }),
    emit: (block) => {
      emit(json(block, "a content block"));
    },
  };
  const line = (level) => (...args) => {
    let text = "";
    for (let i = 0; i < args.length; i++) text += (i ? " " : "") + show(args[i]);
    log(level, text);
  };
  const quiet = { log: line("log"), info: line("log"), debug: line("log"), warn: line("warn"), error: line("error") };
  defineProperty(globalThis, "gatehouse", { value: gatehouse, enumerable: false, writable: false, configurable: false });
  defineProperty(globalThis, "console", { value: quiet, enumerable: false, writable: false, configurable: false });

  // No code from strings: eval and every function constructor refuse.
  const refuse = function Function() {
    throw new TypeErr("code generation from strings is not available in execute_code");
  };
  defineProperty(refuse, "prototype", { value: Function.prototype });
  for (const f of [function () {}, async function () {}, function* () {}, async function* () {}]) {
    defineProperty(getPrototypeOf(f), "constructor", { value: refuse });
  }
  defineProperty(globalThis, "Function", { value: refuse });
  delete globalThis.eval;

  // Freeze the built-ins: every global's value, its prototype and prototype chain, and the
  // prototypes only reachable from instances, so a program cannot change a built-in
  // (prototype pollution) under its own code or ours. (A deep walk over every method costs
  // milliseconds per run; replacing or adding a method is what this prevents.)
  const seen = new Set();
  const harden = (o) => {
    while (o !== null && (typeof o === "object" || typeof o === "function") && !seen.has(o)) {
      seen.add(o);
      freeze(o);
      const p = o.prototype;
      if (p !== null && typeof p === "object" && !seen.has(p)) harden(p);
      o = getPrototypeOf(o);
    }
  };
  for (const k of ownKeys(globalThis)) {
    const d = getOwnPropertyDescriptor(globalThis, k);
    if ("value" in d) harden(d.value);
  }
  harden(globalThis);
  for (const h of [
    function* () {},
    async function* () {},
    (function* () {})(),
    (async function* () {})(),
    [][Symbol.iterator](),
    new Map()[Symbol.iterator](),
    new Set()[Symbol.iterator](),
    ""[Symbol.iterator](),
    /x/[Symbol.matchAll](""),
    async () => {},
    (async () => {})(),
  ]) {
    harden(h);
  }
  harden(GatehouseError);
  for (const f of [gatehouse, quiet]) for (const k of keys(f)) freeze(f[k]);

  const describe = (e) => {
    try {
      if (e !== null && (typeof e === "object" || typeof e === "function")) {
        const out = { name: String(e.name), message: String(e.message), stack: typeof e.stack === "string" ? e.stack : "" };
        if (e instanceof GatehouseError) {
          out.host = true;
          for (const k of keys(e)) if (k !== "message") out[k] = e[k];
        }
        return out;
      }
      return { name: "Thrown", message: show(e), stack: "" };
    } catch {
      return { name: "Thrown", message: "a value that cannot be described", stack: "" };
    }
  };
  let outcome = null;
  const fail = (e) => {
    outcome = stringify({ ok: false, error: describe(e) });
  };
  const start = (fn) => {
    if (typeof fn !== "function") {
      outcome = stringify({ ok: false, error: { name: "NotAFunction", message: "the program is a " + typeof fn + ", not a function", stack: "" } });
      return;
    }
    let result;
    try {
      result = fn();
    } catch (e) {
      fail(e);
      return;
    }
    Promise.resolve(result).then(
      (value) => {
        try {
          outcome = "{\"ok\":true,\"value\":" + json(value, "the result") + "}";
        } catch (e) {
          fail(new TypeErr("the program's result is not JSON: " + show(e && e.message)));
        }
      },
      fail,
    );
  };
  const settle = (id, ok, text) => {
    const p = pending.get(id);
    if (p === undefined) return;
    pending.delete(id);
    const value = parse(text);
    if (ok) p.resolve(value);
    else p.reject(toError(value, p.site));
  };
  return { start, settle, poll: () => outcome };
})
