"""A tool router built in Python: graph edges route with Python predicates.

An analyst (the built-in scripted model) picks a tool; the tool's output goes
back to the analyst, until it says FINISHED. The edges out of ``analyze`` are
Python functions over the visit's `PredicateContext` (its ``content``, and
``visits`` per state), one of them ``async``; the tools are plain handlers.
Visit N of a state runs at ``router.N.<state>``.

    python examples/graph_router.py
"""

from __future__ import annotations

import asyncio

from cadenza import LoadedWorkflow, RunResult, Runtime, StepContext
from cadenza import build as b

MAX_SEARCHES = 2


def needs_search(context: b.PredicateContext) -> bool:
    """Route to search when the analyst asks for it, at most `MAX_SEARCHES` times."""
    asked = "USE_SEARCH" in (context.content or "")
    return asked and context.visits.get("search", 0) < MAX_SEARCHES


async def needs_calc(context: b.PredicateContext) -> bool:
    """Route to the calculator; async, as a predicate that looked something up would be."""
    await asyncio.sleep(0)
    return "USE_CALC" in (context.content or "")


def search(context: StepContext) -> str:
    """A stand-in search tool."""
    return "The answer to everything is six times seven."


def calc(context: StepContext) -> dict[str, int]:
    """A stand-in calculator: its result is a map, its content that map's JSON."""
    return {"answer": 6 * 7}


def build() -> LoadedWorkflow:
    """The router: analyze -> (search | calc) -> analyze ... -> END."""
    return b.workflow(
        "graph-router",
        description="Route between tools until the analyst is done.",
        steps=[
            b.graph(
                "router",
                start="analyze",
                max_steps=12,
                states=[
                    b.agent(
                        "analyze",
                        "Decide the next tool.",
                        name="analyst",
                        prompt="You are the analyst. Answer USE_SEARCH, USE_CALC or FINISHED.",
                        script=["USE_SEARCH", "USE_CALC", "FINISHED: 42 is the answer"],
                    ),
                    b.handler("search", search),
                    b.handler("calc", calc, feedback=False),
                ],
                edges=[
                    b.edge("analyze", "search", when=needs_search, description="needs facts"),
                    b.edge("analyze", "calc", when=needs_calc, description="needs arithmetic"),
                    b.edge("analyze", b.END),
                    b.edge("search", "analyze"),
                    b.edge("calc", "analyze"),
                ],
            )
        ],
        output="steps.router.content",
    )


async def main() -> RunResult:
    """Runs the router on a runtime of its own."""
    async with Runtime() as runtime:
        return await runtime.run(build())


if __name__ == "__main__":
    result = asyncio.run(main())
    print(f"{result.status}: {' -> '.join(result.graphs['router'].path)}")
    print(result.output)
