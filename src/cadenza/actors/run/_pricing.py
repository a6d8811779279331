"""A run's price table, and the check that every model under a cost budget has a price.

A call to a model with no price would make a cost budget guess, so a run is
refused before it starts when any step a ``maxCost`` covers (the run's, its
agent's, a step's around it) calls a model the table cannot price
(`unpriced`). The table is the shipped prices under the workflow's
``prices:`` (an include's too, the including workflow's winning) and, over
all of those, the caller's (``Runtime(prices=...)``, ``--prices FILE``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from cadenza.llm import (
    DEFAULT_PROVIDER_VARIABLE,
    LLMConfigError,
    Price,
    PriceTable,
    parse_model,
)
from cadenza.workflow import (
    Agent,
    LoadedWorkflow,
    ModelPrice,
    PricesInvalid,
    Problem,
    State,
    Step,
    prices_from,
    read_prices,
)

__all__ = [
    "PricesLike",
    "as_prices",
    "caller_prices",
    "cost_budget",
    "run_prices",
    "unpriced",
]

_HOW = (
    "give it a price: prices: {{{model!r}: {{input: USD, output: USD}}}} (per million tokens) "
    "in the workflow, --prices FILE or Runtime(prices=...); docs/prices.md"
)


def as_prices(prices: Mapping[str, ModelPrice | Price]) -> dict[str, Price]:
    """A document's prices (or a caller's) as the table's."""
    return {
        model: price
        if isinstance(price, Price)
        else Price(price.input, price.output, price.cached_input)
        for model, price in prices.items()
    }


PricesLike: TypeAlias = Mapping[str, Price | Mapping[str, float]] | str | os.PathLike[str]
"""Prices by model spec (`Price`, or ``{input, output, cachedInput}``), or a file of them."""


def caller_prices(prices: PricesLike | None) -> dict[str, Price]:
    """``prices`` as the price table takes them (empty: none given).

    Raises:
        PricesInvalid: A file that cannot be read, or prices of the wrong shape.
    """
    if prices is None:
        return {}
    if isinstance(prices, (str, os.PathLike)):
        return as_prices(read_prices(Path(prices)))
    given = {model: price for model, price in prices.items() if isinstance(price, Price)}
    rest = {model: price for model, price in prices.items() if not isinstance(price, Price)}
    if not isinstance(prices, Mapping):
        raise PricesInvalid(
            f"prices= must be a mapping or a file path, not {type(prices).__name__}"
        )
    return {**as_prices(prices_from(rest, "prices=")), **given}


def run_prices(document: LoadedWorkflow, caller: Mapping[str, Price] | None = None) -> PriceTable:
    """The price table of a run of ``document``: see the module docstring."""
    tables: list[dict[str, Price]] = []
    for loaded in _documents(document):  # the deepest include first, the root last
        prices = loaded.workflow.prices
        if isinstance(prices, dict) and prices:
            tables.append(as_prices(prices))
    if caller:
        tables.append(dict(caller))
    return PriceTable(*tables)


def cost_budget(document: LoadedWorkflow) -> str | None:
    """Where ``document`` (or a workflow it includes) sets a ``maxCost``; None: nowhere."""
    if document.workflow.options.max_cost is not None:
        return "options.maxCost"
    for loaded in _documents(document):
        for name, agent in loaded.workflow.agents.items():
            if agent.max_cost is not None:
                return f"agents.{name}.maxCost"
        pending: list[Step | State] = list(loaded.workflow.steps)
        while pending:
            body = pending.pop()
            if body.max_cost is not None:
                return (
                    f"step {body.id!r} maxCost" if isinstance(body, Step) else "a state's maxCost"
                )
            if body.loop is not None and body.loop.steps:
                pending.extend(body.loop.steps)
            if body.graph is not None:
                pending.extend(body.graph.states.values())
    return None


def _documents(document: LoadedWorkflow) -> list[LoadedWorkflow]:
    order: list[LoadedWorkflow] = []
    seen: set[int] = set()

    def visit(loaded: LoadedWorkflow) -> None:
        if id(loaded) in seen:
            return
        seen.add(id(loaded))
        for child in loaded.includes.values():
            visit(child)
        order.append(loaded)

    visit(document)
    return order


@dataclass(frozen=True, slots=True)
class _Call:
    """A model an agent of the document calls, where, and the budget that covers it."""

    where: str
    agent: str | None
    spec: str
    budget: str


