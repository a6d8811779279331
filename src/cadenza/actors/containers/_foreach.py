"""The forEach controller (SPEC 2.2): one iteration per item, at most N alive at once.

``forEach`` is a list, or CEL evaluated once when the step starts that must
yield one, or (an extension) a stream: a JSON-lines file or a Python generator
(`_items`), read a batch at a time as the window moves. Iteration i runs at
``loop[i]`` (the looped step itself) or as the loop's ``steps`` at
``loop[i].<id>``, in a scope holding ``item`` and ``index``; agents get the
item under ``## forEach Item (index: i)``.

At most ``maxConcurrency`` iterations are alive (default: all), and never more
than the run's ``maxConcurrency``: the rest wait as list positions, not as
actors, so a 10,000-item forEach holds a handful of actors at any moment. Each
completion costs O(1): a counter, a slot in two arrays and the next launch.

A failed iteration fails the forEach: no further iteration starts, those
running finish. With ``onError: continue`` on a looped single step, every item
runs and the step is failed if any item failed (without stopping its workflow).

The step's content joins one block per item started, in order; an item that
did not complete is there too, as a line saying so and why (``[item 1 failed:
ValueError: ...]``), so a step reading the content is not handed an empty
block it cannot tell from an empty answer.

With ``outputMode: summary`` (an extension, for runs of many items) the step
keeps no item's content or result: its output counts the items by status and
lists those that did not complete, and a completed item's records (the item's
and its own steps') leave the run's journal as it ends, so the run's memory
follows the items in flight and the few that failed, not the items done. The
store keeps the records (a resume replays them) and the events.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container as Container_
from typing import Any

from cadenza.actors.run import Brief, Placement, Scope, work_error
from cadenza.actors.steps import StepContext, StepsView
from cadenza.protocols import (
    ErrorInfo,
    EventType,
    ForEachMessage,
    ItemEnd,
    ItemStart,
    LoopEnd,
    LoopSummary,
    Shared,
    StepRecord,
    StepStart,
    StepStatus,
)
from cadenza.workflow import ItemSource, compile_expression, preview, quote, type_name

from ._container import Container, Outcome, amend, looped_body
from ._items import ItemStream, open_items

__all__ = ["ForEachController"]

SEPARATOR = "\n\n---\n\n"
"""Between the iterations' contents in the forEach step's content."""

_WHY_LENGTH = 200
"""Characters of an item's error shown in the step's content (its record has it whole)."""

STREAM_WINDOW = 1000
"""Items of a stream of unknown length alive at once when nothing caps them (no
``maxConcurrency`` on the loop or the run): "all" of a generator is not a number."""


class ForEachController(Container):
    """Runs one iteration per item, keeping at most ``limit`` of them alive."""

    kind = "forEach"

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement)
        step = self.step
        assert step.loop is not None
        self.loop = step.loop
        self.body_steps = self.loop.steps
        self.body = looped_body(step, self.body_steps)
        self.roots = {s.id for s in self.body_steps or () if not s.depends_on}
        self.tolerant = self.body is not None and step.on_error == "continue"
        # The items: a list source's list; over a stream, those launched (default mode)
        # or, by index, those in flight and those that did not complete (summary).
        self.items: list[Any] | dict[int, Any] = []
        self.total: int | None = 0  # None: a generator's, until it ends
        self.stream: ItemStream | None = None  # this attempt's, over a stream
        self.pending: deque[Any] = deque()  # read from the stream, not launched yet
        self.broken: ErrorInfo | None = None  # why the stream could not be read on
        self.ended = False  # the stream gave its last item
        self.limit = 1
        self.launched = 0
        self.settled = 0
        self.contents: list[str | None] = []
        self.results: list[Any] = []
        self.statuses: list[StepStatus | None] = []
        self.first_error: ErrorInfo | None = None
        self.errors: dict[int, ErrorInfo] = {}  # of the items that failed (few, usually)
        self.halted = False
        self.summary = self.loop.output_mode == "summary"
        self.counts: dict[str, int] = {}  # summary: items settled, by status
        self.unfinished: dict[int, StepStatus] = {}  # summary: the items that did not complete
        # Item events share their data: at 10,000 items a dict per event is megabytes
        # kept by the store, and the index is already in the address (loop[i]).
        self.start_event = Shared(ItemStart(total=0))
        self.end_events: dict[str, Shared] = {}
        # The addresses of the items in flight: `item_end` names its item with the text
        # its `item_start` did, not a copy (the memory store keeps both events).
        self.in_flight: dict[int, str] = {}
        self.evaluated: list[Any] | ItemStream | None = None  # this attempt's (`before_start`)
        self.failure: Exception | None = None  # why they could not be evaluated

    async def before_start(self) -> None:
        """Evaluates the items, before ``step_start``: zenflow's carries their count."""
        self.failure = None
        await self._close()  # a retried attempt reads its stream from the start
        try:
            self.evaluated = await self._items()
        except Exception as error:  # a bad forEach fails the step (in `begin`), located
            self.evaluated, self.failure = None, error

    def start_data(self, attempt: int) -> StepStart:
        """``loop_type`` and the number of ``items``, as zenflow's ``step_start`` has them."""
        index, total = self.position
        evaluated = self.evaluated
        items = evaluated if evaluated is None or isinstance(evaluated, list) else evaluated.total
        return StepStart(
            kind=self.kind,
            attempt=attempt,
            loop_type="forEach",
            index=index,
            total=total,
            items=len(items) if isinstance(items, list) else items,
        )

    async def begin(self) -> None:
        """Starts the first ``limit`` iterations over the items `before_start` evaluated."""
        if self.failure is not None:  # a bad forEach fails the step, naming the expression
            await self.finish(Outcome("failed", error=work_error(self.failure, self.here)))
            return
        source = self.evaluated
        if source is None:  # cancelled while an async Python callable gave the items
            await self.finish(Outcome("cancelled"))
            return
        self._reset(source)
        count = self.total
        limit = self.loop.max_concurrency or (STREAM_WINDOW if count is None else count)
        if self.run.max_concurrency > 0:
            limit = min(limit, self.run.max_concurrency)
        self.limit = max(limit, 1)
        self.start_event = Shared(ItemStart(total=count))
        over = f"{count}" if count is not None else "a stream of"
        self.run.journal.emit(
            EventType.MESSAGE,
            step_id=self.here,
            message=f"forEach over {over} item(s), at most {self.limit} at once",
            data=ForEachMessage(items=count, max_concurrency=self.limit),
        )
        await self._fill()
        if not self.children:
            await self._complete()

    def _reset(self, source: list[Any] | ItemStream) -> None:
        """A clean state for an attempt over ``source``."""
        if isinstance(source, list):
            self.items, self.total, self.stream = source, len(source), None
        else:
            self.items = {} if self.summary else []
            self.total, self.stream = source.total, source
        self.pending = deque()
        self.broken, self.ended = None, False
        self.launched = self.settled = 0
        self.in_flight = {}
        if self.summary:
            self.counts, self.unfinished = {}, {}
        else:
            self.contents, self.results, self.statuses = [], [], []
        self.first_error = None
        self.errors = {}
        self.halted = False

    async def _fill(self) -> None:
        """Starts items while the window has room, and there are items and leave to."""
        while len(self.children) < self.limit and not self.halted and self.stopping is None:
            if self.stream is None:
                if self.launched == len(self.items):
                    return
                self._launch(self.launched, self.items[self.launched])
            elif self.pending or await self._read():
                item = self.pending.popleft()
                if isinstance(self.items, dict):
                    self.items[self.launched] = item
                else:
                    self.items.append(item)
                self._launch(self.launched, item)
            else:
                return

    async def _read(self) -> bool:
        """Reads the stream's next batch; False when there is none (the end, a broken
        source, a cancellation)."""
        stream = self.stream
        if stream is None or self.ended or self.broken is not None:
            return False
        try:
            batch = await self.park(stream.read())
        except Exception as error:  # a bad line, a generator that raised: the step fails
            self.broken = work_error(error, self.here)
            self.halted = True
            return False
        if batch is None:  # cancelled: `stopping` says why
            return False
        if not batch:
            self.total, self.ended = self.launched, True
            await stream.close()
            return False
        self.pending.extend(batch)
        return True

    async def _close(self) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            await stream.close()

    async def finish(self, outcome: Outcome) -> None:
        """Closes the stream (a file, a generator) before the step ends or retries."""
        await self._close()
        await super().finish(outcome)

    async def _items(self) -> list[Any] | ItemStream | None:
        """The items (evaluated once, now) or their stream, opened; None when cancelled
        while awaiting them."""
        source = self.loop.for_each
        if isinstance(source, list):
            return source
        if isinstance(source, ItemSource):
            return await self.park(open_items(source, self.document.base_dir, self._context()))
        assert source is not None
        expression = compile_expression(source, step_ids=self.run.step_ids)
        names = self.scope.activation(self.run.inputs)
        if not expression.is_async:
            value = expression.evaluate(names)
        else:  # a Python callable: awaited where cancel can reach it
            value = await self.park(expression.evaluate_async(names))
            if self.stopping is not None:
                return None
        if not isinstance(value, list):
            raise TypeError(
                f"forEach {quote(source)} must yield a list, but it gave "
                f"{type_name(value)} {preview(value)}"
            )
        return value

    def _context(self) -> StepContext:
        """What a generator handler is given: a handler step's context, at the forEach."""
        run, address = self.run, self.here
        variables = self.scope.activation(run.inputs)
        return StepContext(
            run_id=run.run_id,
            address=address,
            attempt=self.attempt,
            idempotency_key=f"{run.run_id}:{address}:{self.attempt}",
            inputs=variables["inputs"],
            steps=StepsView(variables["steps"]),
            workflow_dir=self.document.base_dir,
            item=variables.get("item"),
            index=variables.get("index"),
            iteration=variables.get("iteration"),
            brief=self.brief,
        )

    def _launch(self, index: int, item: Any) -> None:
        self.launched = index + 1
        address = self.address.item(index)
        self.in_flight[index] = str(address)
        if not self.summary:
            self.contents.append(None)
            self.results.append(None)
            self.statuses.append(None)
        scope = Scope(self.scope, {"item": item, "index": index})
        self.run.journal.emit(
            EventType.ITEM_START, step_id=self.in_flight[index], data=self.start_event
        )
        item_brief = amend(self.brief, item_index=index)
        if self.body is not None:
            self.spawn_looped(index, self.body, scope, address, item_brief)
            return
        inner = Brief(item_index=index)
        steps = self.body_steps or ()
        briefs = {s.id: item_brief if s.id in self.roots else inner for s in steps}
        self.spawn_body(index, steps, scope, address, briefs=briefs, kind="item")

    async def child_done(self, key: int, record: StepRecord) -> None:
        """Notes iteration ``key`` and starts the next waiting one, if any may start."""
        self.settled += 1
        item = self.in_flight.pop(key, None) or str(self.address.item(key))
        if self.summary:
            self._tally(key, item, record)
        else:
            self.contents[key] = record.content
            self.results[key] = record.result
            self.statuses[key] = record.status
        ended = self.end_events.get(record.status)
        if ended is None:
            ended = self.end_events[record.status] = Shared(ItemEnd(status=record.status))
        self.run.journal.emit(EventType.ITEM_END, step_id=item, data=ended)
        if record.error is not None:
            self.errors[key] = record.error
        if record.status in ("failed", "cancelled"):
            if self.first_error is None:
                self.first_error = record.error
            if not (self.tolerant and record.status == "failed"):
                self.halted = True
        if self.halted or self.stopping is not None:
            pass
        elif self.stream is None:  # a list: the commonest case, without an await
            if self.launched < len(self.items):
                self._launch(self.launched, self.items[self.launched])
        else:
            await self._fill()
        if not self.children:
            await self._complete()

    def _tally(self, key: int, item: str, record: StepRecord) -> None:
        """Counts item ``key`` (``outputMode: summary``); a completed item is forgotten."""
        status = record.status
        self.counts[status] = self.counts.get(status, 0) + 1
        if status != "completed":
            self.unfinished[key] = status
            return
        if isinstance(self.items, dict):  # a stream's item, held while in flight
            del self.items[key]
        # Its own records only: deeper ones (a loop in the body) stay, as finding them
        # would mean a scan of every record per item.
        records = self.run.journal.records
        records.pop(item, None)
        for step in self.body_steps or ():  # ids the document checked: `Address.child`'s text
            records.pop(f"{item}.{step.id}", None)

    def _status(self) -> StepStatus:
        """How the items ended, together: cancelled, failed, waiting or completed."""
        # Membership is all that is asked of it: the list's statuses, or the summary's counts.
        statuses: Container_[str | None] = self.counts if self.summary else self.statuses
        if self.broken is not None:  # the items could not all be read
            return "failed"
        if self.summary and self.settled < self.launched:
            statuses = {"cancelled", *self.counts}  # started, never reported back
        if self.stopping is not None or "cancelled" in statuses:
            return "cancelled" if "failed" not in statuses else "failed"
        if "failed" in statuses:
            return "failed"
        if "waiting" in statuses:  # the other items ran; these wait for a person
            return "waiting"
        return "completed"

    async def _complete(self) -> None:
        status = self._status()
        reason = "forEach" if status == "completed" else ("timeout" if self._expired else status)
        self.run.journal.loops[self.here] = LoopSummary(self.launched, reason)
        self.run.journal.emit(
            EventType.LOOP_END,
            step_id=self.here,
            data=LoopEnd(iterations=self.launched, termination_reason=reason, flagged=False),
        )
        error = (self.broken or self.first_error) if status != "completed" else None
        if self.summary:
            content, summary = self._summary()
            await self.finish(Outcome(status, content, summary, error))
            return
        ran = range(self.launched)
        content = SEPARATOR.join(self._block(i) for i in ran)
        iterations = [
            {
                "index": i,
                "item": self.items[i],
                "status": self.statuses[i] or "cancelled",
                "content": self.contents[i] or "",
                "result": self.results[i],
            }
            for i in ran
        ]
        await self.finish(Outcome(status, content, {"iterations": iterations}, error))

    def _block(self, index: int) -> str:
        """Item ``index``'s part of the step's content: its content, and if it did not
        complete, first a line saying so and why."""
        content = self.contents[index] or ""
        status = self.statuses[index] or "cancelled"
        if status == "completed":
            return content
        note = self._note(index, status)
        return f"{note}\n{content}" if content else note

    def _note(self, index: int, status: str) -> str:
        """The line saying item ``index`` did not complete, and why."""
        error = self.errors.get(index)
        why = ""
        if error is not None:
            first_line = error.message.split("\n", 1)[0]
            why = f": {error.type}: {first_line[:_WHY_LENGTH]}"
        return f"[item {index} {status}{why}]"

    def _summary(self) -> tuple[str, dict[str, Any]]:
        """``outputMode: summary``'s content and result: counts, and the items that did
        not complete (each with its item, status and error)."""
        counts = dict(self.counts)
        missing = self.launched - self.settled
        if missing:
            counts["cancelled"] = counts.get("cancelled", 0) + missing
        total = self.total
        tally = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        of = "" if total is None else f" of {total}"
        lines = [f"forEach: {self.launched}{of} item(s) started ({tally or 'none ended'})"]
        if self.broken is not None:
            lines.append(f"[items unreadable: {self.broken.type}: {self.broken.message}]")
        unfinished = []
        for index in sorted(self.unfinished):
            status = self.unfinished[index]
            error = self.errors.get(index)
            lines.append(self._note(index, status))
            unfinished.append(
                {
                    "index": index,
                    "item": self.items[index],
                    "status": status,
                    "error": None
                    if error is None
                    else {"type": error.type, "message": error.message},
                }
            )
        result = {
            "total": total,
            "started": self.launched,
            "counts": counts,
            "unfinished": unfinished,
        }
        return "\n".join(lines), result
