// The run list: filters by status, pages, and a form to start a run.

import { api } from "./api.js";
import { badge, fill, formatTime, h } from "./dom.js";

const STATUSES = ["queued", "running", "waiting", "completed", "failed", "cancelled"];
const PAGE = 25;

/** Shows the run list in `app`; returns a function that stops refreshing it. */
export function showList(app, params) {
  let statuses = (params.get("status") || "").split(",").filter((s) => STATUSES.includes(s));
  let offset = Math.max(0, parseInt(params.get("offset") || "0", 10) || 0);
  let stopped = false;

  const filters = h("div", { class: "filters", role: "group", "aria-label": "Filter by status" });
  const table = h("div");
  const pager = h("div", { class: "pager" });
  const problem = h("div");
  const startForm = h("form", { class: "panel start", "aria-labelledby": "start-title" });

  fill(
    app,
    h("h1", {}, "Runs"),
    h("div", { class: "row" }, filters, h("div", { class: "spacer" }), h("button", { type: "button", onclick: () => load() }, "Refresh")),
    problem,
    h("div", { class: "panel", style: "margin-top:10px" }, table, pager),
    h("div", { style: "margin-top:16px" }, startForm),
  );

  function setHash() {
    const query = new URLSearchParams();
    if (statuses.length) query.set("status", statuses.join(","));
    if (offset) query.set("offset", String(offset));
    const hash = `#/${query.toString() ? `?${query}` : ""}`;
    if (location.hash !== hash) history.replaceState(null, "", hash);
  }

  function renderFilters() {
    const toggle = (status) => {
      statuses = status === null ? [] : statuses.includes(status) ? statuses.filter((s) => s !== status) : [...statuses, status];
      offset = 0;
      load();
    };
    fill(
      filters,
      h("button", { type: "button", "aria-pressed": statuses.length ? "false" : "true", onclick: () => toggle(null) }, "All"),
      STATUSES.map((status) =>
        h("button", { type: "button", "aria-pressed": statuses.includes(status) ? "true" : "false", onclick: () => toggle(status) }, status),
      ),
    );
  }

  async function load() {
    renderFilters();
    setHash();
    let page;
    try {
      page = await api.listRuns({ statuses, limit: PAGE, offset });
    } catch (error) {
      fill(problem, h("div", { class: "panel error-banner", role: "alert" }, error.message));
      return;
    }
    if (stopped) return;
    fill(problem);
    fill(
      table,
      page.runs.length
        ? h(
            "table",
            { class: "runs" },
            h("thead", {}, h("tr", {}, h("th", {}, "Run"), h("th", {}, "Workflow"), h("th", {}, "Status"), h("th", {}, "Started"), h("th", {}, "Last change"))),
            h(
              "tbody",
              {},
              page.runs.map((run) =>
                h(
                  "tr",
                  { "data-run": run.runId },
                  h("td", { class: "mono" }, h("a", { href: `#/runs/${encodeURIComponent(run.runId)}` }, run.runId)),
                  h("td", {}, run.workflow, run.parentRunId ? h("span", { class: "muted", title: `forked from ${run.parentRunId} at ${run.parentAddress}` }, " ⑂ fork") : null),
                  h("td", {}, badge(run.status), run.live ? h("span", { class: "muted" }, " live") : null),
                  h("td", {}, formatTime(run.createdAt)),
                  h("td", {}, formatTime(run.updatedAt)),
                ),
              ),
            ),
          )
        : h("p", { class: "empty" }, statuses.length ? "No runs with that status." : "No runs yet: start one below or with `cadenza run`."),
    );
    const last = Math.min(page.total, offset + page.runs.length);
    fill(
      pager,
      h("button", { type: "button", disabled: offset === 0, onclick: () => { offset = Math.max(0, offset - PAGE); load(); } }, "← Newer"),
      h("span", { class: "muted" }, page.total ? `${offset + 1}–${last} of ${page.total}` : "0 runs"),
      h("button", { type: "button", disabled: last >= page.total, onclick: () => { offset += PAGE; load(); } }, "Older →"),
    );
  }

  async function renderStart() {
    let workflows = [];
    let root = "";
    try {
      const listing = await api.workflows();
      workflows = listing.workflows.map((w) => w.path);
      root = listing.root;
    } catch {
      // the list is a convenience: the path can still be typed
    }
    const path = h("input", { type: "text", id: "start-path", list: "start-workflows", required: true, placeholder: "examples/reflection.yaml", size: 40 });
    const inputs = h("textarea", { id: "start-inputs", rows: 3 }, "{}");
    const runId = h("input", { type: "text", id: "start-run-id", placeholder: "(a new id)", size: 28 });
    const error = h("p", { class: "check-fail", role: "alert" });
    fill(
      startForm,
      h("h2", { id: "start-title", style: "margin-top:0" }, "Start a run"),
      h("p", { class: "muted" }, `Workflow files under ${root || "the server's root"}.`),
      h("datalist", { id: "start-workflows" }, workflows.map((w) => h("option", { value: w }))),
      h("label", { for: "start-path" }, "Workflow file"),
      path,
      h("label", { for: "start-inputs" }, "Inputs (JSON)"),
      inputs,
      h("label", { for: "start-run-id" }, "Run id (optional)"),
      runId,
      h("div", { class: "row", style: "margin-top:8px" }, h("button", { type: "submit", class: "primary" }, "Start")),
      error,
    );
    startForm.onsubmit = async (event) => {
      event.preventDefault();
      error.textContent = "";
      let values;
      try {
        values = JSON.parse(inputs.value || "{}");
      } catch (problem) {
        error.textContent = `Inputs are not JSON: ${problem.message}`;
        return;
      }
      try {
        const run = await api.start(path.value.trim(), values, runId.value.trim() || undefined);
        location.hash = `#/runs/${encodeURIComponent(run.runId)}`;
      } catch (problem) {
        error.textContent = [problem.message, ...problem.problems].join("\n");
      }
    };
  }

  load();
  renderStart();
  const timer = setInterval(() => {
    if (!document.hidden) load();
  }, 4000);
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}
