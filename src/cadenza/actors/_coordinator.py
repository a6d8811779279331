"""The coordinator: carries messages between agents (SPEC section 5).

Agents call ``send_message(text)``; the message reaches the coordinator actor,
which records it in the run and, when the workflow names a coordinator agent
(``coordinator: {agent: NAME}``), wakes that agent with it. The coordinator agent
may ``forward_to_agent(target_step_id, text, kind?)``, ``narrate(text)`` and
``finalize(summary?)``. A forward to a bare step id reaches the newest live
instance; to an address, that instance, or the step's next instance if that one
has finished. Every inbox is bounded: what does not fit is dropped and
counted, never silently. A flood must not fill memory or the store, so a
dropped message is not recorded whole: its step's first drop, every
thousandth after it, and the total when the run ends each give one
``message_dropped`` event carrying the count so far (``dropped``), not the text.

Drops are counted per step, not per address, and the run as a whole is
bounded too (`Backlog`): a flood addressed to a new target each time (other
addresses of a full step, steps that never start, no step at all) would
otherwise find room, or a drop counter of its own, every time. Past the run's
bound `deliver` raises `MessageRefused`: a post (`RunHandle.post_message`,
which calls it at once, as `RunContext.deliver`, so that the poster hears the
answer) is refused, a forward fails as a tool error, and nothing is recorded.

Each wake of the coordinator agent is bracketed by ``coordinator_wake`` events
(``start``, ``end``). A resumed run wakes the agent again, before anything
else, for each message whose wake the interruption cut off (or never let
begin), in their order; what the cut-off wake did is void (`read_log`).

A step that sent messages reports its end only once the agent has answered
them (`Unanswered`), so its forwards reach the steps that depend on it before
they start: the order is causal, not the scheduler's. That holds across a
resume too: a replayed step waits for the answers the resumed coordinator
gives first.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from cadenza.errors import ActorStopped, InboxFull, MessageRefused
from cadenza.kernel import Actor
from cadenza.protocols import (
    CoordinatorWake,
    EventType,
    MaxWakeCyclesWarning,
    MessageDropped,
    MessageRecord,
    MessageSent,
)
from cadenza.workflow import LoadedWorkflow

from .run import (
    COORDINATOR,
    INBOX_BYTES,
    INBOX_SIZE,
    MSG_TYPES,
    NO_BRIEF,
    AgentMessage,
    Drain,
    Outgoing,
    RunContext,
    Scope,
    letter_size,
    step_name,
)
from .steps import AgentVisit, Tool, ToolError, run_agent

__all__ = ["CoordinatorActor"]

DROP_EVENT_EVERY = 1_000
"""After a target's first dropped message, one ``message_dropped`` event per this many."""


@dataclass(slots=True)
class _Drops:
    """Messages dropped for one step: how many, how many an event reported, the last."""

    count: int = 0
    reported: int = 0
    last: tuple[str, str, int, str] = ("", "", 0, "")
    """The last drop's target, sender, message type and reason."""


