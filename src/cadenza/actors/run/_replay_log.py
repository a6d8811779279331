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
step's new attempt finds the message waiting again. A fork's ``run_forked`` is
such a restart too: the work its parent had in flight there runs anew in the fork.

The coordinator agent's wakes (``coordinator_wake`` start and end) count once
the wake has ended and the step whose message woke it has its outcome
recorded. A wake the restart cut off is void — its forwards are undone — and
its message is answered again by the resumed coordinator, like a message no
wake had begun for yet; a wake for a step still in flight is void too, as the
step will send its message again. A void wake's model calls are not given
back: the wake that happens again replays them from the call journal.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
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
    CoordinatorWake,
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

from ._messages import COORDINATOR, MSG_TYPES, AgentMessage, Outgoing

__all__ = ["LogReader", "LogState", "read_log"]

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
class _Note:
    """A message to the coordinator, until a wake of its agent has begun for it."""

    address: str  # of the step that sent it
    message: Outgoing
    index: int  # its entry in `LogReader.sent`


@dataclass
class _Wake:
    """One wake of the coordinator agent: the message it answers, and what it did."""

    note: _Note | None
    sent: list[int] = field(default_factory=list)  # its forwards' entries in `LogReader.sent`
    letters: list[_Letter] = field(default_factory=list)
    positions: list[tuple[str, int]] = field(default_factory=list)  # (client, position)


@dataclass
class LogState:
    """What an interrupted run's journal held, rebuilt from its events.

    Attributes:
        messages: ``RunResult.messages`` so far, in order.
        mail: Messages waiting for a step's next instance, by step name.
        prompt_tokens: Tokens sent to models so far.
        completion_tokens: Tokens received from models so far.
        llm_calls: Model calls so far.
        cost: USD of the priced ones (``agent_turn``'s ``cost``); ``unpriced_calls``
            the others.
        agents: Per agent name, [prompt tokens, completion tokens, calls, cost].
        address_cost: Per address, the USD of the calls made there.
        checkpoints: Per ``keepLast`` loop address, its iteration checkpoints in order.
        conversations: Per ``Brief.memory_key``, each remembered visit's turns.
        step_tokens: Per address with a recorded outcome, the model tokens of the
            execution that recorded it: its ``agent_turn`` events since the
            previous outcome or restart (what a run cut off by a kill spent on it
            is not counted, as a replay must not count it).
        script_positions: Per ``scripted`` client (the agent's name, or the
            address of an agent step without one), the replies of its script
            already had by work a resume does not do again: the calls of steps
            whose outcome is recorded and of the coordinator agent's wakes that
            count. Work in flight gives its replies back; it will ask for them
            again.
        coordinator_wakes: The coordinator agent's wakes that count: the resumed
            coordinator goes on counting from there (``maxWakes``).
        unanswered: Messages to the coordinator agent that no counted wake
            answered, though their senders' outcomes are recorded: the resumed
            coordinator answers them first, in order.
    """

    messages: list[MessageRecord] = field(default_factory=list)
    mail: dict[str, deque[Any]] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    cost: float = 0.0
    unpriced_calls: int = 0
    agents: dict[str, list[float]] = field(default_factory=dict)
    address_cost: dict[str, float] = field(default_factory=dict)
    checkpoints: dict[str, list[Checkpoint]] = field(default_factory=dict)
    conversations: dict[str, list[list[Any]]] = field(default_factory=dict)
    step_tokens: dict[str, Tokens] = field(default_factory=dict)
    script_positions: dict[str, set[int]] = field(default_factory=dict)
    coordinator_wakes: int = 0
    unanswered: list[Outgoing] = field(default_factory=list)


