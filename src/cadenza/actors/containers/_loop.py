"""The repeat-until loop controller (SPEC 2.1 and 2.4).

Iteration N runs at ``loop.N``: the looped step itself (a single-step loop) or
the loop's ``steps`` as a sub-DAG whose steps are ``loop.N.<id>``. Each
iteration gets a fresh scope below the loop's, holding ``iteration``, so its
``steps`` are its own. After an iteration: ``until`` (CEL), then the judge
(``untilAgent``), then ``maxIterations`` (``onMaxIterations`` decides), then
``delay`` on the run's clock before the next one. An iteration whose step
failed fails the loop, unless that step has ``onError: continue``.

The same controller runs a workflow-level ``loop:``: the whole workflow's steps
are the body, at ``loop.N.<id>`` for the workflow that is run, and at
``parent.N.<id>`` for an included one (see `_include`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from cadenza.actors.run import (
    NO_BRIEF,
    Brief,
    Cancellable,
    Placement,
    RunContext,
    Scope,
    StepFinished,
    work_error,
)
from cadenza.kernel import Address
from cadenza.protocols import (
    ErrorInfo,
    EventType,
    LoopEnd,
    LoopSummary,
    StepRecord,
    StepStart,
    StepStatus,
    iteration_end,
    iteration_start,
)
from cadenza.workflow import LoadedWorkflow, Loop, Step, compile_expression, parse_duration

from ._container import Container, Outcome, amend, looped_body
from ._dag import DagOutcome
from ._judge import JUDGE, Judgement, Judging, iteration_report, run_judge
from ._retention import checkpoint, forget, restore

__all__ = ["CUMULATIVE_SEPARATOR", "ROOT_LOOP", "SAFETY_CAP", "LoopController", "spawn_root_loop"]

SAFETY_CAP = 100
"""Iterations of a loop built in Python without ``maxIterations`` (zenflow's cap)."""

CUMULATIVE_SEPARATOR = "\n\n---\n\n"
"""Between iterations in ``outputMode: cumulative`` content (zenflow's separator)."""

ROOT_LOOP = "loop"
"""The address of a run's workflow-level loop; its iterations are ``loop.N.<step>``."""

FinishHook = Callable[[Outcome, Scope | None], Awaitable[Outcome]]
"""Turns a loop's outcome into its step's, given the last iteration's scope (includes).

Awaitable: an included workflow's ``output`` may be an async Python callable."""


class LoopController(Container):
    """Runs iterations one after another until ``until``, the judge or the cap stops them."""

    kind = "loop"

    def __init__(
        self,
        placement: Placement,
        *,
        loop: Loop | None = None,
        steps: Sequence[Step] | None = None,
        prepare: Callable[[], Scope] | None = None,
        hook: FinishHook | None = None,
    ) -> None:
        super().__init__(placement)
        step = self.step
        spec = loop if loop is not None else step.loop
        assert spec is not None, "a loop controller needs a loop"
        self.loop = spec
        self.body_steps = steps if steps is not None else spec.steps
        self.body = looped_body(step, self.body_steps)
        self.roots = {s.id for s in self.body_steps or () if not s.depends_on}
        # Later body steps keep only the forEach item they belong to.
        index = self.brief.item_index
        self.inner_brief = NO_BRIEF if index is None else Brief(item_index=index)
        self.limit = spec.max_iterations or SAFETY_CAP
        self.prepare = prepare
        self.hook = hook
        self.cumulative = spec.output_mode == "cumulative"
        self.outer = self.scope
        self.current = self.scope
        self.current_address = ""
        self.iterations = 0
        self.blocks: list[str] = []
        self.feedback: str | None = None
        self.last: StepRecord | None = None

    def start_data(self, attempt: int) -> StepStart:
        """``loop_type`` (and an include's reference) as zenflow's ``step_start`` has them."""
        index, total = self.position
        return StepStart(
            kind=self.kind,
            attempt=attempt,
            loop_type="repeat",
            max_iterations=self.limit,
            include=self.step.include,  # an included workflow with a root loop
            index=index,
            total=total,
        )

    async def begin(self) -> None:
        """Starts iteration 0 (of this attempt) in a fresh state."""
        self.iterations = 0
        self.blocks = []
        self.feedback = None
        self.last = None
        if self.prepare is not None:
            try:
                self.outer = self.prepare()
            except Exception as error:  # bad include inputs fail the step, located
                await self.finish(Outcome("failed", error=work_error(error, self.here)))
                return
        # A resumed keepLast loop has forgotten early iterations: it restarts after them.
        await self._launch(restore(self) if self.loop.keep_last else 0)

    async def _launch(self, n: int) -> None:
        if self.stopping is not None:
            await self._end("cancelled")
            return
        address = self.address.iteration(n)
        self.current_address = str(address)
        scope = self.current = Scope(self.outer, {"iteration": n})
        self.run.journal.emit(
            EventType.ITERATION_START,
            step_id=self.current_address,
            data=iteration_start(n, self.limit),
        )
        feedback = self.feedback if self.loop.feedback else None
        if self.body is not None:
            self.spawn_looped(
                n, self.body, scope, address, self._brief(self.step_id, True, feedback)
            )
            return
        steps = self.body_steps or ()
        briefs = {s.id: self._brief(s.id, s.id in self.roots, feedback) for s in steps}
        self.spawn_body(n, steps, scope, address, briefs=briefs)

    def _brief(self, step_id: str, root: bool, feedback: str | None) -> Brief:
        """What a body step hears: the loop's own brief (roots), feedback, memory."""
        brief = self.brief if root else self.inner_brief
        if root and feedback is not None:
            brief = amend(brief, feedback=feedback)
        if self.loop.memory != "fresh":
            key = f"{self.here}:{step_id}"
            brief = amend(brief, memory=self.loop.memory, memory_key=key)
        return brief

    async def child_done(self, key: int, record: StepRecord) -> None:
        """Decides after iteration ``key``: stop (why), or go on to the next one."""
        self.run.journal.emit(
            EventType.ITERATION_END,
            step_id=self.current_address,
            data=iteration_end(key, record.status),
        )
        self.iterations = key + 1
        self.last = record
        if self.loop.keep_last:
            forget(self, key)
        ended = self._ended_by(record)
        if ended is not None:
            await self._end(ended, error=record.error if ended == "failed" else None)
            return
        reason: str | None = None
        verdict: Judgement | None = None
        if self.loop.until is not None or self.loop.until_agent is not None:
            watched = await self._watch(key, record)
            if watched is None:  # the loop ended there
                return
            reason, verdict = watched
        # The iteration's output, with the judge's feedback: the next iteration's feedback.
        block = record.content or ""
        if verdict is not None and verdict.feedback:
            block += f"\n\nJudge feedback: {verdict.feedback}"
        if self.cumulative:
            self.blocks.append(block)
        self.feedback = block
        if reason is not None:
            await self._end("completed", reason=reason)
        elif key + 1 >= self.limit:
            await self._at_limit()
        else:
            delay = self._pause_before(key, block)
            if delay is not None:
                await self.park(self.run.clock.sleep(delay))
            await self._launch(key + 1)

    def _ended_by(self, record: StepRecord) -> StepStatus | None:
        """The loop's status when the iteration's own status ends it, else None."""
        if record.status == "cancelled" or self.stopping is not None:
            return "cancelled"
        if record.status == "waiting":  # a person must answer before the loop can go on
            return "waiting"
        tolerated = self.body is not None and self.step.on_error == "continue"
        if record.status == "failed" and not tolerated:
            return "failed"
        return None

    async def _until(self, record: StepRecord) -> bool | None:
        """Whether ``until`` holds after the iteration; None once it ended the loop.

        A bad ``until`` fails the loop, naming the expression; a cancel while an
        async one ran cancels it.
        """
        assert self.loop.until is not None
        try:
            expression = compile_expression(self.loop.until, step_ids=self.run.step_ids)
            names = self._until_names(record)
            if expression.is_async:  # a Python predicate: awaited where cancel can reach it
                stop = await self.park(expression.evaluate_bool_async(names, what="until"))
            else:
                stop = expression.evaluate_bool(names, what="until")
        except Exception as error:
            await self._end("failed", error=work_error(error, self.here))
            return None
        if self.stopping is not None:
            await self._end("cancelled")
            return None
        return stop

    async def _watch(
        self, key: int, record: StepRecord
    ) -> tuple[str | None, Judgement | None] | None:
        """Whether ``until``, then the judge, stop the loop after iteration ``key``: why
        (None: it goes on), and the judge's verdict if it was asked. None once the loop
        ended (a bad ``until``, a cancel)."""
        if self.loop.until is not None:
            stop = await self._until(record)
            if stop is None:
                return None
            if stop:
                return "until", None
        if self.loop.until_agent is None:
            return None, None
        verdict = await self.park(self._judge(key, record))
        if verdict is None or self.stopping is not None:
            await self._end("cancelled")
            return None
        return ("judge" if verdict.done else None), verdict

    def _pause_before(self, key: int, block: str) -> float | None:
        """Seconds to wait before iteration ``key + 1`` (``delay``; None: none, an offline
        replay, or a resumed run had begun it), once a ``keepLast`` loop has checkpointed
        iteration ``key``."""
        if self.loop.keep_last:
            checkpoint(self, key, block)
        if not self.loop.delay or self.run.recording is not None:
            return None
        replay = self.run.journal.replay
        if replay is not None and replay.launched(str(self.address.iteration(key + 1))):
            return None
        return parse_duration(self.loop.delay)

    def _until_names(self, record: StepRecord) -> dict[str, object]:
        """What ``until`` sees: the iteration's scope and its output."""
        names = self.current.activation(self.run.inputs)
        names["content"] = record.content or ""
        names["result"] = record.result
        names["status"] = record.status
        return names

    def _judge(self, n: int, record: StepRecord) -> Awaitable[Judgement]:
        iteration = self.address.iteration(n)
        inner = None if self.body is not None else self.body_steps
        context = iteration_report(str(iteration), record, inner, self.current)
        judging = Judging(
            agent_name=self.loop.until_agent or "",
            address=str(iteration.child(JUDGE)),
            loop_address=self.here,
            iteration=n,
            limit=self.limit,
            context=context,
            scope=self.current,
            position=self.position,
        )
        return run_judge(self.run, self.document, judging)

    async def _at_limit(self) -> None:
        policy = self.loop.on_max_iterations
        if policy == "fail":
            watched = [w for w in (self.loop.until, self.loop.until_agent) if w]
            why = " before until or the judge stopped it" if watched else ""
            message = f"the loop reached maxIterations ({self.limit}){why}"
            error = ErrorInfo("MaxIterations", message, self.here)
            await self._end("failed", reason="maxIterations", error=error)
            return
        last = self.last
        failed = last is not None and last.status == "failed"
        await self._end(
            "failed" if failed else "completed",
            reason="maxIterations",
            error=last.error if failed and last is not None else None,
            flagged=policy == "returnWithFlag",
        )

    async def _end(
        self,
        status: StepStatus,
        *,
        reason: str | None = None,
        error: ErrorInfo | None = None,
        flagged: bool = False,
    ) -> None:
        why = reason or ("timeout" if self._expired else status)
        self.run.journal.loops[self.here] = LoopSummary(self.iterations, why, flagged)
        self.run.journal.emit(
            EventType.LOOP_END,
            step_id=self.here,
            data=LoopEnd(iterations=self.iterations, termination_reason=why, flagged=flagged),
        )
        last = self.last
        content = last.content if last is not None else None
        if self.cumulative and self.blocks:
            content = CUMULATIVE_SEPARATOR.join(self.blocks)
        outcome = Outcome(status, content, last.result if last is not None else None, error)
        if self.hook is not None:
            hooked = await self.park(self.hook(outcome, self.current if last is not None else None))
            outcome = hooked if hooked is not None else Outcome("cancelled")
        await self.finish(outcome)


def spawn_root_loop(
    run: RunContext,
    document: LoadedWorkflow,
    scope: Scope,
    report: Callable[[DagOutcome], Awaitable[None]],
) -> Cancellable:
    """Runs a workflow with a root ``loop:`` at `ROOT_LOOP`; its end arrives as a `DagOutcome`.

    After the loop, ``scope`` shows the last iteration's steps, so the workflow's
    ``output`` reads them as it would without a loop.
    """
    workflow = document.workflow

    async def finished(message: StepFinished) -> None:
        record = message.record
        await report(DagOutcome(status=record.status, content=record.content, error=record.error))

    async def expose(outcome: Outcome, last: Scope | None) -> Outcome:
        if last is not None:
            scope.own_steps().update(last.own_steps())
        return outcome

    controller = LoopController(
        Placement(run, document, ROOT_LOOP, Step(id=ROOT_LOOP), scope, finished, (0, 1)),
        loop=workflow.loop,
        steps=workflow.steps,
        hook=expose,
    )
    run.supervisor.spawn(Address.root(ROOT_LOOP), lambda: controller)
    return controller
