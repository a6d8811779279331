// The viewer's entry point: a hash router between the run list, a run's page and the fleet.

import { showFleet } from "./fleetview.js";
import { showList } from "./listview.js";
import { showRun } from "./runview.js";

const app = document.getElementById("app");
let leave = () => {};

// A token given as ?token= has been turned into a cookie by the server: drop it from view.
if (new URLSearchParams(location.search).has("token")) {
  history.replaceState(null, "", location.pathname + location.hash);
}

function route() {
  leave();
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const match = path.match(/^\/runs\/(.+)$/);
  if (path === "/fleet") {
    document.title = "Fleet · Cadenza";
    leave = showFleet(app);
  } else if (match) {
    const runId = decodeURIComponent(match[1]);
    document.title = `${runId} · Cadenza`;
    leave = showRun(app, runId);
  } else {
    document.title = "Runs · Cadenza";
    leave = showList(app, new URLSearchParams(query || ""));
  }
  app.focus({ preventScroll: true });
}

window.addEventListener("hashchange", route);
route();
