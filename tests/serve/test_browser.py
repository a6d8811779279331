"""The viewer in a real browser: Playwright driving Debian's headless Chromium.

Screenshots go to each test's tmp dir (the test artefacts). With
``CADENZA_DOCS_IMG=docs/img`` set, the finished graph run and the decision
log are also saved there, as the README shows them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from cadenza.serve import BackgroundServer, ServeOptions
from cadenza.testing import (
    RequestMatch,
    ServerReply,
    ServerRule,
    ServerToolCall,
)
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import CLI, EXAMPLES

from .conftest import REFLECTION, HeldCritic, write

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

if not CHROMIUM.exists():
    pytest.skip(
        f"browser tests need Debian's Chromium at {CHROMIUM} (apt-get install chromium)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium, one for the module."""
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A laptop-sized page; any script error fails the test."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()
    assert errors == []


def shoot(page: Page, where: Path, name: str, docs: str | None = None) -> None:
    """A full-page screenshot into the test's artefacts (and docs/img when asked)."""
    path = where / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    target = os.environ.get("CADENZA_DOCS_IMG")
    if docs is not None and target:
        shutil.copyfile(path, Path(target) / docs)


def show_new_run(page: Page, server: BackgroundServer, path: str) -> None:
    """Starts the workflow ``path`` (under the server's root) through the API; shows its run."""
    started = httpx.post(f"{server.url}/api/runs", json={"path": path}, headers=server.headers)
    page.goto(f"{server.page_url}#/runs/{started.json()['runId']}")


def test_watch_a_reflection_loop_then_answer_the_human_step(
    tmp_path: Path, page: Page, critic: HeldCritic
) -> None:
    """Start from the list, watch the iteration counter advance, open a step, answer, finish."""
    write(tmp_path, "reflection.yaml", REFLECTION)
    options = ServeOptions(store=tmp_path / "runs.db", root=tmp_path, port=0)
    with BackgroundServer(options) as server:
        refused = page.goto(server.url + "/")
        assert refused is not None
        assert refused.status == 401  # without the token, not even the page
        page.goto(server.page_url)  # the address with the token, traded for a cookie
        expect(page).not_to_have_url(re.compile("token"))  # dropped from the address bar
        page.get_by_label("Workflow file").fill("reflection.yaml")
        page.get_by_role("button", name="Start").click()
        expect(page.locator("h1")).to_have_text("watched-reflection")

        counter = page.locator('.loop-counter[data-loop="reflection"] .count')
        critique = page.locator('[data-key="reflection.critique"]')
        expect(counter).to_have_text("1")
        expect(critique).to_have_attribute("data-status", "running")
        expect(page.locator('[data-fact="now"]')).to_have_text("reflection.0.critique")
        shoot(page, tmp_path, "1-first-iteration")

        critic.first.set()
        expect(counter).to_have_text("2")
        expect(page.locator('[data-fact="now"]')).to_have_text("reflection.1.critique")
        shoot(page, tmp_path, "2-second-iteration")

        write_node = page.locator('[data-key="reflection.write"]')
        write_node.focus()
        page.keyboard.press("Enter")
        details = page.locator("aside.details")
        expect(details.locator("h2")).to_contain_text("reflection.1.write")
        expect(details.locator("pre.content")).to_have_text("Draft two")
        expect(details).to_contain_text("You are a writer. Write one short paragraph.")
        expect(details).to_contain_text("Write about actor runtimes.")
        details.get_by_role("button", name="reflection.0.write").click()
        expect(details.locator("pre.content")).to_have_text("Draft one")
        shoot(page, tmp_path, "3-step-details")

        critic.second.set()
        form = page.locator('form.answer[data-address="approve"]')
        expect(form).to_contain_text("Publish the final draft?")
        expect(page.locator(".run-status .status")).to_have_text("waiting")
        shoot(page, tmp_path, "4-waiting-for-a-person")
        form.get_by_label("publish").check()
        form.get_by_label("note").fill("ship it")
        form.get_by_role("button", name="Send answer").click()

        expect(page.locator(".run-status .status")).to_have_text("completed")
        page.get_by_role("tab", name="Output").click()
        expect(page.locator("pre.output")).to_contain_text('"publish": true')
        expect(page.locator('[data-key="approve"]')).to_have_attribute("data-status", "completed")
        shoot(page, tmp_path, "5-finished")

        result = httpx.get(f"{server.url}/api/runs", headers=server.headers).json()["runs"][0]
        assert result["status"] == "completed"


