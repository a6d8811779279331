"""CPU instructions per step, the figure that repeats within ~1% on a noisy machine.

Usage: python benchmarks/instructions.py [--breakdown] [SHAPE ...]
(shapes: chain, loop, graph, foreach; and the floors actors, future)

Wall-clock figures here move by 15% from run to run; the count of instructions
a process retires barely moves. Each shape runs twice in a fresh interpreter
under ``perf stat -e instructions``: once with 1,000 steps and once with 10.
The difference divided by 990 is what one more step costs, with interpreter
start-up, imports and the runtime's own set-up cancelled out; the objects the
imports made are frozen (``gc.freeze``) first, so that where a full garbage
collection happens to fall does not move the figure. Needs Linux
``perf`` (Debian: ``linux-perf``) and permission to count (root, or
``kernel.perf_event_paranoid`` <= 2). Where the machine has no hardware
counter (many virtual machines: perf says ``<not supported>``) it counts the
instructions under Valgrind's callgrind instead (Debian: ``valgrind``), which
is exact and repeatable but some fifty times slower; without either it reports
CPU microseconds per unit, the best of three runs each.

Two shapes are floors rather than workflows: ``actors`` is the bare actor
kernel (a parent spawns a child, the child tells it one message and stops, and
the parent spawns the next: what every step costs before it does anything) and
``future`` one asyncio round trip (a task awaits a future another callback
resolves: what no scheduler on asyncio gets below). ``--breakdown`` splits a
chain step into its parts: the chain is run again with one part at a time
replaced by a stub that does nothing, and the difference is that part's cost.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Each shape: a workflow of n units (steps, iterations, graph steps, items) of
# async no-op handlers, run once in memory.
_PROGRAM = """
import asyncio, gc, sys
sys.path.insert(0, {here!r})
from cadenza import Runtime
from cadenza.workflow import LoadedWorkflow, Loop, Step, Workflow
import bench_dag
{prelude}
# What the imports left is frozen out of the collector's view: otherwise when a
# full collection happens to fall moves the count by several per cent.
gc.collect()
gc.freeze()

n = int(sys.argv[1])
shape = sys.argv[2]
noop = "bench_dag:noop"
if shape == "chain":
    steps = [Step(id=f"s{{i}}", handler=noop, depends_on=[f"s{{i - 1}}"] if i else [])
             for i in range(n)]
elif shape == "loop":
    steps = [Step(id="l", handler=noop, loop=Loop(max_iterations=n))]
elif shape == "foreach":
    steps = [Step(id="f", handler=noop, loop=Loop(for_each=list(range(n)), max_concurrency=64))]
elif shape == "graph":
    import bench_loops
    steps = bench_loops.graph_document(n).workflow.steps
elif shape in FLOORS:
    asyncio.run(FLOORS[shape](n))
    raise SystemExit(0)
else:
    raise SystemExit(f"unknown shape {{shape}}")
document = LoadedWorkflow(
    workflow=Workflow(name=shape, steps=steps), path=None, base_dir=bench_dag.HERE, includes={{}}
)

async def main() -> None:
    async with Runtime() as runtime:
        result = await runtime.run(document)
    assert result.status == "completed", result.error

asyncio.run(main())
"""

SHAPES = ("chain", "loop", "graph", "foreach", "actors", "future")

# The floors: `{prelude}` of every program, so a shape can be one of them.
_FLOORS = """
from cadenza.kernel import Actor, Address, Supervisor

class _Child(Actor):
    def __init__(self, parent):
        self.parent = parent
    async def on_start(self):
        await self.parent.send(None)
        self.stop()
    async def receive(self, message):
        pass

class _Parent(Actor):
    def __init__(self, n, done):
        self.n, self.done, self.spawned = n, done, 0
    async def on_start(self):
        self._spawn()
    def _spawn(self):
        parent = self.ref
        self.supervisor.spawn(Address.root(f"c{self.spawned}"), lambda: _Child(parent))
        self.spawned += 1
    async def receive(self, message):
        if self.spawned == self.n:
            self.done.set_result(None)
            self.stop()
        else:
            self._spawn()

async def actors(n):
    async with Supervisor() as supervisor:
        done = asyncio.get_running_loop().create_future()
        supervisor.spawn("parent", lambda: _Parent(n, done))
        await done

async def future(n):
    loop = asyncio.get_running_loop()
    for _ in range(n):
        waiter = loop.create_future()
        loop.call_soon(waiter.set_result, None)
        await waiter

FLOORS = {"actors": actors, "future": future}
"""

# What --breakdown stubs out of a chain step, one at a time: (part, code run before
# the chain that replaces it). Each stub keeps the run correct, only emptier.
_PARTS = (
    (
        "the step's own work (execute, record, report)",
        """
from cadenza.actors.steps._step import StepActor
from cadenza.actors.run import StepFinished
from cadenza.protocols import StepRecord
_DONE = StepRecord(status="completed", content="")
async def _start(self):
    await self.report(StepFinished(self.step_id, _DONE))
    self.stop()
StepActor.on_start = _start
""",
    ),
    (
        "  journal: 2 events, 2 step records, the durability wait",
        """
from cadenza.actors.run._journal import RunJournal
def _started(self, address, kind, attempt, agent, position):
    pass
async def _finished(self, address, record, *, agent=None, tokens=None):
    self.records[address] = record
