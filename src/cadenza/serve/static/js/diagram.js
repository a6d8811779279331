// The workflow as an SVG diagram: loops, graphs, includes and control loops as nested
// boxes, DAG and graph edges (conditions labelled), and live state from the run's events.
//
// Layout is layered: a body's items sit in rows by dependency depth (graphs: by
// breadth-first distance from the start), each container sized by its body. Graph
// edges that go back or sideways run through a lane on the body's right.

import { keyOf } from "./model.js";
import { s, short } from "./dom.js";

const LEAF_W = 172;
const LEAF_H = 46;
const GAP_X = 26;
const GAP_Y = 46;
const PAD = 14;
const HEAD = 30;
const TERM = 12;
const CHAR = 6.6;

function leafSub(node) {
  const loop = node.loop ? "↻ " : "";
  switch (node.kind) {
    case "agent":
      return `${loop}agent${node.agent ? ` · ${node.agent}` : ""}`;
    case "command":
      return `${loop}command · ${short([].concat(node.command || []).join(" "), 16)}`;
    case "handler":
      return `${loop}handler · ${short(node.handler || "", 16)}`;
    case "human":
      return "human · waits for a person";
    case "include":
      return `${loop}include · ${short(node.include || "", 16)}`;
    case "decide":
      return node.sub || "decide";
    default:
      return `${loop}${node.kind || "step"}`;
  }
}

function loopTitle(node) {
  const loop = node.loop || {};
  if (loop.mode === "forEach") {
    const count = Array.isArray(loop.forEach) ? loop.forEach.length : null;
    const over = count === null ? loop.forEach : `${count} item${count === 1 ? "" : "s"}`;
    return `${node.id} · forEach ${short(over, 30)}`;
  }
  const stop = loop.until ? ` until ${short(loop.until, 44)}` : loop.untilAgent ? ` judged by ${loop.untilAgent}` : "";
  return `${node.id} · repeat ≤${loop.maxIterations ?? "?"}${stop}`;
}

function leaf(key, node, agents) {
  return { type: "leaf", key, node, agents, w: LEAF_W, h: LEAF_H };
}

function terminal(key, label) {
  return { type: "terminal", key, label, w: TERM * 2, h: TERM * 2 };
}

function box(key, node, agents, cls, title, body, counter) {
  const room = counter !== null && counter !== undefined ? 190 : 30; // "✓ 12 iterations (judge)"
  const w = Math.max(body.w + PAD * 2, title.length * CHAR + room);
  return { type: "box", key, node, agents, cls, title, body, counter, w, h: HEAD + body.h + PAD };
}

function fromNode(node, prefix, agents) {
  const key = prefix + node.id;
  const inner = `${key}.`;
  if (node.graph) {
    return box(key, node, agents, "graph", `${node.id} · graph ≤${node.graph.maxSteps} steps`, graphBody(node.graph, inner, agents), node.loop ? key : null);
  }
  if (node.control) {
    const title = `${node.id} · control loop ≤${node.control.maxIterations}`;
    return box(key, node, agents, "control", title, controlBody(node.control, inner, agents), key);
  }
  if (node.loop && node.loop.steps) {
    return box(key, node, agents, "loop", loopTitle(node), dagBody(node.loop.steps, inner, agents), key);
  }
  if (node.workflow) {
    const title = `${node.id} · include ${node.include}`;
    const child = node.workflow;
    return box(key, node, agents, "include", title, dagBody(child.steps, inner, child.agents || {}), node.loop ? key : null);
  }
  const item = leaf(key, node, agents);
  item.counter = node.loop ? key : null;
  return item;
}

