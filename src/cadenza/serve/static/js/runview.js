// The run page: header with status, usage and loop counters; the diagram; step details;
// the answer form of a waiting step; tabs for timeline, decisions, messages, output, events;
// its lineage (the run it was forked from, the runs forked from it) and, on a step that
// started, "Run again from here" (a fork). Live from the run's server-sent events.

import { api } from "./api.js";
import { buildDiagram } from "./diagram.js";
import { announce, badge, fill, formatMs, formatTime, h } from "./dom.js";
import { answerForm } from "./form.js";
import { RunModel, keyOf } from "./model.js";
import { renderDecisions, renderDetails, renderEvents, renderMessages, renderOutput, renderTimeline } from "./panels.js";

const TABS = [
  ["timeline", "Timeline"],
  ["decisions", "Decision log"],
  ["messages", "Messages"],
  ["output", "Output"],
  ["events", "Events"],
];

function tabs(onChange) {
  const buttons = TABS.map(([id, label], i) =>
    h("button", { type: "button", role: "tab", id: `tab-${id}`, "aria-controls": `panel-${id}`, "aria-selected": i === 0 ? "true" : "false", tabindex: i === 0 ? "0" : "-1" }, label),
  );
  const panels = TABS.map(([id], i) => h("div", { role: "tabpanel", id: `panel-${id}`, "aria-labelledby": `tab-${id}`, hidden: i !== 0, tabindex: "0" }));
  let current = TABS[0][0];
  const select = (index, focus) => {
    buttons.forEach((b, i) => {
      b.setAttribute("aria-selected", i === index ? "true" : "false");
      b.tabIndex = i === index ? 0 : -1;
      panels[i].hidden = i !== index;
    });
    current = TABS[index][0];
    if (focus) buttons[index].focus();
    onChange(current);
  };
  buttons.forEach((button, i) => {
    button.addEventListener("click", () => select(i, false));
    button.addEventListener("keydown", (event) => {
      const moves = { ArrowRight: 1, ArrowLeft: -1, Home: -i, End: TABS.length - 1 - i };
      if (event.key in moves) {
        event.preventDefault();
        select((i + moves[event.key] + TABS.length) % TABS.length, true);
      }
    });
  });
  const list = h("div", { role: "tablist", "aria-label": "Run views" }, buttons);
  const panel = Object.fromEntries(TABS.map(([id], i) => [id, panels[i]]));
  return { list, panels, panel, current: () => current };
}

