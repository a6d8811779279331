"""Restart types, restart strategies and restart intensity, as in Erlang/OTP."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from cadenza.errors import ActorStopped, SupervisorEscalation
from cadenza.kernel import (
    Actor,
    ActorRef,
    ActorState,
    Address,
    DeadLetter,
    FakeClock,
    Restart,
    RestartStrategy,
    Supervisor,
)

from .conftest import Settle

_instances = itertools.count()


class Worker(Actor):
    """Answers "who" with its instance number; "boom" crashes it, "quit" stops it."""

    def __init__(self, starts: list[str] | None = None) -> None:
        self.instance = next(_instances)
        self.starts = starts

    async def on_start(self) -> None:
        if self.starts is not None:
            self.starts.append(str(self.address))

    async def receive(self, message: Any) -> Any:
        if message == "boom":
            raise ValueError(f"boom in {self.address}")
        if message == "quit":
            self.stop()
        return self.instance


def ignore_crash(address: Address, error: BaseException) -> None:
    """An on_crash that only keeps the default log quiet."""


async def crash(ref: ActorRef) -> None:
    with pytest.raises(ValueError, match="boom"):
        await ref.ask("boom")


async def test_permanent_actor_is_restarted_after_crash_and_self_stop(settle: Settle) -> None:
    """PERMANENT comes back after a crash and after stopping itself, as a new instance."""
    async with Supervisor(on_crash=ignore_crash) as sup:
        ref = sup.spawn("keeper", Worker, restart=Restart.PERMANENT)
        first = await ref.ask("who")
        await crash(ref)
        second = await ref.ask("who")
        assert second != first
        assert sup.lookup("keeper") is ref
        await ref.ask("quit")
        await settle()
        third = await ref.ask("who")
        assert third not in (first, second)
        assert sup.statistics().restarts == 2
        assert ref.state is ActorState.RUNNING


async def test_permanent_actor_stopped_by_its_owner_stays_stopped(settle: Settle) -> None:
    """ActorRef.stop ends even a PERMANENT actor for good."""
    async with Supervisor() as sup:
        ref = sup.spawn("keeper", Worker, restart=Restart.PERMANENT)
        ref.stop()
        await settle()
        assert ref.state is ActorState.STOPPED
        assert sup.lookup("keeper") is None


async def test_transient_actor_is_restarted_only_after_a_crash(settle: Settle) -> None:
    """TRANSIENT comes back after a crash but not after a normal stop."""
    async with Supervisor(on_crash=ignore_crash) as sup:
        ref = sup.spawn("maybe", Worker, restart=Restart.TRANSIENT)
        await crash(ref)
        await ref.ask("who")
        await ref.ask("quit")
        await settle()
        assert ref.state is ActorState.STOPPED
        assert sup.lookup("maybe") is None
        assert sup.statistics().restarts == 1


async def test_temporary_actor_is_never_restarted(settle: Settle) -> None:
    """TEMPORARY (the default) is gone after a crash."""
    async with Supervisor(on_crash=ignore_crash) as sup:
        ref = sup.spawn("once", Worker)
        await crash(ref)
        await settle()
        assert ref.state is ActorState.FAILED
        assert sup.lookup("once") is None
        assert sup.statistics().restarts == 0


async def test_one_for_one_leaves_siblings_alone() -> None:
    """ONE_FOR_ONE restarts only the actor that crashed."""
    async with Supervisor(on_crash=ignore_crash) as sup:
        a = sup.spawn("a", Worker, restart=Restart.PERMANENT)
        b = sup.spawn("b", Worker, restart=Restart.PERMANENT)
        a_before, b_before = await a.ask("who"), await b.ask("who")
        await crash(a)
        assert await a.ask("who") != a_before
        assert await b.ask("who") == b_before


async def test_one_for_all_restarts_every_sibling_in_spawn_order(settle: Settle) -> None:
    """ONE_FOR_ALL stops all siblings (gracefully), then starts them all in spawn order."""
    starts: list[str] = []
    stops: list[str] = []

    class Recorded(Worker):
        async def on_stop(self) -> None:
            stops.append(str(self.address))

    async with Supervisor(strategy=RestartStrategy.ONE_FOR_ALL, on_crash=ignore_crash) as sup:
        refs = [
            sup.spawn(name, lambda: Recorded(starts), restart=Restart.PERMANENT)
            for name in ("a", "b", "c")
        ]
        temporary = sup.spawn("t", Recorded)
        before = [await ref.ask("who") for ref in refs]
        starts.clear()
        await crash(refs[1])
        await settle()
        after = [await ref.ask("who") for ref in refs]
        assert starts == ["a", "b", "c"]
        assert sorted(stops) == ["a", "c", "t"]  # the crashed one does not run on_stop
        assert all(x != y for x, y in zip(before, after, strict=True))
        assert temporary.state is ActorState.STOPPED  # stopped with the rest, not restarted
        assert sup.lookup("t") is None
        assert sup.statistics().restarts == 3


async def test_rest_for_one_restarts_the_crashed_and_later_siblings(settle: Settle) -> None:
    """REST_FOR_ONE restarts the crashed actor and those spawned after it, in order."""
    starts: list[str] = []
    async with Supervisor(strategy=RestartStrategy.REST_FOR_ONE, on_crash=ignore_crash) as sup:
        refs = [
            sup.spawn(name, lambda: Worker(starts), restart=Restart.TRANSIENT)
            for name in ("a", "b", "c")
        ]
        before = [await ref.ask("who") for ref in refs]
        starts.clear()
        await crash(refs[1])
        await settle()
        after = [await ref.ask("who") for ref in refs]
        assert starts == ["b", "c"]
        assert after[0] == before[0]
        assert after[1] != before[1]
        assert after[2] != before[2]


async def test_restart_gets_a_fresh_inbox_and_reports_queued_tells(settle: Settle) -> None:
    """Messages queued behind a crash go to dead letters, not to the new instance."""
    letters: list[DeadLetter] = []
    async with Supervisor(on_crash=ignore_crash, on_dead_letter=letters.append) as sup:
        ref = sup.spawn("w", Worker, restart=Restart.PERMANENT)
        ref.send_nowait("boom")
        ref.send_nowait("lost")
        await settle()
        assert letters == [DeadLetter("w", "str", "actor crashed")]
        await ref.ask("who")


async def test_on_crash_sees_every_crash_before_the_restart() -> None:
    """on_crash gets the address and error of each crash, before the restart happens."""
    seen: list[tuple[Address, str, int]] = []
    sup = Supervisor(
        on_crash=lambda address, error: seen.append(
            (address, str(error), sup.statistics().restarts)
        )
    )
    async with sup:
        ref = sup.spawn("w", Worker, restart=Restart.PERMANENT)
        await crash(ref)
        await crash(ref)
    assert seen == [
        (Address.root("w"), "boom in w", 0),
        (Address.root("w"), "boom in w", 1),
    ]


async def test_too_many_restarts_escalate_with_the_cause(settle: Settle) -> None:
    """More than max_restarts restarts within the window: every actor stops, the block raises."""
    crashes: list[BaseException] = []
    before = asyncio.all_tasks()
    refs: list[ActorRef] = []

    async def run() -> None:
        async with Supervisor(
            max_restarts=2, within=5, on_crash=lambda a, e: crashes.append(e)
        ) as sup:
            refs.append(sup.spawn("bystander", Worker, restart=Restart.PERMANENT))
            flaky = sup.spawn("flaky", Worker, restart=Restart.PERMANENT)
            for _ in range(3):
                flaky.send_nowait("boom")
                await settle()
            await asyncio.Event().wait()  # cancelled by the escalation

    with pytest.raises(SupervisorEscalation) as caught:
        await run()
    message = str(caught.value)
    assert "'flaky'" in message
    assert "3 restarts within 5" in message
    assert "max_restarts=2" in message
    assert caught.value.__cause__ is crashes[-1]
    assert len(crashes) == 3
    assert refs[0].state is ActorState.STOPPED
    assert asyncio.all_tasks() == before


async def test_restarts_spread_beyond_the_window_do_not_escalate() -> None:
    """Intensity counts restarts within `within` seconds of the supervisor's clock."""
    clock = FakeClock()
    async with Supervisor(max_restarts=1, within=10, clock=clock, on_crash=ignore_crash) as sup:
        ref = sup.spawn("flaky", Worker, restart=Restart.PERMANENT)
        for _ in range(4):
            await crash(ref)
            await clock.advance(10)
        assert sup.statistics().restarts == 4


