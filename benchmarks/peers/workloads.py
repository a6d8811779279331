"""The peer workloads, one per process: ``python benchmarks/peers/workloads.py NAME [N]``.

Each prints one JSON object (``seconds``, ``steps`` or ``ops``, ``rss_growth`` in
bytes, ``peak_traced`` where measured). Every workload is written the way each
framework's documentation shows: a LangGraph ``StateGraph`` cycle with a
conditional edge, ``Send`` for fan-out with an ``operator.add`` reducer, the
SQLite checkpointers from ``langgraph-checkpoint-sqlite``; AutoGen core's
``SingleThreadedAgentRuntime`` with ``RoutedAgent`` handlers; Cadenza workflows
through ``Runtime`` and actors through ``Supervisor``.

No ``from __future__ import annotations`` here: LangGraph and AutoGen read the
type hints of nodes and handlers at run time, and these are defined locally.
"""

# mypy: disallow-subclassing-any=False, disallow-untyped-decorators=False
# (without the `bench` extra the peers' classes and decorators are Any)

import asyncio
import gc
import json
import operator
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

HERE = Path(__file__).parent
Result = dict[str, float]


def peak_rss() -> int:
    """Peak resident set size of this process, in bytes (Linux reports KiB)."""
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return usage if sys.platform == "darwin" else usage * 1024


async def timed(body: Callable[[], Awaitable[None]]) -> tuple[float, int]:
    """Seconds ``body`` took, and how much it raised the peak RSS."""
    gc.collect()
    before = peak_rss()
    started = time.perf_counter()
    await body()
    return time.perf_counter() - started, peak_rss() - before


# -- Cadenza -------------------------------------------------------------------------


def cadenza_loop_text(iterations: int) -> str:
    return f"""
name: writer-critic
steps:
  - id: cycle
    loop:
      maxIterations: {iterations}
      feedback: false
      steps:
        - id: writer
          handler: "_noop:noop"
        - id: critic
          dependsOn: [writer]
          handler: "_noop:noop"
"""


async def cadenza_loop(iterations: int, store: str | None) -> Result:
    from cadenza import Runtime
    from cadenza.workflow import load_workflow_text

    document = load_workflow_text(cadenza_loop_text(iterations), base_dir=HERE)
    with tempfile.TemporaryDirectory() as directory:
        path = None if store is None else Path(directory) / "runs.db"
        async with Runtime(store=path) as runtime:
            await runtime.run(load_workflow_text(cadenza_loop_text(2), base_dir=HERE))  # warm

            async def body() -> None:
                result = await runtime.run(document)
                assert result.status == "completed", result.error

            seconds, growth = await timed(body)
    return {"seconds": seconds, "steps": 2 * iterations, "rss_growth": growth}


async def cadenza_fanout(width: int) -> Result:
    from cadenza import Runtime
    from cadenza.workflow import load_workflow_text

    text = """
name: fan
inputs:
  items: {type: array}
steps:
  - id: fan
    handler: "_noop:echo_item"
    loop: {forEach: "inputs.items"}
  - id: join
    dependsOn: [fan]
    handler: "_noop:noop"
"""
    document = load_workflow_text(text, base_dir=HERE)
    async with Runtime() as runtime:
        await runtime.run(document, inputs={"items": [1, 2]})  # warm

        async def body() -> None:
            result = await runtime.run(document, inputs={"items": list(range(width))})
            assert result.status == "completed", result.error

        seconds, growth = await timed(body)
    return {"seconds": seconds, "steps": width, "rss_growth": growth}


@dataclass(frozen=True)
class Ping:
    n: int


async def cadenza_ask(count: int) -> Result:
    from cadenza.kernel import Actor, Supervisor

    class Ponger(Actor):
        async def receive(self, message: Any) -> Any:
            return message

    class Pinger(Actor):
        async def receive(self, message: Any) -> Any:
            for i in range(message):
                await self.supervisor.ask("ponger", Ping(i))
            return message

    async with Supervisor() as supervisor:
        supervisor.spawn("ponger", Ponger)
        supervisor.spawn("pinger", Pinger)
        await supervisor.ask("pinger", 100)  # warm

        async def body() -> None:
            await supervisor.ask("pinger", count)

        seconds, growth = await timed(body)
    return {"seconds": seconds, "ops": count, "rss_growth": growth}


async def cadenza_idle(count: int) -> Result:
    from cadenza.kernel import Actor, Supervisor

    class Idle(Actor):
        async def receive(self, message: Any) -> Any:
            return None

    async with Supervisor() as supervisor:
        supervisor.spawn("warm", Idle)
        await asyncio.sleep(0)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(count):
            supervisor.spawn(f"idle-{i}", Idle)
        await asyncio.sleep(0)  # every consumer task started and parked
        await asyncio.sleep(0)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        supervisor.cancel()
    return {"bytes_per_actor": (after - before) / count, "ops": count}


# -- LangGraph -----------------------------------------------------------------------


class LoopState(TypedDict):
    n: int


def langgraph_loop_graph(iterations: int, *, sync: bool = False) -> Any:
    from langgraph.graph import END, START, StateGraph

    async def writer(state: LoopState) -> dict[str, int]:
        return {}

    async def critic(state: LoopState) -> dict[str, int]:
        return {"n": state["n"] + 1}

    def writer_sync(state: LoopState) -> dict[str, int]:
        return {}

    def critic_sync(state: LoopState) -> dict[str, int]:
        return {"n": state["n"] + 1}

    def route(state: LoopState) -> str:
        return END if state["n"] >= iterations else "writer"

    graph = StateGraph(LoopState)
    graph.add_node("writer", writer_sync if sync else writer)
    graph.add_node("critic", critic_sync if sync else critic)
    graph.add_edge(START, "writer")
    graph.add_edge("writer", "critic")
    graph.add_conditional_edges("critic", route, ["writer", END])
    return graph


