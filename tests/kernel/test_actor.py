"""Actors: ask and tell, timeouts on the supervisor's clock, hooks, stopping."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cadenza.errors import ActorStopped, AskTimeout, InboxFull
from cadenza.kernel import (
    Actor,
    ActorRef,
    ActorState,
    Address,
    DeadLetter,
    FakeClock,
    Supervisor,
)

from .conftest import Echo, Ping, Settle


class Journal(Actor):
    """Records its hooks and messages in ``log``; waits on ``gate`` for messages named 'wait'."""

    def __init__(self, log: list[str], gate: asyncio.Event | None = None) -> None:
        self.log = log
        self.gate = gate

    async def on_start(self) -> None:
        self.log.append(f"start {self.address}")

    async def receive(self, message: Any) -> Any:
        self.log.append(f"receive {message}")
        if message == "wait" and self.gate is not None:
            await self.gate.wait()
        if message == "boom":
            raise ValueError("boom")
        if message == "stop":
            self.stop()
        return f"done {message}"

    async def on_stop(self) -> None:
        self.log.append("stop")

    async def on_failure(self, error: BaseException) -> None:
        self.log.append(f"failure {error!r}")


async def test_ask_returns_what_receive_returns() -> None:
    """An ask gets the value receive returned for it."""
    async with Supervisor() as sup:
        ref = sup.spawn("echo", Echo)
        assert await ref.ask(41) == 41
        assert await sup.ask("echo", "hi") == "hi"
        assert await sup.ask(Address.root("echo"), None) is None


async def test_tells_are_handled_in_order() -> None:
    """Messages are handled one at a time, in the order they were sent."""
    log: list[str] = []
    async with Supervisor() as sup:
        ref = sup.spawn("journal", lambda: Journal(log))
        for i in range(3):
            await ref.send(i)
        ref.send_nowait(3)
        await sup.tell("journal", 4)
        sup.tell_nowait("journal", 5)
        assert await ref.ask("last") == "done last"
    assert log == [
        "start journal",
        *(f"receive {i}" for i in range(6)),
        "receive last",
        "stop",
    ]


async def test_ask_timeout_runs_on_the_supervisor_clock() -> None:
    """An unanswered ask raises AskTimeout when the fake clock passes the timeout."""
    clock = FakeClock()
    gate = asyncio.Event()
    async with Supervisor(clock=clock) as sup:
        sup.spawn("slow", lambda: Journal([], gate))
        ask = asyncio.create_task(sup.ask("slow", "wait", timeout=30))
        await clock.advance(29)
        assert not ask.done()
        await clock.advance(1)
        with pytest.raises(AskTimeout, match=r"'slow' to str within 30"):
            await ask
        gate.set()


async def test_ask_timeout_covers_waiting_for_room() -> None:
    """An ask stuck behind a full inbox times out and its message is never delivered."""
    clock = FakeClock()
    gate = asyncio.Event()
    log: list[str] = []
    async with Supervisor(clock=clock) as sup:
        ref = sup.spawn("slow", lambda: Journal(log, gate), inbox_size=1)
        busy = asyncio.create_task(ref.ask("wait"))
        await clock.advance(0)
        ref.send_nowait("queued")
        late = asyncio.create_task(ref.ask(Ping(), timeout=5))
        await clock.advance(5)
        with pytest.raises(AskTimeout, match="Ping within 5"):
            await late
        gate.set()
        assert await busy == "done wait"
        assert await ref.ask("sync") == "done sync"
    assert not any("Ping" in line for line in log)


async def test_ask_given_up_before_it_is_taken_is_not_handled() -> None:
    """A queued ask whose caller timed out is skipped, not handled."""
    clock = FakeClock()
    gate = asyncio.Event()
    log: list[str] = []
    async with Supervisor(clock=clock) as sup:
        ref = sup.spawn("slow", lambda: Journal(log, gate))
        busy = asyncio.create_task(ref.ask("wait"))
        given_up = asyncio.create_task(ref.ask("abandoned", timeout=1))
        await clock.advance(1)
        with pytest.raises(AskTimeout):
            await given_up
        gate.set()
        await busy
        await ref.ask("after")
    assert "receive abandoned" not in log


async def test_receive_exception_reaches_the_asker_and_crashes_the_actor(settle: Settle) -> None:
    """The asker gets receive's exception; the actor has crashed (TEMPORARY: gone)."""
    crashes: list[tuple[Address, BaseException]] = []
    log: list[str] = []
    async with Supervisor(on_crash=lambda a, e: crashes.append((a, e))) as sup:
        ref = sup.spawn("fragile", lambda: Journal(log))
        with pytest.raises(ValueError, match="boom") as caught:
            await ref.ask("boom")
        await settle()
        assert ref.state is ActorState.FAILED
        assert sup.lookup("fragile") is None
    assert crashes == [(Address.root("fragile"), caught.value)]
    assert log[-1] == "failure ValueError('boom')"


