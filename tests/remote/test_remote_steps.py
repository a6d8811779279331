"""Handler and agent steps on a worker behave as they do in the supervisor's process."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from cadenza import RunResult, Runtime
from cadenza.protocols import Event, EventType
from cadenza.remote import Dispatcher
from cadenza.testing import ScriptedLLMServer, ServerRule
from tests._helpers import Sink
from tests._processes import running
from tests._workflows import MESSAGING
from tests.conftest import WriteFlow

from .conftest import SpawnWorker

HANDLERS = """
name: handlers
inputs:
  who: {type: string, default: "world"}
steps:
  - id: greet
    handler: "HANDLERS:greet"
  - id: flaky
    dependsOn: [greet]
    handler: "HANDLERS:flaky"
    retries: 1
  - id: each
    dependsOn: [flaky]
    handler: "HANDLERS:item"
    loop: {forEach: "[10, 20]"}
"""

HANDLER_CODE = """
import os

async def greet(ctx):
    return {"greeting": "hello " + ctx.inputs["who"], "pid": os.getpid()}

def flaky(ctx):
    if ctx.attempt == 1:
        raise RuntimeError("first try fails")
    return {"saw": ctx.steps["greet"].result["greeting"], "key": ctx.idempotency_key}

async def item(ctx):
    return f"{ctx.index}:{ctx.item}"
"""


async def run_on_worker(
    flow: Path,
    spawn_worker: SpawnWorker,
    name: str,
    events: Sink[Event] | None = None,
    **worker_options: Any,
) -> RunResult:
    """Runs ``flow`` with one worker called ``name`` connected; events go to ``events``."""
    async with Runtime(workers=Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)) as runtime:
        assert runtime.workers is not None
        spawn_worker(runtime.workers.endpoint, name, **worker_options)
        handle = await runtime.start(flow, on_event=events)
        return await handle.result()


async def test_handlers_run_on_the_worker_with_their_context(
    write_flow: WriteFlow, spawn_worker: SpawnWorker
) -> None:
    """A handler on a worker sees inputs, earlier steps, the attempt and its forEach item;
    a failed attempt is retried like an in-process one."""
    flow = write_flow(HANDLERS, handlers=HANDLER_CODE)
    events: Sink[Event] = Sink()
    result = await run_on_worker(flow, spawn_worker, "hands", events)
    assert result.status == "completed", result.error
    greet = result.steps["greet"]
    assert greet.result["greeting"] == "hello world"
    assert greet.result["pid"] != os.getpid()
    flaky = result.steps["flaky"]
    assert flaky.attempts == 2
    assert flaky.result == {"saw": "hello world", "key": f"{result.run_id}:flaky:2"}
    assert [result.steps[f"each[{i}]"].content for i in (0, 1)] == ["0:10", "1:20"]
    assert {r.worker for r in result.steps.values() if r.worker} == {"hands"}
    retry = next(e for e in events.items if e.type == EventType.STEP_RETRY)
    assert retry.error == "RuntimeError: first try fails"


async def test_agents_run_on_the_worker_with_its_own_keys(
    write_flow: WriteFlow, spawn_worker: SpawnWorker
) -> None:
    """Agents run their tool loop on the worker, with the worker's model keys; their messages
    reach the supervisor's coordinator, their events and usage reach the run."""
    flow = write_flow(MESSAGING)
    events: Sink[Event] = Sink()
    with ScriptedLLMServer([ServerRule(["heard"])]) as server:
        env = {**os.environ, **server.environ()}
        result = await run_on_worker(flow, spawn_worker, "thinker", events, env=env)
        prompt = json.dumps(server.requests[0].body)
    assert result.status == "completed", result.error
    assert result.steps["tell"].content == "told"
    assert result.steps["listener"].content == "heard"
    assert result.steps["listener"].worker == "thinker"
    assert "price is 42" in prompt  # the inbox, drained in the supervisor, travelled
    routes = [(m.from_, m.to, m.text) for m in result.messages]
    assert routes == [
        ("tell", "coordinator", "tell the listener: price is 42"),
        ("coordinator", "listener", "price is 42"),
    ]
    turns = {e.step_id for e in events.items if e.type == "agent_turn"}
    assert {"tell", "listener"} <= turns
    assert result.usage.llm_calls >= 3
    # The worker's streamed text crossed the wire as zenflow's output events, shown here.
    streamed = [e for e in events.items if e.type == "output" and e.step_id == "listener"]
    assert "".join(e.delta or "" for e in streamed) == "heard"
    assert streamed[-1].done is True
    assert {(e.agent, e.agent_id, e.seq) for e in streamed} == {("listener", "listener", 0)}