function dagBody(nodes, prefix, agents) {
  const items = nodes.map((node) => fromNode(node, prefix, agents));
  const index = new Map(nodes.map((node, i) => [node.id, i]));
  const ranks = new Array(nodes.length).fill(null);
  const rankOf = (i, depth = 0) => {
    if (ranks[i] !== null) return ranks[i];
    if (depth > nodes.length) return 0; // a cycle would be a validation error; never loop
    const deps = (nodes[i].dependsOn || []).filter((d) => index.has(d));
    ranks[i] = deps.length ? 1 + Math.max(...deps.map((d) => rankOf(index.get(d), depth + 1))) : 0;
    return ranks[i];
  };
  nodes.forEach((_, i) => rankOf(i));
  const edges = [];
  nodes.forEach((node, i) => {
    for (const dep of node.dependsOn || []) {
      if (!index.has(dep)) continue;
      edges.push({ from: items[index.get(dep)], to: items[i], label: node.condition || "" });
    }
  });
  return arrange(items, ranks, edges);
}

function graphBody(graph, prefix, agents) {
  const start = terminal(`${prefix}⟨start⟩`, "start");
  const end = terminal(`${prefix}⟨end⟩`, "END");
  const states = graph.states.map((node) => fromNode(node, prefix, agents));
  const index = new Map(graph.states.map((node, i) => [node.id, i]));
  const depth = new Map([[graph.start, 1]]);
  const queue = [graph.start];
  while (queue.length) {
    const name = queue.shift();
    for (const edge of graph.edges) {
      if (edge.from === name && edge.to !== "END" && !depth.has(edge.to)) {
        depth.set(edge.to, depth.get(name) + 1);
        queue.push(edge.to);
      }
    }
  }
  const deepest = Math.max(1, ...depth.values());
  const items = [start, ...states, end];
  const ranks = [0, ...graph.states.map((node) => depth.get(node.id) ?? deepest + 1), 0];
  ranks[ranks.length - 1] = Math.max(...ranks) + 1;
  const graphKey = prefix.slice(0, -1);
  const edges = [];
  if (index.has(graph.start)) {
    edges.push({ from: start, to: states[index.get(graph.start)], label: "", graph: graphKey, gFrom: "⟨start⟩", gTo: graph.start });
  }
  for (const edge of graph.edges) {
    const from = states[index.get(edge.from)];
    const to = edge.to === "END" ? end : states[index.get(edge.to)];
    if (!from || !to) continue;
    edges.push({ from, to, label: edge.description || edge.condition || "", title: [edge.description, edge.condition].filter(Boolean).join(": "), graph: graphKey, gFrom: edge.from, gTo: edge.to });
  }
  return arrange(items, ranks, edges);
}

function controlBody(control, prefix, agents) {
  const roles = control.roles.map((role) => {
    const key = prefix + role.id;
    if (role.workflow) {
      const child = role.workflow;
      const title = `${role.id} · ${role.include}`;
      return box(key, role, child.agents || {}, "include", title, dagBody(child.steps, `${key}.`, child.agents || {}), null);
    }
    return leaf(key, role, agents);
  });
  const checks = control.checks.length;
  const decide = leaf(`${prefix}decide`, { id: "decide", kind: "decide", sub: `decide · ${checks} check${checks === 1 ? "" : "s"} + judge` }, agents);
  const items = [...roles, decide];
  const ranks = items.map((_, i) => i);
  const edges = [];
  for (let i = 1; i < items.length; i += 1) edges.push({ from: items[i - 1], to: items[i], label: "" });
  if (roles.length) edges.push({ from: decide, to: roles[0], label: "retry with feedback" });
  return arrange(items, ranks, edges);
}

function arrange(items, ranks, edges) {
  const rows = [];
  items.forEach((item, i) => {
    (rows[ranks[i]] ||= []).push(item);
    item.rank = ranks[i];
  });
  const packed = rows.filter(Boolean);
  const widths = packed.map((row) => row.reduce((sum, item) => sum + item.w, 0) + GAP_X * (row.length - 1));
  const content = Math.max(0, ...widths);
  const back = edges.filter((edge) => edge.to.rank === edge.from.rank || edge.to.rank < edge.from.rank - 1);
  const lane = back.length ? 28 + Math.min(170, Math.max(0, ...back.map((e) => short(e.label, 26).length * CHAR))) : 0;
  let y = 0;
  packed.forEach((row, r) => {
    const height = Math.max(...row.map((item) => item.h));
    let x = (content - widths[r]) / 2;
    for (const item of row) {
      item.x = x;
      item.y = y + (height - item.h) / 2;
      x += item.w + GAP_X;
    }
    y += height + GAP_Y;
  });
  return { items, edges, w: content + lane, content, h: Math.max(0, y - GAP_Y) };
}