/** Shows run `runId` in `app`; returns a function that stops following it. */
export function showRun(app, runId) {
  const model = new RunModel(runId);
  let summary = null;
  let result = null;
  let diagram = null;
  let source = null;
  let selectedAddress = null;
  let selectedKey = null;
  let frame = 0;
  let stopped = false;
  let resultLoading = false;
  let resultDirty = false;
  let lastStatus = null;

  const title = h("h1", {}, "Run");
  const status = h("span", { class: "run-status" });
  const facts = h("div", { class: "facts" });
  const loops = h("div", { class: "loops", "aria-live": "polite" });
  const lineage = h("div", { class: "lineage" });
  const actions = h("div", { class: "row actions" });
  const problem = h("div");
  const waiting = h("div");
  const details = h("aside", { class: "panel details", "aria-labelledby": "details-title", tabindex: "-1" });
  const diagramWrap = h("div", { class: "diagram-wrap" }, h("p", { class: "muted" }, "Loading the workflow…"));
  const views = tabs(() => schedule());

  fill(
    app,
    h("p", {}, h("a", { href: "#/" }, "← All runs")),
    h(
      "section",
      { class: "panel run-head" },
      h("div", {}, h("div", { class: "row" }, title, status), h("div", { class: "mono muted" }, runId), lineage, facts, loops),
      h("div", { class: "spacer" }),
      actions,
    ),
    problem,
    waiting,
    h(
      "div",
      { class: "run-body" },
      h(
        "section",
        { class: "panel", "aria-label": "Workflow diagram" },
        h("h2", {}, "Workflow"),
        diagramWrap,
        h(
          "div",
          { class: "legend" },
          [["running", "var(--running)"], ["completed", "var(--completed)"], ["waiting", "var(--waiting)"], ["failed", "var(--failed)"]].map(([label, color]) =>
            h("span", { style: `--c:${color}` }, label),
          ),
          h("span", { style: "--c:var(--completed)" }, "path taken (green edges)"),
        ),
      ),
      details,
    ),
    views.list,
    views.panels,
  );

  function showProblem(error) {
    fill(problem, error ? h("div", { class: "panel error-banner", role: "alert" }, error.message || String(error)) : null);
  }

  function select(address) {
    selectedAddress = address;
    selectedKey = keyOf(address);
    refreshResult();
    schedule();
  }

  function selectKey(key) {
    const instances = model.instances(key);
    selectedKey = key;
    selectedAddress = instances.length ? instances[instances.length - 1] : null;
    refreshResult();
    schedule();
    details.focus({ preventScroll: true });
  }

  async function refreshResult() {
    if (resultLoading) {
      resultDirty = true;
      return;
    }
    resultLoading = true;
    try {
      result = await api.result(runId);
    } catch (error) {
      showProblem(error);
    } finally {
      resultLoading = false;
    }
    if (resultDirty) {
      resultDirty = false;
      refreshResult();
    }
    schedule();
  }

  async function refreshSummary() {
    try {
      summary = await api.run(runId);
    } catch (error) {
      showProblem(error);
    }
    schedule();
  }

  async function refreshWaiting() {
    let questions = [];
    try {
      questions = model.status === "waiting" ? await api.inputs(runId) : [];
    } catch (error) {
      showProblem(error);
    }
    if (!questions.length) {
      fill(waiting);
      return;
    }
    fill(
      waiting,
      h(
        "section",
        { class: "panel waiting-box", "aria-labelledby": "waiting-title" },
        h("h2", { id: "waiting-title" }, "Waiting for your answer"),
        questions.map((question) =>
          answerForm(question, async (data) => {
            await api.signal(runId, question.address, data);
            fill(waiting, h("p", { class: "panel" }, "Answer recorded; the run goes on."));
            announce("Answer recorded; the run goes on.");
            model.status = "running";
            follow();
          }),
        ),
      ),
    );
    announce("This run waits for your answer.");
  }

  function follow() {
    if (source || stopped) return;
    source = api.stream(runId, model.lastSeq);
    source.onmessage = (message) => {
      const event = JSON.parse(message.data);
      if (!model.add(event)) return;
      if (selectedAddress && event.stepId === selectedAddress && ["step_end", "error", "step_waiting"].includes(event.type)) {
        refreshResult();
      }
      schedule();
    };
    source.addEventListener("output", (message) => {
      if (model.add(JSON.parse(message.data))) schedule();
    });
    source.addEventListener("end", (message) => {
      source.close();
      source = null;
      const end = JSON.parse(message.data);
      model.status = end.status;
      refreshResult();
      refreshSummary();
      refreshWaiting();
      schedule();
    });
  }

  function schedule() {
    if (!frame && !stopped) frame = requestAnimationFrame(render);
  }

  function render() {
    frame = 0;
    const now = Date.now();
    const runStatus = model.events.length ? model.status : summary ? summary.status : "running";
    title.textContent = (summary && summary.workflow) || (result && result.workflow) || "Run";
    if (runStatus !== lastStatus) {
      fill(status, badge(runStatus));
      if (lastStatus !== null) announce(`Run ${runStatus}`);
      lastStatus = runStatus;
    }
    const usage = result && runStatus !== "running" && result.usage
      ? { prompt: result.usage.promptTokens, completion: result.usage.completionTokens, calls: result.usage.llmCalls }
      : model.usage;
    const current = model.running().filter((a) => model.steps.get(a).kind !== "iteration" && !model.loops.has(a));
    const started = model.started ?? (summary ? summary.createdAt * 1000 : null);
    fill(
      facts,
      [
        ["Started", started ? formatTime(new Date(started).toISOString()) : "–"],
        ["Duration", started ? formatMs((model.ended ?? (runStatus === "running" ? now : started)) - started) : "–"],
        ["Tokens", `${usage.prompt + usage.completion} (${usage.prompt} prompt + ${usage.completion} completion)`],
        ["Model calls", String(usage.calls)],
        ["Now", current.length ? current.join(", ") : runStatus === "running" ? "starting…" : "–"],
      ].map(([k, v]) => h("div", { class: "fact" }, h("span", { class: "k" }, k), h("span", { class: "v", "data-fact": k.toLowerCase() }, v))),
    );
    fill(
      loops,
      [...model.loops].map(([address, loop]) =>
        h(
          "span",
          { class: "loop-counter", "data-loop": address },
          h("span", { class: "mono" }, address),
          loop.kind === "forEach" ? " item " : " iteration ",
          h("span", { class: "count" }, String(loop.started)),
          loop.max ? ` / ${loop.max}` : "",
          loop.iterations !== null ? ` · done: ${loop.reason || "ended"}` : "",
        ),
      ),
    );
    const live = summary && summary.live && runStatus === "running";
    const resumable = (runStatus === "running" && summary && !summary.live && !source) || (runStatus === "waiting" && !model.waiting.size);
    fill(
      actions,
      // A queued run is cancelled where it waits, by whichever server is asked.
      live || runStatus === "queued" ? h("button", { type: "button", class: "danger", onclick: onCancel }, "Cancel run") : null,
      resumable ? h("button", { type: "button", onclick: onResume }, "Resume run") : null,
    );
    renderLineage();
    if (diagram) diagram.update(model, selectedKey);
    renderDetails(details, {
      model,
      address: selectedAddress,
      key: selectedKey,
      info: diagram && selectedKey !== null ? diagram.info(selectedKey) : null,
      result,
      onSelect: select,
      onFork,
    });
    const tab = views.current();
    if (tab === "timeline") renderTimeline(views.panel.timeline, model, selectedAddress, select, now);
    if (tab === "decisions") renderDecisions(views.panel.decisions, model, result);
    if (tab === "messages") renderMessages(views.panel.messages, model);
    if (tab === "output") renderOutput(views.panel.output, model, result);
    if (tab === "events") renderEvents(views.panel.events, model);
  }

  async function onCancel() {
    try {
      await api.cancel(runId);
      announce("Cancelling the run");
    } catch (error) {
      showProblem(error);
    }
  }

  function runLink(id) {
    return h("a", { class: "mono", href: `#/runs/${encodeURIComponent(id)}` }, id);
  }

  function renderLineage() {
    const parent = summary && summary.parentRunId;
    const forks = (summary && summary.forks) || [];
    fill(
      lineage,
      parent ? h("div", { class: "forked-from" }, "Forked from ", runLink(parent), " at ", h("code", {}, summary.parentAddress || "")) : null,
      forks.length
        ? h(
            "div",
            { class: "forks" },
            `Forks (${forks.length}): `,
            forks.map((fork, i) => [i ? ", " : "", runLink(fork.runId), ` at ${fork.at} `, badge(fork.status)]),
          )
        : null,
    );
  }

  async function onFork(address) {
    try {
      const forked = await api.fork(runId, address);
      announce(`Started run ${forked.runId} from ${address}`);
      location.hash = `#/runs/${encodeURIComponent(forked.runId)}`;
    } catch (error) {
      showProblem(error);
    }
  }

  async function onResume() {
    try {
      summary = await api.resume(runId);
      model.status = "running";
      follow();
      schedule();
    } catch (error) {
      showProblem(error);
    }
  }

  const ticker = setInterval(() => {
    if (model.status === "running") schedule();
  }, 1000);

  (async () => {
    try {
      summary = await api.run(runId);
    } catch (error) {
      showProblem(error);
      return;
    }
    model.status = summary.status;
    follow();
    refreshResult();
    if (summary.status === "waiting") refreshWaiting();
    try {
      const structure = await api.workflow(runId);
      if (stopped) return;
      diagram = buildDiagram(structure, selectKey);
      fill(diagramWrap, diagram.svg);
    } catch (error) {
      fill(diagramWrap, h("p", { class: "muted" }, `No diagram: ${error.message}`));
    }
    schedule();
  })();

  return () => {
    stopped = true;
    clearInterval(ticker);
    if (source) source.close();
    if (frame) cancelAnimationFrame(frame);
  };
}
