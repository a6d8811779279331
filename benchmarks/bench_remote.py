"""Remote workers over ZeroMQ, each figure beside raw pyzmq + msgspec in the same run.

(a) Latency of one remote no-op step: `Dispatcher.execute` of an async no-op
    handler on a ``cadenza worker`` process, one at a time, against a raw
    zmq.asyncio ROUTER/DEALER round trip of a msgspec message to an echo process.
(b) Throughput of no-op steps through 2 worker processes with 64 in flight,
    against the raw windowed round-trip rate (64 in flight over 2 echo processes,
    the ROUTER polling and draining).
(c) For the record, no target: a 500-item forEach of no-op handlers through the
    whole runtime (controllers, journal, events) on 2 workers, per step, beside
    the same run in-process.

Every process runs on this machine, so the figures include the cost of sharing
its cores. Run alone: ``python benchmarks/bench_remote.py echo ENDPOINT`` is the
raw echo peer.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
from pathlib import Path

import msgspec
import zmq
import zmq.asyncio

from _harness import Figure, now, per_op_us
from cadenza import Runtime, StepContext
from cadenza.protocols import CallRecord, HandlerOrder, Result, StepEvent
from cadenza.remote import Dispatcher, WorkerEvent
from cadenza.workflow import LoadedWorkflow, Loop, Options, Step, Workflow

GROUP = "remote"
HERE = Path(__file__).resolve().parent
WINDOW = 64


async def noop(context: StepContext) -> None:
    """The step under test: does nothing, asynchronously."""


# -- the raw floor: ROUTER/DEALER and msgspec, nothing else ----------------------------


class Ping(msgspec.Struct, tag=True):
    job: int
    attempt: int
    body: str


class Pong(msgspec.Struct, tag=True):
    job: int
    attempt: int
    status: str


async def _echo(endpoint: str) -> None:
    """The raw peer: answers every Ping with a Pong (poll, drain, send async)."""
    context = zmq.asyncio.Context()
    socket = context.socket(zmq.DEALER)
    socket.connect(endpoint)
    await socket.send(b"")
    drain = zmq.Socket.shadow(socket.underlying).recv
    decode = msgspec.msgpack.Decoder(Ping).decode
    encode = msgspec.msgpack.Encoder().encode
    while True:
        await socket.poll()
        while True:
            try:
                ping = decode(drain(zmq.NOBLOCK))
            except zmq.Again:
                break
            await socket.send(encode(Pong(ping.job, ping.attempt, "completed")))


class _Raw:
    def __init__(self, router: zmq.asyncio.Socket, peers: list[bytes]) -> None:
        self.router = router
        self.peers = peers
        self.encode = msgspec.msgpack.Encoder().encode
        self.decode = msgspec.msgpack.Decoder(Pong).decode
        self.body = "x" * 200  # about the size of a handler's work order

    async def latency_us(self, rounds: int) -> float:
        router, peer = self.router, self.peers[0]
        started = now()
        for i in range(rounds):
            await router.send_multipart((peer, self.encode(Ping(i, 1, self.body))))
            _, frame = await router.recv_multipart()
            self.decode(frame)
        return per_op_us(now() - started, rounds)

    async def rate(self, total: int) -> float:
        router, drain = self.router, zmq.Socket.shadow(self.router.underlying).recv_multipart
        sent = done = 0
        started = now()
        for i in range(WINDOW):
            await router.send_multipart((self.peers[i % 2], self.encode(Ping(i, 1, self.body))))
            sent += 1
        while done < total:
            await router.poll()
            while True:
                try:
                    peer, frame = drain(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self.decode(frame)
                done += 1
                if sent < total:
                    await router.send_multipart((peer, self.encode(Ping(sent, 1, self.body))))
                    sent += 1
        return total / (now() - started)


# -- Cadenza ---------------------------------------------------------------------------


class _Quiet:
    """A dispatch sink that keeps nothing."""

    def dispatched(self, worker: str, job: int, attempt: int) -> None: ...
    def queued(self, job: int) -> None: ...
    def requeued(self, worker: str, job: int, attempt: int, reason: str) -> None: ...
    def rejected(self, worker: str, job: int, attempt: int) -> None: ...
    def event(self, event: StepEvent) -> None: ...
    def mail(self, text: str) -> None: ...

    def call(self, call: CallRecord) -> None: ...


def _order(i: int) -> HandlerOrder:
    return HandlerOrder(
        run_id="bench",
        address=f"each[{i}]",
        attempt=1,
        idempotency_key=f"bench:each[{i}]:1",
        base_dir=str(HERE),
        handler="bench_remote:noop",
        inputs={},
        steps={},
    )


async def _latency_us(dispatcher: Dispatcher, rounds: int) -> float:
    sink, orders = _Quiet(), [_order(i) for i in range(rounds)]
    started = now()
    for order in orders:
        result: Result = await dispatcher.execute(order, sink)
        assert result.status == "completed", result.error
    return per_op_us(now() - started, rounds)


async def _rate(dispatcher: Dispatcher, total: int) -> float:
    sink, orders = _Quiet(), [_order(i) for i in range(total)]
    queue = iter(orders)

    async def lane() -> None:
        for order in queue:
            await dispatcher.execute(order, sink)

    started = now()
    await asyncio.gather(*(lane() for _ in range(WINDOW)))
    return total / (now() - started)


def _foreach(n: int) -> LoadedWorkflow:
    step = Step(id="each", handler="bench_remote:noop", loop=Loop(for_each=list(range(n))))
    workflow = Workflow(name="fan", steps=[step], options=Options(max_concurrency=WINDOW))
    return LoadedWorkflow(workflow=workflow, path=None, base_dir=HERE, includes={})


async def _run_per_step_us(runtime: Runtime, document: LoadedWorkflow, n: int) -> float:
    started = now()
    result = await runtime.run(document)
    assert result.status == "completed", result.error
    return per_op_us(now() - started, n)


async def _measure(quick: bool) -> list[Figure]:
    rounds, total, items = (500, 4_000, 200) if quick else (3_000, 30_000, 500)
    repeats = 3 if quick else 5
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    router.bind("tcp://127.0.0.1:*")
    raw_endpoint = router.getsockopt_string(zmq.LAST_ENDPOINT)
    dispatcher = Dispatcher("tcp://127.0.0.1:*")
    connected = asyncio.Event()
    names: set[str] = set()

    def on_event(event: WorkerEvent) -> None:
        if event.type == "worker_connected" and event.worker:
            names.add(event.worker)
            if len(names) == 2:
                connected.set()

    dispatcher.subscribe(on_event)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        async with Runtime(workers=dispatcher) as runtime:
            for i in range(2):
                processes.append(_spawn(sys.executable, __file__, "echo", raw_endpoint))
                processes.append(
                    _spawn(
                        *(sys.executable, "-m", "cadenza", "worker", "--name", f"bench-{i}"),
                        *("--connect", dispatcher.endpoint, "--concurrency", str(WINDOW // 2)),
                    )
                )
            peers = [(await router.recv_multipart())[0] for _ in range(2)]
            await asyncio.wait_for(connected.wait(), 30)
            raw = _Raw(router, peers)
            await raw.latency_us(200)  # warm both paths up
            await _latency_us(dispatcher, 200)
            samples: dict[str, list[float]] = {k: [] for k in ("rl", "l", "rr", "r", "local", "s")}
            document = _foreach(items)
            async with Runtime() as local:
                for _ in range(repeats):  # interleaved, so both see the same machine
                    samples["rl"].append(await raw.latency_us(rounds))
                    samples["l"].append(await _latency_us(dispatcher, rounds))
                    samples["rr"].append(await raw.rate(total))
                    samples["r"].append(await _rate(dispatcher, total))
                    samples["local"].append(await _run_per_step_us(local, document, items))
                    samples["s"].append(await _run_per_step_us(runtime, document, items))
    finally:
        for process in processes:
            process.kill()
            process.wait()
        router.close(linger=0)
        context.term()
    m = {key: statistics.median(values) for key, values in samples.items()}
    return [
        Figure(GROUP, "remote no-op step round trip", m["l"], "us", m["rl"],
               "raw zmq.asyncio ROUTER/DEALER + msgspec", "<= 1.5x raw", m["l"] <= 1.5 * m["rl"]),
        Figure(GROUP, f"remote no-op steps, 2 workers, {WINDOW} in flight", m["r"], "ops/s",
               m["rr"], f"raw windowed round trips ({WINDOW} in flight)", ">= 0.5x raw",
               m["r"] >= 0.5 * m["rr"]),
        Figure(GROUP, f"{items}-item forEach on 2 workers, per step", m["s"], "us", m["local"],
               "the same run in-process"),
    ]  # fmt: skip


def _spawn(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, cwd=HERE, stdout=subprocess.DEVNULL)


def run(quick: bool) -> list[Figure]:
    """Measure remote dispatch; ``quick`` shrinks the sizes for a smoke run."""
    return asyncio.run(_measure(quick))


if __name__ == "__main__" and sys.argv[1:2] == ["echo"]:
    asyncio.run(_echo(sys.argv[2]))
