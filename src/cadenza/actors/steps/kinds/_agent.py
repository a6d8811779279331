"""What a run does with an ``agent`` step: its tool-calling loop, here or on a worker.

The prompt is built where the run's state is (dependencies, brief, inbox,
context files) and the model resolved there; a worker runs the loop from that
prompt. A visit that continues a loop's conversation (``memory``) stays here:
the conversation is the run's state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from cadenza.actors.run import COORDINATOR, NO_BRIEF, Outgoing, RunContext, Scope, StepFailure
from cadenza.actors.steps._agent import AgentOutcome, AgentVisit, model_spec, run_agent
from cadenza.actors.steps._calls import continued, cut_off
from cadenza.actors.steps._leaf import LeafStep, LeafWork, Send, WorkerSite, order_head
from cadenza.actors.steps._prompt import build_prompt, read_context_files
from cadenza.kernel import Actor, Slots, Supervisor
from cadenza.llm import Price, PriceTable
from cadenza.protocols import AgentOrder, CostLeft, Mail, Usage, WorkOrder
from cadenza.workflow import Agent, LoadedWorkflow, Options, Step, Workflow

__all__ = ["AgentWork"]


class AgentWork(LeafWork):
    """An agent step: the coordinator's messages reach it, it spends tokens, and its
    calls are journaled."""

    isolated = True
    mailbox = True
    spends_tokens = True
    journaled = True
    effects = False  # its tool calls settle one by one (`_Conversation.call`)

    async def work(self, actor: LeafStep, address: str, attempt: int) -> tuple[str, Any]:
        step = actor.step
        outputs = actor.scope.steps()
        depends_on = step.depends_on if isinstance(step, Step) else []
        visit = AgentVisit(
            address=address,
            agent_name=step.agent,
            instructions=actor.render(step.instructions or ""),
            scope=actor.scope,
            brief=actor.brief,
            step_model=step.model,
            dependencies=[(d, outputs[d]["content"]) for d in depends_on if d in outputs],
            context_files=step.context_files,
            drain_inbox=actor.drain_inbox,
            max_retries=step.max_retries,
            execution=attempt,
            resumes=_resumes(actor, address, attempt),
        )
        return _outcome(await run_agent(actor.run, actor.document, visit))

    def order(
        self, actor: LeafStep, address: str, attempt: int, seconds: float | None
    ) -> WorkOrder | None:
        if actor.brief.memory != "fresh":
            return None  # the conversation this visit continues is the run's state
        resumes = _resumes(actor, address, attempt)
        run = actor.run
        step = actor.step
        agent = actor.document.workflow.agents.get(step.agent) if step.agent else None
        outputs = actor.scope.steps()
        depends_on = step.depends_on if isinstance(step, Step) else []
        prompt = build_prompt(
            actor.render(step.instructions or ""),
            brief=actor.brief,
            item=actor.scope.activation(run.inputs).get("item"),
            dependencies=[(d, outputs[d]["content"]) for d in depends_on if d in outputs],
            context_files=read_context_files(actor.document.base_dir, step.context_files),
            inbox=actor.drain_inbox(),
        )
        retries = step.max_retries if step.max_retries is not None else run.options.max_retries
        model = model_spec(run, agent, step.agent, step.model)
        return AgentOrder(
            **order_head(actor, address, attempt, seconds),
            agent_name=step.agent,
            agent=None if agent is None else msgspec.to_builtins(agent),
            model=model,
            prompt=prompt,
            max_tokens=run.options.max_tokens,
            tokens_spent=run.journal.prompt_tokens + run.journal.completion_tokens,
            max_retries=retries,
            thinking=run.default_thinking,
            recorded=[] if resumes is None else continued(run, address, attempt, of=resumes),
            cost=_cost_left(run, address, step.agent, agent, model),
        )

    async def run_order(self, order: WorkOrder, site: WorkerSite) -> tuple[str, Any]:
        assert isinstance(order, AgentOrder)
        agent = None if order.agent is None else msgspec.convert(order.agent, Agent)
        agents = {order.agent_name: agent} if agent is not None and order.agent_name else {}
        cost = order.cost
        options = Options(
            max_tokens=order.max_tokens, max_cost=None if cost is None else cost.limit
        )
        workflow = Workflow(name="remote", steps=[], agents=agents, options=options)
        document = LoadedWorkflow(
            workflow=workflow, path=None, base_dir=Path(order.base_dir), includes={}
        )
        journal = site.journal(order.run_id, workflow.name)
        journal.prompt_tokens = order.tokens_spent  # the budget counts the whole run's spend
        prices = PriceTable()
        if cost is not None:  # the tightest cost budget, its spend, and the model's price
            journal.cost = cost.spent
            price = Price(cost.input, cost.output, cost.cached_input)
            prices = PriceTable({order.model: price}, defaults={})
        try:
            async with Supervisor(clock=site.clock) as supervisor:
                supervisor.spawn(COORDINATOR, lambda: _Courier(site.job, site.fence, site.send))
                context = RunContext(
                    run_id=order.run_id,
                    document=document,
                    inputs={},
                    journal=journal,
                    supervisor=supervisor,
                    clock=site.clock,
                    limiter=Slots(1),
                    step_ids=frozenset(),
                    providers=site.providers(order.run_id),
                    prices=prices,
                    default_thinking=order.thinking,
                )
                if cost is not None:
                    context.budgets.run_cost = (cost.what, cost.key)
                visit = AgentVisit(
                    address=order.address,
                    agent_name=order.agent_name,
                    instructions=order.prompt,
                    scope=Scope(),
                    brief=NO_BRIEF,
                    step_model=order.model,
                    can_send_messages=order.can_send_messages,
                    max_retries=order.max_retries,
                    execution=order.attempt,
                    recorded=order.recorded,
                )
                outcome = await run_agent(context, document, visit)
        finally:
            site.usage.append(
                Usage(
                    prompt_tokens=journal.prompt_tokens - order.tokens_spent,
                    completion_tokens=journal.completion_tokens,
                    llm_calls=journal.llm_calls,
                )
            )
        return _outcome(outcome)


def _cost_left(
    run: RunContext, address: str, agent_name: str | None, agent: Agent | None, model: str
) -> CostLeft | None:
    """The cost budget over a remote agent step with least left, and its model's price
    (None: no cost budget covers the step, or its model has no price: refused at load)."""
    limit = agent.max_cost if agent is not None else None
    budgets = [b for b in run.budgets.covering(address, agent_name, limit) if b.unit == "usd"]
    price = run.prices.price_of(model)
    if not budgets or price is None:
        return None
    tightest = min(budgets, key=lambda budget: budget.limit - budget.spent())
    return CostLeft(
        limit=tightest.limit,
        spent=tightest.spent(),
        what=tightest.what,
        key=tightest.key,
        input=price.input,
        output=price.output,
        cached_input=price.cached_input,
    )


def _resumes(actor: LeafStep, address: str, attempt: int) -> int | None:
    """The attempt a resumed run's first attempt at this step continues (its calls are
    replayed), or None: the run is not resumed, or the step was not cut off."""
    if attempt != actor.first_attempt or not cut_off(actor.run, address, attempt - 1):
        return None
    return attempt - 1


def _outcome(outcome: AgentOutcome) -> tuple[str, Any]:
    if outcome.error is not None:
        raise StepFailure(outcome.error, content=outcome.content or None, result=outcome.result)
    return outcome.content, outcome.result


class _Courier(Actor):
    """Stands in for the run's coordinator on a worker: forwards ``send_message``."""

    def __init__(self, job: int, fence: int, send: Send) -> None:
        self.job = job
        self.fence = fence
        self.send = send

    async def receive(self, message: Any) -> None:
        if isinstance(message, Outgoing):
            self.send(Mail(self.job, self.fence, message.text))