async def test_pending_asks_fail_when_the_actor_stops(settle: Settle) -> None:
    """On stop the current message finishes; queued asks fail with ActorStopped."""
    gate = asyncio.Event()
    log: list[str] = []
    async with Supervisor() as sup:
        ref = sup.spawn("worker", lambda: Journal(log, gate))
        current = asyncio.create_task(ref.ask("wait"))
        await settle()
        queued = [asyncio.create_task(ref.ask(Ping())) for _ in range(2)]
        await settle()
        ref.stop()
        assert ref.state is ActorState.STOPPING
        gate.set()
        assert await current == "done wait"
        for ask in queued:
            with pytest.raises(ActorStopped, match=r"actor 'worker' stopped before answering Ping"):
                await ask
        with pytest.raises(ActorStopped, match="Ping"):
            await ref.ask(Ping())
        with pytest.raises(
            ActorStopped, match="'worker' is stopping or stopped; it cannot take int"
        ):
            ref.send_nowait(1)
        with pytest.raises(ActorStopped, match="cannot take int"):
            await ref.send(1)
    assert ref.state is ActorState.STOPPED
    assert log == ["start worker", "receive wait", "stop"]


async def test_in_flight_ask_fails_when_the_actor_is_cancelled(settle: Settle) -> None:
    """Cancelling the supervisor fails an ask being handled with ActorStopped."""
    async with Supervisor() as sup:
        ref = sup.spawn("stuck", lambda: Journal([], asyncio.Event()))
        ask = asyncio.create_task(ref.ask("wait"))
        await settle()
        sup.cancel()
    with pytest.raises(ActorStopped, match="'stuck' was cancelled before answering str"):
        await ask


async def test_crash_on_a_tell_fails_queued_asks() -> None:
    """When a tell crashes the actor, asks queued behind it fail with ActorStopped."""
    async with Supervisor(on_crash=lambda a, e: None) as sup:
        ref = sup.spawn("fragile", lambda: Journal([]))
        ref.send_nowait("boom")
        with pytest.raises(ActorStopped, match="crashed before answering"):
            await ref.ask("next")


async def test_hooks_run_in_order_and_see_their_context() -> None:
    """on_start sees address, supervisor and ref; on_stop runs after the last message."""
    seen: list[object] = []

    class Curious(Actor):
        async def on_start(self) -> None:
            seen.extend([self.address, self.supervisor, self.ref.state])

        async def receive(self, message: Any) -> Any:
            return message

    async with Supervisor() as sup:
        ref = sup.spawn("curious", Curious)
        states = [ref.state]
        await ref.ask(0)
        states.append(ref.state)
    assert states == [ActorState.STARTING, ActorState.RUNNING]
    assert seen == [Address.root("curious"), sup, ActorState.STARTING]


