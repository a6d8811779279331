"""The journal inside an agent step: each model call and tool call, recorded as it completes.

An agent visit (a step's attempt, a judge's question, a coordinator's wake) makes
calls in a sequence: model, tool, tool, model... Each one is recorded when it
completes (`CallRecord`: what was asked, as a digest, and what came back). A
tool call's record is committed, with the model call that asked for it, before
the visit goes on: a kill after it runs no tool and sends no model call again.
A model call's record rides on the next commit (a tool's, or the step's
outcome), so a visit that only talks costs no commit more than a step does.

A resumed visit reads back what its interrupted execution recorded and, call
by call, takes the recorded answer instead of calling again, for as
long as it asks exactly what was asked then: the digest of a model call covers
the whole request (model, messages, tools, settings), and a tool call's covers
the model call that asked for it, its name and its arguments. The first call
asked otherwise (a prompt, a tool list or a model that changed underneath a
Python-built run) ends the replay there: ``replay_diverged`` says where and
why, and the visit goes live.

A step's attempts are numbered anew on resume (each execution has its own
idempotency key), so the resumed attempt first copies its predecessor's calls
under its own number, in one commit: every attempt's journal is whole, and a
second kill replays from the newest one.

An offline replay (``cadenza replay``, `RunContext.recording`) answers every call
from the recorded run's journal, strictly: a call it does not hold, or asks
otherwise, is the replay's difference (`ReplayDiffers`), never a live call.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Sequence

import msgspec

from cadenza._failpoints import ARMED, failpoint
from cadenza.actors.run import Recording, RunContext
from cadenza.protocols import CallKind, CallRecord, CallsReplayed, EventType, ReplayDiverged

__all__ = ["CallLog", "continued", "cut_off", "digest"]


def digest(*parts: bytes | str) -> str:
    """The SHA-256 hex digest of ``parts``, each length-prefixed (no two splits collide)."""
    hashed = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        hashed.update(len(data).to_bytes(8, "big"))
        hashed.update(data)
    return hashed.hexdigest()


def cut_off(run: RunContext, address: str, attempt: int) -> bool:
    """Whether a resumed run's step at ``address`` was cut off in ``attempt``: its stored
    record says it was running then (not a supervisor's restart of a failed one)."""
    replay = run.journal.replay
    if replay is None or replay.is_final(address):
        return False
    prior = replay.prior.get(address)
    return prior is not None and prior.attempts == attempt


def continued(run: RunContext, address: str, execution: int, *, of: int) -> list[CallRecord]:
    """The calls execution ``execution`` of ``address`` replays as it continues ``of``
    (a resumed run's): copied under ``execution`` when it is a step's new attempt."""
    replay = run.journal.replay
    kept = replay.calls.get(address, ()) if replay is not None else ()
    if of == execution:  # a judge's question, a wake: asked again under its number
        return [call for call in kept if call.attempt == of]
    # A step's attempt continues its predecessor's journal, which may itself have
    # continued one (a second kill) and not committed all its copy: each call is
    # the newest attempt's that has it.
    latest: dict[int, CallRecord] = {}
    for call in kept:  # ordered by attempt, then seq
        if call.attempt <= of:
            latest[call.seq] = call
    recorded = [latest[seq] for seq in sorted(latest)]
    store = run.journal.store
    for call in recorded:  # committed with this attempt's first record, before it
        store.put_call(run.run_id, msgspec.structs.replace(call, attempt=execution))
    return recorded


class CallLog:
    """One visit's calls: the answers it may replay, and the record of those it makes.

    Args:
        run: The run (its journal's store records the calls).
        address: Where the visit runs.
        execution: Its number among the address's executions (a step's attempt).
        recorded: What the interrupted execution recorded, in order: the calls to
            replay, for as long as they are asked again the same way.
        offline: In an offline replay, the recorded run and the attempt whose calls
            ``recorded`` holds: every call must be one of them (None: calls may go live).
    """

    def __init__(
        self,
        run: RunContext,
        address: str,
        execution: int,
        recorded: Sequence[CallRecord] = (),
        *,
        offline: tuple[Recording, int] | None = None,
    ) -> None:
        self._run = run
        self._address = address
        self._execution = execution
        self._recorded = deque(recorded)
        self._seq = 0
        self._replayed: dict[CallKind, int] = {"model": 0, "tool": 0}
        self._offline = offline

    @classmethod
    def resuming(cls, run: RunContext, address: str, execution: int, *, of: int | None) -> CallLog:
        """The log of a visit that may continue an interrupted one: execution ``of`` of
        ``address`` (None: it continues none, as on a run's first try).

        When ``of`` is an earlier execution, its calls are copied to this one (queued
        before anything this one records, so committed before it).
        An offline replay's visit takes its calls from the recorded run instead.
        """
        recording = run.recording
        if recording is not None:
            attempt, recorded = recording.calls(address, execution)
            return cls(run, address, execution, recorded, offline=(recording, attempt))
        replay = run.journal.replay
        if of is None or replay is None:
            return cls(run, address, execution)
        return cls(run, address, execution, continued(run, address, execution, of=of))

    @property
    def replaying(self) -> bool:
        """Whether recorded answers are left to replay."""
        return bool(self._recorded)

    @property
    def offline(self) -> bool:
        """Whether this is an offline replay's visit: nothing is called live, and what
        the record answered is what the run spends."""
        return self._offline is not None

    def replay(self, kind: CallKind, asked: str) -> str | None:
        """The recorded answer to the next call, asked as ``asked`` (its digest); None
        when it must be made live: nothing recorded is left, or it was asked otherwise
        (then nothing recorded is replayed from here on, and the event says why).

        Raises:
            ReplayDiffers: An offline replay's call that the record does not answer.
        """
        if self._offline is not None:
            return self.answer(kind, asked)
        self._seq += 1
        if not self._recorded:
            return None
        entry = self._recorded.popleft()
        if entry.kind == kind and entry.digest == asked:
            self._replayed[kind] += 1
            if not self._recorded:
                self._replayed_all()
            return entry.body
        reason = (
            f"the journal has a {entry.kind} call here, not a {kind} call"
            if entry.kind != kind
            else f"the {kind} call asks otherwise than the recorded one"
        )
        self._recorded.clear()
        self._replayed_all()
        journal = self._run.journal
        data = ReplayDiverged(seq=self._seq, kind=kind, reason=reason)
        journal.emit(EventType.REPLAY_DIVERGED, step_id=self._address, data=data)
        return None

    def answer(self, kind: CallKind, asked: str) -> str:
        """An offline replay's next call, asked as ``asked``: the recorded answer.

        Raises:
            ReplayDiffers: The record has no such call here, or it was asked otherwise.
        """
        if self._offline is None:
            raise RuntimeError(f"{self._address}: answer() is for an offline replay's calls")
        recording, attempt = self._offline
        self._seq += 1
        entry = self._recorded.popleft() if self._recorded else None
        if entry is not None and entry.kind == kind and entry.digest == asked:
            recording.call_answered(kind)
            return entry.body
        raise recording.call_differs(self._address, attempt, self._seq, kind, entry)

    async def record(self, kind: CallKind, asked: str, body: str, *, ran: bool = True) -> None:
        """Records the call just made live (the one `replay` last declined).

        A tool call's record is durable when this returns, with every call before
        it: a kill from here on neither runs the tool again nor sends those model
        calls again. A model call's is a decision (`RunJournal.decided`): it is
        committed in the background, and at the latest before the tool it asks for
        runs (`RunJournal.settle`), so a step that only talks waits for no commit;
        a kill before then sends that model call again (no side effect is
        repeated: a tool it asked for had not run).
        """
        run = self._run
        call = CallRecord(
            address=self._address,
            attempt=self._execution,
            seq=self._seq,
            kind=kind,
            digest=asked,
            body=body,
        )
        store = run.journal.store
        store.put_call(run.run_id, call)
        if kind == "model" or not ran:  # nothing happened that a kill could repeat
            run.journal.decided()
            return
        await run.journal.durable()  # LeaseLost: another process drives the run now
        if ARMED:  # a crash test is on: spare every other run the call
            failpoint("call.after_record")

    def _replayed_all(self) -> None:
        model, tools = self._replayed["model"], self._replayed["tool"]
        if model + tools:
            data = CallsReplayed(calls=model + tools, model=model, tools=tools)
            self._run.journal.emit(EventType.CALLS_REPLAYED, step_id=self._address, data=data)