async def test_zero_restarts_escalate_on_the_first_crash() -> None:
    """max_restarts=0 gives up at the first restart it would make."""

    async def run() -> None:
        async with Supervisor(max_restarts=0, on_crash=ignore_crash) as sup:
            await crash(sup.spawn("fragile", Worker, restart=Restart.TRANSIENT))
            await asyncio.Event().wait()

    with pytest.raises(SupervisorEscalation, match="1 restarts"):
        await run()


async def test_failing_factory_on_restart_counts_as_a_crash() -> None:
    """A factory that fails during a restart is a crash of that actor, counted for intensity."""
    calls = itertools.count()
    crashes: list[BaseException] = []

    def factory() -> Worker:
        if next(calls) > 0:
            raise OSError("no more workers")
        return Worker()

    async def run() -> None:
        async with Supervisor(max_restarts=2, on_crash=lambda a, e: crashes.append(e)) as sup:
            await crash(sup.spawn("w", factory, restart=Restart.PERMANENT))
            await asyncio.Event().wait()

    with pytest.raises(SupervisorEscalation) as caught:
        await run()
    assert isinstance(caught.value.__cause__, OSError)
    assert [type(e) for e in crashes] == [ValueError, OSError, OSError]


async def test_pending_asks_of_a_sibling_fail_on_escalation(settle: Settle) -> None:
    """When the supervisor gives up, asks pending anywhere fail with ActorStopped."""

    class Slow(Actor):
        async def receive(self, message: Any) -> Any:
            await asyncio.Event().wait()

    pending: list[asyncio.Task[Any]] = []

    async def run() -> None:
        async with Supervisor(max_restarts=0, on_crash=ignore_crash) as sup:
            pending.append(asyncio.create_task(sup.spawn("slow", Slow).ask("x")))
            await settle()
            sup.spawn("flaky", Worker, restart=Restart.PERMANENT).send_nowait("boom")
            await asyncio.Event().wait()

    with pytest.raises(SupervisorEscalation):
        await run()
    with pytest.raises(ActorStopped, match="'slow' was cancelled"):
        await pending[0]


def test_intensity_arguments_are_checked() -> None:
    """Nonsense intensity settings are refused up front."""
    with pytest.raises(ValueError, match="max_restarts"):
        Supervisor(max_restarts=-1)
    with pytest.raises(ValueError, match="within"):
        Supervisor(within=0)
    with pytest.raises(ValueError, match="inbox_size"):
        Supervisor(inbox_size=0)
