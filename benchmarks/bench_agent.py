"""Agent-step overhead: LLM calls/s through Cadenza agent steps vs a bare httpx loop.

The same local server (its own process, answering at once) serves both sides.
Cadenza's side is a run of sequential agent steps, one model call each, so
the figure includes everything a step costs: the step actor, its prompt, the
provider, usage accounting, events and the store records. Agent steps stream
their replies (server-sent events, text shown as ``output`` events), so the floor
streams too: the same request with ``stream: true``, its events read line by
line and parsed with ``json``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
from pathlib import Path

from _harness import Figure, best_of, now
from bench_llm import _bare_calls_per_s, _debug_logs_filtered, _server_process
from cadenza import Runtime
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


async def _cadenza_calls_per_s(environ: dict[str, str], calls: int) -> float:
    os.environ.update(environ)
    async with Runtime() as runtime:
        await runtime.run(_agent_chain(20))  # warm up: connection, client, caches
        started = now()
        result = await runtime.run(_agent_chain(calls))
        elapsed = now() - started
    assert result.status == "completed", result.error
    return calls / elapsed


def run(quick: bool) -> list[Figure]:
    """Calls/s through agent steps and through bare httpx, interleaved runs."""
    calls = 100 if quick else 500
    repeats = 3 if quick else 5
    bare_runs: list[float] = []
    cadenza_runs: list[float] = []
    with _debug_logs_filtered(), _server_process() as environ:
        for _ in range(repeats):
            bare_runs.append(
                best_of(1, lambda: asyncio.run(_bare_calls_per_s(environ, calls, stream=True)))
            )
            cadenza_runs.append(
                best_of(1, lambda: asyncio.run(_cadenza_calls_per_s(environ, calls)))
            )
    bare, cadenza = statistics.median(bare_runs), statistics.median(cadenza_runs)
    return [
        Figure("agent", "agent steps through Cadenza (sequential)", cadenza, "ops/s",
               bare, "bare httpx streamed POST + json", ">= 0.8x raw", cadenza >= 0.8 * bare),
    ]  # fmt: skip