/** Absolute positions, depth first. */
function place(item, x, y) {
  item.ax = x;
  item.ay = y;
  if (item.type !== "box") return;
  const offset = (item.w - PAD * 2 - item.body.w) / 2;
  for (const child of item.body.items) place(child, x + PAD + offset + child.x, y + HEAD + child.y);
}

/** Spreads the ends of a body's edges along each side of each item, ordered by where
 * the other end is, so edges into or out of one box never share a point. */
function assignPorts(edges) {
  const sides = new Map();
  const add = (item, side, edge, end, other) => {
    const id = `${item.key}|${side}`;
    if (!sides.has(id)) sides.set(id, { item, side, ends: [] });
    sides.get(id).ends.push({ edge, end, other: other.ax + other.w / 2 });
  };
  for (const edge of edges) {
    const f = edge.from;
    const t = edge.to;
    edge.route = t.rank > f.rank ? "down" : t.rank === f.rank - 1 ? "up" : "lane";
    if (edge.route === "down") {
      add(f, "bottom", edge, "from", t);
      add(t, "top", edge, "to", f);
    } else if (edge.route === "up") {
      add(f, "top", edge, "from", t);
      add(t, "bottom", edge, "to", f);
    }
  }
  for (const { item, side, ends } of sides.values()) {
    ends.sort((a, b) => a.other - b.other);
    ends.forEach(({ edge, end }, i) => {
      const x = item.ax + (item.w * (i + 1)) / (ends.length + 1);
      const y = side === "top" ? item.ay : item.ay + item.h;
      edge[end === "from" ? "p1" : "p2"] = [x, y];
    });
  }
}

function edgePath(edge, laneX, k) {
  const f = edge.from;
  const t = edge.to;
  if (edge.route === "down" || edge.route === "up") {
    const [x1, y1] = edge.p1;
    const [x2, y2] = edge.p2;
    const mid = (y1 + y2) / 2;
    const d = `M${x1},${y1} C${x1},${mid} ${x2},${mid} ${x2},${y2}`;
    return { d, lx: (x1 + x2) / 2, ly: mid, anchor: "middle", back: edge.route === "up" };
  }
  const x1 = f.ax + f.w;
  const y1 = f.ay + f.h / 2;
  const x2 = t.ax + t.w;
  const y2 = t.ay + t.h / 2;
  const lane = laneX + 10 + (k % 3) * 8;
  return { d: `M${x1},${y1} C${lane},${y1} ${lane},${y2} ${x2 + 2},${y2}`, lx: lane - 4, ly: (y1 + y2) / 2, anchor: "start", back: true };
}

class Drawing {
  constructor(onSelect) {
    this.onSelect = onSelect;
    this.nodes = new Map(); // key -> {el, item}
    this.edges = []; // {el, edge}
    this.counters = new Map(); // loop key -> tspan
    this.labels = []; // placed label boxes, to keep labels from covering each other
  }

  /** A free spot for a label near (x, y): moved down, then aside, until nothing overlaps. */
  spot(x, y, width) {
    const overlaps = (px, py) => this.labels.some((r) => px < r.x + r.w && r.x < px + width && py < r.y + 14 && r.y < py + 14);
    let px = x;
    let py = y;
    for (let tries = 0; tries < 8 && overlaps(px, py); tries += 1) {
      if (tries < 3) py += 15;
      else {
        py = y;
        px = x + (tries - 2) * (tries % 2 ? 1 : -1) * 40;
      }
    }
    this.labels.push({ x: px, y: py, w: width });
    return [px, py];
  }

