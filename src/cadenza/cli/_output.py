"""What the command line prints about a run: progress, the summary, stored runs.

``cadenza run`` and ``cadenza resume`` watch a run with `watch_run` (NDJSON
events with ``--events``, live progress on a terminal, else nothing) and end
with `print_summary`; ``cadenza runs list`` is `print_runs`, and ``cadenza runs
show`` on a terminal `print_run`. Durations, step marks
and the commands a person is told to type next are made here once, so every
command words them alike. A suggested command carries ``--store`` when the run
is not in the default store, so that it works when pasted.

Imported by the commands that run or read runs only: it loads the runtime.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

import anyio
import msgspec

from cadenza.actors import EventSink
from cadenza.kernel import Clock, SystemClock
from cadenza.protocols import (
    Event,
    EventType,
    GraphTransition,
    ItemEnd,
    ItemStart,
    IterationStart,
    JudgeVerdict,
    RunForked,
    RunResult,
    StepRecord,
    StepReplayed,
    payload,
)
from cadenza.store import RunRow, describe_store

from ._paths import DEFAULT_STORE, StoreSpec

if TYPE_CHECKING:
    import argparse

    from cadenza.api import RunHandle

__all__ = [
    "LiveProgress",
    "command_hint",
    "print_run",
    "print_runs",
    "print_summary",
    "watch_run",
]

_encode_json = msgspec.json.Encoder().encode

_SHOWS_OUTPUT = frozenset({"completed"})
"""Statuses whose output is the workflow's own: any other run's output is a fallback
(the last step that ran) that a person would take for a success."""

_MARKS = {  # by step status
    "completed": "✓",
    "failed": "✗",
    "cancelled": "✗",
    "skipped": "-",
    "waiting": "?",
    "running": "⋯",
}


def command_hint(*words: str, store: StoreSpec) -> str:
    """A ``cadenza`` command line to paste: quoted, with ``--store`` unless the default.

    A URL's password is masked (``***``): keep it in PGPASSWORD or ~/.pgpass.
    """
    if store != DEFAULT_STORE:
        words = (*words, "--store", describe_store(store))
    return " ".join(["cadenza", *map(shlex.quote, words)])


def took(seconds: float) -> str:
    """A finished duration: ``850ms``, ``12.3s``, ``2m05s``, ``1h02m``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    return elapsed(seconds)


def elapsed(seconds: float) -> str:
    """A running time in whole seconds (it is redrawn each second): ``7s``, ``2m05s``."""
    minutes, whole = divmod(int(seconds), 60)
    if not minutes:
        return f"{whole}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{whole:02d}s"


def _containers(addresses: Iterable[str]) -> set[str]:
    """Every address that holds one of ``addresses`` (``loop``, ``loop.0`` for
    ``loop.0.write``; ``each`` for ``each[2]``): linear in their total length."""
    return {
        address[:end] for address in addresses for end, char in enumerate(address) if char in ".["
    }


def _items_holding(address: str) -> list[str]:
    """The forEach items ``address`` is inside, outermost first: ``a[1]``, ``a[1].b[2]``
    for ``a[1].b[2].c``."""
    return [address[: end + 1] for end, char in enumerate(address) if char == "]"]


def _fan_of(item: str) -> str:
    """The forEach an item belongs to: ``a[1].b`` for ``a[1].b[2]``."""
    return item[: item.rindex("[")]


@dataclass
class _Fan:
    """A forEach under way: its items are counted as they end, not listed one by one.

    Sets of item addresses, not counters, so that an item is counted once however its
    end is told: its ``item_end``, or (on resume, where the ``item_end`` recorded before
    the interruption is not told again) a step of it replayed.
    """

    total: int | None = None  # from item_start; unknown until one is told
    ended: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)  # a failure inside, or ended failed

    def counts(self) -> str:
        """``7,312/10,000 done, 2 failed``."""
        total = f"/{self.total:,}" if self.total is not None else ""
        failed = f", {len(self.failed):,} failed" if self.failed else ""
        return f"{len(self.ended):,}{total} done{failed}"