class LogReader:
    """Reads a log one event at a time (`read`), then gives its `LogState` (`finish`):
    a resume feeds it its journal a page at a time."""

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
        self.waiting: deque[_Note] = deque()  # for the coordinator agent, no wake begun yet
        self.wake: _Wake | None = None  # the one going on
        self.answered: dict[str, list[_Wake]] = {}  # ended, by their sender still in flight
        self.unmarked = False  # the coordinator woke without `coordinator_wake`: an older log

    def read(self, event: Event) -> None:
        """Takes one event of the log into account (most types say nothing to it)."""
        read = _READS.get(event.type)
        if read is not None:
            read(self, event, event.step_id or "")

    def _dead_letter(self, event: Event, address: str) -> None:
        if (event.message or "").startswith("AgentMessage"):
            self._lost(address)

    def _wakes_spent(self, event: Event, address: str) -> None:
        if self.waiting:
            self.waiting.popleft()  # answered by not waking the agent

    def _memory(self, event: Event, address: str) -> None:
        memory = payload(event, AgentMemory)
        self.memories.append((memory.key, memory.turns))
        self.unconfirmed_memories.setdefault(address, []).append(len(self.memories) - 1)

    def _checkpoint(self, event: Event, address: str) -> None:
        self.state.checkpoints.setdefault(address, []).append(payload(event, Checkpoint))

    def _started(self, event: Event, address: str) -> None:
        if payload(event, StepStart).kind == "loop":
            self.state.checkpoints.pop(address, None)  # a new attempt starts from nothing

    def _ended(self, event: Event, address: str) -> None:
        self._confirm(address)

    def _error(self, event: Event, address: str) -> None:
        if payload(event, StepError).status == "failed":
            self._confirm(address)

    def _resumed(self, event: Event, address: str) -> None:
        self._restart()

    def _turn(self, event: Event, address: str) -> None:
        turn = payload(event, AgentTurn)
        if turn.phase != "response":
            return
        self.state.llm_calls += 1
        self._cost(event, address, turn.cost)
        if event.tokens is not None:
            self.state.prompt_tokens += event.tokens.prompt
            self.state.completion_tokens += event.tokens.completion
            prompt, completion = self.spending.get(address, (0, 0))
            self.spending[address] = (
                prompt + event.tokens.prompt,
                completion + event.tokens.completion,
            )
        position = turn.script_position
        client = event.agent or address  # the key `run_agent` gives the registry
        if address == _COORDINATOR_AGENT:
            if self.wake is None:
                self.unmarked = True  # an older version's log: wakes were not marked
            elif position is not None:
                self.wake.positions.append((client, position))
        elif position is not None:
            self.replies.setdefault(address, []).append((client, position))

    def _cost(self, event: Event, address: str, cost: float | None) -> None:
        """Counts a call's cost for the run, its agent and its address, as the journal does."""
        state = self.state
        if cost is None:
            state.unpriced_calls += 1
        else:
            state.cost += cost
            state.address_cost[address] = state.address_cost.get(address, 0.0) + cost
        if event.agent is not None:
            usage = state.agents.setdefault(event.agent, [0, 0, 0, 0.0])
            if event.tokens is not None:
                usage[0] += event.tokens.prompt
                usage[1] += event.tokens.completion
            usage[2] += 1
            usage[3] += cost or 0.0

    def _woke(self, event: Event, address: str) -> None:
        wake = payload(event, CoordinatorWake)
        if wake.phase == "start":
            note = next((n for n in self.waiting if n.message.sender == wake.from_), None)
            if note is not None:
                self.waiting.remove(note)
            self.wake = _Wake(note)
        elif self.wake is not None:
            ended, self.wake = self.wake, None
            sender = ended.note.address if ended.note is not None else None
            if sender in self.unconfirmed:
                self.answered.setdefault(sender, []).append(ended)
            else:
                self._count(ended)

    def _count(self, wake: _Wake) -> None:
        """A wake that stands: the replies of the script it had stay had."""
        self.state.coordinator_wakes += 1
        self._count_replies(wake)

    def _count_replies(self, wake: _Wake) -> None:
        for client, position in wake.positions:
            self.state.script_positions.setdefault(client, set()).add(position)

    def _void(self, wake: _Wake) -> None:
        """A wake that will happen again: what it did is undone, but for its model calls.

        Those are in the call journal (a call's ``agent_turn`` is committed after its
        record), so the wake that happens again under the same number replays them
        instead of asking the model: the replies they had stay had. Given back, a
        later wake would have a reply a second time.
        """
        self._count_replies(wake)
        for index in wake.sent:
            self.sent[index] = None
        for letter in wake.letters:
            letter.gone = True

    def _sent(self, event: Event, address: str) -> None:
        sent = payload(event, MessageSent)
        sender, to, text = sent.from_, sent.to, sent.text
        wake = self.wake if sender == _COORDINATOR else None
        if to == _COORDINATOR:
            record = MessageRecord(from_=sender, to=to, text=text)
        else:
            kind = _KINDS.get(sent.msg_type, "info")
            record = MessageRecord(from_=sender, to=to, text=text, kind=kind)
            name = to.rsplit(".", 1)[-1].split("[", 1)[0]  # as the coordinator files it
            letter = _Letter(name, AgentMessage(sender, text, kind))
            self.letters.append(letter)
            if wake is not None:
                wake.letters.append(letter)
        self.sent.append((address, record))
        index = len(self.sent) - 1
        if to == _COORDINATOR:  # a step's: it counts once the step's outcome is recorded
            self.unconfirmed.setdefault(address, []).append(index)
            self.waiting.append(_Note(address, Outgoing(sender, text), index))
        elif wake is not None:
            wake.sent.append(index)
        # Else a post from outside the run (or, before posts were from `api`, from the
        # coordinator between wakes): it stands, whatever the run did next.

    def _dropped(self, event: Event, address: str) -> None:
        dropped = payload(event, MessageDropped)
        if dropped.to == _COORDINATOR:  # never reached the coordinator: not a message
            for index in reversed(self.unconfirmed.get(address, [])):
                entry = self.sent[index]
                if entry is not None and entry[1].text == dropped.text:
                    self.sent[index] = None
                    for note in self.waiting:
                        if note.index == index:
                            self.waiting.remove(note)  # it never woke anyone
                            break
                    break
            return
        for letter in reversed(self.letters):  # recorded, but never delivered
            if not letter.gone and letter.letter.text == dropped.text:
                letter.gone = True
                break

    def _drained(self, event: Event, address: str) -> None:
        drained = payload(event, AgentInboxDrain)
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
        for wake in self.answered.pop(address, ()):
            self._count(wake)
        self.unconfirmed.pop(address, None)
        self.unconfirmed_memories.pop(address, None)
        for letter in self.drains.pop(address, ()):
            letter.gone = True

    def _restart(self) -> None:
        """The process died: what unfinished work did is void, it will be done again."""
        self._restart_coordinator()
        self.spending.clear()
        # A step cut off replays the model calls its journal holds (their agent_turn
        # events are committed only after their records): the replies they had stay
        # had, whichever agent of the resumed run asks first.
        for replies in self.replies.values():
            for client, position in replies:
                self.state.script_positions.setdefault(client, set()).add(position)
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

    def _restart_coordinator(self) -> None:
        """Which messages the next process's coordinator answers first (read before the rest)."""
        for wakes in self.answered.values():  # their senders will send them again
            for wake in wakes:
                self._void(wake)
        self.answered.clear()
        if self.wake is not None:  # cut off: answered again
            self._void(self.wake)
            if self.wake.note is not None:
                self.waiting.appendleft(self.wake.note)
            self.wake = None
        if self.unmarked:  # an older version's log: its wakes are not known, none is repeated
            self.waiting.clear()
        else:  # a step in flight sends its message again
            self.waiting = deque(n for n in self.waiting if n.address not in self.unconfirmed)
        self.unmarked = False

    def finish(self) -> LogState:
        self._restart()
        self.state.messages = [entry[1] for entry in self.sent if entry is not None]
        self.state.unanswered = [note.message for note in self.waiting]
        for letter in self.letters:
            if not letter.gone:
                self.state.mail.setdefault(letter.name, deque()).append(letter.letter)
        for memory in self.memories:
            if memory is not None:
                key, turns = memory
                visit = msgspec.convert(turns, list[Message])
                self.state.conversations.setdefault(key, []).append(visit)
        return self.state


