"""Reading an interrupted run's event log: what its journal knew when it stopped.

A resumed run re-derives its controllers' state by replay, but some of what its
journal held never passes through a controller again: the messages agents
sent (replayed steps do not send them twice), the messages still waiting for a
step that had not started (``RunContext.mail``), what agents remember across a
loop's iterations (``memory``), the tokens already spent, what each
finished step spent (a control loop's budget counts its replayed steps too),
and which replies of their scripts ``scripted`` agents have had.
`read_log` rebuilds those from the events, in one pass.

Work that was in flight when the process died is re-run, so whatever it did
before dying is dropped here: a message sent by a step counts once that step's
outcome is recorded (its ``step_end``, ``step_skipped`` or failing ``error``),
and is forgotten if the log reaches a restart (``run_resumed``, or its end)
first. Draining a message out of an inbox is undone the same way, so the
step's new attempt finds the message waiting again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import msgspec

from cadenza.kernel import Address
from cadenza.llm import Message
from cadenza.protocols import (
    AgentInboxDrain,
    AgentMemory,
    AgentTurn,
    Checkpoint,
    Event,
    EventType,
    MessageDropped,
    MessageRecord,
    MessageSent,
    StepError,
    StepStart,
    Tokens,
    payload,
)

from ._journal import AGENT_MEMORY
from ._messages import COORDINATOR, MSG_TYPES, AgentMessage

__all__ = ["RUN_RESUMED", "LogState", "read_log"]

RUN_RESUMED = "run_resumed"
"""The event a resumed run starts with; data ``{replayable, afterSeq}``."""

_KINDS = {number: kind for kind, number in MSG_TYPES.items()}
_COORDINATOR = "coordinator"
_COORDINATOR_AGENT = str(COORDINATOR)  # where the coordinator agent's model calls are made


@dataclass
class _Letter:
    """A message delivered to a step: waiting for it until drained (or lost)."""

    name: str
    letter: AgentMessage
    taken_by: str | None = None  # the drainer, while its drain is not yet confirmed
    gone: bool = False


@dataclass
class LogState:
    """What an interrupted run's journal held, rebuilt from its events.

    Attributes:
        messages: ``RunResult.messages`` so far, in order.
        mail: Messages waiting for a step's next instance, by step name.
        prompt_tokens: Tokens sent to models so far.
        completion_tokens: Tokens received from models so far.
        llm_calls: Model calls so far.
        checkpoints: Per ``keepLast`` loop address, its iteration checkpoints in order.
        conversations: Per ``Brief.memory_key``, each remembered visit's turns.
        step_tokens: Per address with a recorded outcome, the model tokens of the
            execution that recorded it: its ``agent_turn`` events since the
            previous outcome or restart (what a run cut off by a kill spent on it
            is not counted, as a replay must not count it).
        script_positions: Per ``scripted`` client (the agent's name, or the
            address of an agent step without one), the replies of its script
            already had by work a resume does not do again: the calls of steps
            whose outcome is recorded, and the coordinator agent's (a wake of it
            is not repeated). A step in flight gives its replies back; it will
            ask for them again.
    """

    messages: list[MessageRecord] = field(default_factory=list)
    mail: dict[str, deque[Any]] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    checkpoints: dict[str, list[Checkpoint]] = field(default_factory=dict)
    conversations: dict[str, list[list[Any]]] = field(default_factory=dict)
    step_tokens: dict[str, Tokens] = field(default_factory=dict)
    script_positions: dict[str, set[int]] = field(default_factory=dict)


class _Reader:
    def __init__(self) -> None:
        self.state = LogState()
        self.sent: list[tuple[str, MessageRecord] | None] = []
        self.unconfirmed: dict[str, list[int]] = {}
        self.memories: list[tuple[str, list[Any]] | None] = []
        self.unconfirmed_memories: dict[str, list[int]] = {}
        self.letters: list[_Letter] = []
        self.drains: dict[str, list[_Letter]] = {}
        self.spending: dict[str, tuple[int, int]] = {}  # tokens of unconfirmed work
        self.replies: dict[str, list[tuple[str, int]]] = {}  # (client, position), unconfirmed

    def read(self, event: Event) -> None:
        kind, address = event.type, event.step_id or ""
        if kind == "message_sent":
            self._sent(address, payload(event, MessageSent))
        elif kind == "message_dropped":
            self._dropped(address, payload(event, MessageDropped))
        elif kind == "agent_inbox_drain":
            self._drained(address, payload(event, AgentInboxDrain))
        elif kind == EventType.DEAD_LETTER and (event.message or "").startswith("AgentMessage"):
            self._lost(address)
        elif kind == "agent_turn":
            self._turn(event, address)
        elif kind == AGENT_MEMORY:
            memory = payload(event, AgentMemory)
            self.memories.append((memory.key, memory.turns))
            self.unconfirmed_memories.setdefault(address, []).append(len(self.memories) - 1)
        elif kind == "checkpoint":
            self.state.checkpoints.setdefault(address, []).append(payload(event, Checkpoint))
        elif kind == EventType.STEP_START and payload(event, StepStart).kind == "loop":
            self.state.checkpoints.pop(address, None)  # a new attempt starts from nothing
        elif kind in (EventType.STEP_END, EventType.STEP_SKIPPED) or (
            kind == EventType.ERROR and payload(event, StepError).status == "failed"
        ):
            self._confirm(address)
        elif kind == RUN_RESUMED:
            self._restart()

    def _turn(self, event: Event, address: str) -> None:
        turn = payload(event, AgentTurn)
        if turn.phase != "response":
            return
        self.state.llm_calls += 1
        if event.tokens is not None:
            self.state.prompt_tokens += event.tokens.prompt
            self.state.completion_tokens += event.tokens.completion
            prompt, completion = self.spending.get(address, (0, 0))
            self.spending[address] = (
                prompt + event.tokens.prompt,
                completion + event.tokens.completion,
            )
        position = turn.script_position
        if position is not None:
            client = event.agent or address  # the key `run_agent` gives the registry
            if address == _COORDINATOR_AGENT:
                self.state.script_positions.setdefault(client, set()).add(position)
            else:
                self.replies.setdefault(address, []).append((client, position))

    def _sent(self, address: str, sent: MessageSent) -> None:
        sender, to, text = sent.from_, sent.to, sent.text
        if to == _COORDINATOR:
            record = MessageRecord(from_=sender, to=to, text=text)
        else:
            kind = _KINDS.get(sent.msg_type, "info")
            record = MessageRecord(from_=sender, to=to, text=text, kind=kind)
            name = to.rsplit(".", 1)[-1].split("[", 1)[0]  # as the coordinator files it
            self.letters.append(_Letter(name, AgentMessage(sender, text, kind)))
        self.sent.append((address, record))
        if sender != _COORDINATOR:
            self.unconfirmed.setdefault(address, []).append(len(self.sent) - 1)

    def _dropped(self, address: str, dropped: MessageDropped) -> None:
        if dropped.to == _COORDINATOR:  # never reached the coordinator: not a message
            for index in reversed(self.unconfirmed.get(address, [])):
                entry = self.sent[index]
                if entry is not None and entry[1].text == dropped.text:
                    self.sent[index] = None
                    break
            return
        for letter in reversed(self.letters):  # recorded, but never delivered
            if not letter.gone and letter.letter.text == dropped.text:
                letter.gone = True
                break

    def _drained(self, address: str, drained: AgentInboxDrain) -> None:
        name = Address.parse(address).name
        for letter in self.letters:
            if (
                not letter.gone
                and letter.taken_by is None
                and letter.name == name
                and letter.letter.sender == drained.from_
            ):
                letter.taken_by = address
                self.drains.setdefault(address, []).append(letter)
                return

    def _lost(self, address: str) -> None:
        name = address.rsplit(".", 1)[-1].split("[", 1)[0]
        for letter in self.letters:
            if not letter.gone and letter.taken_by is None and letter.name == name:
                letter.gone = True
                return

    def _confirm(self, address: str) -> None:
        spent = self.spending.pop(address, None)
        if spent is not None:
            self.state.step_tokens[address] = Tokens(spent[0], spent[1], spent[0] + spent[1])
        for client, position in self.replies.pop(address, ()):
            self.state.script_positions.setdefault(client, set()).add(position)
        self.unconfirmed.pop(address, None)
        self.unconfirmed_memories.pop(address, None)
        for letter in self.drains.pop(address, ()):
            letter.gone = True

    def _restart(self) -> None:
        """The process died: what unfinished work did is void, it will be done again."""
        self.spending.clear()
        self.replies.clear()
        for indexes in self.unconfirmed.values():
            for index in indexes:
                self.sent[index] = None
        self.unconfirmed.clear()
        for indexes in self.unconfirmed_memories.values():
            for index in indexes:
                self.memories[index] = None
        self.unconfirmed_memories.clear()
        for letters in self.drains.values():
            for letter in letters:
                letter.taken_by = None
        self.drains.clear()

    def finish(self) -> LogState:
        self._restart()
        self.state.messages = [entry[1] for entry in self.sent if entry is not None]
        for letter in self.letters:
            if not letter.gone:
                self.state.mail.setdefault(letter.name, deque()).append(letter.letter)
        for memory in self.memories:
            if memory is not None:
                key, turns = memory
                visit = msgspec.convert(turns, list[Message])
                self.state.conversations.setdefault(key, []).append(visit)
        return self.state


def read_log(events: list[Event]) -> LogState:
    """Messages, waiting mail, usage, checkpoints, script positions of a run, from its events."""
    reader = _Reader()
    for event in events:
        reader.read(event)
    return reader.finish()