class LiveProgress:
    """Live progress on a terminal: what ended scrolls up; below it, what runs now.

    Each line of the running list says how long the step has been running and,
    for an agent whose model streams, the end of what it is writing now. Only the
    innermost running addresses are listed (a loop's iteration step, not the loop
    and the iteration too). A forEach's items are not listed one by one as they
    end: the forEach's line in the running list counts them (``fan[…]  7,312/10,000
    done, 2 failed``), its end line gives the final count, and only the first
    `ITEM_FAILURES` failures inside items scroll up (the summary names them all).

    The running list is redrawn once a second by `keep_time`, and when a line scrolls
    up above it; a change to it alone (a step started or ended) waits for the next
    second, so a run writes a bounded number of lines a second however many steps it
    has. It is erased when the run ends, before the summary is printed.
    """

    MARKS: Mapping[str, str] = {
        EventType.STEP_END: _MARKS["completed"],
        EventType.ERROR: _MARKS["failed"],
        EventType.STEP_SKIPPED: _MARKS["skipped"],
        EventType.STEP_WAITING: _MARKS["waiting"],
        EventType.STEP_RETRY: "↻",
    }
    SHOWN = 6
    """Running steps (and forEach loops) listed at most; the rest are counted."""
    ITEM_FAILURES = 5
    """Failures inside forEach items printed as they happen; later ones are counted."""
    _ENDINGS = frozenset((*MARKS, EventType.STEP_REPLAYED))
    _UP_AND_CLEAR = "\x1b[1A\x1b[2K"

    def __init__(self, stream: TextIO, clock: Clock | None = None) -> None:
        self.stream = stream
        self.clock = clock or SystemClock()
        self.running: dict[str, float] = {}  # address -> when it started (clock time)
        self.writing: dict[str, str] = {}  # address -> the end of its agent's streamed text
        self.fans: dict[str, _Fan] = {}  # forEach address -> its items so far
        self.item_failures = 0  # failures inside items printed so far
        self.ended: set[str] = set()  # addresses whose last reply's text is done
        self.drawn = 0  # lines of the running list on the screen now
        self.stale = False  # the running list changed since it was drawn
        self.held: list[str] | None = None  # lines kept back while a question is shown

    def hold(self) -> None:
        """Erases the running list and keeps new lines back: a question is on the screen."""
        self.stream.write(self._UP_AND_CLEAR * self.drawn)
        self.stream.flush()
        self.drawn = 0
        self.held = []

    def release(self) -> None:
        """Shows what was kept back, and the running list again."""
        held, self.held = self.held or [], None
        self._draw(held)

    def __call__(self, event: Event) -> None:
        if event.type == EventType.OUTPUT:
            self._streamed(event)
            return
        line = self._line(event)
        changed = self._track(event)
        if line is not None:
            self._draw([line])
        elif changed:
            self.stale = True  # drawn by the next tick of keep_time

    def redraw(self) -> None:
        """Brings the running list and its elapsed times up to date."""
        if self.running or self.stale:
            self._draw([])

    async def keep_time(self) -> None:
        """Redraws once a second, until cancelled."""
        while True:
            await self.clock.sleep(1)
            self.redraw()

    def close(self) -> None:
        """Erases the running list (the run is over)."""
        self.running.clear()
        self.fans.clear()
        self._draw([])

    def _streamed(self, event: Event) -> None:
        address = event.step_id
        text = event.delta
        if address not in self.running or text is None:
            return
        whole = event.data is not None and event.data.get("whole") is True
        written = self.writing.get(address, "")
        if whole:  # the reply so far, for one who joined mid-reply: it replaces the tail
            written = ""
        elif address in self.ended:  # the previous reply ended: this one is a new line
            self.ended.discard(address)
            written += "\n"
        if event.done:
            self.ended.add(address)
        # The line shows the newest words of a reply, a turn's end included: one
        # reply's last word and the next one's first must not run together.
        tail = " ".join((written + text).split())
        self.writing[address] = tail[-self._TAIL :]
        self._draw([])

    _TAIL = 240  # characters of streamed text kept per step; a line shows what fits

    def _track(self, event: Event) -> bool:
        """Keeps the running list and the forEach counts; whether they changed."""
        address = event.step_id
        counted = address is not None and "[" in address and self._count(event, address)
        if event.type == EventType.STEP_START and address is not None:
            self.running[address] = self.clock.now()
            return True
        if event.type in self._ENDINGS and address is not None:
            ended = self.fans.pop(address, None) is not None  # its end line gave the count
            if address in self.running:
                del self.running[address]
                self.writing.pop(address, None)
                self.ended.discard(address)
                ended = True
            return ended or counted
        if event.type in (EventType.WORKFLOW_END, EventType.RUN_INTERRUPTED) and (
            self.running or self.fans
        ):
            self.running.clear()
            self.writing.clear()
            self.ended.clear()
            self.fans.clear()
            return True
        return counted

    def _count(self, event: Event, address: str) -> bool:
        """Counts an event inside a forEach item; whether a count changed."""
        if event.type == EventType.ITEM_START:
            self._fan(_fan_of(address)).total = payload(event, ItemStart).total
            return True
        if event.type == EventType.ITEM_END:
            status = payload(event, ItemEnd).status
            if status == "waiting":  # not ended: it goes on when the run is resumed
                return False
            self._ended([address], failed=status in ("failed", "cancelled"))
            return True
        if event.type == EventType.ERROR:
            for item in _items_holding(address):
                self._fan(_fan_of(item)).failed.add(item)
            return True
        if event.type == EventType.STEP_REPLAYED:  # ended before the interruption, told once then
            self._ended(
                _items_holding(address), failed=payload(event, StepReplayed).status == "failed"
            )
            return True
        return False

    def _ended(self, items: list[str], *, failed: bool) -> None:
        for item in items:
            fan = self._fan(_fan_of(item))
            fan.ended.add(item)
            if failed:
                fan.failed.add(item)

    def _fan(self, address: str) -> _Fan:
        fan = self.fans.get(address)
        if fan is None:
            fan = self.fans[address] = _Fan()
        return fan

    def _line(self, event: Event) -> str | None:
        """The line that scrolls up for ``event``, if any."""
        if event.type in (EventType.WORKFLOW_START, EventType.RUN_RESUMED):
            verb = "started" if event.type == EventType.WORKFLOW_START else "resumed"
            return f"run {event.run_id} ({event.message}) {verb}"
        if event.type == EventType.RUN_FORKED:
            forked = payload(event, RunForked)
            return (
                f"run {event.run_id} ({event.message}) forked from {forked.parent_run_id}"
                f" at {forked.at}"
            )
        if event.step_id is not None and "[" in event.step_id and not self._tells_item(event):
            return None  # inside a forEach item: counted on the forEach's line
        progress = _progress(event)
        if progress is not None:
            return progress
        mark = self.MARKS.get(event.type)
        if mark is None or event.step_id is None:
            return None
        return f"  {mark} {event.step_id}  {self._detail(event, event.step_id)}"

    def _detail(self, event: Event, address: str) -> str:
        """What a step's line says after its address: how long, how its items went, why."""
        detail = event.duration or ""
        fan = self.fans.get(address)
        if fan is not None:  # a forEach's end: how its items went
            detail = f"{detail}  {fan.counts()}".strip()
        if event.error:
            detail = f"{detail} {event.error}".strip()
        if event.type in (EventType.STEP_SKIPPED, EventType.STEP_WAITING) and event.message:
            detail = event.message.splitlines()[0]
        return detail

    def _tells_item(self, event: Event) -> bool:
        """Whether an event inside a forEach item gets its own line: a question, always
        (a person must answer it); a failure, while fewer than ITEM_FAILURES were told."""
        if event.type == EventType.STEP_WAITING:
            return True
        if event.type == EventType.ERROR and self.item_failures < self.ITEM_FAILURES:
            self.item_failures += 1
            return True
        return False

    def _draw(self, lines: list[str]) -> None:
        if self.held is not None:
            self.held.extend(lines)
            return
        footer = self._running_lines()
        text = self._UP_AND_CLEAR * self.drawn + "".join(f"{line}\n" for line in lines + footer)
        self.drawn = len(footer)
        self.stale = False
        self.stream.write(text)
        self.stream.flush()

    def _running_lines(self) -> list[str]:
        # The running list is redrawn in place: a line that wrapped would break
        # the count of lines to go back up, so each is cut to the terminal's width.
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError):
            columns = 0
        width = (columns or 80) - 1  # a terminal that tells no size (0) is taken as 80 wide
        now = self.clock.now()
        lines = self._fan_lines(now)
        holding = _containers(self.running)
        innermost = [a for a in self.running if a not in holding and a not in self.fans]
        for address in innermost[: self.SHOWN]:
            line = (
                f"  {_MARKS['running']} {address}  running {elapsed(now - self.running[address])}"
            )
            writing = self.writing.get(address)
            if writing:  # the newest words, the line's end: what fits before the width
                room = width - len(line) - 4
                line += f"  │ {writing[-room:]}" if room > 10 else ""
            lines.append(line)
        if len(innermost) > self.SHOWN:
            lines.append(f"  … and {len(innermost) - self.SHOWN:,} more running")
        return [line[:width] for line in lines]

    def _fan_lines(self, now: float) -> list[str]:
        """A line per forEach under way (its finished items counted), at most SHOWN."""
        lines = []
        for address, fan in list(self.fans.items())[: self.SHOWN]:
            since = elapsed(now - self.running[address]) if address in self.running else ""
            running = f"  running {since}" if since else ""
            lines.append(f"  {_MARKS['running']} {address}[…]  {fan.counts()}{running}")
        if len(self.fans) > self.SHOWN:
            lines.append(f"  … and {len(self.fans) - self.SHOWN:,} more forEach loops")
        return lines


