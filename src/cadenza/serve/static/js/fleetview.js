// The fleet page: the store's live supervisors, the workers connected to each, and the
// queue (GET /api/fleet, what `cadenza fleet` prints), read again every two seconds.

import { api } from "./api.js";
import { fill, h } from "./dom.js";

const EVERY = 2000;

/** Seconds for a person: "0.4 s", "12 s", "3 min 05 s". */
function seconds(value) {
  const s = Math.max(0, value);
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.floor(s)} s`;
  const minutes = Math.floor(s / 60);
  if (minutes < 60) return `${minutes} min ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, "0")} min`;
}

function fact(label, value, key) {
  return h("div", { class: "fact" }, h("span", { class: "k" }, label), h("span", { class: "v", "data-fact": key }, value));
}

function table(caption, headers, rows, empty) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  return h(
    "table",
    { class: "fleet" },
    h("caption", { class: "skip" }, caption),
    h("thead", {}, h("tr", {}, headers.map((title) => h("th", { scope: "col" }, title)))),
    h("tbody", {}, rows),
  );
}

function supervisorRows(fleet) {
  return fleet.supervisors.map((row) =>
    h(
      "tr",
      { "data-supervisor": row.supervisorId },
      h("td", { class: "mono" }, row.supervisorId),
      h("td", { class: "mono" }, `${row.host}:${row.pid}`),
      h("td", { class: "mono" }, row.workers || "–"),
      h("td", { "data-col": "capacity" }, row.capacity ?? "–"),
      h("td", { "data-col": "runs" }, row.runs),
      h("td", { "data-col": "waiting" }, row.waiting),
      h("td", { "data-col": "running" }, row.running),
      h("td", {}, `${seconds(fleet.at - row.seenAt)} ago`),
    ),
  );
}

function workerRows(fleet) {
  return fleet.supervisors.flatMap((row) =>
    row.pool.map((worker) =>
      h(
        "tr",
        { "data-worker": worker.name },
        h("td", { class: "mono" }, worker.name),
        h("td", { class: "mono" }, row.supervisorId),
        h("td", { "data-col": "capacity" }, worker.capacity),
        h("td", { "data-col": "in-flight" }, worker.inFlight),
      ),
    ),
  );
}

/** Shows the fleet in `app`; returns a function that stops refreshing it. */
export function showFleet(app) {
  let stopped = false;
  const problem = h("div");
  const queue = h("div", { class: "facts fleet-facts" });
  const supervisors = h("div");
  const workers = h("div");
  fill(
    app,
    h("h1", {}, "Fleet"),
    problem,
    h("section", { class: "panel", "aria-labelledby": "queue-title" }, h("h2", { id: "queue-title" }, "Queue"), queue),
    h("section", { class: "panel", "aria-labelledby": "supervisors-title", style: "margin-top:10px" }, h("h2", { id: "supervisors-title" }, "Supervisors"), supervisors),
    h("section", { class: "panel", "aria-labelledby": "workers-title", style: "margin-top:10px" }, h("h2", { id: "workers-title" }, "Workers"), workers),
  );

  async function load() {
    let fleet;
    try {
      fleet = await api.fleet();
    } catch (error) {
      if (!stopped) fill(problem, h("div", { class: "panel error-banner", role: "alert" }, error.message));
      return;
    }
    if (stopped) return;
    fill(problem);
    const depth = fleet.queue;
    const byPriority = Object.entries(depth.byPriority)
      .sort(([a], [b]) => Number(b) - Number(a))
      .map(([priority, runs]) => `${runs} at ${priority}`)
      .join(", ");
    fill(
      queue,
      fact("Queued runs", depth.runs, "queued"),
      fact("By priority", byPriority || "–", "by-priority"),
      fact("Oldest waiting", depth.runs ? seconds(depth.oldestAge) : "–", "oldest"),
      fact("Supervisors", fleet.supervisors.length, "supervisors"),
    );
    fill(
      supervisors,
      table(
        "Live supervisors",
        ["Supervisor", "Host:pid", "Workers at", "Capacity", "Runs", "Steps waiting", "On workers", "Seen"],
        supervisorRows(fleet),
        "No supervisor on the roll: start one with `cadenza supervise --capacity N` or `cadenza serve --recover`.",
      ),
    );
    fill(
      workers,
      table(
        "Connected workers",
        ["Worker", "Supervisor", "Capacity", "In flight"],
        workerRows(fleet),
        "No worker connected: start one with `cadenza worker --store URL`.",
      ),
    );
  }

  load();
  const timer = setInterval(() => {
    if (!document.hidden) load();
  }, EVERY);
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}
