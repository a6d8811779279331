"""Actor runtime figures, each beside a raw asyncio floor measured in the same run.

(a) ask round trip through the supervisor vs a future-based ask between two
    bare tasks; (b) one-way tell routed by address vs ``asyncio.Queue``;
(c) memory per idle actor vs a bare task + deque + future, and spawn + first
    reply per second.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections import deque
from typing import Any

from _harness import Figure, best_of, now, per_op_us
from cadenza.kernel import Actor, Supervisor

GROUP = "actors"


class _Echo(Actor):
    __slots__ = ()

    async def receive(self, message: Any) -> Any:
        return message


class _Sink(Actor):
    """Counts tells and resolves ``done`` after ``expected`` of them."""

    __slots__ = ("done", "expected", "seen")

    def __init__(self, expected: int, done: asyncio.Future[None]) -> None:
        self.expected = expected
        self.done = done
        self.seen = 0

    async def receive(self, message: Any) -> None:
        self.seen += 1
        if self.seen == self.expected:
            self.done.set_result(None)


# -- (a) ask round trip ---------------------------------------------------------------


async def _raw_ask(rounds: int) -> float:
    """A server task answering (message, future) pairs from an asyncio.Queue."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[int, asyncio.Future[int]]] = asyncio.Queue()

    async def server() -> None:
        while True:
            message, reply = await queue.get()
            reply.set_result(message)

    task = loop.create_task(server())
    start = now()
    for i in range(rounds):
        reply: asyncio.Future[int] = loop.create_future()
        queue.put_nowait((i, reply))
        await reply
    elapsed = now() - start
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return per_op_us(elapsed, rounds)


async def _supervised_ask(rounds: int) -> float:
    async with Supervisor() as sup:
        sup.spawn("bench.echo", _Echo)
        ask = sup.ask
        start = now()
        for i in range(rounds):
            await ask("bench.echo", i)
        elapsed = now() - start
    return per_op_us(elapsed, rounds)


# -- (b) one-way tell -------------------------------------------------------------------


async def _raw_one_way(messages: int) -> float:
    queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1000)

    async def consumer() -> None:
        for _ in range(messages):
            await queue.get()

    task = asyncio.get_running_loop().create_task(consumer())
    start = now()
    put = queue.put
    for i in range(messages):
        await put(i)
    await task
    return messages / (now() - start)


async def _supervised_one_way(messages: int) -> float:
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    async with Supervisor(inbox_size=1000) as sup:
        sup.spawn("bench.0.sink", lambda: _Sink(messages, done))
        tell = sup.tell
        start = now()
        for i in range(messages):
            await tell("bench.0.sink", i)
        await done
        elapsed = now() - start
    return messages / elapsed


# -- (c) memory and spawn rate ------------------------------------------------------------


async def _idle(items: deque[int]) -> None:
    await asyncio.get_running_loop().create_future()


async def _raw_idle_kib(count: int) -> float:
    loop = asyncio.get_running_loop()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tasks = [loop.create_task(_idle(deque())) for _ in range(count)]
    await asyncio.sleep(0)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return used / count / 1024


async def _actor_idle_kib(count: int) -> float:
    """Actors that each answered one ask, then sit idle: address, table entries included."""
    async with Supervisor() as sup:
        root = sup.spawn("warmup", _Echo).address
        await sup.ask(root, 0)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        refs = [sup.spawn(root.iteration(i).child("echo"), _Echo) for i in range(count)]
        for ref in refs:
            await ref.ask(0)
        del refs
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
    return used / count / 1024


async def _raw_spawn_rate(count: int) -> float:
    """A bare task per actor that answers one future, then idles on another."""
    loop = asyncio.get_running_loop()

    async def actor(reply: asyncio.Future[int]) -> None:
        reply.set_result(0)
        await loop.create_future()

    tasks = []
    start = now()
    for _ in range(count):
        reply: asyncio.Future[int] = loop.create_future()
        tasks.append(loop.create_task(actor(reply)))
        await reply
    elapsed = now() - start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return count / elapsed


async def _spawn_rate(count: int) -> float:
    async with Supervisor() as sup:
        root = sup.spawn("warmup", _Echo).address
        addresses = [root.iteration(i).child("echo") for i in range(count)]
        start = now()
        for address in addresses:
            await sup.spawn(address, _Echo).ask(0)
        elapsed = now() - start
    return count / elapsed


def _median(repeats: int, make: Any, *args: int) -> float:
    return best_of(repeats, lambda: asyncio.run(make(*args)))


def run(quick: bool) -> list[Figure]:
    """Measure the actor runtime; ``quick`` shrinks the sizes for a smoke run."""
    rounds = 5_000 if quick else 50_000
    messages = 20_000 if quick else 200_000
    actors = 2_000 if quick else 10_000
    repeats = 3 if quick else 5

    raw_ask = _median(repeats, _raw_ask, rounds)
    ask = _median(repeats, _supervised_ask, rounds)
    raw_one_way = _median(repeats, _raw_one_way, messages)
    one_way = _median(repeats, _supervised_one_way, messages)
    raw_kib = _median(repeats, _raw_idle_kib, actors)
    kib = _median(repeats, _actor_idle_kib, actors)
    raw_spawn = _median(repeats, _raw_spawn_rate, actors)
    spawn = _median(repeats, _spawn_rate, actors)
    return [
        Figure(GROUP, "ask round trip (supervisor, by address)", ask, "us",
               raw_ask, "asyncio future ask", "<= 3x raw", ask <= 3 * raw_ask),
        Figure(GROUP, "one-way tell (routed by address)", one_way, "ops/s",
               raw_one_way, "asyncio.Queue one-way", ">= 0.2x raw", one_way >= raw_one_way / 5),
        Figure(GROUP, f"idle actor memory ({actors:,} actors)", kib, "KiB",
               raw_kib, "task + deque + future", "<= 2.5 KiB", kib <= 2.5),
        Figure(GROUP, "spawn + first reply", spawn, "ops/s",
               raw_spawn, "task + future reply", ">= 50,000/s", spawn >= 50_000),
    ]  # fmt: skip