RunJournal.leaf_started = _started
RunJournal.step_finished = _finished
""",
    ),
    (
        "    of which the 2 events (timestamp, Event, store, observers)",
        """
from cadenza.actors.run._journal import RunJournal
from cadenza.protocols import Event
_EVENT = Event(type="stub", timestamp="", run_id="", seq=0)
RunJournal.emit = lambda self, type, **fields: _EVENT
""",
    ),
    (
        "  handler call: resolve, scope, StepContext, await",
        """
from cadenza.actors.steps.kinds._handler import HandlerWork
async def _call():
    return "", None
HandlerWork.work = lambda self, actor, address, attempt: _call()
""",
    ),
)

# String hashing is seeded per process: dicts and sets then differ in layout, and
# the count by a few per cent. One fixed seed makes two runs of one tree agree.
_ENV = {**os.environ, "PYTHONHASHSEED": "0"}


def _program(prelude: str) -> str:
    return _PROGRAM.format(here=str(HERE), prelude=_FLOORS + prelude)


def instructions(n: int, shape: str, prelude: str = "") -> int | None:
    """Instructions retired running ``shape`` with ``n`` units (None: no counter here)."""
    program = _program(prelude)
    command = ["perf", "stat", "-x,", "-e", "instructions", sys.executable, "-c", program]
    done = subprocess.run(
        [*command, str(n), shape], capture_output=True, text=True, check=True, timeout=600, env=_ENV
    )
    for line in done.stderr.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("instructions"):
            return int(fields[0]) if fields[0].isdigit() else None
    raise RuntimeError(f"perf printed no instruction count:\n{done.stderr}")


def simulated_instructions(n: int, shape: str, prelude: str = "") -> int:
    """Instructions executed running ``shape`` with ``n`` units, counted by callgrind."""
    program = _program(prelude)
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    done = subprocess.run(
        [*command, sys.executable, "-c", program, str(n), shape],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
        env=_ENV,
    )
    for line in done.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1])
    raise RuntimeError(f"callgrind printed no instruction count:\n{done.stderr}")


def cpu_seconds(n: int, shape: str, prelude: str = "") -> float:
    """User plus system CPU of an interpreter running ``shape`` with ``n`` units, best of 3."""
    program = _program(prelude)
    best = float("inf")
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        command = [sys.executable, "-c", program, str(n), shape]
        subprocess.run(command, check=True, timeout=600, env=_ENV)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best = min(best, spent)
    return best


def per_unit(shape: str, prelude: str = "") -> tuple[float, str]:
    """What one more unit of ``shape`` costs, and in what (instructions where countable)."""
    # A first run writes the bytecode caches of modules edited since their last import:
    # compiled inside one of the two counted runs, they would be counted as steps.
    subprocess.run([sys.executable, "-c", _program(prelude), "10", shape], check=True, env=_ENV)
    if shutil.which("perf") is not None:
        big, small = instructions(1000, shape, prelude), instructions(10, shape, prelude)
        if big is not None and small is not None:
            return (big - small) / 990, "instructions"
    if shutil.which("valgrind") is not None:
        big = simulated_instructions(1000, shape, prelude)
        small = simulated_instructions(10, shape, prelude)
        return (big - small) / 990, "instructions (callgrind)"
    cpu = cpu_seconds(1000, shape, prelude) - cpu_seconds(10, shape, prelude)
    return cpu / 990 * 1e9, "ns CPU (perf: no instruction counter here)"


def _show(label: str, value: float, unit: str, of: float | None = None) -> None:
    share = f"  {value / of:6.1%}" if of else ""
    print(f"{label:62} {value / 1000:8.1f}k{share}  {unit}", flush=True)


def breakdown() -> None:
    """A chain step's cost split into its parts, beside the floors under it."""
    total, unit = per_unit("chain")
    _show("chain step, in all", total, unit, total)
    costs = []
    for label, stub in _PARTS:
        without, _ = per_unit("chain", stub)
        costs.append(total - without)
        _show(label, costs[-1], unit, total)
    actors, _ = per_unit("actors")
    _show("the actor kernel: spawn, start, one message, exit (floor)", actors, unit, total)
    rest = total - costs[0] - actors  # the first part is the step's own work: it holds the others
    _show("the rest: DAG controller, placement, scope, spawn_step", rest, unit, total)
    future, _ = per_unit("future")
    _show("for scale: one asyncio future round trip (floor)", future, unit, total)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("shapes", nargs="*", metavar="SHAPE", help=f"of {SHAPES}")
    parser.add_argument(
        "--breakdown", action="store_true", help="split a chain step into its parts instead"
    )
    args = parser.parse_args()
    if shutil.which("perf") is None and shutil.which("valgrind") is None:
        print("needs perf (Debian: linux-perf) or valgrind", file=sys.stderr)
        return 2
    unknown = sorted(set(args.shapes) - set(SHAPES))
    if unknown:
        parser.error(f"unknown shape(s) {unknown}; have {list(SHAPES)}")
    if args.breakdown:
        if args.shapes:
            parser.error("--breakdown takes no shapes: it splits a chain step")
        breakdown()
        return 0
    for shape in args.shapes or SHAPES:
        value, unit = per_unit(shape)
        print(f"{shape:8} {value / 1000:8.1f}k {unit} per unit", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
