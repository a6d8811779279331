// The run page's panels: timeline, step details, decision log, messages, output, events.

import { badge, fill, formatMs, formatTime, h, pretty, short } from "./dom.js";
import { keyOf } from "./model.js";

const MAX_ROWS = 2000;

function depthOf(address) {
  return address.split(/\.|(?=\[)/).length - 1;
}

/** The iteration number of a loop's iteration (its container, or the step a loop without
 * a body repeats), else null. */
function iterationOf(step) {
  if (step.iteration !== null && step.iteration !== undefined) return step.iteration;
  if (step.kind !== "iteration") return null;
  return Number(step.address.slice(step.address.lastIndexOf(".") + 1));
}

function stepLabel(step) {
  const iteration = iterationOf(step);
  if (iteration !== null) return `↻ iteration ${iteration + 1}`;
  const dot = step.address.lastIndexOf(".");
  return dot < 0 ? step.address : step.address.slice(dot + 1);
}

function elapsed(step, now) {
  if (step.durationMs !== null && step.durationMs !== undefined) return step.durationMs;
  if (!step.start) return null;
  return (step.end ?? now) - step.start;
}

/** Steps and iterations in start order, indented by nesting, with bars on the run's clock. */
export function renderTimeline(el, model, selected, onSelect, now) {
  const t0 = model.started ?? Math.min(...[...model.steps.values()].map((s) => s.start || now));
  const span = Math.max(1, (model.ended ?? now) - t0);
  const rows = model.order.slice(0, MAX_ROWS).map((address) => {
    const step = model.steps.get(address);
    const ms = elapsed(step, now);
    const left = step.start ? ((step.start - t0) / span) * 100 : 0;
    const width = ms !== null ? (ms / span) * 100 : 0;
    return h(
      "tr",
      {
        class: address === selected ? "selected" : "",
        "data-address": address,
        "data-kind": iterationOf(step) !== null ? "iteration" : step.kind || "",
      },
      h(
        "td",
        { class: "addr" },
        h(
          "button",
          { type: "button", style: `padding-left:${depthOf(address) * 14}px`, title: address, onclick: () => onSelect(address) },
          stepLabel(step),
        ),
      ),
      h("td", { class: "muted" }, step.kind === "iteration" ? "" : step.kind || ""),
      h("td", {}, badge(step.status)),
      h("td", { class: "dur" }, formatMs(ms)),
      h(
        "td",
        { class: "bar-cell" },
        h(
          "div",
          { class: "bar-track", "aria-hidden": "true" },
          h("div", {
            class: `bar ${step.status}${step.kind === "iteration" ? " iteration" : ""}`,
            style: `left:${Math.min(left, 100).toFixed(2)}%;width:${Math.min(width, 100 - left).toFixed(2)}%`,
          }),
        ),
      ),
    );
  });
  const more = model.order.length > MAX_ROWS ? h("p", { class: "muted" }, `… and ${model.order.length - MAX_ROWS} more`) : null;
  fill(
    el,
    rows.length
      ? h(
          "table",
          { class: "timeline" },
          h("thead", {}, h("tr", {}, h("th", {}, "Step"), h("th", {}, "Kind"), h("th", {}, "Status"), h("th", {}, "Duration"), h("th", {}, "When"))),
          h("tbody", {}, rows),
        )
      : h("p", { class: "empty" }, "No step has started yet."),
    more,
  );
}

function section(title, ...content) {
  return [h("h3", {}, title), ...content];
}

/**
 * One step's details: what it is, how it went, its content and result, prompts, model
 * turns and tool calls. `info` is the diagram item (node and agents) when there is one.
 * A step that started offers "Run again from here": `onFork(address)` forks the run there.
 */
export function renderDetails(el, { model, address, key, info, result, onSelect, onFork }) {
  if (!address && !key) {
    fill(el, h("h2", {}, "Step details"), h("p", { class: "muted" }, "Select a step in the diagram or the timeline (Enter or click)."));
    return;
  }
  const step = address ? model.steps.get(address) : null;
  const node = info ? info.node : null;
  const record = result && result.steps ? result.steps[address] : null;
  const instances = model.instances(key);
  const decided = !step && key && key.endsWith(".decide") ? [...model.decisions.keys()].find((a) => keyOf(a) === key.slice(0, -".decide".length)) : null;
  const shown = step ? step.status : decided ? "completed" : "pending";
  const parts = [h("h2", { id: "details-title" }, address || key, " ", badge(shown))];
  if (instances.length > 1) {
    parts.push(
      h(
        "div",
        { class: "instances", role: "group", "aria-label": "Runs of this step" },
        instances.map((a) =>
          h("button", { type: "button", "aria-pressed": a === address ? "true" : "false", onclick: () => onSelect(a) }, a),
        ),
      ),
    );
  }
  const agentName = (step && step.agent) || (node && node.agent);
  const agent = info && agentName && info.agents ? info.agents[agentName] : null;
  const facts = [
    ["Kind", (step && step.kind) || (node && node.kind)],
    ["Agent", agentName ? `${agentName}${agent && agent.model ? ` (${agent.model})` : ""}` : null],
    ["Attempts", record ? record.attempts : step && step.attempts],
    ["Started", step && step.start ? formatTime(new Date(step.start).toISOString()) : null],
    ["Duration", step ? formatMs(record && record.durationMs !== undefined ? record.durationMs : step.durationMs) : null],
    ["Tokens", step && (step.tokens.prompt || step.tokens.completion) ? `${step.tokens.prompt} prompt + ${step.tokens.completion} completion` : null],
    ["Worker", record && record.worker],
    ["Replayed", step && step.replayed ? "yes (recorded outcome, not run again)" : null],
  ].filter(([, v]) => v !== null && v !== undefined && v !== "");
  parts.push(h("dl", {}, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))])));
  if (onFork && step && step.start) {
    parts.push(
      h(
        "div",
        { class: "row actions" },
        h(
          "button",
          {
            type: "button",
            "data-action": "fork",
            title: "A new run: what finished before this step started is reused, this step and what follows run again",
            onclick: () => onFork(address),
          },
          "Run again from here",
        ),
      ),
    );
  }
  const error = (record && record.error && `${record.error.type}: ${record.error.message}`) || (step && (step.error || step.message));
  if (error) parts.push(...section("Error", h("pre", { class: "check-fail" }, error)));
  if (step && step.status === "running" && step.streamed) {
    parts.push(...section("Writing now", h("pre", { class: "content streaming", "aria-live": "polite" }, step.streamed)));
  }
  if (record && record.content) parts.push(...section("Content", h("pre", { class: "content" }, pretty(record.content))));
  if (record && record.result !== null && record.result !== undefined) {
    parts.push(...section("Result", h("pre", { class: "result" }, pretty(record.result))));
  }
  if (step && step.answer !== undefined) parts.push(...section("Answer", h("pre", {}, pretty(step.answer))));
  if (agent && agent.prompt) parts.push(...section("System prompt", h("pre", {}, agent.prompt)));
  if (node && node.instructions) parts.push(...section("Instructions", h("pre", {}, node.instructions)));
  if (node && node.human) parts.push(...section("Question", h("pre", {}, node.human.prompt)));
  if (node && node.command) parts.push(...section("Command", h("pre", {}, [].concat(node.command).join(" "))));
  if (step && step.turns.length) {
    parts.push(
      ...section(
        "Model turns",
        h(
          "table",
          {},
          h("thead", {}, h("tr", {}, h("th", {}, "Turn"), h("th", {}, "Model"), h("th", {}, "Tokens"), h("th", {}, "Time"))),
          h(
            "tbody",
            {},
            step.turns.map((t) =>
              h(
                "tr",
                {},
                h("td", {}, String(t.turn ?? "")),
                h("td", { class: "mono" }, t.model || ""),
                h("td", {}, t.tokens ? `${t.tokens.prompt} + ${t.tokens.completion}` : t.end ? "–" : "waiting…"),
                h("td", { class: "dur" }, t.end ? formatMs(t.end - t.start) : "…"),
              ),
            ),
          ),
        ),
      ),
    );
  }
  if (step && step.tools.length) {
    parts.push(
      ...section(
        `Tool calls (${step.tools.length})`,
        step.tools.map((call) =>
          h(
            "details",
            { class: "tool-call", open: step.tools.length <= 3 },
            h("summary", {}, h("span", { class: "mono" }, call.name), " ", badge(call.status)),
            h("div", { class: "muted" }, "input"),
            h("pre", {}, pretty(call.input)),
            call.output !== undefined ? [h("div", { class: "muted" }, "output"), h("pre", {}, pretty(call.output))] : null,
            call.error ? h("pre", { class: "check-fail" }, call.error) : null,
          ),
        ),
      ),
    );
  }
  const mine = model.messages.filter((m) => m.from === address || m.to === address || (key && (m.from === key || m.to === key)));
  if (mine.length) parts.push(...section("Messages", messageTable(mine)));
  const control = model.decisions.has(address) ? address : decided;
  if (control) parts.push(...section("Decision log", decisionTable(control, model.decisions.get(control), result, true)));
  else if (!step && key && key.endsWith(".decide")) parts.push(h("p", { class: "muted" }, "No decision yet."));
  fill(el, parts);
}

