"""Hostile CEL, each evaluated or refused while the event loop stays free.

Three sets: 300 expressions that build large values from 100 KB of content
(``corpus``), the fuzz suite's hand-written hostile expressions (``HOSTILE``),
and searches on 1 MB of content whose needle or regular expression comes from
the data (``data_corpus``: every string function cel-cpp has, the strings
extension's included).

Run as a script it evaluates every expression on an event loop, the way a step
does, with a `LoopProbe` ticking beside it, and prints one JSON object: per
expression the set, the outcome (``value``, ``refused``, ``error`` for another
documented error, else the exception's type), the CPU milliseconds the
evaluation took and the longest the loop went without ticking (CPU and wall
milliseconds; ``refused`` covers the cost bound and the compile-time caps),
plus the process's peak RSS growth over the whole run.
``test_cel_bounds.py`` runs it in a child process; ``python
tests/hardening/hostile_cel.py`` prints the figures quoted in docs/hardening.md.
"""

from __future__ import annotations

import itertools
import json
import resource
import sys
import time
from typing import Any

import anyio

CONTENT_SIZE = 100_000
DATA_SIZE = 1_000_000

HUNDRED = "[" + ", ".join(str(i) for i in range(100)) + "]"
HOSTILE = [
    # The CEL spec: nested comprehensions multiply; cel-cpp's budget stops them.
    f"{HUNDRED}.map(a, {HUNDRED}.map(b, {HUNDRED}.map(c, a + b + c)))",
    f"{HUNDRED}.all(a, {HUNDRED}.all(b, {HUNDRED}.exists(c, a + b + c < 0)))",
    f"{HUNDRED}.map(a, {HUNDRED}.map(b, {HUNDRED}.map(c, {HUNDRED}.map(d, d))))",
    f"{HUNDRED}.filter(a, {HUNDRED}.exists_one(b, {HUNDRED}.all(c, true)))",
    "inputs.list.map(a, inputs.list.map(b, inputs.list.map(c, a)))",
    "(" * 40 + "1" + ")" * 40,
    "[" * 40 + "]" * 40,
    " + ".join(["1"] * 40),
    " && ".join(["true"] * 40),
    "x" * 5000,
    "'" + "a" * 4090 + "'",
    "'a'.matches('(a+)+$')",
    "('a' * 1000000)",
    "content.matches('^(x+x+)+y$')",
    "size(" * 30 + "content" + ")" * 30,
    "9223372036854775807 + 1",
    "-9223372036854775808 - 1",
    "1 / 0",
    "1 % 0",
    "int(1e300)",
    "uint(-1)",
    "{'a': 1, 'a': 2}",
    "[1, 'a', 2.0, null]",
    "inputs.config.a.b[100]",
    "inputs.config.a.b[-1]",
    "steps.list-services.result.x",
    "timestamp('2020-13-45T00:00:00Z')",
    "duration('99999999999999h')",
    "'\\u0000' + '\\uFFFF'",
    "b'\\xff'.size()",
    "has(inputs.a.b.c)",
    "dyn(inputs).topic.size()",
    # cel-cpp's lists and math extensions: ranges as long as the data says, sorts, shifts.
    "lists.range(9223372036854775807)",
    "size(lists.range(inputs.huge)) > 0",
    "lists.range(inputs.n * inputs.huge)",
    "lists.range(-1)",
    "lists.range(100).map(a, lists.range(100).map(b, lists.range(100)))",
    "inputs.list.map(x, lists.range(x))",
    "inputs.list.sort().distinct().reverse()",
    "inputs.list.sortBy(x, -x)",
    "inputs.list.map(x, [x, [x]]).flatten(1000000)",
    "[1, 2].slice(2, 1)",
    "math.greatest(inputs.list) + math.least(inputs.list)",
    "math.bitShiftLeft(1, 64)",
    "math.abs(-9223372036854775808)",
    "math.greatest([])",
]
"""Exponential macros, regex bombs, overflow, giant literals (``test_fuzz_cel.py``)."""