_READS: dict[str, Callable[[LogReader, Event, str], None]] = {
    EventType.MESSAGE_SENT: LogReader._sent,
    EventType.MESSAGE_DROPPED: LogReader._dropped,
    EventType.AGENT_INBOX_DRAIN: LogReader._drained,
    EventType.DEAD_LETTER: LogReader._dead_letter,
    EventType.AGENT_TURN: LogReader._turn,
    EventType.COORDINATOR_WAKE: LogReader._woke,
    EventType.MAX_WAKE_CYCLES_REACHED: LogReader._wakes_spent,
    EventType.AGENT_MEMORY: LogReader._memory,
    EventType.CHECKPOINT: LogReader._checkpoint,
    EventType.STEP_START: LogReader._started,
    EventType.STEP_END: LogReader._ended,
    EventType.STEP_SKIPPED: LogReader._ended,
    EventType.ERROR: LogReader._error,
    EventType.RUN_RESUMED: LogReader._resumed,
    EventType.RUN_FORKED: LogReader._resumed,
}
"""What each type of event the reader heeds does to it (by the address it names)."""


def read_log(events: Iterable[Event]) -> LogState:
    """Messages, waiting mail, usage, checkpoints, script positions of a run, from its events."""
    reader = LogReader()
    for event in events:
        reader.read(event)
    return reader.finish()
