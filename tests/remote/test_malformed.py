"""Bad frames are rejected at the edge: the supervisor keeps running and runs complete."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import pytest
import zmq
import zmq.asyncio

from cadenza import Runtime
from cadenza._logging import EVENT
from cadenza.protocols import (
    PROTOCOL_VERSION,
    CallMade,
    CallRecord,
    Dispatch,
    Heartbeat,
    Hello,
    Result,
    WireError,
    supervisor_decoder,
    worker_decoder,
)
from cadenza.remote import Dispatcher, WorkerEvent
from tests._helpers import Sink

from .conftest import ECHO_EACH, SpawnWorker, worker_names

FRAMES = 1000


def _rogue_frames(rng: random.Random) -> list[list[bytes]]:
    """Random bytes, truncated and mistyped messages, unknown tags, extra frames."""
    valid = msgspec.msgpack.encode(Result(7, 1, "completed", content="forged"))
    shapes = [
        lambda: [rng.randbytes(rng.randrange(0, 300))],
        lambda: [valid[: rng.randrange(0, len(valid))]],
        lambda: [msgspec.msgpack.encode({"t": "result", "job": "seven", "attempt": 1})],
        lambda: [msgspec.msgpack.encode({"t": rng.choice(["bogus", "", "HELLO"]), "x": 1})],
        lambda: [msgspec.msgpack.encode(rng.random())],
        lambda: [valid, rng.randbytes(8)],
        lambda: [b"", b"", b""],
    ]
    return [rng.choice(shapes)() for _ in range(FRAMES)]


@contextmanager
def dealer() -> Iterator[zmq.asyncio.Socket]:
    """A DEALER socket of the test's own, as a rogue peer opens one; closed after the block."""
    context = zmq.asyncio.Context()
    socket = context.socket(zmq.DEALER)
    try:
        yield socket
    finally:
        socket.close(linger=0)
        context.term()


def watched_dispatcher() -> tuple[Dispatcher, Sink[WorkerEvent]]:
    """A dispatcher on a free port, and the worker events it emits."""
    dispatcher = Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)
    events: Sink[WorkerEvent] = Sink()
    dispatcher.subscribe(events)
    return dispatcher, events


