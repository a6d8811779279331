"""The control loop controller (SPEC 2.5): planner -> actor -> checks -> evaluator -> decide.

Iteration N lives at ``step.N`` and calls its workflows at ``step.N.planner``
(the first iteration and after a replan), ``step.N.actor`` (``step.N.delegate``
once the loop delegated) and ``step.N.evaluator``; their own steps are at
``step.N.actor.<id>``. Between the actor and the evaluator the checks run over
the actor's ``result``. Then `decide` (``decide.py``, pure) rules, and the
ruling is written down (``_control_log.py``) before anything else happens.

Before every call `admit` checks the budget: the tokens spent by this step's
children (counted from the ``agent_turn`` events under its address, so steps
running beside it do not count, and in a resumed run from the ``step_replayed``
events of the children replayed there, which carry what they spent) plus the
most a call of that role has cost so far must stay within ``limits.maxTokens``.
``limits.timeout`` runs on the run's clock; when it passes, the running call is
cancelled and the loop stops as ``stopped_budget``. The step's own ``timeout``
and ``retries`` work as for every container (``_container.py``).

Under ``escalate: human`` an escalation asks a person at ``step.N.human``
(`ask_person`, as a ``human:`` step does): without an answer yet the loop ends
``waiting``, and so does the run; once ``cadenza signal`` recorded one, the
resumed run replays the loop to that iteration and `heed` turns the answer into
its ruling. A call whose workflow waits for a person makes the loop wait too.

The loop runs as one coroutine in the actor's ``on_start``: its calls report
through futures rather than the inbox, so the sequence reads top to bottom.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import msgspec

from cadenza.actors.containers import Container, Outcome
from cadenza.actors.run import Placement, StepFinished, work_error
from cadenza.actors.steps import ask_person
from cadenza.kernel import Address, Timer
from cadenza.protocols import ErrorInfo, Event, EventType, StepRecord, StepStart
from cadenza.workflow import LoadedWorkflow, parse_duration, parse_template

from ._control_log import DecisionLog
from ._evidence import read_verdict, run_checks
from ._subflow import call_workflow, load_reference, render_reference
from .decide import (
    PERSON_SCHEMA,
    History,
    InfraFailure,
    Ruling,
    Setup,
    Spent,
    admit,
    advance,
    decide,
    effective_score,
    heed,
)

__all__ = ["HUMAN", "ControlController"]

HUMAN = "human"
"""Where in an iteration an escalation asks a person: ``step.N.human``."""


class Waiting:
    """A call's workflow waits for a person: the iteration, and the loop, wait with it."""


WAITING = Waiting()

Called = dict[str, Any] | InfraFailure | Ruling | Waiting | None
"""What a call gives back: its output map, an infrastructure failure, a budget
stop, `WAITING`, or None when the loop is being cancelled."""