@asynccontextmanager
async def watch_run(*, events: bool, json_only: bool) -> AsyncIterator[EventSink | None]:
    """What watches a run's events: NDJSON on stderr (``--events``), live progress on a
    terminal (not with ``--json``), else nothing. The progress lives as long as the block.
    """
    stderr = sys.stderr
    if events:

        def write(event: Event) -> None:
            stderr.write(_encode_json(event).decode() + "\n")

        yield write
        return
    if json_only or not stderr.isatty():
        yield None
        return
    progress = LiveProgress(stderr)
    async with anyio.create_task_group() as group:
        group.start_soon(progress.keep_time)
        try:
            yield progress
        finally:
            group.cancel_scope.cancel()
            progress.close()


def print_summary(result: RunResult, stream: TextIO, *, store: StoreSpec) -> None:
    """The run as a person reads it at its end: status, loops and graphs, messages,
    usage, steps that failed while the run went on, questions, the error, the output."""
    _write(stream, [_header(result.run_id, result.workflow, result.status)])
    _write(stream, _details(result, store))


def print_run(
    row: RunRow,
    steps: Mapping[str, StepRecord],
    stream: TextIO,
    *,
    store: StoreSpec,
    forks: Sequence[RunRow] = (),
) -> None:
    """A stored run for a person (``runs show`` on a terminal): the summary's header,
    when it started and how long it took, its lineage (the run it was forked from,
    the runs forked from it), every step, then the rest of the summary."""
    lines = [_header(row.run_id, row.workflow, row.status)]
    lines.append(f"  started {_started(row)}, {_duration(row)}")
    if row.parent_run_id is not None:
        lines.append(f"  forked from {row.parent_run_id} at {row.parent_address}")
    lines.extend(f"  fork {f.run_id} at {f.parent_address}: {f.status}" for f in forks)
    if steps:
        lines.append("  steps:")
        lines.extend(_step_lines(steps))
    if row.result is not None:
        lines.extend(_details(row.result, store))
    _write(stream, lines)


