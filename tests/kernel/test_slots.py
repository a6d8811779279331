"""`Slots`: the run-wide concurrency limit every step attempt passes through."""

from __future__ import annotations

import asyncio

import pytest

from cadenza.kernel import Slots


def test_take_succeeds_until_the_slots_are_gone_and_give_frees_one() -> None:
    slots = Slots(2)
    assert slots.take()
    assert slots.take()
    assert not slots.take()
    slots.give()
    assert slots.free == 1
    assert slots.take()


def test_a_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Slots(0)


def queue(slots: Slots, served: list[str], *names: str) -> list[asyncio.Task[None]]:
    """A task per name that waits for a slot, notes its name in ``served``, gives it back."""

    async def worker(name: str) -> None:
        await slots.wait()
        served.append(name)
        slots.give()

    return [asyncio.create_task(worker(name)) for name in names]


async def test_waiters_are_served_in_arrival_order_and_newcomers_queue_behind() -> None:
    slots = Slots(1)
    assert slots.take()
    order: list[str] = []
    first, second = queue(slots, order, "first", "second")
    await asyncio.sleep(0)  # both are now waiting in line
    slots.give()
    assert not slots.take(), "a slot freed for a waiter went to a newcomer"
    await asyncio.gather(first, second)
    assert order == ["first", "second"]
    assert slots.free == 1


async def test_a_cancelled_waiter_passes_its_slot_to_the_next() -> None:
    slots = Slots(1)
    assert slots.take()
    got: list[str] = []
    doomed, patient = queue(slots, got, "doomed", "patient")
    await asyncio.sleep(0)
    slots.give()  # handed to "doomed", which is cancelled before it runs
    doomed.cancel()
    await asyncio.gather(doomed, patient, return_exceptions=True)
    assert got == ["patient"]
    assert slots.free == 1


async def test_a_waiter_cancelled_while_waiting_leaves_the_line() -> None:
    slots = Slots(1)
    assert slots.take()
    waiter = asyncio.create_task(slots.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    slots.give()
    assert slots.take(), "the cancelled waiter still held a place in line"


async def test_async_with_takes_and_gives_a_slot() -> None:
    slots = Slots(1)
    async with slots:
        assert slots.free == 0
    assert slots.free == 1
