"""The messages agents exchange through the coordinator, and the bounds of an inbox.

The coordinator actor (``_coordinator``) carries them; agent steps send
`Outgoing` and drain `AgentMessage`; the embedding service posts `PostMessage`;
a resumed run rebuilds waiting ones from its journal. They live apart from the
coordinator so that the agent loop, the step actor and the replay can name them
without importing the actor that routes them.
"""

from __future__ import annotations

from collections import deque

import msgspec

from cadenza.kernel import Address

__all__ = [
    "COORDINATOR",
    "INBOX_BYTES",
    "INBOX_SIZE",
    "MSG_TYPES",
    "AgentMessage",
    "Drain",
    "Outgoing",
    "PostMessage",
    "pending_bytes",
    "step_name",
]

COORDINATOR = Address.root("Coordinator")
"""The coordinator's address: capitalised, so no step id can take it."""

INBOX_SIZE = 10_000
"""Messages an agent step (and the coordinator) may hold before new ones are dropped."""

INBOX_BYTES = 1 << 20
"""UTF-8 bytes of text a step's undrained messages may hold before new ones are dropped.

A drained inbox becomes part of the agent's next prompt, and 1 MiB of text
(~250,000 tokens) is past most models' context windows already; every accepted
message is also journaled whole, so this bound is what keeps a flood of large
messages from filling the store.
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


class PostMessage(msgspec.Struct, frozen=True):
    """A message the embedding service posts to a step (``RunHandle.post_message``)."""

    target: str
    text: str
    kind: str = "info"


class Drain(msgspec.Struct, frozen=True):
    """Asked at the end of a run: answered once every earlier message is handled."""


def step_name(target: str) -> str:
    """The step an address belongs to: ``loop.0.worker``, ``each[1].worker`` → ``worker``."""
    return target.rsplit(".", 1)[-1].split("[", 1)[0]


def pending_bytes(mail: dict[str, deque[AgentMessage]]) -> dict[str, int]:
    """`RunContext.mail_bytes` for messages kept in ``mail`` (after a replay)."""
    return {
        name: sum(len(letter.text.encode()) for letter in letters) for name, letters in mail.items()
    }
