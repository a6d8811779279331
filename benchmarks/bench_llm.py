"""Provider overhead: sequential calls/s through the ``openai`` provider vs bare httpx.

Both loops send the same Chat Completions request to the same local
``ScriptedLLMServer``, which answers at once, so the difference is what the
provider adds per call: encoding the request from Structs, the retry loop and
its per-attempt deadline scope, the capped streamed read, decoding the reply
into a ``Completion``, and the (filtered) debug log call. The floor is a bare
``httpx.AsyncClient.post`` of pre-encoded bytes plus ``response.json()``.
The server runs in a process of its own, so its work does not compete with the
client for the GIL; debug logging is filtered out while measuring, as in a
production setup.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import statistics
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection

import httpx
import structlog

from _harness import Figure, best_of, now
from cadenza.llm import LLMRequest, Message, ProviderRegistry, ToolSpec
from cadenza.llm._openai import encode_openai
from cadenza.testing import ScriptedLLMServer, ServerRule

GROUP = "llm"

_REQUEST = LLMRequest(
    model="gpt-test",
    messages=(
        Message("system", "You are a terse assistant that answers in one sentence."),
        Message("user", "Summarise the plot of a three-act play about a fugue."),
    ),
    tools=(
        ToolSpec(
            "submit_result",
            "Finish the step with a result.",
            {"type": "object", "properties": {"summary": {"type": "string"}}},
        ),
    ),
)
_RULES = [ServerRule(["A fugue returns, changed, three times; the third time it resolves."])]


async def _bare_calls_per_s(
    environ: dict[str, str], calls: int, *, stream: bool = False, body: bytes | None = None
) -> float:
    """The floor: pre-encoded requests through httpx, the reply parsed with ``json``.

    With ``stream`` the request asks for a streamed reply (as Cadenza's agent
    steps do) and the floor reads its server-sent events line by line, each
    ``data`` line parsed: what the smallest hand-written streaming client does.
    ``body`` is the request to send (default: `_REQUEST`'s).
    """
    url = f"{environ['OPENAI_BASE_URL']}/chat/completions"
    if body is None:  # the bytes the openai provider sends for it
        body = encode_openai(_REQUEST, stream=stream)
    headers = {"Authorization": "Bearer bench-key", "Content-Type": "application/json"}
    async with httpx.AsyncClient() as http:

        async def one() -> None:
            response = await http.post(url, content=body, headers=headers)
            response.raise_for_status()
            response.json()

        async def one_streamed() -> None:
            async with http.stream("POST", url, content=body, headers=headers) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        json.loads(line[6:])

        return await _rate(one_streamed if stream else one, calls)


async def _provider_calls_per_s(environ: dict[str, str], calls: int) -> float:
    async with ProviderRegistry(environ=environ) as providers:
        client = providers.client("openai")

        async def one() -> None:
            await client.complete(_REQUEST)

        return await _rate(one, calls)


async def _rate(one: Callable[[], Awaitable[None]], calls: int) -> float:
    for _ in range(20):  # warm up: connection, client, caches
        await one()
    started = now()
    for _ in range(calls):
        await one()
    return calls / (now() - started)


def _serve(connection: Connection) -> None:
    """In the server process: serve until the parent says stop.

    It remembers no request: a log of thousands of parsed requests made the
    server's garbage collections long enough to land on whichever side was
    being measured (one run of five stood 20% off the others).
    """
    with ScriptedLLMServer(_RULES, keep=1) as server:
        connection.send(server.environ(api_key="bench-key"))
        connection.recv()


@contextmanager
def _server_process() -> Iterator[dict[str, str]]:
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=_serve, args=(theirs,), daemon=True)
    process.start()
    try:
        environ: dict[str, str] = ours.recv()
        yield environ
    finally:
        ours.send(None)
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
            process.join()


@contextmanager
def _debug_logs_filtered() -> Iterator[None]:
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        yield
    finally:
        structlog.configure(**saved)


def run(quick: bool) -> list[Figure]:
    """Measure calls/s through the openai provider and bare httpx; ``quick`` shrinks the sizes."""
    calls = 200 if quick else 1_000
    repeats = 3 if quick else 5
    bare_runs: list[float] = []
    provider_runs: list[float] = []
    with _debug_logs_filtered(), _server_process() as environ:
        # Interleaved, so a noisy neighbour slows both sides alike.
        for _ in range(repeats):
            bare_runs.append(best_of(1, lambda: asyncio.run(_bare_calls_per_s(environ, calls))))
            provider_runs.append(
                best_of(1, lambda: asyncio.run(_provider_calls_per_s(environ, calls)))
            )
    bare, provider = statistics.median(bare_runs), statistics.median(provider_runs)
    return [
        Figure(GROUP, "openai provider complete() (sequential)", provider, "ops/s",
               bare, "bare httpx POST + json", ">= 0.8x raw", provider >= 0.8 * bare),
    ]  # fmt: skip