  draw(item, parent) {
    if (item.type === "terminal") {
      const g = s("g", { class: "terminal" }, s("circle", { cx: item.ax + TERM, cy: item.ay + TERM, r: TERM }), s("text", { x: item.ax + TERM, y: item.ay + TERM + 3, "text-anchor": "middle" }, item.label));
      parent.append(g);
      return;
    }
    const label = item.type === "box" ? item.title : `${item.node.id}: ${leafSub(item.node)}`;
    const g = s("g", { class: `node ${item.type === "box" ? `box ${item.cls}` : "leaf"}`, tabindex: 0, role: "button", "aria-label": label, "data-key": item.key });
    g.addEventListener("click", (event) => {
      event.stopPropagation();
      this.onSelect(item.key);
    });
    g.addEventListener("keydown", (event) => {
      if (event.target === g && (event.key === "Enter" || event.key === " ")) {
        event.preventDefault();
        event.stopPropagation();
        this.onSelect(item.key);
      }
    });
    parent.append(g);
    this.nodes.set(item.key, { el: g, item });
    if (item.type === "leaf") {
      g.append(
        s("rect", { x: item.ax, y: item.ay, width: item.w, height: item.h, rx: 7 }),
        s("text", { class: "label", x: item.ax + 10, y: item.ay + 19 }, short(item.node.id, 24)),
        s("text", { class: "sub", x: item.ax + 10, y: item.ay + 36 }, short(leafSub(item.node), 27)),
        s("text", { class: "sub visits", x: item.ax + item.w - 8, y: item.ay + 19, "text-anchor": "end" }),
        s("title", {}, label),
      );
      if (item.counter) this.counterFor(item.counter, g.querySelector(".visits"));
      return;
    }
    const counter = s("tspan", { class: "counter" });
    g.append(
      s("rect", { class: "frame", x: item.ax, y: item.ay, width: item.w, height: item.h, rx: 9 }),
      s("text", { class: "title", x: item.ax + 10, y: item.ay + 19 }, item.title, counter),
      s("title", {}, item.title),
    );
    if (item.counter) this.counterFor(item.counter, counter);
    const body = item.body;
    const laneX = item.ax + PAD + (item.w - PAD * 2 - body.w) / 2 + body.content;
    assignPorts(body.edges);
    body.edges.forEach((edge, k) => this.edge(edge, g, laneX, k));
    for (const child of body.items) this.draw(child, g);
  }

  counterFor(key, el) {
    this.counters.set(key, el);
    el.dataset.loop = key;
  }

  edge(edge, parent, laneX, k) {
    const path = edgePath(edge, laneX, k);
    const label = short(edge.label, 26);
    const g = s("g", { class: `edge${path.back ? " back" : ""}` });
    g.append(s("path", { d: path.d, "marker-end": "url(#arrow)" }));
    if (label) {
      const width = label.length * CHAR + 8;
      const [x, y] = this.spot(path.anchor === "middle" ? path.lx - width / 2 : path.lx, path.ly - 10, width);
      g.append(
        s("rect", { class: "label-bg", x, y, width, height: 14, rx: 3 }),
        s("text", { x: x + 4, y: y + 11 }, label),
      );
    }
    if (edge.title || edge.label) g.append(s("title", {}, edge.title || edge.label));
    parent.append(g);
    this.edges.push({ el: g, edge });
  }
}

/**
 * Draws a workflow structure (GET /api/runs/{id}/workflow). Returns the SVG and an
 * update(model, selectedKey) that paints the run's state onto it.
 */
