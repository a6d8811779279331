// What a run's events say, folded into state the views draw: steps, loops, graphs,
// decisions, messages, usage. Events arrive in seq order (replayed, then live).

import { parseDuration } from "./dom.js";

/** The diagram key of an address: iteration numbers and forEach indexes dropped. */
export function keyOf(address) {
  return address
    .split(".")
    .filter((segment) => !/^\d+$/.test(segment))
    .map((segment) => segment.replace(/\[\d+\]$/, ""))
    .join(".");
}

/** The address of the loop an iteration or item address belongs to. */
function loopOf(address) {
  const item = address.match(/^(.*)\[\d+\]$/);
  if (item) return item[1];
  const dot = address.lastIndexOf(".");
  return dot < 0 ? address : address.slice(0, dot);
}

/** The loop a judge's verdict is about: `draft` for its judge at `draft.0.untilAgent`. */
function judgedLoopOf(address) {
  return loopOf(address.replace(/\.untilAgent$/, ""));
}

export class RunModel {
  constructor(runId) {
    this.runId = runId;
    this.lastSeq = 0;
    this.events = [];
    this.steps = new Map(); // address -> step state
    this.order = []; // addresses in the order they started
    this.loops = new Map(); // loop address -> {started, max, iterations, reason, kind}
    this.graphs = new Map(); // graph address -> {taken: Map("from>to" -> n), path, reason}
    this.decisions = new Map(); // control address -> [decision data]
    this.messages = [];
    this.usage = { prompt: 0, completion: 0, calls: 0 };
    this.status = "running";
    this.started = null;
    this.ended = null;
    this.waiting = new Map(); // address -> {prompt, schema}
  }

  step(address, at) {
    let step = this.steps.get(address);
    if (!step) {
      step = {
        address, key: keyOf(address), kind: null, agent: null, status: "pending", start: at,
        end: null, durationMs: null, attempts: 0, turns: [], tools: [], error: null,
        message: null, tokens: { prompt: 0, completion: 0 }, replayed: false, iteration: null,
      };
      this.steps.set(address, step);
      this.order.push(address);
    }
    return step;
  }

  loop(address) {
    let loop = this.loops.get(address);
    if (!loop) {
      loop = { started: 0, max: null, iterations: null, reason: null, kind: "repeat", verdicts: [] };
      this.loops.set(address, loop);
    }
    return loop;
  }

  graph(address) {
    let graph = this.graphs.get(address);
    if (!graph) {
      graph = { taken: new Map(), path: [], reason: null };
      this.graphs.set(address, graph);
    }
    return graph;
  }

  /** Text a running agent's model streamed (`output` events): the newest 64 KB are kept
   * for its panel, each reply on lines of its own. */
  streamed(event) {
    const step = this.steps.get(event.stepId);
    const text = event.delta;
    if (!step || step.status !== "running" || typeof text !== "string") return false;
    // `whole`: the reply's text so far, sent first to a viewer that joined mid-reply.
    step.reply = (event.data && event.data.whole ? "" : step.reply || "") + text;
    if (event.done) { // the reply's text ends: the next one starts on a new line
      step.said = [step.said, step.reply].filter(Boolean).join("\n").slice(-65536);
      step.reply = "";
    }
    step.streamed = [step.said, step.reply].filter(Boolean).join("\n").slice(-65536);
    return true;
  }

