"""A run's events as server-sent events: what the store holds, then live.

Each event is one SSE message whose ``id`` is the event's ``seq`` and whose
``data`` is the event's JSON (the NDJSON envelope of SPEC section 9), so a
browser's ``EventSource`` resumes after a dropped connection by itself
(``Last-Event-ID``). When the run ends (``workflow_end``: completed, failed,
cancelled, or waiting for a person) one ``end`` message carries the run's
status and the stream closes. A comment line every 15 seconds keeps proxies
from closing a quiet stream.

Runs this server drives are followed through `RunHandle.events` (no polling);
runs driven by another process sharing the store (``cadenza run``, a worker
host) are followed by reading the store every ``poll`` seconds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any, Final

import anyio
import msgspec
from starlette.responses import Response

from cadenza import Runtime
from cadenza.protocols import Event, EventType, WorkflowEnd, payload

from ._limits import StreamSlots

__all__ = ["EventStream", "run_events"]

KEEPALIVE: Final = 15.0
"""Seconds between keep-alive comments on a quiet stream."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_encode = msgspec.json.Encoder().encode


async def run_events(
    runtime: Runtime, run_id: str, after: int, poll: float
) -> AsyncIterator[Event]:
    """The run's events with ``seq > after``, ending after the run's end (or never, if it runs)."""
    handle = runtime.handle(run_id)
    if handle is not None:
        async for event in handle.events():
            if event.seq > after or event.type == EventType.OUTPUT:
                yield event
        return
    last = after
    while True:
        row = await runtime.get_run(run_id)  # before the events: an ended run's are all stored
        for event in await runtime.store.events(run_id, after_seq=last):
            last = event.seq
            yield event
        if row.status not in ("running", "queued"):
            return
        if runtime.handle(run_id) is not None:  # this server resumed it meanwhile
            async for event in run_events(runtime, run_id, last, poll):
                yield event
            return
        await anyio.sleep(poll)


class EventStream(Response):
    """An ASGI response streaming a run's events until the run ends, the client
    leaves, or the server stops (``stopping`` is set).

    Args:
        runtime: The runtime whose store holds the run.
        run_id: The run (it must exist: check before building the response).
        after: Send only events with a greater ``seq``.
        stopping: Set when the server shuts down: the stream ends at once.
        poll: Seconds between store reads for runs another process drives.
        slots: The open streams' count; this stream holds a slot taken for it,
            and gives it back when it ends.
    """

    def __init__(
        self,
        runtime: Runtime,
        run_id: str,
        after: int,
        stopping: anyio.Event,
        poll: float,
        slots: StreamSlots,
    ) -> None:
        super().__init__(media_type="text/event-stream")
        self.runtime = runtime
        self.run_id = run_id
        self.after = after
        self.stopping = stopping
        self.poll = poll
        self.slots = slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            gone = await self._stream(receive, send)
        finally:
            # Before the answer ends: a client that sees the end may open another at once.
            self.slots.give_back()
        if not gone:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _stream(self, receive: Receive, send: Send) -> bool:
        """Sends the events up to the run's ``end``; whether the client left meanwhile."""
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        lock = anyio.Lock()
        gone = False

        async def emit(chunk: bytes) -> None:
            async with lock:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})

        async with anyio.create_task_group() as group:

            async def watch_client() -> None:
                nonlocal gone
                while (await receive())["type"] != "http.disconnect":
                    pass
                gone = True
                group.cancel_scope.cancel()

            async def watch_server() -> None:
                await self.stopping.wait()
                group.cancel_scope.cancel()

            async def keep_alive() -> None:
                while True:
                    await anyio.sleep(KEEPALIVE)
                    await emit(b": keep-alive\n\n")

            group.start_soon(watch_client)
            group.start_soon(watch_server)
            group.start_soon(keep_alive)
            status: Any = None
            last = self.after
            async for event in run_events(self.runtime, self.run_id, self.after, self.poll):
                if event.type == EventType.OUTPUT:  # not in the record: no id to resume from
                    await emit(b"event: output\ndata: %s\n\n" % _encode(event))
                    continue
                await emit(b"id: %d\ndata: %s\n\n" % (event.seq, _encode(event)))
                last = event.seq
                if event.type == EventType.WORKFLOW_END:  # a resumed run has several
                    status = payload(event, WorkflowEnd).status
            if status is None:
                status = (await self.runtime.get_run(self.run_id)).status
            await emit(b"event: end\ndata: %s\n\n" % _encode({"status": status, "seq": last}))
            group.cancel_scope.cancel()
        return gone
