"""Forking a run (time travel): a new run reuses what its source recorded before an
address started, with outputs or inputs replaced, and runs live from there.

The source is never written: its rows are read back byte for byte through sqlite3.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cadenza import Runtime
from cadenza.errors import ForkRefused, InputError, RunNotFound
from cadenza.protocols import CallRecord, EventType, RunForked, payload
from cadenza.store import MemoryRunStore
from cadenza.testing import ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from cadenza.workflow import load_workflow_text
from tests._helpers import Watch, assert_refused, cadenza, import_source
from tests._terminal import Terminal
from tests.conftest import StoreFactory, WriteFlow

CHAIN = """
name: chain
agents:
  worker:
    model: "openai:test-model"
    prompt: "You are one link of a chain."
inputs:
  topic: {type: string, default: actors}
steps:
  - {id: s1, agent: worker, instructions: "Do step 1 about {{ inputs.topic }}."}
  - {id: s2, agent: worker, dependsOn: [s1], instructions: "Do step 2."}
  - {id: s3, agent: worker, dependsOn: [s2], instructions: "Do step 3."}
  - {id: s4, agent: worker, dependsOn: [s3], instructions: "Do step 4."}
  - {id: s5, agent: worker, dependsOn: [s4], instructions: "Do step 5."}
  - {id: s6, agent: worker, dependsOn: [s5], instructions: "Do step 6."}
output: "steps.s6.content"
"""

STEPS = [f"s{n}" for n in range(1, 7)]

# Each step's request is answered by the rule of its own instructions: the server's
# log says which step asked, and what it was shown (its dependency's output).
RULES = [
    ServerRule([f"answer {n}"], match={"user": f"Do step {n}"}, name=f"s{n}") for n in range(1, 7)
]

EDITED = "An edited second answer."

ECHOES = """
name: echoes
inputs:
  word: {type: string, default: one}
steps:
  - {id: s1, command: "echo ${WORD}", env: {WORD: "{{ inputs.word }}"}}
  - {id: s2, command: "echo two", dependsOn: [s1]}
  - {id: s3, command: "echo three", dependsOn: [s2]}
  - {id: s4, command: "echo four", dependsOn: [s3]}