function messageTable(messages) {
  return h(
    "table",
    { class: "messages" },
    h("thead", {}, h("tr", {}, h("th", {}, "From"), h("th", {}, "To"), h("th", {}, "Message"))),
    h(
      "tbody",
      {},
      messages.map((m) =>
        h(
          "tr",
          {},
          h("td", { class: "mono" }, m.from || ""),
          h("td", { class: "mono" }, m.to || ""),
          h("td", {}, m.text || "", m.dropped ? h("div", { class: "check-fail" }, `dropped: ${m.dropped}`) : null),
        ),
      ),
    ),
  );
}

/** The decision log as a table; `compact` (the details panel) leaves out checks and feedback. */
function decisionTable(address, decisions, result, compact = false) {
  const heads = compact ? ["Iteration", "Decision", "Score", "Reason"] : ["Iteration", "Decision", "Score", "Checks", "Reason", "Feedback"];
  return h(
    "table",
    { class: `decisions${compact ? " compact" : ""}`, "data-control": address },
    h("thead", {}, h("tr", {}, heads.map((name) => h("th", {}, name)))),
    h(
      "tbody",
      {},
      decisions.map((d) => {
        const record = result && result.steps ? result.steps[`${address}.${d.iteration}`] : null;
        const checks = record && record.result && Array.isArray(record.result.checks) ? record.result.checks : [];
        return h(
          "tr",
          {},
          h("td", { title: `${address}.${d.iteration}` }, String((d.iteration ?? 0) + 1)),
          h("td", { class: `decision ${d.decision}` }, d.decision || ""),
          h("td", { class: "dur" }, d.score === null || d.score === undefined ? "–" : Number(d.score).toFixed(2)),
          compact
            ? null
            : h(
                "td",
                {},
                checks.map((c) => h("div", { class: c.passed ? "check-pass" : "check-fail", title: c.feedback || "" }, `${c.passed ? "✓" : "✗"} ${short(c.expr, 40)}`)),
              ),
          h("td", {}, d.reason || ""),
          compact ? null : h("td", {}, h("div", { style: "white-space:pre-wrap" }, d.feedback || "")),
        );
      }),
    ),
  );
}

