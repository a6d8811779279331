"""Agent-step overhead: LLM calls/s through Cadenza agent steps vs a bare httpx loop.

The same local server (its own process, answering at once) serves both sides.
Cadenza's side is a run of sequential agent steps, one model call each, so
the figure includes everything a step costs: the step actor, its prompt, the
provider, usage accounting, events and the store records on a SQLite file,
each model call journaled (issue 29). An agent step's outcome is a decision:
committed in the background while the next step runs (docs/durability.md). Agent steps stream
their replies (server-sent events, text shown as ``output`` events), so the floor
streams too. It sends the very request a step of the chain sends (its prompt, the
previous step's output, the agent's default tools: `_step_request`), its events
read line by line and parsed with ``json``: the floor does the same HTTP work,
and the ratio is what Cadenza adds to it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sqlite3
import statistics
import tempfile
from pathlib import Path

from _harness import Figure, best_of, now
from bench_llm import _RULES, _bare_calls_per_s, _debug_logs_filtered, _server_process
from cadenza import Runtime
from cadenza.testing import ScriptedLLMServer
from cadenza.workflow import Agent, LoadedWorkflow, Options, Step, Workflow

HERE = Path(__file__).resolve().parent


def _agent_chain(n: int) -> LoadedWorkflow:
    steps = [
        Step(id=f"s{i}", agent="a", instructions="Answer.", depends_on=[f"s{i - 1}"] if i else [])
        for i in range(n)
    ]
    workflow = Workflow(
        name="agent-chain",
        agents={"a": Agent(model="openai:gpt-test", prompt="You answer.")},
        steps=steps,
        options=Options(max_concurrency=1),
    )
    return LoadedWorkflow(workflow=workflow, path=None, base_dir=HERE, includes={})


async def _cadenza_calls_per_s(environ: dict[str, str], calls: int, store: Path) -> float:
    """Calls/s through agent steps on a SQLite store: every call journaled and committed."""
    os.environ.update(environ)
    async with Runtime(store=store) as runtime:
        await runtime.run(_agent_chain(20))  # warm up: connection, client, caches
        started = now()
        result = await runtime.run(_agent_chain(calls), run_id="measured")
        elapsed = now() - started
    assert result.status == "completed", result.error
    return calls / elapsed


def _step_request() -> bytes:
    """The body a step of the measured chain sends (one with a dependency), as sent."""

    async def record() -> bytes:
        with ScriptedLLMServer(_RULES) as server:
            environ = server.environ(api_key="bench-key")
            saved = {name: os.environ.get(name) for name in environ}
            os.environ.update(environ)
            try:
                async with Runtime() as runtime:
                    await runtime.run(_agent_chain(2))
            finally:
                for name, value in saved.items():
                    if value is None:
                        del os.environ[name]
                    else:
                        os.environ[name] = value
            return json.dumps(server.requests[-1].body, separators=(",", ":")).encode()

    return asyncio.run(record())


def _journal_bytes_per_call(store: Path) -> float:
    """The bytes of the measured run's call journal per model call (rows as stored)."""
    with sqlite3.connect(store) as connection:
        count, size = connection.execute(
            "SELECT count(*), sum(length(address) + length(kind) + length(digest)"
            " + coalesce(length(body), 0) + 24) FROM calls WHERE run_id = 'measured'"
        ).fetchone()
    return size / count if count else 0.0


def run(quick: bool) -> list[Figure]:
    """Calls/s through agent steps and through bare httpx, interleaved runs."""
    calls = 100 if quick else 500
    repeats = 3 if quick else 5
    bare_runs: list[float] = []
    cadenza_runs: list[float] = []
    journal = 0.0
    with (
        _debug_logs_filtered(),
        _server_process() as environ,
        tempfile.TemporaryDirectory() as directory,
    ):
        body = _step_request()
        for attempt in range(repeats):
            store = Path(directory) / f"runs-{attempt}.db"
            floor = _bare_calls_per_s(environ, calls, stream=True, body=body)
            bare_runs.append(best_of(1, functools.partial(asyncio.run, floor)))
            measured = functools.partial(asyncio.run, _cadenza_calls_per_s(environ, calls, store))
            cadenza_runs.append(best_of(1, measured))
            journal = _journal_bytes_per_call(store)
    bare, cadenza = statistics.median(bare_runs), statistics.median(cadenza_runs)
    return [
        Figure("agent", "agent steps on SQLite, calls journaled (sequential)", cadenza, "ops/s",
               bare, "bare httpx streamed POST + json", ">= 0.8x raw", cadenza >= 0.8 * bare),
        Figure("agent", "call journal per model call", journal / 1024, "KiB",
               None, "", "", None),
    ]  # fmt: skip