def print_runs(rows: list[RunRow], stream: TextIO) -> None:
    """``runs list``: a line per run: id, status, when it started, how long it took
    (``-`` while queued or running), workflow."""
    width = max((len(row.run_id) for row in rows), default=0)
    for row in rows:
        ongoing = row.status in ("running", "queued")
        duration = "-" if ongoing else took(row.updated_at - row.created_at)
        stream.write(
            f"{row.run_id:<{width}}  {row.status:<9}  {_started(row)}  {duration:>7}  "
            f"{row.workflow}\n"
        )


def _header(run_id: str, workflow: str, status: str) -> str:
    return f"run {run_id} ({workflow}): {status}"


def _started(row: RunRow) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row.created_at))


def _duration(row: RunRow) -> str:
    if row.status == "queued":
        return "not started"
    if row.status == "running":
        return "not ended"
    return f"took {took(row.updated_at - row.created_at)}"


def _write(stream: TextIO, lines: list[str]) -> None:
    stream.write("".join(f"{line}\n" for line in lines))


def _progress(event: Event) -> str | None:
    """The line of a loop's iteration, a judge's verdict or a graph's transition."""
    if event.type == EventType.ITERATION_START:
        iteration = payload(event, IterationStart).iteration
        return f"  ⟳ {event.step_id}  iteration {iteration}"
    if event.type == EventType.JUDGE_VERDICT:
        judged = payload(event, JudgeVerdict)
        verdict = {True: "done", False: "not done", None: "no verdict"}[judged.done]
        reason = f": {judged.reason}" if judged.reason else ""
        return f"  ⚖ {event.step_id}  {verdict}{reason}"
    if event.type == EventType.GRAPH_TRANSITION:
        taken = payload(event, GraphTransition)
        return f"  → {event.step_id}  {taken.from_} → {taken.to}"
    return None


