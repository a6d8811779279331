// Small DOM and formatting helpers shared by the views.

/** Builds an element: h("a", {href: "#/"}, "Runs"). Attributes starting with "on" bind events. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";

/** Builds an SVG element the same way. */
export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2).toLowerCase(), value);
    } else if (name === "dataset") {
      Object.assign(el.dataset, value);
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** "1.234s" (Go-style, as events carry them) -> milliseconds, or null. */
export function parseDuration(text) {
  if (!text) return null;
  let ms = 0;
  const re = /([\d.]+)(ms|µs|us|ns|h|m|s)/g;
  let match;
  let any = false;
  while ((match = re.exec(text)) !== null) {
    any = true;
    const n = parseFloat(match[1]);
    ms += { h: 3600e3, m: 60e3, s: 1e3, ms: 1, "µs": 1e-3, us: 1e-3, ns: 1e-6 }[match[2]] * n;
  }
  return any ? ms : null;
}

/** Milliseconds for a person: "850 ms", "12.3 s", "4 min 05 s". */
export function formatMs(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60e3) return `${(ms / 1000).toFixed(ms < 10e3 ? 2 : 1)} s`;
  const minutes = Math.floor(ms / 60e3);
  const seconds = Math.round((ms % 60e3) / 1000);
  return `${minutes} min ${String(seconds).padStart(2, "0")} s`;
}

/** Epoch seconds or an ISO string as a local date and time. */
export function formatTime(value) {
  const date = typeof value === "number" ? new Date(value * 1000) : new Date(value);
  if (Number.isNaN(date.getTime())) return "–";
  return date.toLocaleString(undefined, {
    year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit",
  });
}

/** A value as readable text: strings as they are, anything else as indented JSON. */
export function pretty(value) {
  if (value === undefined) return "";
  if (typeof value === "string") {
    try {
      const parsed = JSON.parse(value);
      if (parsed !== null && typeof parsed === "object") return JSON.stringify(parsed, null, 2);
    } catch {
      // not JSON: shown as it is
    }
    return value;
  }
  return JSON.stringify(value, null, 2);
}

/** A status badge. */
export function badge(status) {
  return h("span", { class: `status ${status || "pending"}` }, status || "pending");
}

/** Shortens text to n characters with an ellipsis. */
export function short(text, n) {
  const flat = String(text ?? "").replace(/\s+/g, " ").trim();
  return flat.length <= n ? flat : `${flat.slice(0, n - 1)}…`;
}

/** Tells screen readers about a change without moving focus. */
export function announce(text) {
  const region = document.getElementById("announce");
  if (region) region.textContent = text;
}