/** The decision log of every control loop in the run. */
export function renderDecisions(el, model, result) {
  if (!model.decisions.size) {
    fill(el, h("p", { class: "empty" }, "This run has no control loop decisions."));
    return;
  }
  fill(el, [...model.decisions].map(([address, decisions]) => [h("h3", { class: "mono" }, address), decisionTable(address, decisions, result)]));
}

/** Messages carried between agents. */
export function renderMessages(el, model) {
  fill(el, model.messages.length ? messageTable(model.messages) : h("p", { class: "empty" }, "No messages between agents in this run."));
}

/** The run's output, error and usage, and its raw result JSON. */
export function renderOutput(el, model, result) {
  if (!result) {
    fill(el, h("p", { class: "empty" }, "Loading the result…"));
    return;
  }
  const parts = [];
  if (result.error) parts.push(h("h3", {}, "Error"), h("pre", { class: "check-fail" }, `${result.error.type}: ${result.error.message}${result.error.address ? `\nat ${result.error.address}` : ""}`));
  parts.push(h("h3", {}, "Output"), h("pre", { class: "output" }, result.output === null || result.output === undefined ? "(none yet)" : pretty(result.output)));
  const loops = Object.entries(result.loops || {});
  if (loops.length) {
    parts.push(h("h3", {}, "Loops"), h("ul", {}, loops.map(([a, l]) => h("li", {}, h("span", { class: "mono" }, a), `: ${l.iterations} iteration(s), ${l.terminationReason}${l.flagged ? ", flagged" : ""}`))));
  }
  const graphs = Object.entries(result.graphs || {});
  if (graphs.length) {
    parts.push(h("h3", {}, "Graphs"), h("ul", {}, graphs.map(([a, g]) => h("li", {}, h("span", { class: "mono" }, a), `: ${g.path.join(" → ")} (${g.terminationReason})`))));
  }
  parts.push(h("details", {}, h("summary", {}, "Result JSON"), h("pre", {}, JSON.stringify(result, null, 2))));
  fill(el, parts);
}

/** The newest events, as they came. */
export function renderEvents(el, model) {
  const events = model.events.slice(-300);
  fill(
    el,
    h(
      "table",
      { class: "events" },
      h("thead", {}, h("tr", {}, h("th", {}, "Seq"), h("th", {}, "Time"), h("th", {}, "Type"), h("th", {}, "Step"), h("th", {}, "Detail"))),
      h(
        "tbody",
        {},
        events.map((e) =>
          h(
            "tr",
            {},
            h("td", { class: "dur" }, String(e.seq)),
            h("td", { class: "dur" }, e.timestamp.slice(11, 23)),
            h("td", { class: "mono" }, e.type),
            h("td", { class: "mono" }, e.stepId || ""),
            h("td", {}, short(e.error || e.message || (e.data ? JSON.stringify(e.data) : ""), 140)),
          ),
        ),
      ),
    ),
    model.events.length > 300 ? h("p", { class: "muted" }, `The newest 300 of ${model.events.length} events.`) : null,
  );
}
