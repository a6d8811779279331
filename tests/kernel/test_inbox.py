"""Inbox: bounded FIFO, backpressure, close semantics, cancellation safety."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from cadenza.errors import ActorStopped, InboxFull
from cadenza.kernel import Inbox

from .conftest import Settle


async def test_fifo_order_and_length() -> None:
    """Items come out in the order they went in; len counts what is held."""
    inbox: Inbox[int] = Inbox(10)
    for i in range(5):
        await inbox.send(i)
    assert len(inbox) == 5
    assert [await inbox.receive() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert len(inbox) == 0


async def test_send_nowait_on_full_inbox_raises_inbox_full() -> None:
    """send_nowait refuses an item beyond capacity."""
    inbox: Inbox[int] = Inbox(2)
    inbox.send_nowait(1)
    inbox.send_nowait(2)
    with pytest.raises(InboxFull):
        inbox.send_nowait(3)
    assert inbox.maxsize == 2


async def test_send_blocks_until_consumer_takes_one(settle: Settle) -> None:
    """A sender on a full inbox waits until the consumer frees a slot."""
    inbox: Inbox[int] = Inbox(1)
    inbox.send_nowait(1)
    sender = asyncio.create_task(inbox.send(2))
    await settle()
    assert not sender.done()
    assert await inbox.receive() == 1
    await sender
    assert await inbox.receive() == 2


async def test_waiting_senders_are_served_in_order(settle: Settle) -> None:
    """Blocked senders deliver in arrival order, and a newcomer cannot jump the queue."""
    inbox: Inbox[str] = Inbox(1)
    inbox.send_nowait("first")
    senders = []
    for name in ("a", "b", "c"):
        senders.append(asyncio.create_task(inbox.send(name)))
        await settle()
    assert await inbox.receive() == "first"
    with pytest.raises(InboxFull):
        inbox.send_nowait("late")  # the freed slot is reserved for "a"
    received = [await inbox.receive() for _ in range(3)]
    await asyncio.gather(*senders)
    assert received == ["a", "b", "c"]


async def test_receive_waits_for_an_item(settle: Settle) -> None:
    """receive on an empty inbox waits until something is sent."""
    inbox: Inbox[int] = Inbox(1)
    receiver = asyncio.create_task(inbox.receive())
    await settle()
    assert not receiver.done()
    inbox.send_nowait(7)
    assert await receiver == 7


async def test_receive_nowait_on_empty_inbox_would_block() -> None:
    """receive_nowait raises WouldBlock when nothing is there."""
    inbox: Inbox[int] = Inbox(1)
    with pytest.raises(anyio.WouldBlock):
        inbox.receive_nowait()


async def test_second_receiver_is_refused(settle: Settle) -> None:
    """Only one task may wait in receive at a time."""
    inbox: Inbox[int] = Inbox(1)
    first = asyncio.create_task(inbox.receive())
    await settle()
    with pytest.raises(anyio.BusyResourceError):
        await inbox.receive()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_close_refuses_sends_and_drains_then_raises() -> None:
    """After close, sends fail; held items still come out, then receive raises."""
    inbox: Inbox[int] = Inbox(5)
    inbox.send_nowait(1)
    inbox.close()
    inbox.close()  # idempotent
    assert inbox.closed
    with pytest.raises(ActorStopped):
        inbox.send_nowait(2)
    with pytest.raises(ActorStopped):
        await inbox.send(2)
    assert await inbox.receive() == 1
    with pytest.raises(ActorStopped):
        await inbox.receive()
    with pytest.raises(ActorStopped):
        inbox.receive_nowait()


async def test_close_wakes_waiting_sender_and_receiver(settle: Settle) -> None:
    """Pending senders and an idle receiver are woken by close with ActorStopped."""
    full: Inbox[int] = Inbox(1)
    full.send_nowait(1)
    sender = asyncio.create_task(full.send(2))
    empty: Inbox[int] = Inbox(1)
    receiver = asyncio.create_task(empty.receive())
    await settle()
    full.close()
    empty.close()
    with pytest.raises(ActorStopped, match="closed"):
        await sender
    with pytest.raises(ActorStopped):
        await receiver
    assert full.drain() == [1]


async def test_cancelled_receive_loses_nothing(settle: Settle) -> None:
    """A receive cancelled after an item arrived leaves that item for the next receive."""
    inbox: Inbox[int] = Inbox(2)
    receiver = asyncio.create_task(inbox.receive())
    await settle()
    inbox.send_nowait(1)  # wakes the receiver, which has not run yet
    receiver.cancel()
    with pytest.raises(asyncio.CancelledError):
        await receiver
    assert len(inbox) == 1
    assert await inbox.receive() == 1
    inbox.send_nowait(2)  # no stale waiter left behind
    assert await inbox.receive() == 2


async def test_cancelled_sender_delivers_nothing_and_passes_its_turn(settle: Settle) -> None:
    """A sender cancelled after being woken did not deliver; the next sender gets the slot."""
    inbox: Inbox[str] = Inbox(1)
    inbox.send_nowait("held")
    first = asyncio.create_task(inbox.send("cancelled"))
    await settle()
    second = asyncio.create_task(inbox.send("second"))
    await settle()
    assert await inbox.receive() == "held"  # wakes `first`
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await second
    assert inbox.drain() == ["second"]
    inbox.send_nowait("after")  # no waiter left behind
    assert await inbox.receive() == "after"


async def test_cancelled_sender_before_wakeup_leaves_no_waiter(settle: Settle) -> None:
    """A sender cancelled while still waiting is simply forgotten."""
    inbox: Inbox[int] = Inbox(1)
    inbox.send_nowait(1)
    sender = asyncio.create_task(inbox.send(2))
    await settle()
    sender.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sender
    assert await inbox.receive() == 1
    inbox.send_nowait(3)
    assert inbox.drain() == [3]


async def test_drain_frees_room_for_waiting_senders(settle: Settle) -> None:
    """Draining an open inbox lets blocked senders in."""
    inbox: Inbox[int] = Inbox(1)
    inbox.send_nowait(1)
    sender = asyncio.create_task(inbox.send(2))
    await settle()
    assert inbox.drain() == [1]
    await sender
    assert inbox.drain() == [2]


def test_size_must_be_positive() -> None:
    """An inbox holds at least one item."""
    with pytest.raises(ValueError, match="at least 1"):
        Inbox(0)
