"""The runtime's own CPU per agent step: the model's reply canned, no HTTP.

Usage: python benchmarks/agent_overhead.py [--steps N] [--repeats R]

`bench_agent` judges agent steps against bare httpx, where httpx's own work
(~850 us of the client's CPU a call on the reference machine) is most of both
sides and its noise hides a change of a few microseconds. This takes it away:
the chain of `bench_agent` runs with ``HTTPCaller._send_once`` replaced by a
function that feeds the very reply the local server streams (recorded once)
through the same stream parser and assembler. What is left is everything else a
step costs: the actor, the prompt, the tools, the request's digest and encoding,
usage and cost, the events, the step and call records, on a SQLite file and in
memory. Figures are CPU microseconds per step (the writer thread's included),
the median of ``--repeats`` runs; lower is better. A diagnostic, not a judged
figure: ``benchmarks/run.py`` does not run it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench_agent import _agent_chain, _step_request
from bench_llm import _debug_logs_filtered, _server_process
from cadenza import Runtime
from cadenza.llm import _http
from cadenza.llm._stream import StreamAssembler, framer_for
from cadenza.store import MemoryRunStore


def _recorded_reply(environ: dict[str, str], body: bytes) -> tuple[httpx.Headers, bytes]:
    """The streamed reply the local server gives a step of the chain, whole."""
    url = f"{environ['OPENAI_BASE_URL']}/chat/completions"
    headers = {"Authorization": "Bearer bench-key", "Content-Type": "application/json"}
    with httpx.Client() as client:
        response = client.post(url, content=body, headers=headers)
        response.raise_for_status()
        return response.headers, response.content


def _can(headers: httpx.Headers, content: bytes) -> None:
    """Every model call from now on is answered by ``content``, parsed as if it streamed."""
    framer = framer_for(headers["content-type"])
    assert framer is not None, "the recorded reply is not a stream"

    async def send_once(
        self: _http.HTTPCaller,
        url: str,
        request_headers: Any,
        body: bytes,
        stream: Callable[[int], StreamAssembler] | None,
        attempt: int,
    ) -> tuple[int, httpx.Headers, StreamAssembler]:
        assert stream is not None, "agent steps ask for streamed replies"
        assembler = stream(attempt)
        parser = framer()
        assembler.feed(parser.feed(content))
        assembler.feed(parser.close())
        return 200, headers, assembler

    _http.HTTPCaller._send_once = send_once  # type: ignore[method-assign,assignment]


async def _cpu_per_step(store: Path | MemoryRunStore, steps: int) -> float:
    async with Runtime(store=store) as runtime:
        await runtime.run(_agent_chain(50))  # warm up
        workflow = _agent_chain(steps)
        started = time.process_time()
        result = await runtime.run(workflow, run_id="measured")
        spent = time.process_time() - started
    assert result.status == "completed", result.error
    return spent / steps * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with _debug_logs_filtered(), _server_process() as environ:
        headers, content = _recorded_reply(environ, _step_request())
        os.environ.update(environ)  # the key the provider needs; no call reaches the server
        _can(headers, content)
        with tempfile.TemporaryDirectory() as directory:
            sqlite = [
                asyncio.run(_cpu_per_step(Path(directory) / f"runs-{i}.db", args.steps))
                for i in range(args.repeats)
            ]
            memory = [
                asyncio.run(_cpu_per_step(MemoryRunStore(), args.steps))
                for _ in range(args.repeats)
            ]
    for name, runs in (("SQLite", sqlite), ("memory", memory)):
        spread = ", ".join(f"{run:.0f}" for run in runs)
        median = statistics.median(runs)
        print(f"agent step, HTTP canned, {name} store: {median:.0f} us CPU ({spread})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