def unpriced(
    document: LoadedWorkflow,
    table: PriceTable,
    default_model: str | None = None,
    filename: str | None = None,
) -> list[Problem]:
    """A problem for every model a cost budget covers that ``table`` has no price for
    (``filename``: the document's name in them; by default its path)."""
    problems: list[Problem] = []
    reported: set[tuple[str, str]] = set()
    name = filename or (str(document.path) if document.path else document.workflow.name)
    bare_to = os.environ.get(DEFAULT_PROVIDER_VARIABLE) or None
    for call in _calls(document, default_model):
        try:
            provider, model = parse_model(call.spec, default_provider=bare_to)
        except LLMConfigError:
            continue  # a model no provider serves: the run fails on it as without a budget
        if table.price(provider, model) is not None or (call.spec, call.budget) in reported:
            continue
        reported.add((call.spec, call.budget))
        who = f"agent {call.agent!r}" if call.agent else "the default agent"
        message = (
            f"{who} calls model {call.spec!r}, which has no price, under the cost budget "
            f"{call.budget}: a budget cannot count a call it cannot price; "
            + _HOW.format(model=f"{provider}:{model}")
        )
        problems.append(Problem(name, 0, 0, call.where, message))
    return problems


def _calls(document: LoadedWorkflow, default_model: str | None) -> Iterator[_Call]:
    workflow = document.workflow
    run_budget = "options.maxCost" if workflow.options.max_cost is not None else None
    walk = _Walk(default_model)
    coordinator = workflow.coordinator
    if coordinator is not None:
        yield from walk.agent(document, "coordinator", coordinator.agent, None, run_budget)
    if workflow.loop is not None:
        yield from walk.loop_judge(document, "loop", workflow.loop.until_agent, run_budget)
    yield from walk.steps(document, workflow.steps, "steps", run_budget, set())


@dataclass(frozen=True, slots=True)
class _Walk:
    default_model: str | None

    def steps(
        self,
        document: LoadedWorkflow,
        steps: list[Step],
        where: str,
        budget: str | None,
        seen: set[tuple[int, str | None]],
    ) -> Iterator[_Call]:
        for index, step in enumerate(steps):
            yield from self.body(document, step, f"{where}[{index}]", budget, seen)

    def body(
        self,
        document: LoadedWorkflow,
        body: Step | State,
        where: str,
        budget: str | None,
        seen: set[tuple[int, str | None]],
    ) -> Iterator[_Call]:
        if body.max_cost is not None:
            budget = budget or f"{where}.maxCost"
        loop = body.loop
        if loop is not None:
            yield from self.loop_judge(document, f"{where}.loop", loop.until_agent, budget)
            if loop.steps:
                yield from self.steps(document, loop.steps, f"{where}.loop.steps", budget, seen)
        if body.graph is not None:
            for state_name, state in body.graph.states.items():
                yield from self.body(
                    document, state, f"{where}.graph.states.{state_name}", budget, seen
                )
        for reference in _references(body):
            child = document.includes.get(reference)
            if child is not None and (id(child), budget) not in seen:
                seen.add((id(child), budget))  # the run's options apply, not the child's
                yield from self.steps(child, child.workflow.steps, "steps", budget, seen)
        if body.kind == "agent":
            yield from self.agent(document, where, body.agent, body.model, budget)

    def loop_judge(
        self, document: LoadedWorkflow, where: str, judge: str | None, budget: str | None
    ) -> Iterator[_Call]:
        if judge is not None:
            yield from self.agent(document, f"{where}.untilAgent", judge, None, budget)

    def agent(
        self,
        document: LoadedWorkflow,
        where: str,
        name: str | None,
        step_model: str | None,
        budget: str | None,
    ) -> Iterator[_Call]:
        agent: Agent | None = document.workflow.agents.get(name) if name else None
        if agent is not None and agent.max_cost is not None:
            budget = budget or f"agents.{name}.maxCost"
        if budget is None:
            return
        spec = step_model or (agent.model if agent is not None else None)
        if spec is None and agent is not None and agent.script is not None:
            spec = f"scripted:{name}"
        spec = spec or self.default_model
        if spec is not None:
            yield _Call(where, name, spec, budget)


def _references(body: Step | State) -> Iterator[str]:
    """The workflows a step runs: its ``include``, its control loop's roles."""
    if body.include is not None:
        yield body.include
    control = body.control
    if control is not None:
        for role in (control.planner, control.actor, control.evaluator, control.delegate):
            if role is not None:
                yield role