class CoordinatorActor(Actor):
    """Records messages between agents and, with a coordinator agent, routes them."""

    def __init__(self, run: RunContext, document: LoadedWorkflow) -> None:
        self.run = run
        self.document = document
        coordinator = document.workflow.coordinator
        self.agent_name = coordinator.agent if coordinator is not None else None
        self.max_wakes = coordinator.max_wakes if coordinator is not None else 0
        self.wakes = 0
        self.dropped: dict[str, _Drops] = {}
        if self.agent_name is not None:
            # Made before any step starts, so that a replayed step whose message the
            # interruption left unanswered waits for its answer like a live one.
            unanswered = run.unanswered
            unanswered.enabled = True
            replay = run.journal.replay
            for message in replay.log.unanswered if replay is not None else ():
                unanswered.sent(message.sender)

    async def on_start(self) -> None:
        """In a resumed run: wakes the agent for the messages the interruption left unanswered."""
        replay = self.run.journal.replay
        if replay is None or self.agent_name is None:
            return
        self.wakes = replay.log.coordinator_wakes
        for message in replay.log.unanswered:
            try:
                await self._wake(message)
            finally:
                self.run.unanswered.answered(message.sender)

    async def receive(self, message: Any) -> None:
        """Handles one message: an agent's outgoing message, or a drain."""
        if isinstance(message, Outgoing):
            try:
                await self._incoming(message)
            finally:  # its sender, finished, may now report its end
                self.run.unanswered.answered(message.sender)
        elif isinstance(message, Drain):
            self._report_drops()

    async def _incoming(self, message: Outgoing) -> None:
        journal = self.run.journal
        journal.record_message(
            MessageRecord(from_=message.sender, to="coordinator", text=message.text)
        )
        await self._wake(message)

    async def _wake(self, message: Outgoing) -> None:
        """Wakes the coordinator agent with ``message``, if it has an agent and wakes left."""
        journal = self.run.journal
        if self.agent_name is None or self.run.cancelled is not None:
            return
        where = str(COORDINATOR)
        if self.wakes >= self.max_wakes:
            journal.emit(
                EventType.MAX_WAKE_CYCLES_REACHED,
                step_id=where,
                message=f"the coordinator agent woke {self.wakes} times, its cap; not waking it",
            )
            return
        self.wakes += 1
        if self.wakes == max(1, int(self.max_wakes * 0.8)):
            journal.emit(
                EventType.MAX_WAKE_CYCLES_WARNING,
                step_id=where,
                data=MaxWakeCyclesWarning(
                    current_cycle=self.wakes,
                    max_cycles=self.max_wakes,
                    unread_remaining=self.waiting_messages,
                ),
            )
        start = CoordinatorWake(phase="start", from_=message.sender)
        journal.emit(EventType.COORDINATOR_WAKE, step_id=where, agent=self.agent_name, data=start)
        outcome = await run_agent(
            self.run,
            self.document,
            AgentVisit(
                address=where,
                agent_name=self.agent_name,
                instructions=f"Message from {message.sender}:\n{message.text}",
                scope=Scope(),
                brief=NO_BRIEF,
                extra_tools=self._tools(),
                can_send_messages=False,
                # A wake the kill cut off happens again under its number; its digests tell
                # whether what it is asked is what it was asked then.
                execution=self.wakes,
                resumes=self.wakes,
            ),
        )
        if outcome.error is not None:
            journal.emit(
                EventType.ERROR,
                step_id=where,
                agent=self.agent_name,
                error=f"{outcome.error.type}: {outcome.error.message}",
            )
        end = CoordinatorWake(phase="end", from_=message.sender)
        journal.emit(EventType.COORDINATOR_WAKE, step_id=where, agent=self.agent_name, data=end)

    def deliver(self, target: str, text: str, kind: str, *, sender: str) -> None:
        """Puts a message into a step's inbox, or keeps it for the step's next instance.

        Only a message that found room is recorded (``message_sent``, the result's
        messages); one that did not is counted (see the module docstring).

        Raises:
            MessageRefused: The run's backlog is full, or the message is larger
                than an inbox holds; nothing is recorded.
        """
        size = letter_size(self.run.run_id, text)
        self.run.backlog.take(self.run.run_id, size)
        refused = self._place(target, AgentMessage(sender, text, kind), size)
        if refused is not None:
            self.run.backlog.give_back(1, size)
            self._drop(target, sender, kind, refused)
            return
        journal = self.run.journal
        journal.record_message(MessageRecord(from_=sender, to=target, text=text, kind=kind))
        data = MessageSent(from_=sender, to=target, text=text, msg_type=MSG_TYPES.get(kind, 0))
        journal.emit(EventType.MESSAGE_SENT, step_id=sender, data=data)

    def _place(self, target: str, letter: AgentMessage, size: int) -> str | None:
        """Delivers ``letter``, or keeps it for the step's next instance; else why not."""
        name = step_name(target)
        pending = self.run.mail_bytes.get(name, 0)
        if pending + size > INBOX_BYTES:
            return f"inbox full: {pending} of {INBOX_BYTES} bytes of messages wait for {name!r}"
        ref = self.run.supervisor.lookup(target)
        placed = False
        if ref is not None:
            try:
                ref.send_nowait(letter)
                placed = True
            except InboxFull:
                return "inbox full"
            except ActorStopped:
                pass  # that instance finished: the next one gets it
        if not placed:
            waiting = self.run.mail.setdefault(name, deque())
            if len(waiting) >= INBOX_SIZE:
                return f"{INBOX_SIZE} messages already wait for {name!r}"
            waiting.append(letter)
        self.run.mail_bytes[name] = pending + size
        return None

    def _drop(self, target: str, sender: str, kind: str, reason: str) -> None:
        name = step_name(target)
        drops = self.dropped.get(name)
        if drops is None:
            drops = self.dropped[name] = _Drops()
        drops.count += 1
        drops.last = (target, sender, MSG_TYPES.get(kind, 0), reason)
        if drops.count == 1 or drops.count % DROP_EVENT_EVERY == 0:
            self._drop_event(drops)

    def _drop_event(self, drops: _Drops) -> None:
        target, sender, msg_type, reason = drops.last
        drops.reported = drops.count
        data = MessageDropped(
            from_=sender, to=target, msg_type=msg_type, reason=reason, dropped=drops.count
        )
        self.run.journal.emit(EventType.MESSAGE_DROPPED, step_id=target, data=data)

    def _report_drops(self) -> None:
        """At the run's end: the total of every step with drops no event has counted yet."""
        for drops in self.dropped.values():
            if drops.count != drops.reported:
                self._drop_event(drops)

    def _tools(self) -> list[Tool]:
        from cadenza.llm import ToolSpec

        journal = self.run.journal

        async def forward(arguments: dict[str, Any]) -> str:
            target = arguments.get("target_step_id")
            text = arguments.get("text")
            kind = arguments.get("kind") or "info"
            if not isinstance(target, str) or not isinstance(text, str):
                raise ToolError("forward_to_agent needs 'target_step_id' and 'text' strings")
            if kind not in MSG_TYPES:
                raise ToolError(f"kind must be one of {sorted(MSG_TYPES)}")
            try:
                self.deliver(target, text, kind, sender="coordinator")
            except MessageRefused as error:
                raise ToolError(str(error)) from None
            return '{"status": "forwarded"}'

        async def narrate(arguments: dict[str, Any]) -> str:
            text = str(arguments.get("text", ""))
            journal.emit(EventType.COORDINATOR_NARRATION, step_id=str(COORDINATOR), message=text)
            return '{"status": "ok"}'

        async def finalize(arguments: dict[str, Any]) -> str:
            summary = str(arguments.get("summary", ""))
            journal.emit(EventType.COORDINATOR_SYNTHESIS, step_id=str(COORDINATOR), message=summary)
            return '{"status": "ok"}'

        def spec(
            name: str, description: str, properties: dict[str, Any], required: list[str]
        ) -> ToolSpec:
            schema = {"type": "object", "properties": properties, "required": required}
            return ToolSpec(name=name, description=description, parameters=schema)

        text = {"type": "string"}
        return [
            Tool(
                spec(
                    "forward_to_agent",
                    "Forward a message to a step: a bare step id (its newest instance)"
                    " or an address.",
                    {
                        "target_step_id": text,
                        "text": text,
                        "kind": {"type": "string", "enum": sorted(MSG_TYPES)},
                    },
                    ["target_step_id", "text"],
                ),
                forward,
            ),
            Tool(
                spec(
                    "narrate",
                    "Say what is happening, for the people watching.",
                    {"text": text},
                    ["text"],
                ),
                narrate,
            ),
            Tool(spec("finalize", "Sum up the exchange.", {"summary": text}, []), finalize),
        ]