COSTLY = """
name: costly
prices: {scripted: {input: 100000, output: 100000}}
options: {maxCost: BUDGET}
agents:
  writer: {script: ["one", "two", "three"], maxCost: AGENT}
steps:
  - {id: first, agent: writer, instructions: "First."}
  - {id: second, dependsOn: [first], agent: writer, instructions: "Second."}
  - {id: third, dependsOn: [second], agent: writer, instructions: "Third."}
"""


@pytest.mark.parametrize(
    ("budget", "agent", "named"),
    [("0.5", "100", "options.maxCost"), ("100", "0.5", "agents.writer.maxCost")],
)
async def test_a_cost_budget_stops_agent_steps_on_a_worker(
    write_flow: WriteFlow, spawn_worker: SpawnWorker, budget: str, agent: str, named: str
) -> None:
    """The worker reserves its calls against the budget with least left, as its supervisor
    sent it: the first call (priced far past the budget) is made, the next step's refused
    on the worker, the run ends BudgetExceeded naming that budget."""
    flow = write_flow(COSTLY.replace("BUDGET", budget).replace("AGENT", agent))
    result = await run_on_worker(flow, spawn_worker, "remote")
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.type == "BudgetExceeded"
    assert named in result.error.message
    assert result.steps["first"].worker == "remote"
    assert result.steps["first"].content == "one"
    assert result.steps["second"].status == "failed"
    assert result.usage.llm_calls == 1
    assert result.usage.cost > float(budget if named == "options.maxCost" else agent)


MEMORY = """
name: memory
agents:
  talker:
    script: ["one", "two", "three"]
steps:
  - id: talk
    agent: talker
    instructions: "Talk."
    loop: {maxIterations: 2, memory: accumulate}
  - id: once
    dependsOn: [talk]
    agent: talker
    instructions: "Once."
"""


async def test_an_agent_loop_that_keeps_memory_runs_in_the_supervisor(
    write_flow: WriteFlow, spawn_worker: SpawnWorker
) -> None:
    """The conversation a remembering loop continues is the run's state: those visits stay
    in the supervisor; a fresh agent step still goes to a worker."""
    flow = write_flow(MEMORY)
    result = await run_on_worker(flow, spawn_worker, "remote")
    assert result.status == "completed", result.error
    assert [result.steps[f"talk.{i}"].content for i in (0, 1)] == ["one", "two"]
    assert {result.steps[f"talk.{i}"].worker for i in (0, 1)} == {None}
    assert result.steps["once"].worker == "remote"


TOOLS = """
name: remote-tools
inputs:
  who: {type: string, default: "world"}
steps:
  - id: greet
    handler: "HANDLERS:greet"
  - id: save
    dependsOn: [greet]
    tool: write
    toolInput: {path: out/greeting.txt, content: $steps.greet.result.greeting}
  - id: where
    tool: bash
    toolInput: {command: "echo $$"}
  - id: add
    tool: "HANDLERS:add"
    toolInput: {a: 2, b: 3}
  - id: wrong
    tool: "HANDLERS:add"
    toolInput: {a: two}
    onError: continue
"""

TOOL_CODE = (
    HANDLER_CODE
    + """
def add(a: int, b: int = 0) -> dict:
    return {"sum": a + b}
"""
)


async def test_tool_steps_run_on_the_worker_with_their_arguments_evaluated_here(
    write_flow: WriteFlow, spawn_worker: SpawnWorker
) -> None:
    """A tool step's `$` arguments are evaluated by the supervisor; the call runs on the
    worker, whose tool_call events reach the run; a bad argument fails as it would here."""
    flow = write_flow(TOOLS, handlers=TOOL_CODE)
    events: Sink[Event] = Sink()
    result = await run_on_worker(flow, spawn_worker, "hands", events)
    assert result.status == "completed", result.error
    assert (flow.parent / "out" / "greeting.txt").read_text() == "hello world"
    assert int(result.steps["where"].content or "0") != os.getpid()
    assert result.steps["add"].content == '{"sum":5}'
    wrong = result.steps["wrong"]
    assert wrong.status == "failed"
    assert wrong.error is not None
    assert wrong.error.type == "ToolError"
    assert "invalid arguments" in wrong.error.message
    tools = ("save", "where", "add", "wrong")
    assert {result.steps[step].worker for step in tools} == {"hands"}
    phases = [
        (e.step_id, (e.data or {}).get("phase")) for e in events.items if e.type == "tool_call"
    ]
    assert sorted(phases) == sorted((step, p) for step in tools for p in ("start", "end"))