async def test_a_rogue_peer_sending_garbage_does_not_disturb_a_run(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    """1,000 malformed frames from a rogue DEALER are each rejected and counted; the run
    completes on a real worker, and the rogue never becomes a worker."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(ECHO_EACH)
    dispatcher, events = watched_dispatcher()
    with dealer() as rogue:
        async with Runtime(workers=dispatcher) as runtime:
            rogue.connect(dispatcher.endpoint)
            spawn_worker(dispatcher.endpoint, "honest")
            handle = await runtime.start(flow, inputs={"items": list(range(30))})
            for frames in _rogue_frames(random.Random(7)):
                await rogue.send_multipart(frames)
            result = await handle.result()
            await events.until(lambda e: sum(x.type == "frame_rejected" for x in e) >= FRAMES)
            # Still serving: a valid frame from the rogue is answered (it is told to say hello).
            await rogue.send(msgspec.msgpack.encode(Heartbeat()))
            reply = worker_decoder().decode(await rogue.recv())
            statistics = dispatcher.statistics()

    assert result.status == "completed", result.error
    assert all(r.worker == "honest" for a, r in result.steps.items() if a.startswith("each["))
    assert statistics.rejected_frames == FRAMES
    assert statistics.accepted == 30
    assert type(reply).__name__ == "Disconnect"
    assert worker_names(events.items, "worker_connected") == {"honest"}


async def test_a_peer_speaking_another_protocol_version_is_refused() -> None:
    """A hello with another version gets a version error and no work; the peer is no worker."""
    with dealer() as peer:
        async with Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2) as dispatcher:
            peer.connect(dispatcher.endpoint)
            await peer.send(msgspec.msgpack.encode(Hello(PROTOCOL_VERSION + 1, "future", 8)))
            reply = worker_decoder().decode(await peer.recv())
            workers = dispatcher.workers
    assert isinstance(reply, WireError)
    assert reply.code == "version"
    assert workers == []


@pytest.mark.parametrize(
    "frame",
    [b"", b"\xc1", b"\x81\xa1t\xa5bogus", msgspec.msgpack.encode({"t": "hello", "version": "1"})],
)
def test_the_supervisor_decoder_rejects_bad_frames(frame: bytes) -> None:
    """Invalid msgpack, an unknown tag or a mistyped field is a decode error, never a value."""
    with pytest.raises(msgspec.DecodeError):
        supervisor_decoder().decode(frame)


@pytest.mark.parametrize(
    ("hello", "field"),
    [
        ({"capacity": 2**62, "name": "greedy"}, "capacity"),
        ({"capacity": 2, "name": "n" * 100_000}, "name"),
        ({"capacity": 2, "name": "bad\nname"}, "name"),
        ({"capacity": -1, "name": "negative"}, "capacity"),
    ],
)
async def test_a_hello_out_of_bounds_is_refused_with_a_reason(
    hello: dict[str, object], field: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The impostor never becomes a worker; the refusal names the field, in a warning."""
    dispatcher, events = watched_dispatcher()
    with dealer() as rogue:
        async with Runtime(workers=dispatcher):
            rogue.connect(dispatcher.endpoint)
            frame = {"t": "hello", "version": PROTOCOL_VERSION, **hello}
            await rogue.send(msgspec.msgpack.encode(frame))
            await events.until(lambda e: any(x.type == "frame_rejected" for x in e))
            statistics = dispatcher.statistics()
    assert statistics.workers == 0
    (rejected,) = [e for e in events.items if e.type == "frame_rejected"]
    assert rejected.data is not None
    assert f"$.{field}" in rejected.data["reason"]
    warnings = [r for r in caplog.records if getattr(r, EVENT, None) == "frame_rejected"]
    assert warnings
    assert warnings[0].levelname == "WARNING"


TWO_STEPS = """
name: two-steps
steps:
  - id: first
    command: "echo first"
  - id: second
    dependsOn: [first]
    command: "echo second"
"""


async def test_a_worker_cannot_write_the_call_journal_of_a_step_it_was_not_sent(
    tmp_path: Path,
) -> None:
    """A rogue worker, handed one step, reports calls for another step and for another
    attempt of its own: the run's journal (a SQLite file) holds neither; only its own
    step's call, for the attempt it was sent, is kept."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(TWO_STEPS)
    store = tmp_path / "runs.db"

    def forged(job: int, attempt: int, address: str, step_attempt: int) -> bytes:
        call = CallRecord(
            address=address, attempt=step_attempt, seq=1, kind="tool", digest="0" * 64, body="1"
        )
        return msgspec.msgpack.encode(CallMade(job, attempt, call))

    dispatcher = Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)
    with dealer() as rogue:
        async with Runtime(workers=dispatcher, store=store) as runtime:
            rogue.connect(dispatcher.endpoint)
            await rogue.send(msgspec.msgpack.encode(Hello(PROTOCOL_VERSION, "rogue", 1)))
            handle = await runtime.start(flow, run_id="attacked")
            decoder = worker_decoder()
            answered = 0
            while answered < 2:
                message = decoder.decode(await rogue.recv())
                if not isinstance(message, Dispatch):
                    continue  # the welcome, heartbeats
                job, attempt, order = message.job, message.attempt, message.order
                other = "second" if order.address == "first" else "first"
                await rogue.send(forged(job, attempt, other, 1))
                await rogue.send(forged(job, attempt, order.address, order.attempt + 5))
                await rogue.send(forged(job, attempt, order.address, order.attempt))
                await rogue.send(msgspec.msgpack.encode(Result(job, attempt, "completed")))
                answered += 1
            result = await handle.result()
            calls = await runtime.store.calls("attacked")

    assert result.status == "completed", result.error
    assert sorted((c.address, c.attempt) for c in calls) == [("first", 1), ("second", 1)]