def corpus() -> list[str]:
    """The expressions: the issue's own, and combinations of what builds large values."""
    growers = [
        "content + content",
        'content.replace("", content)',
        'content.replace("x", content)',
        'content.replace("", "yy")',
        'content.replace("x", "yyyyyyyy")',
        'content.split("")',
        'content.split("x")',
        'content.split("").join(content)',
        'content.split("x").join("--")',
        "strings.quote(content)",
        "content.lowerAscii() + content.upperAscii() + content.reverse()",
        '"%s%s%s".format([content, content, content])',
        "[content, content, content, content]",
        '{"a": content, "b": content + content}',
        "string(inputs.items)",
        "inputs.items + inputs.items + inputs.items",
    ]
    ranges = ["inputs.items", "[1, 2, 3]", "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]", 'content.split("")']
    expressions = [
        'content.replace("", content) != ""',
        "[1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, "
        "[1,2,3,4,5,6,7,8,9,10].map(c, content + content))).size() > 0",
        "inputs.items.map(i, i * 2).size() > 0",
        "inputs.items.filter(i, i % 2 == 0).size() > 0",
        'inputs.items.all(i, content.contains("needle"))',
        "inputs.items.exists(i, string(i) == content)",
    ]
    expressions += [f"size({grower}) > 0" for grower in growers]
    for outer, body in itertools.product(ranges, growers):
        expressions.append(f"{outer}.map(x, {body}).size() > 0")
        expressions.append(f"{outer}.exists(x, size({body}) == 0)")
    for first, second in itertools.product(ranges, ranges[:3]):
        for body in growers[:8]:
            expressions.append(f"{first}.map(x, {second}.map(y, {body})).size() > 0")
    for grower, other in itertools.product(growers[:8], growers[:8]):
        if len(expressions) >= 300:
            break
        expressions.append(f"size({grower}) + size({other}) > 0")
    return expressions[:300]


def data_corpus() -> list[str]:
    """Searches on 1 MB of content whose needle or pattern is data (see `data_activation`)."""
    needles = [
        "inputs.half",  # 500 KB of x then y: every position a long partial match
        "inputs.near",  # 2,000 bytes: the largest a search of 1 MB may take
        "steps.a.content",  # another step's 1 MB output
        'inputs.half + "y"',
        "content",
        "inputs.wide",  # 250 K characters of é then y: 500 KB of UTF-8
    ]
    searches = [
        "content.contains({})",
        "content.startsWith({})",
        "content.endsWith({})",
        "content.indexOf({}) >= 0",
        "content.lastIndexOf({}) >= 0",
        "content.indexOf({}, 10) >= 0",
        "content.lastIndexOf({}, 999999) >= 0",
        "size(content.split({})) > 0",
        "size(content.split({}, 3)) > 0",
        'size(content.replace({}, "z")) > 0',
        'size(content.replace({}, "z", 2)) > 0',
        "steps.a.content.contains({})",
    ]
    expressions = [search.format(needle) for search in searches for needle in needles]
    patterns = [
        "inputs.bomb",  # ((a|b){1000})c: 14 characters, 3,007 instructions
        "inputs.unicode",  # \pL{300}: a few characters, a program near RE2's cap
        "inputs.near",  # 2,000 bytes of literal text
        "inputs.small",  # ^x+$: small enough to run on 1 MB
        "steps.a.content",  # 1 MB as a pattern
        "content",  # content.matches(content): 25 s on 100 KB before the bound
        '"^(" + inputs.bomb + ")"',
        "inputs.half",
    ]
    for pattern in patterns:
        expressions.append(f"content.matches({pattern})")
        expressions.append(f"matches(steps.a.content, {pattern})")
    expressions += [
        "inputs.words.exists(w, content.contains(w))",
        "inputs.words.exists(w, content.indexOf(w) >= 0)",
        "inputs.words.map(w, size(content.split(w))).size() > 0",
        "inputs.words.all(w, content.replace(w, w) == content)",
        'content.split(inputs.near).join(inputs.near).contains(inputs.near + "z")',
        "inputs.ab.matches(inputs.bomb)",
        "inputs.ab.matches(inputs.ambiguous)",
    ]
    return expressions