def test_a_finished_graph_run_shows_the_path_taken(tmp_path: Path, page: Page) -> None:
    """The tool router: states visited, edges taken, the timeline and the graph's path."""
    options = ServeOptions(store=tmp_path / "runs.db", root=EXAMPLES, port=0)
    with BackgroundServer(options) as server:
        show_new_run(page, server, "tool-router.yaml")
        expect(page.locator(".run-status .status")).to_have_text("completed")
        for state in ("analyze", "search", "calc"):
            node = page.locator(f'[data-key="router.{state}"]')
            expect(node).to_have_attribute("data-status", "completed")
        expect(page.locator('[data-key="router.analyze"] .visits')).to_have_text(
            "\u00d73"
        )  # 3 visits
        # start→analyze, analyze→search, search→analyze, analyze→calc, calc→analyze, analyze→END
        expect(page.locator("svg.diagram .edge.taken")).to_have_count(6)
        expect(page.locator("svg.diagram .edge", has_text="needs facts")).to_have_count(1)
        rows = page.locator("table.timeline tbody tr")
        expect(rows).to_have_count(6)
        details = page.locator("aside.details")
        page.locator('[data-key="router.calc"]').click()
        expect(details.locator("pre.content")).to_contain_text("6*7=42")
        page.locator('[data-key="router.analyze"]').click()
        expect(details.locator("h2")).to_contain_text("router.4.analyze")
        expect(details.locator("pre.content")).to_have_text("FINISHED: 42 is the answer")
        expect(details).to_contain_text("Answer USE_SEARCH, USE_CALC or FINISHED.")
        shoot(page, tmp_path, "graph-run", docs="viewer-graph-run.png")

        page.get_by_role("tab", name="Output").click()
        expect(page.locator("#panel-output")).to_contain_text(
            "analyze → search → analyze → calc → analyze (end)"
        )


def test_a_control_loop_decision_log_reads_as_a_table(tmp_path: Path, page: Page) -> None:
    """control-tagline: the check outranks the judge (retry), then the shorter draft passes."""
    options = ServeOptions(store=tmp_path / "runs.db", root=EXAMPLES, port=0)
    with BackgroundServer(options) as server:
        show_new_run(page, server, "control-tagline.yaml")
        expect(page.locator(".run-status .status")).to_have_text("completed")
        expect(page.locator('.loop-counter[data-loop="tagline"] .count')).to_have_text("2")

        timeline = page.get_by_role("tab", name="Timeline")
        timeline.focus()
        page.keyboard.press("ArrowRight")
        expect(page.get_by_role("tab", name="Decision log")).to_have_attribute(
            "aria-selected", "true"
        )
        rows = page.locator('table.decisions[data-control="tagline"] tbody tr')
        expect(rows).to_have_count(2)
        expect(rows.nth(0).locator("td.decision")).to_have_text("retry")
        expect(rows.nth(0)).to_contain_text("Too long: 240 chars, limit 120")
        expect(rows.nth(0)).to_contain_text("✗ size(result.text) <= 120")
        expect(rows.nth(1).locator("td.decision")).to_have_text("accept")
        page.locator('[data-key="tagline.decide"]').click()
        expect(page.locator("aside.details .status")).to_have_text("completed")
        expect(page.locator("aside.details table.decisions tbody tr")).to_have_count(2)
        page.get_by_role("tab", name="Decision log").scroll_into_view_if_needed()
        shoot(page, tmp_path, "decision-log", docs="viewer-decision-log.png")


QUICKSTART = EXAMPLES.parent / "docs" / "quickstart.md"


