"""``keepLast: N``: a repeat-until loop that keeps only its last N iterations' records.

A loop that runs for thousands of iterations would otherwise carry every
iteration's records in its run's result, its journal and the store. With
``keepLast`` set, after each iteration the loop writes a checkpoint (the
iteration's number, its feedback block and its last record, as a ``checkpoint``
event) and then forgets the iteration that fell out of the window. The run's
events stay: they are the history; ``cadenza runs prune`` removes whole runs.

Forgotten records cannot be replayed, so such a loop resumes from its newest
checkpoint instead: it takes back its counters, its feedback and (for
``outputMode: cumulative``) every block, puts the retained iterations' records
back into the journal, and starts the iteration after the checkpoint.
"""

from __future__ import annotations

from typing import Protocol

from cadenza.actors.run import RunContext
from cadenza.kernel import Address
from cadenza.protocols import Checkpoint, EventType, StepRecord
from cadenza.store import is_under
from cadenza.workflow import Loop

__all__ = ["checkpoint", "forget", "restore"]


class _Loop(Protocol):
    """What retention reads and restores of a repeat-until loop (`LoopController`)."""

    run: RunContext
    loop: Loop
    here: str
    cumulative: bool
    iterations: int
    blocks: list[str]
    feedback: str | None
    last: StepRecord | None

    @property
    def address(self) -> Address:
        """The loop step's address."""
        ...


def forget(loop: _Loop, n: int) -> None:
    """Iteration ``n`` has ended: the one that leaves the window is forgotten.

    Forgetting comes before the checkpoint of ``n``: a crash between the two
    leaves an older checkpoint and fewer records, never records that outlive
    their window.
    """
    run, keep = loop.run, loop.loop.keep_last or 0
    if n - keep < 0:
        return
    prefix = str(loop.address.iteration(n - keep))
    records = run.journal.records
    for address in [a for a in records if is_under(a, prefix)]:
        del records[address]
    run.journal.store.forget_steps(run.run_id, prefix)


def checkpoint(loop: _Loop, n: int, block: str) -> None:
    """The loop goes on after iteration ``n``: what a resume restarts it from."""
    point = Checkpoint(iteration=n, block=block, last=loop.last)
    loop.run.journal.emit(EventType.CHECKPOINT, step_id=loop.here, data=point)


def restore(loop: _Loop) -> int:
    """Takes a resumed loop back to its newest checkpoint; returns the iteration to run next."""
    replay = loop.run.journal.replay
    points = replay.log.checkpoints.get(loop.here) if replay is not None else None
    if replay is None or not points:
        return 0
    newest = points[-1]
    n = newest.iteration
    loop.iterations = n + 1
    loop.feedback = newest.block
    loop.blocks = [point.block for point in points] if loop.cumulative else []
    loop.last = newest.last
    first_kept = n + 1 - (loop.loop.keep_last or 0)
    records = loop.run.journal.records
    for address, record in replay.prior.items():
        iteration = _iteration_of(address, loop.here)
        if iteration is not None and first_kept <= iteration <= n:
            records[address] = record
            replay.take(address)
    return n + 1


def _iteration_of(address: str, loop: str) -> int | None:
    """N when ``address`` is ``loop.N`` or inside it, else None."""
    if not is_under(address, loop) or len(address) == len(loop) or address[len(loop)] != ".":
        return None
    number = address[len(loop) + 1 :].split(".", 1)[0]
    return int(number) if number.isdigit() else None