def data_activation() -> dict[str, Any]:
    """The values the `data_corpus` reads: 1 MB of content, needles and patterns as data."""
    content = "x" * DATA_SIZE
    return {
        "content": content,
        "steps": {"a": {"content": content}},
        "inputs": {
            "half": "x" * (DATA_SIZE // 2) + "y",
            "near": "x" * 1_999 + "y",
            "wide": "é" * 250_000 + "y",
            "small": "^x+$",
            "bomb": "((a|b){1000})c",
            "unicode": "\\pL{300}",
            "ambiguous": "[ab]*a[ab]{20}c",
            "words": ["x" * 9_999 + "y"] * 100,
            "ab": "ab" * (DATA_SIZE // 2),
        },
    }


def fuzz_activation() -> dict[str, Any]:
    """The context ``test_fuzz_cel.py`` evaluates its hostile expressions over."""
    return {
        "inputs": {
            "topic": "loops",
            "n": 3,
            "huge": 10**12,
            "list": list(range(100)),
            "config": {"a": {"b": [1]}},
        },
        "steps": {"build": {"content": "APPROVED", "result": {"exitCode": 0}}},
        "content": "x" * 1000,
    }


class LoopProbe:
    """A task that ticks on the event loop and records the longest stretch between two ticks.

    The stretch is measured in the process's CPU time as well as wall time.
    Whatever holds the loop burns CPU in this process (the engine holds the GIL,
    so even a worker thread running it would show), while the time the machine's
    other jobs take the core from us does not count: on a busy 2-core machine
    the CPU figure is the robust bound on blocking, the wall figure a noisy one.
    """

    def __init__(self) -> None:
        self.longest_cpu = 0.0
        self.longest_wall = 0.0
        self._tick = anyio.Event()

    async def run(self) -> None:
        """Tick until cancelled."""
        cpu, wall = time.process_time(), time.perf_counter()
        while True:
            await anyio.sleep(0.001)
            now_cpu, now_wall = time.process_time(), time.perf_counter()
            self.longest_cpu = max(self.longest_cpu, now_cpu - cpu)
            self.longest_wall = max(self.longest_wall, now_wall - wall)
            cpu, wall = now_cpu, now_wall
            self._tick.set()
            self._tick = anyio.Event()

    async def ticked(self) -> None:
        """Returns after the probe's next tick."""
        await self._tick.wait()

    def reset(self) -> None:
        self.longest_cpu = self.longest_wall = 0.0


async def measure_all(sets: list[tuple[str, list[str], dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each expression of each set, evaluated on the loop beside a `LoopProbe`."""
    from cadenza.errors import ExpressionError, ExpressionTooComplex
    from cadenza.workflow import compile_expression

    results = []
    probe = LoopProbe()
    async with anyio.create_task_group() as group:
        group.start_soon(probe.run)
        for name, sources, activation in sets:
            for source in sources:
                await probe.ticked()
                probe.reset()
                started = time.process_time()
                try:
                    await compile_expression(source).evaluate_async(activation)
                    outcome = "value"
                except ExpressionError as error:
                    refused = isinstance(error, ExpressionTooComplex) or "refused before" in str(
                        error
                    )
                    outcome = "refused" if refused else "error"
                except Exception as error:  # reported, for the test to fail on
                    outcome = type(error).__name__
                spent = time.process_time() - started
                await probe.ticked()
                results.append(
                    {
                        "set": name,
                        "source": source,
                        "outcome": outcome,
                        "cpuMs": round(spent * 1000, 2),
                        "loopMs": round(probe.longest_cpu * 1000, 2),
                        "loopWallMs": round(probe.longest_wall * 1000, 2),
                    }
                )
        group.cancel_scope.cancel()
    return results


def main() -> None:
    sets = [
        (
            "bounds",
            corpus(),
            {"content": "x" * CONTENT_SIZE, "inputs": {"items": list(range(5_000))}},
        ),
        ("fuzz", HOSTILE, fuzz_activation()),
        ("data", data_corpus(), data_activation()),
    ]
    only = set(sys.argv[1:])
    sets = [entry for entry in sets if not only or entry[0] in only]
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results = anyio.run(measure_all, sets)
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline
    json.dump({"results": results, "rssGrowthKiB": growth}, sys.stdout)


if __name__ == "__main__":
    main()