output: "steps.s4.content"
"""


def source_rows(store: Path, run_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the store holds about ``run_id``, in every table keyed by run (the calls'
    too, where the store has them), as the bytes SQLite holds."""
    connection = sqlite3.connect(store)
    try:
        tables = {
            name: [row[1] for row in connection.execute(f"PRAGMA table_info({name})")]
            for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        connection.text_factory = bytes
        rows = {}
        for table, columns in tables.items():
            if "run_id" in columns:
                order = ", ".join(str(n) for n in range(1, len(columns) + 1))
                rows[table] = connection.execute(
                    f"SELECT * FROM {table} WHERE run_id = ? ORDER BY {order}", (run_id,)
                ).fetchall()
    finally:
        connection.close()
    assert {"runs", "events", "steps", "documents", "leases"} <= set(rows)
    return rows


def stored_events(store: Path, run_id: str, cwd: Path) -> list[dict[str, Any]]:
    shown = cadenza("runs", "show", run_id, "--events", "--store", str(store), cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines()]


def test_a_chain_forked_at_step_3_with_step_2_edited_calls_the_model_for_3_to_6_only(
    tmp_path: Path, write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """The acceptance: steps 1-2 are replayed (no model call), 3-6 run live and step 3
    sees the edited output of step 2; the source's rows do not change by a byte."""
    server = model_server(RULES)
    flow = write_flow(CHAIN)
    store = tmp_path / "runs.db"
    where = ("--store", str(store))
    ran = cadenza("run", str(flow), "--run-id", "source", "--json", *where, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert [request.rule for request in server.requests] == STEPS
    before = source_rows(store, "source")
    assert before["events"], "the source's events are read back"

    forked = cadenza(
        "fork", "source", "--at", "s3", "--set", f"s2={EDITED}", "--run-id", "child", "--json",
        *where, cwd=tmp_path,
    )  # fmt: skip

    assert forked.returncode == 0, forked.stderr
    assert "cadenza: run child forks source at s3" in forked.stderr
    assert [request.rule for request in server.requests[6:]] == ["s3", "s4", "s5", "s6"]
    third = json.dumps(server.requests[6].body)
    assert EDITED in third
    assert "answer 2" not in third
    result = json.loads(forked.stdout)
    assert (result["runId"], result["status"], result["output"]) == (
        "child",
        "completed",
        "answer 6",
    )
    contents = {address: step["content"] for address, step in result["steps"].items()}
    assert contents == {"s1": "answer 1", "s2": EDITED, **{s: f"answer {s[1]}" for s in STEPS[2:]}}
    assert source_rows(store, "source") == before

    events = stored_events(store, "child", tmp_path)
    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    types = [event["type"] for event in events]
    forked_at = types.index("run_forked")
    assert types[0] == "workflow_start"
    source = stored_events(store, "source", tmp_path)
    cut = next(e["seq"] for e in source if e["type"] == "step_start" and e["stepId"] == "s3")
    assert forked_at == cut - 1  # right after the source's events before s3 started
    assert events[:forked_at] == [{**event, "runId": "child"} for event in source[: cut - 1]]
    assert events[forked_at]["data"] == {
        "parentRunId": "source",
        "at": "s3",
        "replayable": 2,
        "afterSeq": forked_at,
        "edited": ["s2"],
    }
    after = events[forked_at + 1 :]
    assert [e["stepId"] for e in after if e["type"] == "step_replayed"] == ["s1", "s2"]
    assert [e["stepId"] for e in after if e["type"] == "step_start"] == STEPS[2:]
    assert sum(1 for e in after if e["type"] == "agent_turn") == 8  # a request and its response
    checked = cadenza("runs", "check", *where, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout


def test_runs_show_gives_the_lineage_both_ways(tmp_path: Path, write_flow: WriteFlow) -> None:
    """On a terminal: the fork says where it came from, its source lists its forks."""
    flow = write_flow(ECHOES)
    cadenza("run", str(flow), "--run-id", "source", "--store", "runs.db", cwd=tmp_path)
    for child, at in (("first", "s3"), ("second", "s2")):
        forked = cadenza(
            "fork", "source", "--at", at, "--run-id", child, "--store", "runs.db", cwd=tmp_path
        )
        assert forked.returncode == 0, forked.stderr
    with Terminal("runs", "show", "second", "--store", "runs.db", cwd=tmp_path) as tty:
        assert tty.wait() == 0
    lines = tty.lines()
    assert lines[0] == "run second (echoes): completed"
    assert lines[2] == "  forked from source at s2"
    with Terminal("runs", "show", "source", "--store", "runs.db", cwd=tmp_path) as tty:
        assert tty.wait() == 0
    lines = tty.lines()
    assert lines[2:4] == ["  fork first at s3: completed", "  fork second at s2: completed"]
    assert not any(line.startswith("  forked from") for line in lines)


def test_a_fork_that_cannot_start_is_one_line_and_writes_nothing(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """An unknown run, an address never started, an output for a step the fork runs
    again, a malformed --set, an unknown input: exit 2, one line, no new run."""
    flow = write_flow(ECHOES)
    cadenza("run", str(flow), "--run-id", "source", "--store", "runs.db", cwd=tmp_path)
    before = source_rows(tmp_path / "runs.db", "source")

    def fork(*args: str) -> Any:
        return cadenza("fork", *args, "--store", "runs.db", cwd=tmp_path)

    assert_refused(fork("nope", "--at", "s1"), "no run 'nope' in the store")
    assert_refused(
        fork("source", "--at", "s9"), "run 'source' never started 's9'; it started s1, s2, s3, s4"
    )
    assert_refused(
        fork("source", "--at", "s2", "--set", "s3=later"),
        "cannot set the output of 's3': a fork of run 'source' at 's2' reuses only s1",
    )
    assert_refused(fork("source", "--at", "s2", "--set", "s1"), "is not of the form ADDRESS=VALUE")
    assert_refused(fork("source", "--at", "s2", "--set-json", "s1={"), "the value is not JSON")
    assert_refused(fork("source", "--at", "s2", "--input", "wrod=x"), "unknown input 'wrod'")
    listed = cadenza("runs", "list", "--store", "runs.db", cwd=tmp_path)
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["source"]
    assert source_rows(tmp_path / "runs.db", "source") == before


async def test_a_fork_replaces_inputs_and_takes_a_structured_output(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """``inputs`` replace the source's and are checked; a JSON value is a step's result."""
    flow = write_flow(ECHOES)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        await runtime.run(flow, run_id="source", inputs={"word": "first"})
        handle = await runtime.fork("source", at="s1", inputs={"word": "again"}, new_run_id="again")
        result = await handle.result()
        assert result.steps["s1"].content == "again\n"
        row = await runtime.get_run("again")
        assert row.inputs == {"word": "again"}
        assert (row.parent_run_id, row.parent_address) == ("source", "s1")

        handle = await runtime.fork("source", at="s3", set={"s2": {"verdict": "ok", "n": 2}})
        result = await handle.result()
        assert result.steps["s2"].result == {"verdict": "ok", "n": 2}
        assert json.loads(result.steps["s2"].content or "") == {"verdict": "ok", "n": 2}
        assert result.steps["s1"].content == "first\n"  # the source's inputs, kept

        with pytest.raises(InputError, match="input 'word'"):
            await runtime.fork("source", at="s1", inputs={"word": ["a"]})
        with pytest.raises(InputError, match="already taken"):
            await runtime.fork("source", at="s1", new_run_id="again")
        with pytest.raises(RunNotFound):
            await runtime.fork("missing", at="s1")
        with pytest.raises(ForkRefused, match="never started 's9'"):  # an InputError too
            await runtime.fork("source", at="s9")
        forks = await runtime.forks("source")
        assert forks[0].run_id == "again"
        assert len(forks) == 2


async def test_a_fork_on_every_store_leaves_its_source_as_it_was(
    store_factory: StoreFactory,
) -> None:
    """Memory, SQLite, PostgreSQL: the fork records its lineage and replays what it
    reuses; a second runtime on the same data reads the source as it was."""
    flow = load_workflow_text(ECHOES)
    async with Runtime(store=store_factory()) as runtime:
        await runtime.run(flow, run_id="source")
        before = (await runtime.stored_events("source"), await runtime.store.steps("source"))
        handle = await runtime.fork("source", at="s3", set={"s2": "edited"}, new_run_id="child")
        result = await handle.result()
        assert (result.status, result.steps["s2"].content) == ("completed", "edited")
        assert result.output == "four\n"
        after = (await runtime.stored_events("source"), await runtime.store.steps("source"))
        assert after == before
        if store_factory.kind == "memory":
            return  # nothing outlives the runtime
    async with Runtime(store=store_factory()) as reader:
        child = await reader.get_run("child")
        assert (child.parent_run_id, child.parent_address) == ("source", "s3")
        assert [row.run_id for row in await reader.forks("source")] == ["child"]
        assert (await reader.stored_events("source"), await reader.store.steps("source")) == before


async def test_a_fork_copies_the_calls_of_the_steps_it_reuses_only() -> None:
    """The recorded calls of reused steps come along (a fork replays offline too);
    the source keeps its own."""
    store = MemoryRunStore()
    async with Runtime(store=store) as runtime:
        await runtime.run(load_workflow_text(ECHOES), run_id="source")
        calls = [
            CallRecord(address=a, attempt=1, seq=1, kind="tool", digest=f"d-{a}", body=f'"{a}"')
            for a in ("s1", "s2", "s3")
        ]
        for call in calls:
            store.put_call("source", call)
        handle = await runtime.fork("source", at="s3", new_run_id="child")
        assert (await handle.result()).status == "completed"
        assert await store.calls("child") == calls[:2]
        assert await store.calls("source") == calls


async def test_a_run_still_going_elsewhere_can_be_forked(
    tmp_path: Path, write_flow: WriteFlow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork only reads its source: the source, driven by another runtime on the same
    file, goes on unchanged and knows nothing of it."""
    module = import_source(
        tmp_path,
        "import anyio\n\n"
        "async def slow(context):\n"
        "    if context.run_id == 'source':\n"
        "        await anyio.sleep_forever()  # in flight until the test cancels it\n"
        "    return 'done by ' + context.run_id\n",
        monkeypatch,
    )
    flow = write_flow(
        "name: parked\nsteps:\n  - {id: s1, command: 'echo one'}\n"
        f"  - {{id: s2, handler: '{module.__name__}:slow', dependsOn: [s1]}}\n"
        "  - {id: s3, command: 'echo three', dependsOn: [s2]}\n"
    )
    store = tmp_path / "runs.db"
    async with Runtime(store=store) as driving, Runtime(store=store) as forking:
        watch = Watch()
        started = await driving.start(flow, run_id="source", on_event=watch)
        await watch.wait_for(EventType.STEP_START, "s2")
        await driving.store.flush()  # what the other runtime reads is what is committed
        handle = await forking.fork("source", at="s2", new_run_id="child")
        result = await handle.result()
        assert result.status == "completed"
        assert result.steps["s2"].content == "done by child"
        assert not started.done
        started.cancel("the test is over")
        assert (await started.result()).status == "cancelled"
    async with Runtime(store=store) as reader:
        source = await reader.stored_events("source")
        assert EventType.RUN_FORKED not in {event.type for event in source}
        assert [row.run_id for row in await reader.forks("source")] == ["child"]
        child = await reader.stored_events("child")
        forked = next(e for e in child if e.type == EventType.RUN_FORKED)
        assert payload(forked, RunForked).replayable == 1  # s1; s2 was in flight


async def test_a_fork_inside_a_loop_replays_the_iterations_before_it(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """Forked at an iteration's step: earlier iterations are replayed, the loop goes on
    live from there, and its decisions are made again from the records."""
    flow = write_flow(
        "name: looped\nsteps:\n  - id: rounds\n    loop:\n      maxIterations: 3\n"
        "      steps:\n        - {id: a, command: 'echo a'}\n"
        "        - {id: b, command: 'echo b', dependsOn: [a]}\n"
    )
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        await runtime.run(flow, run_id="source")
        handle = await runtime.fork(
            "source", at="rounds.1.b", set={"rounds.1.a": "edited"}, new_run_id="child"
        )
        result = await handle.result()
        assert result.status == "completed"
        assert result.steps["rounds.1.a"].content == "edited"
        with pytest.raises(ForkRefused, match=re.escape("'rounds.0': it runs steps of its own")):
            await runtime.fork("source", at="rounds.1.b", set={"rounds.0": "made again"})
        events = await runtime.stored_events("child")
        forked = next(i for i, e in enumerate(events) if e.type == EventType.RUN_FORKED)
        replayed = [e.step_id for e in events[forked:] if e.type == EventType.STEP_REPLAYED]
        started = [e.step_id for e in events[forked:] if e.type == EventType.STEP_START]
        assert replayed == ["rounds.0.a", "rounds.0.b", "rounds.1.a"]
        assert [s for s in started if re.fullmatch(r"rounds\.\d\.\w", s or "")] == [
            "rounds.1.b",
            "rounds.2.a",
            "rounds.2.b",
        ]


async def test_an_interrupted_fork_resumes_like_any_run(
    tmp_path: Path, write_flow: WriteFlow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork stopped by its runtime's shutdown is resumed in another: what it reused and
    what it finished are replayed, the step it was in runs again."""
    module = import_source(
        tmp_path,
        "import anyio\n\n"
        "async def once(context):\n"
        "    if context.run_id == 'child' and context.attempt == 1:\n"
        "        await anyio.sleep_forever()  # until the runtime shuts down\n"
        "    return f'{context.run_id} attempt {context.attempt}'\n",
        monkeypatch,
    )
    flow = write_flow(
        "name: twice\nsteps:\n  - {id: s1, command: 'echo one'}\n"
        "  - {id: s2, command: 'echo two', dependsOn: [s1]}\n"
        f"  - {{id: s3, handler: '{module.__name__}:once', dependsOn: [s2]}}\n"
    )
    store = tmp_path / "runs.db"
    async with Runtime(store=store) as runtime:
        await runtime.run(flow, run_id="source")
        watch = Watch()
        await runtime.fork("source", at="s2", new_run_id="child", on_event=watch)
        await watch.wait_for(EventType.STEP_START, "s3")
    async with Runtime(store=store) as runtime:
        assert [row.run_id for row in await runtime.resumable()] == ["child"]
        result = await (await runtime.resume("child")).result()
        assert result.status == "completed"
        assert result.steps["s3"].content == "child attempt 2"
        events = await runtime.stored_events("child")
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        types = [e.type for e in events]
        assert types.index("run_forked") < types.index("run_interrupted")
        resumed = types.index("run_resumed")
        again = [(e.type, e.step_id) for e in events[resumed:] if e.step_id is not None]
        # s1's replay is in the log already (the fork's own): a resume does not repeat it.
        assert again == [("step_replayed", "s2"), ("step_start", "s3"), ("step_end", "s3")]
        row = await runtime.get_run("child")
        assert (row.parent_run_id, row.parent_address) == ("source", "s2")


TYPED = """
name: typed
agents:
  judge:
    model: "openai:test-model"
    resultSchema:
      type: object
      properties: {verdict: {enum: [pass, fail]}}
      required: [verdict]
steps:
  - {id: judge, agent: judge, instructions: "Judge."}
  - id: after
    command: echo $VERDICT
    env: {VERDICT: "{{ steps.judge.result.verdict }}"}
    dependsOn: [judge]
output: "steps.after.content"
"""


async def test_an_edited_output_must_fit_its_agents_result_schema(
    model_server: StartLLMServer, tmp_path: Path, write_flow: WriteFlow
) -> None:
    """As the agent's own ``submit_result`` must: a misfit is refused, naming where, and
    nothing is written; a fit becomes the step's result."""
    submit = ServerToolCall("submit_result", {"verdict": "fail"})
    model_server([ServerRule([ServerReply(content="judged", tool_calls=[submit])])])
    flow = write_flow(TYPED)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        source = await runtime.run(flow, run_id="source")
        assert source.output == "fail\n"

        with pytest.raises(InputError, match=r"'judge' does not fit .*verdict: 'maybe' is not"):
            await runtime.fork("source", at="after", set={"judge": {"verdict": "maybe"}})
        with pytest.raises(InputError, match=r"\(root\): 'pass' is not of type 'object'"):
            await runtime.fork("source", at="after", set={"judge": "pass"})
        assert [row.run_id for row in await runtime.list_runs()] == ["source"]

        handle = await runtime.fork("source", at="after", set={"judge": {"verdict": "pass"}})
        assert (await handle.result()).output == "pass\n"