export function buildDiagram(structure, onSelect) {
  const agents = structure.agents || {};
  let root;
  if (structure.loop) {
    const node = { id: structure.name, kind: "loop", loop: structure.loop };
    root = box("", node, agents, "loop", `${loopTitle(node)} (workflow loop)`, dagBody(structure.steps, "", agents), "");
  } else {
    root = box("⟨root⟩", { id: structure.name, kind: "workflow" }, agents, "workflow", structure.name, dagBody(structure.steps, "", agents), null);
  }
  place(root, 6, 6);
  const width = root.w + 12;
  const height = root.h + 12;
  const svg = s("svg", { class: "diagram", width, height, viewBox: `0 0 ${width} ${height}`, role: "group", "aria-label": `Diagram of workflow ${structure.name}` });
  svg.append(
    s("defs", {},
      s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, s("path", { d: "M0,0 L10,5 L0,10 z" })),
      s("marker", { id: "arrow-taken", class: "taken", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, s("path", { d: "M0,0 L10,5 L0,10 z" })),
    ),
  );
  const drawing = new Drawing(onSelect);
  drawing.draw(root, svg);
  const rootEntry = drawing.nodes.get(root.key);
  if (rootEntry && root.key === "⟨root⟩") {
    rootEntry.el.removeAttribute("tabindex");
    rootEntry.el.removeAttribute("role");
    drawing.nodes.delete(root.key);
  }

  /** The drawn node of a key, or of its nearest drawn ancestor. */
  function nearest(key) {
    let current = key;
    while (current) {
      if (drawing.nodes.has(current)) return current;
      const dot = current.lastIndexOf(".");
      if (dot < 0) break;
      current = current.slice(0, dot);
    }
    return drawing.nodes.has(current) ? current : null;
  }

  function update(model, selected) {
    const states = model.keyStates();
    const painted = new Map();
    for (const [key, state] of states) {
      if (drawing.nodes.has(key)) painted.set(key, state.status);
    }
    for (const [key, state] of states) {
      const target = drawing.nodes.has(key) ? null : nearest(key);
      if (target !== null && state.status === "running") painted.set(target, "running");
    }
    for (const [address, decisions] of model.decisions) {
      const key = `${keyOf(address)}.decide`;
      if (drawing.nodes.has(key) && decisions.length) {
        painted.set(key, "completed");
        states.set(key, { status: "completed", visits: decisions.length });
      }
    }
    for (const [key, { el, item }] of drawing.nodes) {
      const status = painted.get(key) || "pending";
      el.setAttribute("class", `node ${item.type === "box" ? `box ${item.cls}` : "leaf"} st-${status}${key === selected ? " selected" : ""}`);
      el.dataset.status = status;
      const visits = item.type === "leaf" && !item.counter ? el.querySelector(".visits") : null;
      const count = states.get(key)?.visits || 0;
      if (visits) visits.textContent = count > 1 ? `×${count}` : "";
    }
    for (const [address, loop] of model.loops) {
      const el = drawing.counters.get(keyOf(address));
      if (!el) continue;
      const max = loop.max ? `/${loop.max}` : "";
      el.textContent = loop.iterations !== null
        ? `  ✓ ${loop.iterations} iteration${loop.iterations === 1 ? "" : "s"}${loop.reason ? ` (${loop.reason})` : ""}`
        : `  ⟳ ${loop.started}${max}`;
    }
    const taken = new Map();
    for (const [address, graph] of model.graphs) {
      const gkey = keyOf(address);
      for (const [edge, n] of graph.taken) taken.set(`${gkey}|${edge}`, n);
      if (graph.path.length) taken.set(`${gkey}|⟨start⟩>${graph.path[0]}`, 1);
    }
    for (const { el, edge } of drawing.edges) {
      let on = false;
      if (edge.graph !== undefined) {
        on = taken.has(`${edge.graph}|${edge.gFrom}>${edge.gTo}`);
      } else if (edge.from.key && edge.to.key) {
        const from = states.get(edge.from.key);
        const to = states.get(edge.to.key);
        on = Boolean(from && to && from.status === "completed" && to.status !== "pending" && to.status !== "skipped");
      }
      el.classList.toggle("taken", on);
      el.querySelector("path").setAttribute("marker-end", on ? "url(#arrow-taken)" : "url(#arrow)");
    }
  }

  function info(key) {
    const target = nearest(key);
    return target === null ? null : drawing.nodes.get(target).item;
  }

  return { svg, update, info, nearest };
}