async def langgraph_loop(iterations: int, saver: str | None) -> Result:
    config: dict[str, Any] = {
        "recursion_limit": 2 * iterations + 10,
        "configurable": {"thread_id": "bench"},
    }
    with tempfile.TemporaryDirectory() as directory:
        db = str(Path(directory) / "checkpoints.db")
        if saver is None:
            app = langgraph_loop_graph(iterations).compile()
            await app.ainvoke({"n": iterations - 1}, config)  # warm

            async def body() -> None:
                await app.ainvoke({"n": 0}, config)

            seconds, growth = await timed(body)
        elif saver == "sqlite-sync":
            from langgraph.checkpoint.sqlite import SqliteSaver

            with SqliteSaver.from_conn_string(db) as checkpointer:
                app = langgraph_loop_graph(iterations, sync=True).compile(checkpointer=checkpointer)

                async def body() -> None:
                    app.invoke({"n": 0}, config, durability="sync")

                seconds, growth = await timed(body)
        else:
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            async with AsyncSqliteSaver.from_conn_string(db) as async_checkpointer:
                app = langgraph_loop_graph(iterations).compile(checkpointer=async_checkpointer)

                async def body() -> None:
                    await app.ainvoke({"n": 0}, config)

                seconds, growth = await timed(body)
    return {"seconds": seconds, "steps": 2 * iterations, "rss_growth": growth}


class FanState(TypedDict):
    results: Annotated[list[int], operator.add]


class WorkState(TypedDict):
    i: int


async def langgraph_fanout(width: int) -> Result:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    def fan(state: FanState) -> list[Send]:
        return [Send("work", {"i": i}) for i in range(len_holder[0])]

    async def work(state: WorkState) -> dict[str, list[int]]:
        return {"results": [state["i"]]}

    async def join(state: FanState) -> dict[str, list[int]]:
        return {}

    graph = StateGraph(FanState)
    graph.add_node("work", work)
    graph.add_node("join", join)
    graph.add_conditional_edges(START, fan, ["work"])
    graph.add_edge("work", "join")
    graph.add_edge("join", END)
    app = graph.compile()
    len_holder = [2]
    await app.ainvoke({"results": []})  # warm
    len_holder[0] = width

    async def body() -> None:
        out = await app.ainvoke({"results": []})
        assert len(out["results"]) == width

    seconds, growth = await timed(body)
    return {"seconds": seconds, "steps": width, "rss_growth": growth}


# -- AutoGen core --------------------------------------------------------------------


async def autogen_ask(count: int) -> Result:
    from autogen_core import (
        AgentId,
        MessageContext,
        RoutedAgent,
        SingleThreadedAgentRuntime,
        message_handler,
    )

    @dataclass
    class Request:
        n: int

    @dataclass
    class Start:
        count: int

    class Ponger(RoutedAgent):
        def __init__(self) -> None:
            super().__init__("answers requests")

        @message_handler
        async def on_request(self, message: Request, ctx: MessageContext) -> Request:
            return message

    class Pinger(RoutedAgent):
        def __init__(self) -> None:
            super().__init__("asks the ponger")

        @message_handler
        async def on_start(self, message: Start, ctx: MessageContext) -> int:
            target = AgentId("ponger", "default")
            for i in range(message.count):
                await self.send_message(Request(i), target)
            return message.count

    runtime = SingleThreadedAgentRuntime()
    await Ponger.register(runtime, "ponger", Ponger)
    await Pinger.register(runtime, "pinger", Pinger)
    runtime.start()
    pinger = AgentId("pinger", "default")
    await runtime.send_message(Start(100), pinger)  # warm

    async def body() -> None:
        await runtime.send_message(Start(count), pinger)

    seconds, growth = await timed(body)
    await runtime.stop()
    return {"seconds": seconds, "ops": count, "rss_growth": growth}


async def autogen_idle(count: int) -> Result:
    from autogen_core import (
        MessageContext,
        RoutedAgent,
        SingleThreadedAgentRuntime,
        message_handler,
    )

    @dataclass
    class Nothing:
        pass

    class Idle(RoutedAgent):
        def __init__(self) -> None:
            super().__init__("idle")

        @message_handler
        async def on_nothing(self, message: Nothing, ctx: MessageContext) -> None:
            return None

    runtime = SingleThreadedAgentRuntime()
    await Idle.register(runtime, "idle", Idle)
    runtime.start()
    await runtime.get("idle", key="warm", lazy=False)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(count):
        await runtime.get("idle", key=f"k{i}", lazy=False)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    await runtime.stop()
    return {"bytes_per_actor": (after - before) / count, "ops": count}


WORKLOADS: dict[str, Callable[[int], Coroutine[Any, Any, Result]]] = {
    "cadenza-loop": lambda n: cadenza_loop(n, None),
    "cadenza-loop-sqlite": lambda n: cadenza_loop(n, "sqlite"),
    "cadenza-fanout": cadenza_fanout,
    "cadenza-ask": cadenza_ask,
    "cadenza-idle": cadenza_idle,
    "langgraph-loop": lambda n: langgraph_loop(n, None),
    "langgraph-loop-sqlite-sync": lambda n: langgraph_loop(n, "sqlite-sync"),
    "langgraph-loop-async-sqlite": lambda n: langgraph_loop(n, "async-sqlite"),
    "langgraph-fanout": langgraph_fanout,
    "autogen-ask": autogen_ask,
    "autogen-idle": autogen_idle,
}


def main() -> None:
    name, size = sys.argv[1], int(sys.argv[2])
    sys.path.insert(0, str(HERE))
    result = asyncio.run(WORKLOADS[name](size))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