def test_a_judged_loop_on_one_step_counts_its_iterations(tmp_path: Path, page: Page) -> None:
    """The quick start's judged loop (an agent step repeated until a judge says done):
    its iterations are addressed `draft.0`, `draft.1`, the step itself, with the judge
    at `draft.0.untilAgent`. The counter and the chip say 2 iterations, there is no chip
    per iteration, and the timeline's rows for `draft.0` and `draft.1` read as iterations."""
    judged = re.search(r"```yaml\n(# file: judged\.yaml\n.*?)```", QUICKSTART.read_text(), re.S)
    assert judged is not None
    write(tmp_path, "judged.yaml", judged.group(1))
    options = ServeOptions(store=tmp_path / "runs.db", root=tmp_path, port=0)
    with BackgroundServer(options) as server:
        show_new_run(page, server, "judged.yaml")
        expect(page.locator(".run-status .status")).to_have_text("completed")

        chips = page.locator(".loop-counter")
        expect(chips).to_have_count(1)
        expect(chips).to_have_attribute("data-loop", "draft")
        expect(chips.locator(".count")).to_have_text("2")
        expect(chips).to_contain_text("done: judge")
        counter = page.locator('svg.diagram [data-loop="draft"]')
        expect(counter).to_have_text("✓ 2 iterations (judge)")

        rows = page.locator("table.timeline tbody tr")
        expect(rows).to_have_count(5)
        labels = ["draft", "↻ iteration 1", "untilAgent", "↻ iteration 2", "untilAgent"]
        expect(rows.locator("td.addr")).to_have_text(labels)
        expect(rows.locator("td:nth-child(2)")).to_have_text(
            ["loop", "agent", "judge", "agent", "judge"]
        )
        for n in (0, 1):
            row = page.locator(f'table.timeline tr[data-address="draft.{n}"]')
            expect(row).to_have_attribute("data-kind", "iteration")
        shoot(page, tmp_path, "judged-loop")


STREAMING = """\
name: streaming-writer
agents:
  writer:
    prompt: "You are a writer."
    model: "openai:gpt-test"
    tools: [bash]
steps:
  - id: draft
    agent: writer
    instructions: "Write about actor runtimes."
"""


def test_a_running_agents_streamed_text_shows_on_its_panel(
    tmp_path: Path, page: Page, model_server: StartLLMServer
) -> None:
    """While the agent's third turn waits, its panel shows what its model streamed, each
    turn's text on a line of its own (zenflow's ``done`` ends a turn's)."""
    first, second = threading.Event(), threading.Event()
    shell = ServerToolCall("bash", {"command": "true"})
    outline = ServerReply(
        "Outline: mailboxes, supervisors, backpressure.",
        tool_calls=[shell],
        chunk=5,
        hold=first,  # until the page watches the step
    )
    later = [ServerReply("Checked.", tool_calls=[shell], chunk=5)]
    later.append(ServerReply("Final draft.", hold=second))
    rules = [
        ServerRule(later, match=RequestMatch(last_role="tool")),
        ServerRule([outline]),
    ]
    write(tmp_path, "streaming.yaml", STREAMING)
    options = ServeOptions(store=tmp_path / "runs.db", root=tmp_path, port=0)
    model = model_server(rules)
    try:
        with BackgroundServer(options) as server:
            show_new_run(page, server, "streaming.yaml")
            draft = page.locator('[data-key="draft"]')
            expect(draft).to_have_attribute("data-status", "running")
            draft.click()
            details = page.locator("aside.details")
            expect(details.locator("h2")).to_contain_text("draft")
            model.wait_for_requests(1)
            first.set()
            streaming = details.locator("pre.streaming")
            written = "Outline: mailboxes, supervisors, backpressure.\nChecked."
            expect(streaming).to_have_js_property("textContent", written)
            shoot(page, tmp_path, "streaming")
            second.set()
            expect(page.locator(".run-status .status")).to_have_text("completed")
            expect(streaming).to_have_count(0)  # the step's record takes its place
            expect(details.locator("pre.content")).to_contain_text("Final draft.")
    finally:
        first.set()
        second.set()


CHAIN = """\
name: chain
steps:
  - {id: first, command: "echo first"}
  - {id: second, command: "echo second", dependsOn: [first]}
  - {id: third, command: "echo third", dependsOn: [second]}
output: "steps.third.content"
"""