async def test_a_tool_step_on_a_worker_is_ended_by_its_timeout(
    write_flow: WriteFlow, spawn_worker: SpawnWorker, tmp_path: Path
) -> None:
    """The step's timeout holds on the worker: the bash process group is gone after it."""
    flow = write_flow(
        f"""
        name: remote-timeout
        steps:
          - {{id: quick, tool: glob, toolInput: {{pattern: "*.yaml"}}}}
          - id: slow
            timeout: 1s
            tool: bash
            toolInput: {{command: 'echo $$ > {tmp_path}/slow.pid; exec sleep 300'}}
        """
    )
    result = await run_on_worker(flow, spawn_worker, "hands")
    quick = result.steps["quick"]
    assert (quick.content, quick.worker) == ("flow.yaml", "hands")
    slow = result.steps["slow"]
    assert slow.status == "failed"
    assert slow.error is not None
    assert (slow.error.type, slow.error.message) == ("Timeout", "timed out after 1s")
    assert not running(tmp_path / "slow.pid")


JOURNALED = """
name: journaled
agents:
  appender:
    tools: [bash]
    script:
      - toolCalls: [{name: bash, arguments: {command: "echo 1 >> lines.txt"}}]
      - toolCalls: [{name: bash, arguments: {command: "echo 2 >> lines.txt"}}]
      - "appended"
steps:
  - id: append
    agent: appender
    instructions: "Append."
"""


async def test_an_agent_on_a_worker_journals_its_calls_in_the_supervisors_store(
    write_flow: WriteFlow, spawn_worker: SpawnWorker, tmp_path: Path
) -> None:
    """The worker sends each call it makes back: the run's store holds the agent's three
    model calls and two tool calls, under the step's address and attempt, in order."""
    flow = write_flow(JOURNALED)
    store = tmp_path / "runs.db"
    dispatcher = Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)
    async with Runtime(store=store, workers=dispatcher) as runtime:
        assert runtime.workers is not None
        spawn_worker(runtime.workers.endpoint, "journaler")
        result = await runtime.run(flow, run_id="r-1")
        calls = await runtime.store.calls("r-1")
    assert result.status == "completed", result.error
    assert result.steps["append"].worker == "journaler"
    assert [(c.address, c.attempt, c.seq, c.kind) for c in calls] == [
        ("append", 1, 1, "model"),
        ("append", 1, 2, "tool"),
        ("append", 1, 3, "model"),
        ("append", 1, 4, "tool"),
        ("append", 1, 5, "model"),
    ]
    assert json.loads(calls[-1].body)["content"] == "appended"


PARKED = """
name: parked
agents:
  appender:
    tools: [bash, "HANDLERS:hold"]
    script:
      - toolCalls: [{name: bash, arguments: {command: "echo 1 >> lines.txt"}}]
      - toolCalls: [{name: hold, arguments: {}}]
      - "done"
steps:
  - id: append
    agent: appender
    instructions: "Append, then hold."
"""

HOLD = """
import asyncio
from pathlib import Path

async def hold() -> str:
    while Path("hold.flag").exists():  # the first worker's supervisor goes away meanwhile
        await asyncio.sleep(0.01)
    return "released"
"""


async def test_a_resumed_agent_step_replays_its_calls_on_a_worker(
    write_flow: WriteFlow, spawn_worker: SpawnWorker, tmp_path: Path
) -> None:
    """Interrupted while its second tool call runs on a worker, the run resumes with
    another worker: the step's recorded calls travel with its order and are replayed
    there (the bash line is appended once), and it goes on live from the held call."""
    flow = write_flow(PARKED, handlers=HOLD)
    store = tmp_path / "runs.db"
    (tmp_path / "hold.flag").touch()
    held = anyio.Event()

    def holding(event: Event) -> None:
        if event.type == "tool_call" and (event.data or {}).get("tool_name") == "hold":
            held.set()

    first = Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)
    async with Runtime(store=store, workers=first, shutdown_deadline=0) as runtime:
        assert runtime.workers is not None
        spawn_worker(runtime.workers.endpoint, "first")
        await runtime.start(flow, run_id="r-1", on_event=holding)
        with anyio.fail_after(30):  # a hang detector, not a timing
            await held.wait()
    (tmp_path / "hold.flag").unlink()
    events: Sink[Event] = Sink()
    second = Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)
    async with Runtime(store=store, workers=second) as runtime:
        assert runtime.workers is not None
        spawn_worker(runtime.workers.endpoint, "second")
        result = await (await runtime.resume("r-1", on_event=events)).result()
    assert result.status == "completed", result.error
    assert result.steps["append"].worker == "second"
    assert (tmp_path / "lines.txt").read_text().split() == ["1"]
    replayed = [e.data for e in events.items if e.type == "calls_replayed"]
    assert replayed == [{"calls": 3, "model": 2, "tools": 1}]