class ControlController(Container):
    """Runs a ``control:`` step's iterations until the decide policy ends the loop."""

    kind = "control"

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement)
        step = self.step
        assert step.control is not None, "a control controller needs a control step"
        self.spec = step.control
        self.limits = self.spec.limits
        self.setup = Setup(
            has_planner=self.spec.planner is not None,
            has_delegate=self.spec.delegate is not None,
            escalate=self.spec.escalate,
        )
        self.log = DecisionLog(self.run.journal, "", self.limits.max_iterations, self.position)
        self.tokens = 0
        self.history = History()
        self.objective = self.criteria = self.feedback = ""
        self.plan: Any = ""
        self.needs_plan = self.setup.has_planner
        self.best: tuple[float, Any] | None = None
        self.last: Any = None
        self._prefix = ""
        self._began = 0.0
        self._late = False
        self._deadline: Timer | None = None
        self._reserve: dict[str, int] = {}
        self._calls = 0

    def start_data(self, attempt: int) -> StepStart:
        """The iteration cap, in the ``step_start`` event."""
        cap = self.limits.max_iterations
        index, total = self.position
        return StepStart(
            kind=self.kind,
            attempt=attempt,
            max_iterations=cap,
            index=index,
            total=total,
        )

    async def on_start(self) -> None:
        """Counts the tokens of this step's children while the whole loop runs."""
        self._prefix = f"{self.address}."
        # Restated too: a second resume replays children the first one already did.
        unsubscribe = self.run.journal.subscribe(self._count, restated=True)
        try:
            await super().on_start()
        finally:
            unsubscribe()

    def _count(self, event: Event) -> None:
        step_id = event.step_id
        if (
            event.tokens is not None
            and (event.type == EventType.AGENT_TURN or event.type == EventType.STEP_REPLAYED)
            and step_id is not None
            and step_id.startswith(self._prefix)
        ):
            self.tokens += event.tokens.total

    async def begin(self) -> None:
        """Runs one attempt of the whole loop, from a clean state, to its end."""
        self.log = DecisionLog(
            self.run.journal, self.here, self.limits.max_iterations, self.position
        )
        self.tokens, self.history, self.best, self.last = 0, History(), None, None
        self.feedback, self.plan, self.needs_plan = "", "", self.setup.has_planner
        self._reserve, self._late = {}, False
        self._began = self.run.clock.now()
        if self.limits.timeout is not None:
            seconds = parse_duration(self.limits.timeout)
            self._deadline = self.run.clock.call_later(seconds, self._time_up)
        try:
            names = self.scope.activation(self.run.inputs)
            self.objective = self._render(self.spec.objective, names)
            self.criteria = self._render(self.spec.criteria or "", names)
        except Exception as error:  # a bad objective template fails the step, located
            await self._end(None, error=work_error(error, self.here))
            return
        ruling: Ruling | Waiting | None = None
        n = 0
        while self.stopping is None:
            ruling = await self._iteration(n)
            if (
                isinstance(ruling, Ruling)
                and ruling.decision == "escalate"
                and ruling.status is None
            ):
                ruling = await self._ask(n, ruling)
            if not isinstance(ruling, Ruling) or ruling.status is not None:
                break
            n += 1
        if isinstance(ruling, Waiting) and self.stopping is None:
            await self._wait()
            return
        await self._end(ruling if isinstance(ruling, Ruling) and self.stopping is None else None)

    def _time_up(self) -> None:
        self._deadline = None
        self._late = True
        for child in list(self.children.values()):
            child.cancel(f"the control loop's limits.timeout ({self.limits.timeout}) passed")

    def _spent(self) -> Spent:
        seconds = self.run.clock.now() - self._began
        if self._late and self.limits.timeout is not None:  # the timer is the authority
            seconds = max(seconds, parse_duration(self.limits.timeout))
        return Spent(self.tokens, seconds)

    def _render(self, text: str, names: dict[str, Any]) -> str:
        return parse_template(text, step_ids=self.run.step_ids).render(names)

    # One iteration -------------------------------------------------------------

    async def _iteration(self, n: int) -> Ruling | Waiting | None:
        self.log.started(n)
        started = self.run.clock.now()
        detail: dict[str, Any] = {}
        ruling = await self._work(n, self.address.iteration(n), detail)
        if ruling is None:
            await self.log.interrupted(n, self.stopping or "cancelled")
            return None
        if isinstance(ruling, Waiting):
            await self.log.waiting(n)
            return ruling
        if ruling.infra:  # nothing was judged: the next attempt hears the last verdict again
            ruling = dataclasses.replace(ruling, feedback=self.feedback)
        self.feedback = ruling.feedback
        self.history = advance(self.history, ruling)
        self.needs_plan = self.needs_plan or ruling.decision == "replan"
        elapsed = int((self.run.clock.now() - started) * 1000)
        await self.log.decided(n, ruling, detail, elapsed)
        return ruling

    async def _work(
        self, n: int, address: Address, detail: dict[str, Any]
    ) -> Ruling | Waiting | None:
        if self.needs_plan:
            inputs: dict[str, Any] = {
                "objective": self.objective,
                "criteria": self.criteria,
                "feedback": self.feedback,
                "history": list(self.log.entries),
            }
            planned = await self._call("planner", address, inputs)
            if not isinstance(planned, dict):
                return self._settle(planned)
            if "plan" not in planned:
                return self._settle(InfraFailure("planner", "its output map has no 'plan'"))
            self.plan, self.needs_plan = planned["plan"], False
            detail["plan"] = self.plan
        role = "delegate" if self.history.delegated else "actor"
        inputs = {"objective": self.objective, "plan": self.plan, "feedback": self.feedback}
        result = await self._call(role, address, {**inputs, "iteration": n})
        if not isinstance(result, dict):
            return self._settle(result)
        self.last = result
        names = self.scope.activation(self.run.inputs)
        names["result"] = result
        checks = run_checks(self.spec.checks, names, self.run.step_ids)
        detail["checks"] = [dataclasses.asdict(check) for check in checks]
        inputs = {"objective": self.objective, "criteria": self.criteria, "result": result}
        output = await self._call("evaluator", address, inputs)
        if not isinstance(output, dict):
            return self._settle(output)
        verdict = read_verdict(output)
        if not isinstance(verdict, InfraFailure):
            detail["verdict"] = output
            score = effective_score(verdict, checks)
            if self.best is None or score >= self.best[0]:
                self.best = (score, result)
        return decide(verdict, checks, self.history, self.limits, self._spent(), self.setup)

    def _settle(self, called: InfraFailure | Ruling | Waiting | None) -> Ruling | Waiting | None:
        if isinstance(called, InfraFailure):
            return decide(called, (), self.history, self.limits, self._spent(), self.setup)
        return called

    # A person ------------------------------------------------------------------

    async def _ask(self, n: int, escalation: Ruling) -> Ruling | Waiting:
        """Asks a person about iteration ``n``: their ruling, or `WAITING` for it."""
        where = str(self.address.iteration(n).child(HUMAN))
        prompt = self._question(n, escalation)
        record = await ask_person(
            self.run, where, prompt=prompt, schema=PERSON_SCHEMA, position=self.position
        )
        if record.status != "completed":
            return WAITING
        answer = record.result if isinstance(record.result, dict) else {}
        ruling = heed(answer, escalation, where)
        self.feedback = ruling.feedback
        self.history = advance(self.history, ruling)
        self.log.answered(n, ruling)
        return ruling

    def _question(self, n: int, escalation: Ruling) -> str:
        lines = [
            f"The control loop {self.here!r} escalated iteration {n}: {escalation.reason}",
            f"Objective: {self.objective}",
        ]
        if self.criteria:
            lines.append(f"Criteria: {self.criteria}")
        lines.append(f"Result: {msgspec.json.encode(self.last).decode()}")
        if escalation.feedback:
            lines.append(f"Feedback on it: {escalation.feedback}")
        lines.append(
            'Answer {"decision": "accept"} to take this result, {"decision": "retry", '
            '"feedback": "..."} for another attempt that hears your feedback, or '
            '{"decision": "stop"} to end the loop escalated.'
        )
        return "\n".join(lines)

    # Calls ---------------------------------------------------------------------

    async def _call(self, role: str, iteration: Address, inputs: dict[str, Any]) -> Called:
        reserve = self._reserve.get(role, 0)
        stop = admit(role, reserve, self.limits, self._spent())
        if stop is not None:
            return stop
        reference = getattr(self.spec, role)
        try:
            reference = render_reference(self.run, reference, self.scope)
            child = await load_reference(self.document, reference)
        except Exception as error:  # a workflow that cannot be had is the call's failure
            return InfraFailure(role, f"cannot load workflow {reference!r}: {error}")
        if self.stopping is not None:
            return None
        before = self.tokens
        record = await self._run(child, role, iteration.child(role), inputs)
        self._reserve[role] = max(reserve, self.tokens - before)
        if record.status == "cancelled" and self.stopping is not None:
            return None
        if record.status == "cancelled" and self._late:
            return admit(role, 0, self.limits, self._spent())
        if record.status == "waiting":  # a `human:` step in the workflow: the loop waits too
            return WAITING
        if record.status != "completed":
            failure = record.error
            why = f"{failure.type}: {failure.message}" if failure else record.status
            return InfraFailure(role, why)
        if not isinstance(record.result, dict):
            return InfraFailure(role, "its output is not a map; give its workflow an `output:`")
        return record.result

    async def _run(
        self, child: LoadedWorkflow, role: str, address: Address, inputs: dict[str, Any]
    ) -> StepRecord:
        done: asyncio.Future[StepRecord] = asyncio.get_running_loop().create_future()

        async def report(finished: StepFinished) -> None:
            if not done.done():
                done.set_result(finished.record)

        self._calls += 1
        key = self._calls
        self.children[key] = call_workflow(
            self.run, child, role, address, inputs, report, self.position
        )
        try:
            return await done
        finally:
            self.children.pop(key, None)

    # The end -------------------------------------------------------------------

    async def _wait(self) -> None:
        """Ends this run of the loop ``waiting`` for a person; a resume goes on from there."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self.log.summarize(self.history.iterations, "waiting")
        await self.finish(Outcome("waiting"))

    async def _end(self, ruling: Ruling | None, *, error: ErrorInfo | None = None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        iterations = self.history.iterations
        if ruling is None or ruling.status is None:
            why = "failed" if error else "timeout" if self._expired else "cancelled"
            self.log.summarize(iterations, why)
            await self.finish(Outcome("failed" if error else "cancelled", error=error))
            return
        score: float | None = ruling.score
        chosen = self.last
        if ruling.status != "succeeded":  # stopped: the best attempt, the latest among equals
            score, chosen = self.best or (None, self.last)
        result = {
            "status": ruling.status,
            "result": chosen,
            "score": score,
            "iterations": iterations,
            "decisionLog": list(self.log.entries),
            "tokensSpent": self.tokens,
        }
        self.log.summarize(iterations, ruling.status)
        content = "" if chosen is None else msgspec.json.encode(chosen).decode()
        if ruling.status == "succeeded":
            await self.finish(Outcome("completed", content, result))
            return
        failure = ErrorInfo("ControlStopped", f"{ruling.status}: {ruling.reason}", self.here)
        await self.finish(Outcome("failed", content, result, failure))
