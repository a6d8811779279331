"""Supervisor: spawning, routing, dead letters, shutdown and cancellation."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from cadenza._logging import EVENT, FIELDS
from cadenza.errors import ActorStopped, AddressError, InboxFull, SupervisorEscalation
from cadenza.kernel import (
    Actor,
    ActorState,
    Address,
    DeadLetter,
    FakeClock,
    Restart,
    Supervisor,
    SupervisorStatistics,
)

from .conftest import Echo, Ping, Settle


class Named(Actor):
    """Answers with its own address."""

    async def receive(self, message: Any) -> Any:
        return str(self.address)


class Stuck(Actor):
    """Never finishes a message; counts hook calls in ``log``."""

    def __init__(self, log: list[str] | None = None) -> None:
        self.log = log if log is not None else []

    async def receive(self, message: Any) -> Any:
        await asyncio.Event().wait()

    async def on_stop(self) -> None:
        self.log.append("stop")


async def test_routes_by_exact_address_and_bare_name_to_newest(settle: Settle) -> None:
    """lookup, tell and ask take an exact address or a bare name (newest live instance)."""
    async with Supervisor() as sup:
        first = sup.spawn("dev-cycle.0.implement", Named)
        second = sup.spawn(Address.parse("dev-cycle.1.implement"), Named)
        sup.spawn("dev-cycle.1.review", Named)
        assert sup.lookup("dev-cycle.0.implement") is first
        assert sup.lookup(Address.parse("dev-cycle.0.implement")) is first
        assert sup.lookup("implement") is second
        assert await sup.ask("implement", Ping()) == "dev-cycle.1.implement"
        assert await sup.ask("dev-cycle.0.implement", Ping()) == "dev-cycle.0.implement"
        second.stop()
        await settle()
        assert sup.lookup("implement") is first
        assert sup.lookup("nothing") is None
        assert sup.lookup("dev-cycle") is None


async def test_children_and_statistics() -> None:
    """children lists live actors in spawn order; statistics() counts them."""
    async with Supervisor() as sup:
        refs = [sup.spawn(Address.root("pool").item(i), Named) for i in range(3)]
        assert sup.children == tuple(refs)
        assert sup.statistics() == SupervisorStatistics(
            live_actors=3, restarts=0, crashes=0, dead_letters=0
        )
        assert "3 actors" in repr(sup)
    assert sup.children == ()


async def test_spawn_refuses_a_live_address_and_bad_text(settle: Settle) -> None:
    """A live address cannot be spawned twice; once stopped, it is free again."""
    async with Supervisor() as sup:
        ref = sup.spawn("solo", Named)
        with pytest.raises(AddressError, match="already has the address 'solo'"):
            sup.spawn("solo", Named)
        with pytest.raises(AddressError, match="column 6"):
            sup.spawn("solo..x", Named)
        ref.stop()
        await settle()
        assert sup.spawn("solo", Named) is not ref


async def test_spawn_checks_the_inbox_size() -> None:
    """An inbox must hold at least one message."""
    async with Supervisor(inbox_size=5) as sup:
        with pytest.raises(ValueError, match="at least 1"):
            sup.spawn("tiny", Named, inbox_size=0)
        assert sup.lookup("tiny") is None


async def test_spawn_needs_a_running_supervisor() -> None:
    """spawn() before entering the block is a usage error."""
    sup = Supervisor()
    with pytest.raises(RuntimeError, match="async with"):
        sup.spawn("early", Named)
    async with sup:
        pass
    with pytest.raises(ActorStopped, match="stopping"):
        sup.spawn("late", Named)
    with pytest.raises(RuntimeError, match="only once"):
        async with sup:
            pass


async def test_dead_letters_for_unknown_and_stopped_addresses(settle: Settle) -> None:
    """Undeliverable tells become DeadLetter records, never silence."""
    letters: list[DeadLetter] = []
    async with Supervisor(on_dead_letter=letters.append) as sup:
        await sup.tell("nobody", Ping())
        sup.tell_nowait(Address.parse("nobody.0"), 1)
        busy = sup.spawn("busy", Stuck)
        busy.send_nowait("hold")
        await settle()
        busy.stop()  # stopping: its inbox is closed while "hold" is handled
        await sup.tell("busy", Ping())
        sup.tell_nowait("busy", "x")
        sup.cancel()
    assert letters == [
        DeadLetter("nobody", "Ping", "no such actor"),
        DeadLetter("nobody.0", "int", "no such actor"),
        DeadLetter("busy", "Ping", "actor stopped"),
        DeadLetter("busy", "str", "actor stopped"),
    ]
    assert sup.statistics().dead_letters == 4


async def test_dead_letters_are_logged_by_default(caplog: pytest.LogCaptureFixture) -> None:
    """Without on_dead_letter, each dead letter is a structured warning record."""
    with caplog.at_level(logging.WARNING, logger="cadenza"):
        async with Supervisor() as sup:
            await sup.tell("nobody", Ping())
    records = [(r.name, r.levelname, getattr(r, EVENT), getattr(r, FIELDS)) for r in caplog.records]
    assert records == [
        (
            "cadenza.kernel",
            "WARNING",
            "dead_letter",
            {"address": "nobody", "message_type": "Ping", "reason": "no such actor"},
        )
    ]


async def test_queued_tells_become_dead_letters_at_shutdown(settle: Settle) -> None:
    """Leaving the block stops actors after their current message; queued tells are reported."""
    letters: list[DeadLetter] = []
    gate = asyncio.Event()

    class Gated(Actor):
        async def receive(self, message: Any) -> Any:
            await gate.wait()

    async def release() -> None:
        await settle()
        gate.set()

    async with Supervisor(on_dead_letter=letters.append) as sup:
        ref = sup.spawn("gated", Gated)
        ref.send_nowait("current")
        await settle()
        ref.send_nowait("queued")
        releaser = asyncio.create_task(release())
    await releaser
    assert letters == [DeadLetter("gated", "str", "actor stopped")]


async def test_ask_to_unknown_address_raises() -> None:
    """An ask nobody can answer raises ActorStopped naming the address."""
    async with Supervisor() as sup:
        with pytest.raises(ActorStopped, match="no live actor at 'ghost' to answer Ping"):
            await sup.ask("ghost", Ping())


async def test_tell_nowait_to_full_inbox_raises() -> None:
    """tell_nowait surfaces a full inbox as InboxFull."""
    async with Supervisor() as sup:
        sup.spawn("tiny", Stuck, inbox_size=1)
        sup.tell_nowait("tiny", 1)
        with pytest.raises(InboxFull):
            sup.tell_nowait("tiny", 2)
        sup.cancel()


async def test_tell_waits_for_room_then_reports_a_stop(settle: Settle) -> None:
    """A tell blocked on a full inbox becomes a dead letter if the actor stops meanwhile."""
    letters: list[DeadLetter] = []
    async with Supervisor(on_dead_letter=letters.append) as sup:
        ref = sup.spawn("tiny", Stuck, inbox_size=1)
        ref.send_nowait("current")
        await settle()
        ref.send_nowait("queued")
        teller = asyncio.create_task(sup.tell("tiny", Ping()))
        await settle()
        assert not teller.done()
        ref.stop()
        await teller
        sup.cancel()
    assert DeadLetter("tiny", "Ping", "actor stopped") in letters


async def test_graceful_exit_stops_every_actor() -> None:
    """Leaving the block runs on_stop for every actor and waits for them."""
    log: list[str] = []

    class Polite(Echo):
        async def on_stop(self) -> None:
            log.append(str(self.address))

    async with Supervisor() as sup:
        refs = [sup.spawn(Address.root("p").iteration(i), Polite) for i in range(3)]
    assert sorted(log) == ["p.0", "p.1", "p.2"]
    assert all(ref.state is ActorState.STOPPED for ref in refs)


async def test_cancelling_the_host_task_leaves_no_task_behind(settle: Settle) -> None:
    """Cancelling the task running `async with` cancels every actor; none outlive it."""
    before = asyncio.all_tasks()
    log: list[str] = []
    entered = asyncio.Event()

    async def host() -> None:
        async with Supervisor() as sup:
            for i in range(5):
                sup.spawn(Address.root("stuck").iteration(i), lambda: Stuck(log)).send_nowait(i)
            sup.spawn("fresh", Stuck)  # cancelled before its first step
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(host())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert asyncio.all_tasks() == before
    assert log == []  # cancellation runs no hooks


async def test_supervisor_cancel_ends_the_block_quietly(settle: Settle) -> None:
    """sup.cancel() cancels the actors and the body; the block ends without an error."""
    before = asyncio.all_tasks()
    reached_end = False
    async with Supervisor() as sup:
        ref = sup.spawn("stuck", Stuck)
        ask = asyncio.create_task(ref.ask(Ping()))
        await settle()
        sup.cancel()
        await asyncio.Event().wait()
        reached_end = True
    assert not reached_end
    with pytest.raises(ActorStopped, match="cancelled"):
        await ask
    assert asyncio.all_tasks() == before
    assert ref.state is ActorState.STOPPED


async def test_body_exception_cancels_actors_and_propagates() -> None:
    """An error in the body cancels every actor and leaves the block unchanged."""
    before = asyncio.all_tasks()

    async def run() -> None:
        async with Supervisor() as sup:
            sup.spawn("stuck", Stuck).send_nowait(1)
            raise LookupError("body")

    with pytest.raises(LookupError, match="body"):
        await run()
    assert asyncio.all_tasks() == before


async def test_spawn_from_on_stop_during_shutdown_is_refused() -> None:
    """A stopping supervisor spawns nothing new."""
    errors: list[BaseException] = []

    class Spawner(Echo):
        async def on_stop(self) -> None:
            try:
                self.supervisor.spawn("child", Named)
            except ActorStopped as error:
                errors.append(error)

    async with Supervisor() as sup:
        sup.spawn("spawner", Spawner)
    assert len(errors) == 1


async def test_callback_error_ends_the_block_with_it() -> None:
    """If on_dead_letter raises, the supervisor cancels its actors and the block raises it."""

    def explode(letter: DeadLetter) -> None:
        raise RuntimeError(f"cannot record {letter.address}")

    async def run() -> None:
        async with Supervisor(on_dead_letter=explode) as sup:
            sup.spawn("stuck", Stuck).send_nowait(1)
            sup.tell_nowait("nobody", 1)
            await asyncio.Event().wait()

    with pytest.raises(RuntimeError, match="cannot record nobody"):
        await run()


async def test_cancellation_during_graceful_shutdown_cancels_the_stragglers(
    settle: Settle,
) -> None:
    """A scope cancelled while the block waits for a slow actor cancels it and moves on."""
    clock = FakeClock()
    before = asyncio.all_tasks()
    caught: list[bool] = []

    async def host() -> None:
        with clock.move_on_after(5) as scope:
            async with Supervisor() as sup:
                sup.spawn("slow", Stuck).send_nowait("hold")
                await settle()  # the actor is now inside receive
        caught.append(scope.cancelled_caught)

    task = asyncio.create_task(host())
    await clock.advance(1)
    assert not task.done()  # waiting for "slow" to finish its message
    await clock.advance(4)
    await task
    assert caught == [True]
    assert asyncio.all_tasks() == before


async def test_nested_supervisor_escalation_crashes_its_actor() -> None:
    """A supervisor inside an actor escalates into that actor's crash, seen by the asker."""

    class Boom(Actor):
        async def receive(self, message: Any) -> Any:
            raise ValueError("inner")

    class Owner(Actor):
        async def receive(self, message: Any) -> Any:
            async with Supervisor(max_restarts=0, on_crash=lambda a, e: None) as inner:
                inner.spawn("boom", Boom, restart=Restart.PERMANENT).send_nowait(message)
                await asyncio.Event().wait()

    async with Supervisor(on_crash=lambda a, e: None) as sup:
        with pytest.raises(SupervisorEscalation) as caught:
            await sup.spawn("owner", Owner).ask(1)
    assert isinstance(caught.value.__cause__, ValueError)


async def test_cancel_after_exit_is_harmless() -> None:
    """cancel() on a supervisor that already ended does nothing."""
    async with Supervisor() as sup:
        pass
    sup.cancel()
    assert sup.statistics().live_actors == 0
