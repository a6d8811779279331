// The HTTP API (docs/api.md), by relative URLs so the viewer also works mounted under a prefix.

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.type = error.type || "HTTPError";
    this.problems = error.problems || [];
  }
}

async function call(method, path, body) {
  const init = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let data = null;
  const text = await response.text();
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { error: { message: text } };
    }
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

const run = (id) => `api/runs/${encodeURIComponent(id)}`;

export const api = {
  listRuns({ statuses = [], limit = 25, offset = 0 } = {}) {
    const query = new URLSearchParams({ limit: String(limit), offset: String(offset) });
    for (const status of statuses) query.append("status", status);
    return call("GET", `api/runs?${query}`);
  },
  run: (id) => call("GET", run(id)),
  result: (id) => call("GET", `${run(id)}/result`),
  workflow: (id) => call("GET", `${run(id)}/workflow`),
  inputs: (id) => call("GET", `${run(id)}/inputs`),
  workflows: () => call("GET", "api/workflows"),
  /** The store's live supervisors, their workers and the queue. */
  fleet: () => call("GET", "api/fleet"),
  start: (path, inputs, runId) =>
    call("POST", "api/runs", runId ? { path, inputs, runId } : { path, inputs }),
  signal: (id, address, data) => call("POST", `${run(id)}/signal`, { address, data, resume: true }),
  cancel: (id) => call("POST", `${run(id)}/cancel`, {}),
  resume: (id) => call("POST", `${run(id)}/resume`, {}),
  /** A new run going again from `at`, reusing what run `id` recorded before `at` started. */
  fork: (id, at) => call("POST", `${run(id)}/fork`, { at }),
  /** An EventSource on the run's events with seq > after. */
  stream: (id, after) => new EventSource(`${run(id)}/events/stream?after=${after}`),
};