def _details(result: RunResult, store: StoreSpec) -> list[str]:
    lines = []
    for address, loop in result.loops.items():
        flag = ", flagged" if loop.flagged else ""
        lines.append(
            f"  loop {address}: {loop.iterations} iteration(s), {loop.termination_reason}{flag}"
        )
    for address, graph in result.graphs.items():
        lines.append(f"  graph {address}: {' -> '.join(graph.path)} ({graph.termination_reason})")
    lines.extend(f"  {m.from_} -> {m.to}: {m.text}" for m in result.messages)
    if result.usage.llm_calls:
        usage = result.usage
        tokens = usage.prompt_tokens + usage.completion_tokens
        cost = f", {_usd(usage.cost)}" if usage.cost else ""
        lines.append(f"  {usage.llm_calls} model call(s), {tokens} tokens{cost}")
    lines.extend(_tolerated_failures(result))
    lines.extend(_questions(result.run_id, result.steps, store))
    if result.error is not None:
        where = f" at {result.error.address}" if result.error.address else ""
        lines.append(f"error{where}: {result.error.type}: {result.error.message}")
    if result.status in _SHOWS_OUTPUT and result.output not in (None, ""):
        output = result.output if isinstance(result.output, str) else json.dumps(result.output)
        lines.append(output.removesuffix("\n"))
    return lines


def _tolerated_failures(result: RunResult) -> list[str]:
    """Steps that failed while the run went on (``onError: continue``, a judge that
    failed open): each where it failed first, not again for every container above it."""
    failed = [address for address, record in result.steps.items() if record.status == "failed"]
    skip = _containers(failed)
    if result.error is not None and result.error.address is not None:
        skip.add(result.error.address)  # the summary's error line names it
    lines = []
    for address in failed:
        if address in skip:
            continue
        error = result.steps[address].error
        why = f": {error.type}: {error.message}" if error is not None else ""
        lines.append(f"  {_MARKS['failed']} {address} failed, the run went on{why}")
    return lines


def _questions(run_id: str, steps: Mapping[str, StepRecord], store: StoreSpec) -> list[str]:
    """What a waiting run asks, and the command that answers it."""
    lines = []
    for address, record in steps.items():
        # Only a step that asks holds a question; the containers around it wait with it.
        question = msgspec.to_builtins(record.result) if record.status == "waiting" else None
        if isinstance(question, dict) and "prompt" in question:
            prompt = str(question["prompt"] or "").replace("\n", "\n    ")
            answer = command_hint("signal", run_id, address, "--data", "JSON", store=store)
            lines.append(f"  waiting at {address}: {prompt}")
            lines.append(f"    answer: {answer}")
    return lines


def _step_lines(steps: Mapping[str, StepRecord]) -> list[str]:
    width = min(max(map(len, steps)), 48)
    lines = []
    for address, record in steps.items():
        detail = took(record.duration_ms / 1000) if record.status != "running" else ""
        if record.attempts > 1:
            detail += f" ({record.attempts} attempts)"
        if record.error is not None:
            first = record.error.message.splitlines()[0] if record.error.message else ""
            detail += f"  {record.error.type}: {first}"
        mark = _MARKS.get(record.status, " ")
        lines.append(f"    {mark} {address:<{width}}  {record.status:<9}  {detail}".rstrip())
    return lines


EXIT_CODES = {"completed": 0, "failed": 1, "cancelled": 1, "waiting": 3, "running": 1, "queued": 1}
"""The exit code of ``cadenza run`` and ``resume`` for each run status."""

CANCEL_GRACE = 5.0
"""Seconds the steps of an interrupted run get to stop before they are stopped outright
(more than a command's SIGTERM-to-SIGKILL wait of 2 s)."""


async def follow(handle: RunHandle, args: argparse.Namespace) -> int:
    """Waits for the run (SIGINT/SIGTERM cancel it), prints its result; the exit code."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as group:

            async def cancel_on_signal() -> None:
                # The first signal asks the steps to stop and gives them CANCEL_GRACE
                # seconds; a step that does not is then stopped outright, so a signal
                # always ends the run, recorded ``cancelled``. A second signal stops
                # everything at once.
                grace = CANCEL_GRACE
                async for signum in signals:
                    handle.cancel(f"interrupted by {signal.Signals(signum).name}", deadline=grace)
                    grace = 0.0

            group.start_soon(cancel_on_signal)
            # Awaited here only to know when to stop watching: the run's error
            # (the store failed it, say) is raised below as itself, not wrapped
            # in the task group's.
            with contextlib.suppress(Exception):
                await handle.result()
            group.cancel_scope.cancel()
    result = await handle.result()
    if args.json:
        sys.stdout.write(_encode_json(result).decode() + "\n")
    else:
        print_summary(result, sys.stdout, store=args.store)
    return EXIT_CODES[result.status]


def _usd(amount: float) -> str:
    """``$0.35`` for cents and more, ``$0.000945`` below a cent (a scripted run's cost)."""
    if amount >= 0.01:
        return f"${amount:,.2f}"
    return "$" + f"{amount:.6f}".rstrip("0").rstrip(".")
