"""The messages agents exchange through the coordinator, and the bounds of inboxes and runs.

The coordinator actor (``_coordinator``) carries them; agent steps send
`Outgoing` and drain `AgentMessage`; a resumed run rebuilds waiting ones from
its journal; `Backlog` counts what a run holds, all its targets together;
`Unanswered` what the coordinator agent has yet to answer, per sender. They
live apart from the coordinator so that the agent loop, the step actor and the
replay can name them without importing the actor that routes them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

import msgspec

from cadenza.errors import MessageRefused
from cadenza.kernel import Address

__all__ = [
    "COORDINATOR",
    "INBOX_BYTES",
    "INBOX_SIZE",
    "MSG_TYPES",
    "POSTER",
    "RUN_MAIL_BYTES",
    "RUN_MAIL_SIZE",
    "AgentMessage",
    "Backlog",
    "Drain",
    "Outgoing",
    "Unanswered",
    "letter_size",
    "pending_bytes",
    "step_name",
]

COORDINATOR = Address.root("Coordinator")
"""The coordinator's address: capitalised, so no step id can take it."""

POSTER = "api"
"""Who sent a message posted from outside the run (`RunHandle.post_message`, the HTTP
API, a post through the store): its ``message_sent`` ``from``."""

INBOX_SIZE = 10_000
"""Messages an agent step (and the coordinator) may hold before new ones are dropped."""

INBOX_BYTES = 1 << 20
"""UTF-8 bytes of text a step's undrained messages may hold before new ones are dropped.

A drained inbox becomes part of the agent's next prompt, and 1 MiB of text
(~250,000 tokens) is past most models' context windows already; every accepted
message is also journaled whole, so this bound is what keeps a flood of large
messages from filling the store.
"""

RUN_MAIL_SIZE = 2 * INBOX_SIZE
"""Messages a run may hold waiting for delivery, across all its targets, before it refuses.

Per-step bounds alone do not bound a run: a flood addressed to a new target
each time (a step that never starts, or no step at all) found an empty inbox
every time. Twice one inbox, so that the bounds of one step are what a flood
of small messages to it meets first (dropped and counted, not refused).
"""

RUN_MAIL_BYTES = 4 * INBOX_BYTES
"""UTF-8 bytes of text a run's messages waiting for delivery may hold before it refuses.

Four full inboxes. Every accepted message is journaled whole (a 1 KB message
costs about 3 KB of store), so this is what bounds a flood's share of the store:
4,096 messages of 1 KB, 12 MB of store (docs/hardening.md).
"""

MSG_TYPES = {"info": 0, "cancel": 1, "context": 2, "reply": 3}


class AgentMessage(msgspec.Struct, frozen=True):
    """A message delivered into an agent step's inbox."""

    sender: str
    text: str
    kind: str = "info"


class Outgoing(msgspec.Struct, frozen=True):
    """An agent's ``send_message``: to the coordinator."""

    sender: str
    text: str


class Drain(msgspec.Struct, frozen=True):
    """Asked at the end of a run: answered once every earlier message is handled."""


@dataclass(slots=True)
class Backlog:
    """A run's messages waiting for delivery, across all its targets: how many, how big.

    A message counts from the moment it is posted (or forwarded) until an agent
    drains it; one a step's inbox drops is given back. What no instance ever
    takes counts until the run ends, so junk addressed to no step fills the
    backlog and then meets the refusal, rather than memory and the store.
    """

    letters: int = 0
    size: int = 0

    def take(self, run_id: str, size: int) -> None:
        """Counts one more message of ``size`` bytes.

        Raises:
            MessageRefused: The run holds `RUN_MAIL_SIZE` messages or `RUN_MAIL_BYTES`
                of text with it; nothing is counted.
        """
        if self.letters >= RUN_MAIL_SIZE:
            raise MessageRefused(
                f"run {run_id!r} refuses the message: {self.letters} messages already wait"
                f" for delivery, its bound is {RUN_MAIL_SIZE}"
            )
        if self.size + size > RUN_MAIL_BYTES:
            raise MessageRefused(
                f"run {run_id!r} refuses the message of {size} bytes: {self.size} bytes of"
                f" messages already wait for delivery, its bound is {RUN_MAIL_BYTES}"
            )
        self.letters += 1
        self.size += size

    def give_back(self, letters: int, size: int) -> None:
        """Uncounts messages drained, dropped or never sent."""
        self.letters -= letters
        self.size -= size

    @classmethod
    def of(cls, mail: dict[str, deque[AgentMessage]]) -> Backlog:
        """The backlog of the messages kept in ``mail`` (after a replay)."""
        sizes = pending_bytes(mail)
        return cls(sum(len(letters) for letters in mail.values()), sum(sizes.values()))


class Unanswered:
    """Messages to the coordinator agent it has not answered yet, per sender.

    A step's messages are answered (the agent woken, its forwards delivered or
    dropped) before the step reports its end to its container, so what depends
    on the step starts after the forwards its messages caused have landed:
    ordered by cause, not by which of two actors the scheduler happens to run
    first. Counted only in a run whose workflow names a coordinator agent (the
    coordinator enables it); elsewhere nothing is counted and no step waits.
    """

    __slots__ = ("_counts", "_waiters", "enabled")

    def __init__(self) -> None:
        self.enabled = False
        self._counts: dict[str, int] = {}
        self._waiters: dict[str, asyncio.Future[None]] = {}

    def sent(self, sender: str) -> None:
        """Counts one more message from ``sender`` for the coordinator agent to answer."""
        if self.enabled:
            self._counts[sender] = self._counts.get(sender, 0) + 1

    def answered(self, sender: str) -> None:
        """One message from ``sender`` is answered; its waiter goes on once none is left."""
        count = self._counts.get(sender)
        if count is None:
            return
        if count > 1:
            self._counts[sender] = count - 1
            return
        del self._counts[sender]
        waiter = self._waiters.pop(sender, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def waiter(self, sender: str) -> asyncio.Future[None] | None:
        """Done once every message ``sender`` sent so far is answered; None if none waits."""
        if sender not in self._counts:
            return None
        waiter = self._waiters.get(sender)
        if waiter is None or waiter.done():  # (done: cancelled with an earlier awaiter)
            waiter = self._waiters[sender] = asyncio.get_running_loop().create_future()
        return waiter


def letter_size(run_id: str, text: str) -> int:
    """The UTF-8 size of a message for a step of run ``run_id``.

    Raises:
        MessageRefused: It is larger than a step's inbox holds (`INBOX_BYTES`):
            no instance could ever take it.
    """
    size = len(text.encode())
    if size > INBOX_BYTES:
        raise MessageRefused(
            f"run {run_id!r} refuses the message of {size} bytes: a step's inbox holds"
            f" {INBOX_BYTES}"
        )
    return size


def step_name(target: str) -> str:
    """The step an address belongs to: ``loop.0.worker``, ``each[1].worker`` → ``worker``."""
    return target.rsplit(".", 1)[-1].split("[", 1)[0]


def pending_bytes(mail: dict[str, deque[AgentMessage]]) -> dict[str, int]:
    """`RunContext.mail_bytes` for messages kept in ``mail`` (after a replay)."""
    return {
        name: sum(len(letter.text.encode()) for letter in letters) for name, letters in mail.items()
    }