def test_run_again_from_here_opens_the_fork_linked_to_its_parent(
    tmp_path: Path, page: Page
) -> None:
    """A step's "Run again from here" starts a fork there and shows it: its header links
    to the run it came from, whose header lists it back; the steps before it are replayed."""
    write(tmp_path, "chain.yaml", CHAIN)
    options = ServeOptions(store=tmp_path / "runs.db", root=tmp_path, port=0)
    with BackgroundServer(options) as server:
        started = httpx.post(
            f"{server.url}/api/runs", json={"path": "chain.yaml"}, headers=server.headers
        )
        source = started.json()["runId"]
        page.goto(f"{server.page_url}#/runs/{source}")
        expect(page.locator(".run-status .status")).to_have_text("completed")
        expect(page.locator(".lineage")).to_be_empty()
        page.locator('[data-key="second"]').click()
        details = page.locator("aside.details")
        expect(details.locator("h2")).to_contain_text("second")
        details.get_by_role("button", name="Run again from here").click()

        parent = page.locator(".forked-from a")
        expect(parent).to_have_text(source)
        expect(page.locator(".forked-from")).to_have_text(f"Forked from {source} at second")
        expect(page.locator(".run-status .status")).to_have_text("completed")
        fork = re.search(r"#/runs/(.+)$", page.url)
        assert fork is not None
        assert fork.group(1) != source
        page.locator('[data-key="first"]').click()
        expect(details).to_contain_text("yes (recorded outcome, not run again)")
        page.locator('[data-key="second"]').click()
        expect(details).not_to_contain_text("recorded outcome")
        shoot(page, tmp_path, "fork")

        parent.click()
        expect(page.locator(".mono.muted").first).to_have_text(source)
        expect(page.locator(".lineage .forks a")).to_have_text(fork.group(1))
        expect(page.locator(".lineage .forks")).to_contain_text("at second")
        runs = httpx.get(f"{server.url}/api/runs/{source}", headers=server.headers).json()
        assert [f["runId"] for f in runs["forks"]] == [fork.group(1)]


GATED = """
name: gated
steps:
  - id: wait
    command: 'n=0; while [ ! -e "$GATE" ] && [ $n -lt 1500 ]; do sleep 0.02; n=$((n+1)); done'
    env: {{GATE: "{gate}"}}
"""
"""One command step that waits for the test's gate file (given up after about 30 s)."""


def test_the_fleet_page_shows_the_supervisor_its_worker_and_the_queue(
    tmp_path: Path, page: Page
) -> None:
    """The server is a supervisor (``--recover --capacity 1 --workers``) with one worker
    found through the roll; three runs queued: the Fleet page shows it driving 1 run,
    the worker with its step in flight, 2 runs queued; then the queue drains."""
    gate = tmp_path / "gate"
    write(tmp_path, "gated.yaml", GATED.format(gate=gate))
    store = tmp_path / "runs.db"
    options = ServeOptions(
        store=store,
        root=tmp_path,
        port=0,
        recover=True,
        capacity=1,
        workers="tcp://127.0.0.1:*",
    )
    worker: subprocess.Popen[bytes] | None = None
    with BackgroundServer(options) as server:
        try:
            worker = subprocess.Popen(
                [*CLI, "worker", "--store", str(store), "--name", "w1"],
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(3):
                queued = httpx.post(
                    f"{server.url}/api/runs",
                    json={"path": "gated.yaml", "queue": True},
                    headers=server.headers,
                )
                assert queued.status_code == 201, queued.text
            page.goto(f"{server.page_url}#/fleet")
            expect(page.locator("h1")).to_have_text("Fleet")
            supervisor = page.locator("tr[data-supervisor]")
            expect(supervisor).to_have_count(1)
            expect(supervisor.locator('[data-col="capacity"]')).to_have_text("1")
            expect(supervisor.locator('[data-col="runs"]')).to_have_text("1", timeout=60_000)
            on_worker = page.locator('tr[data-worker="w1"] [data-col="in-flight"]')
            expect(on_worker).to_have_text("1", timeout=60_000)
            expect(page.locator('[data-fact="queued"]')).to_have_text("2")
            expect(page.locator('[data-fact="by-priority"]')).to_have_text("2 at 0")
            shoot(page, tmp_path, "fleet", docs="fleet.png")
            gate.touch()
            expect(page.locator('[data-fact="queued"]')).to_have_text("0", timeout=60_000)
            expect(supervisor.locator('[data-col="runs"]')).to_have_text("0", timeout=60_000)
            expect(on_worker).to_have_text("0")
        finally:
            if worker is not None:
                worker.kill()
                worker.wait(timeout=30)