async def test_self_stop_takes_effect_after_the_current_message(settle: Settle) -> None:
    """stop() inside receive finishes that message, then refuses the queued ones."""
    log: list[str] = []
    letters: list[DeadLetter] = []
    async with Supervisor(on_dead_letter=letters.append) as sup:
        ref = sup.spawn("quitter", lambda: Journal(log))
        ref.send_nowait("stop")
        ref.send_nowait("never")
        await settle()
        assert ref.state is ActorState.STOPPED
    assert log == ["start quitter", "receive stop", "stop"]
    assert letters == [DeadLetter("quitter", "str", "actor stopped")]


async def test_on_start_failure_is_a_crash() -> None:
    """If on_start raises, on_failure runs, receive never does, and queued asks fail."""
    log: list[str] = []
    crashes: list[BaseException] = []

    class BadStart(Journal):
        async def on_start(self) -> None:
            raise RuntimeError("no start")

    async with Supervisor(on_crash=lambda a, e: crashes.append(e)) as sup:
        ref = sup.spawn("bad", lambda: BadStart(log))
        with pytest.raises(ActorStopped, match="crashed"):
            await ref.ask("hello")
    assert log == ["failure RuntimeError('no start')"]
    assert [type(e) for e in crashes] == [RuntimeError]


async def test_on_stop_failure_is_a_crash() -> None:
    """If on_stop raises, the stop is reported as a crash."""
    crashes: list[BaseException] = []

    class BadStop(Echo):
        async def on_stop(self) -> None:
            raise RuntimeError("no stop")

    async with Supervisor(on_crash=lambda a, e: crashes.append(e)) as sup:
        ref = sup.spawn("bad", BadStop)
        await ref.ask(1)
    assert ref.state is ActorState.FAILED
    assert [str(e) for e in crashes] == ["no stop"]


async def test_on_failure_error_is_reported_instead(settle: Settle) -> None:
    """If on_failure raises, its error is reported, with the crash as its context."""
    crashes: list[BaseException] = []

    class BadFailure(Actor):
        async def receive(self, message: Any) -> Any:
            raise ValueError("first")

        async def on_failure(self, error: BaseException) -> None:
            raise KeyError("second")

    async with Supervisor(on_crash=lambda a, e: crashes.append(e)) as sup:
        with pytest.raises(ValueError, match="first"):
            await sup.spawn("bad", BadFailure).ask(1)
        await settle()
    assert [type(e) for e in crashes] == [KeyError]
    assert isinstance(crashes[0].__context__, ValueError)


async def test_send_waits_for_room_in_a_full_inbox(settle: Settle) -> None:
    """ActorRef.send blocks on a full inbox; send_nowait raises InboxFull."""
    gate = asyncio.Event()
    async with Supervisor() as sup:
        ref = sup.spawn("slow", lambda: Journal([], gate), inbox_size=1)
        ref.send_nowait("wait")
        await settle()
        ref.send_nowait("queued")
        with pytest.raises(InboxFull):
            ref.send_nowait("overflow")
        sender = asyncio.create_task(ref.send("blocked"))
        await settle()
        assert not sender.done()
        gate.set()
        await sender
        assert await ref.ask("sync") == "done sync"


async def test_factory_must_build_an_actor() -> None:
    """A factory that returns something else is refused at spawn."""
    async with Supervisor() as sup:
        with pytest.raises(TypeError, match="not an Actor"):
            sup.spawn("odd", lambda: object())  # type: ignore[arg-type, return-value]


async def test_ref_repr_names_address_and_state() -> None:
    """An ActorRef's repr shows where it is and how it is."""
    async with Supervisor() as sup:
        ref: ActorRef = sup.spawn("a.0.b", Echo)
        assert repr(ref) == "<ActorRef a.0.b starting>"
        assert ref.address == Address.parse("a.0.b")
        assert ref.supervisor is sup


async def test_an_actor_cannot_ask_itself() -> None:
    """Asking yourself would wait forever, so it is refused at once."""

    class Narcissus(Actor):
        async def receive(self, message: Any) -> Any:
            return await self.ref.ask("again")

    async with Supervisor(on_crash=lambda a, e: None) as sup:
        with pytest.raises(RuntimeError, match="asked itself"):
            await sup.spawn("narcissus", Narcissus).ask(1)
