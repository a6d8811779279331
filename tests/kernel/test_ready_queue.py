"""The ready queue: actors without a task while idle, and what a suspended turn keeps."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

from cadenza.errors import ActorStopped
from cadenza.kernel import Actor, ActorState, Restart, Supervisor

from .conftest import Echo, Settle


class Gated(Actor):
    """Logs each message; one named 'wait' waits on ``gate`` before it is logged as done."""

    def __init__(self, log: list[str], gate: asyncio.Event) -> None:
        self.log = log
        self.gate = gate
        self.tasks: list[asyncio.Task[Any] | None] = []

    async def receive(self, message: Any) -> Any:
        self.log.append(f"begin {message}")
        if message == "wait":
            self.tasks.append(asyncio.current_task())
            await self.gate.wait()
            self.tasks.append(asyncio.current_task())
        self.log.append(f"end {message}")
        return message


async def test_idle_actors_hold_no_task(settle: Settle) -> None:
    """A hundred idle actors that have each answered a message hold no task of their own.

    The supervisor's ready queue keeps one task, parked, for the next message.
    """
    before = asyncio.all_tasks()
    async with Supervisor() as sup:
        refs = [sup.spawn(f"echo{i}", Echo) for i in range(100)]
        assert [await ref.ask(i) for i, ref in enumerate(refs)] == list(range(100))
        await settle()
        assert len(asyncio.all_tasks() - before) == 1
        assert all(ref.state is ActorState.RUNNING for ref in refs)
        assert await refs[7].ask("again") == "again"  # an idle actor still answers
    assert asyncio.all_tasks() == before  # and that one ends with the supervisor


async def test_a_suspended_turn_keeps_its_task_and_the_order_of_messages(settle: Settle) -> None:
    """Messages behind a turn that awaits wait for it; the turn sees one task throughout."""
    log: list[str] = []
    gate = asyncio.Event()
    async with Supervisor() as sup:
        ref = sup.spawn("gated", lambda: Gated(log, gate))
        for message in ("first", "wait", "third"):
            await ref.send(message)
        other = sup.spawn("other", Echo)
        await settle()
        assert log == ["begin first", "end first", "begin wait"]
        assert await other.ask("meanwhile") == "meanwhile"  # others are not held up
        gate.set()
        assert await ref.ask("last") == "last"
    assert log == [
        "begin first", "end first", "begin wait", "end wait",
        "begin third", "end third", "begin last", "end last",
    ]  # fmt: skip


async def test_a_cancel_scope_entered_before_a_suspension_still_works(settle: Settle) -> None:
    """An anyio cancel scope opened in a turn's synchronous part cancels the awaits after it."""
    scopes: list[anyio.CancelScope] = []
    outcome: list[str] = []

    class Scoped(Actor):
        async def receive(self, message: Any) -> Any:
            if message != "go":
                return message
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                await anyio.sleep_forever()
            outcome.append("cancelled" if scope.cancelled_caught else "not cancelled")
            return None

    async with Supervisor() as sup:
        ref = sup.spawn("scoped", Scoped)
        await ref.send("go")
        await settle()
        scopes[0].cancel()
        assert await ref.ask("next") == "next"
    assert outcome == ["cancelled"]


async def test_cancelling_a_suspended_turn_ends_the_actor_and_fails_its_asks(
    settle: Settle,
) -> None:
    """Supervisor.cancel reaches a turn parked in an await: the ask fails, no hook runs."""
    log: list[str] = []
    gate = asyncio.Event()
    async with Supervisor() as sup:
        ref = sup.spawn("gated", lambda: Gated(log, gate))
        idle = sup.spawn("idle", Echo)
        assert await idle.ask("ready") == "ready"
        ask = asyncio.create_task(ref.ask("wait"))
        await settle()
        sup.cancel()
        with pytest.raises(ActorStopped, match="was cancelled"):
            await ask
    assert log == ["begin wait"]
    assert ref.state is ActorState.STOPPED
    assert idle.state is ActorState.STOPPED


async def test_a_crash_in_a_synchronous_turn_is_restarted() -> None:
    """A turn that raises without awaiting reaches the restart strategy like any crash."""
    crashes: list[str] = []

    class Fragile(Actor):
        async def receive(self, message: Any) -> Any:
            if message == "boom":
                raise ValueError("boom")
            return message

    async with Supervisor(on_crash=lambda address, error: crashes.append(str(error))) as sup:
        ref = sup.spawn("fragile", Fragile, restart=Restart.PERMANENT)
        with pytest.raises(ValueError, match="boom"):
            await ref.ask("boom")
        assert await ref.ask("after") == "after"
        assert sup.statistics().restarts == 1
    assert crashes == ["boom"]


async def test_an_actor_that_asks_itself_in_a_synchronous_turn_is_refused() -> None:
    """The self-ask check holds for a turn that runs without a task of its own."""

    class Narcissus(Actor):
        async def receive(self, message: Any) -> Any:
            try:
                await self.ref.ask("me")
            except RuntimeError as error:
                return str(error)
            return "answered"

    async with Supervisor() as sup:
        ref = sup.spawn("narcissus", Narcissus)
        assert "asked itself" in await ref.ask("go")


async def test_a_full_inbox_suspends_the_sending_turn_until_the_receiver_makes_room() -> None:
    """Back-pressure between two actors: every message arrives, in order, through a tiny inbox."""
    received: list[int] = []

    class Sink(Actor):
        async def receive(self, message: Any) -> Any:
            received.append(message)
            return len(received)

    class Source(Actor):
        async def receive(self, message: Any) -> Any:
            sink = self.supervisor.lookup("sink")
            assert sink is not None
            for n in range(10):
                await sink.send(n)  # waits whenever the sink's inbox holds 2
            return "sent"

    async with Supervisor() as sup:
        sink = sup.spawn("sink", Sink, inbox_size=2)
        source = sup.spawn("source", Source)
        assert await source.ask("go") == "sent"
        assert await sink.ask(10) == 11
    assert received == list(range(11))
