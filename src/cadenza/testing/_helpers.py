"""Small helpers for testing one's own workflows: run one, record its messages.

from cadenza.testing import MessageRecorder, ScriptedLLMServer, run_workflow

async def test_the_buyer_and_seller_agree() -> None:
    messages = MessageRecorder()
    result = await run_workflow("negotiation.yaml", on_event=messages)
    assert result.status == "completed"
    assert any("DEAL" in text for text in messages.texts(sender="buyer"))
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from cadenza.kernel import FakeClock
from cadenza.protocols import (
    AgentInboxDrain,
    Event,
    EventType,
    MessageDropped,
    MessageSent,
    RunResult,
    payload,
)

if TYPE_CHECKING:
    from cadenza.kernel import Clock
    from cadenza.store import RunStore
    from cadenza.workflow import LoadedWorkflow, Workflow

__all__ = ["MessageRecorder", "RecordedMessage", "run_workflow"]


async def run_workflow(
    workflow: LoadedWorkflow | Workflow | str | os.PathLike[str],
    *,
    inputs: Mapping[str, Any] | None = None,
    store: RunStore | str | os.PathLike[str] | None = None,
    clock: Clock | None = None,
    default_model: str | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> RunResult:
    """Runs ``workflow`` on a fresh `Runtime` (an in-memory store by default) and
    returns its result; the runtime is closed when the run has ended.

    Args:
        workflow: A file path, a loaded workflow, or one built with `cadenza.build`.
        inputs: The run's inputs.
        store: A store or a SQLite path, to look at the run afterwards or resume it.
        clock: A `FakeClock` makes delays, timeouts and loop waits instant: it
            jumps to the next timer whenever the run has been idle for 50 ms of
            real time (`FakeClock.autojump`). A step doing real work for longer
            than that (a command, a real model call) can see its timeout fire
            early under it.
        default_model: The model of steps that name none (e.g. ``scripted:writer``).
        on_event: Sees every event of the run (a `MessageRecorder`, a list's append).

    Raises:
        WorkflowError: The workflow is invalid.
        InputError: An input is missing or of the wrong type.
    """
    from cadenza import Runtime

    async with Runtime(store=store, clock=clock, default_model=default_model) as runtime:
        handle = await runtime.start(workflow, inputs=inputs, on_event=on_event)
        if not isinstance(clock, FakeClock):
            return await handle.result()
        async with anyio.create_task_group() as group:
            group.start_soon(clock.autojump)
            result = await handle.result()
            group.cancel_scope.cancel()
        return result


@dataclass(frozen=True, slots=True)
class RecordedMessage:
    """One message the run carried: who sent it, to whom, and what it said.

    ``target`` is ``coordinator`` for an agent's ``send_message``, else the step id
    or address the coordinator (or `RunHandle.post_message`) delivered it to.
    """

    sender: str
    target: str
    text: str
    dropped: str | None = None
    """Why the message was dropped (a full inbox), or None if it was delivered."""


class MessageRecorder:
    """An event sink (``on_event=``) that keeps the messages a run carries.

    Messages are listed in the order they were sent; `drained` says which step
    took which sender's messages into its next turn (``agent_inbox_drain``).
    """

    def __init__(self) -> None:
        self.messages: list[RecordedMessage] = []
        self.drained: list[tuple[str, str]] = []
        """``(address, sender)`` for every message a step read from its inbox."""

    def __call__(self, event: Event) -> None:
        if event.type == EventType.MESSAGE_SENT:
            sent = payload(event, MessageSent)
            self.messages.append(RecordedMessage(sender=sent.from_, target=sent.to, text=sent.text))
        elif event.type == EventType.MESSAGE_DROPPED:
            dropped = payload(event, MessageDropped)
            self.messages.append(
                RecordedMessage(
                    sender=dropped.from_,
                    target=dropped.to,
                    text=dropped.text or "",
                    dropped=dropped.reason,
                )
            )
        elif event.type == EventType.AGENT_INBOX_DRAIN:
            self.drained.append((event.step_id or "", payload(event, AgentInboxDrain).from_))

    def texts(self, *, sender: str | None = None, target: str | None = None) -> list[str]:
        """The texts of the messages from ``sender`` and/or to ``target`` (bare step
        ids match any instance: ``buyer`` matches ``haggle.2.buyer``), in order."""
        return [
            message.text
            for message in self.messages
            if message.dropped is None
            and (sender is None or _matches(message.sender, sender))
            and (target is None or _matches(message.target, target))
        ]


def _matches(address: str, wanted: str) -> bool:
    if address == wanted:
        return True
    last = address.rsplit(".", 1)[-1].split("[", 1)[0]
    return last == wanted