  /** Folds one event in; returns false for one already seen. */
  add(event) {
    if (event.type === "output") return this.streamed(event); // live only: no seq
    if (event.seq && event.seq <= this.lastSeq) return false;
    this.lastSeq = event.seq || this.lastSeq;
    this.events.push(event);
    const at = Date.parse(event.timestamp);
    const data = event.data || {};
    const address = event.stepId;
    switch (event.type) {
      case "workflow_start":
        this.started = this.started ?? at;
        this.status = "running";
        break;
      case "run_resumed":
      case "run_forked":
        this.status = "running";
        this.ended = null;
        break;
      case "workflow_end":
        this.status = data.status || event.message || "completed";
        this.ended = at;
        for (const step of this.steps.values()) {
          if (step.status === "running") step.status = "cancelled"; // it never reported back
        }
        break;
      case "step_start": {
        if (this.status !== "running") this.status = "running";
        const step = this.step(address, at);
        step.kind = data.kind || step.kind;
        step.agent = event.agent || step.agent;
        step.status = "running";
        step.start = at;
        step.end = null;
        step.streamed = step.said = step.reply = "";
        step.attempts = data.attempt || step.attempts + 1;
        if (data.kind === "loop" || data.loop_type) {
          const loop = this.loop(address);
          loop.max = data.maxIterations ?? loop.max;
          loop.kind = data.loop_type || loop.kind;
        }
        if (data.kind === "control") {
          const loop = this.loop(address);
          loop.max = data.maxIterations ?? loop.max;
          loop.kind = "control";
        }
        break;
      }
      case "step_end": {
        const step = this.step(address, at);
        step.status = "completed";
        step.end = at;
        step.durationMs = parseDuration(event.duration) ?? (step.start ? at - step.start : null);
        break;
      }
      case "error": {
        if (!address) break;
        const step = this.step(address, at);
        step.status = data.status || "failed";
        step.end = at;
        step.error = event.error || event.message || null;
        step.durationMs = parseDuration(event.duration) ?? (step.start ? at - step.start : null);
        break;
      }
      case "step_skipped": {
        const step = this.step(address, at);
        step.status = "skipped";
        step.message = event.message || null;
        step.end = at;
        break;
      }
      case "step_waiting": {
        const step = this.step(address, at);
        step.kind = step.kind || "human";
        step.status = "waiting";
        step.end = at;
        this.waiting.set(address, { prompt: data.prompt || event.message || "", schema: data.schema ?? null });
        break;
      }
      case "signal_received": {
        this.waiting.delete(address);
        const step = this.step(address, at);
        step.status = "completed";
        step.answer = data.answer;
        break;
      }
      case "step_replayed": {
        const step = this.step(address, at);
        step.status = data.status || step.status;
        step.replayed = true;
        break;
      }
      case "step_retry": {
        const step = this.step(address, at);
        step.retries = (step.retries || 0) + 1;
        break;
      }
      case "iteration_start": {
        const loop = this.loop(loopOf(address));
        loop.started = Math.max(loop.started, (data.iteration ?? loop.started) + 1);
        loop.max = data.maxIterations ?? loop.max;
        // The iteration's address is a container (kind "iteration") when the loop has a
        // body, and the repeated step's own run when it has none: `draft.0` is an agent.
        this.step(address, at).iteration = data.iteration ?? null;
        break;
      }
      case "item_start": {
        const loop = this.loop(loopOf(address));
        loop.kind = "forEach";
        loop.started += 1;
        loop.max = data.total ?? loop.max;
        break;
      }
      case "judge_verdict":
        this.loop(judgedLoopOf(address)).verdicts.push(data);
        break;
      case "loop_end": {
        const loop = this.loop(address);
        loop.iterations = data.iterations ?? loop.started;
        loop.reason = data.terminationReason || null;
        loop.flagged = Boolean(data.flagged);
        break;
      }
      case "graph_transition": {
        const graph = this.graph(address);
        const edge = `${data.from}>${data.to}`;
        graph.taken.set(edge, (graph.taken.get(edge) || 0) + 1);
        if (!graph.path.length && data.from) graph.path.push(data.from);
        if (data.to && data.to !== "END") graph.path.push(data.to);
        break;
      }
      case "graph_end": {
        const graph = this.graph(address);
        graph.path = data.path || graph.path;
        graph.reason = data.terminationReason || null;
        break;
      }
      case "decision": {
        if (!this.decisions.has(address)) this.decisions.set(address, []);
        this.decisions.get(address).push({ ...data, at });
        break;
      }
      case "agent_turn": {
        const step = this.step(address, at);
        step.agent = event.agent || step.agent;
        if (data.phase === "request") {
          step.turns.push({ turn: data.turn, model: data.model, start: at, end: null, tokens: null });
        } else {
          const turn = step.turns[step.turns.length - 1] || { turn: step.turns.length + 1, start: at };
          if (!step.turns.includes(turn)) step.turns.push(turn);
          turn.end = at;
          turn.model = data.model || turn.model;
          turn.attempts = data.attempts;
          if (event.tokens) {
            turn.tokens = event.tokens;
            step.tokens.prompt += event.tokens.prompt || 0;
            step.tokens.completion += event.tokens.completion || 0;
            this.usage.prompt += event.tokens.prompt || 0;
            this.usage.completion += event.tokens.completion || 0;
          }
          this.usage.calls += 1;
        }
        break;
      }
      case "tool_call": {
        const step = this.step(address, at);
        let call = step.tools.find((c) => c.id === data.tool_call_id && c.status === "running");
        if (data.phase === "start" || !call) {
          call = { id: data.tool_call_id, name: data.tool_name, input: data.input, status: "running", start: at };
          step.tools.push(call);
        }
        if (data.phase === "end") {
          call.status = data.error ? "failed" : "completed";
          call.output = data.output;
          call.error = data.error;
          call.end = at;
        }
        break;
      }
      case "message_sent":
        this.messages.push({ from: data.from, to: data.to, text: data.text, at });
        break;
      case "message_dropped":
        this.messages.push({ from: data.from, to: data.to, text: data.text, at, dropped: data.reason });
        break;
      default:
        break;
    }
    return true;
  }

  /** Addresses of a diagram key, in start order. */
  instances(key) {
    return this.order.filter((address) => this.steps.get(address).key === key);
  }

  /** The latest state of every key (the newest instance wins). */
  keyStates() {
    const states = new Map();
    for (const address of this.order) {
      const step = this.steps.get(address);
      const state = states.get(step.key) || { status: "pending", own: null, running: false, visits: 0 };
      if (step.kind === "iteration") {
        state.status = step.status;
      } else {
        state.own = step.status;
        state.visits += 1;
      }
      state.running = state.running || step.status === "running";
      states.set(step.key, state);
    }
    for (const state of states.values()) {
      state.status = state.running ? "running" : state.own || state.status;
    }
    return states;
  }

  /** Addresses running now. */
  running() {
    return this.order.filter((address) => this.steps.get(address).status === "running");
  }
}
