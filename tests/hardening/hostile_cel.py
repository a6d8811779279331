"""300 hostile CEL expressions on 100 KB of content: each evaluated or refused, cheaply.

Run as a script it evaluates every expression in this process and prints one
JSON object: per expression the outcome (``value``, ``refused`` or the type of
any other error), the CPU milliseconds it took, and the process's peak RSS
growth over the whole set. ``test_cel_bounds.py`` runs it in a child process;
``python tests/hardening/hostile_cel.py`` prints the figures quoted in
docs/hardening.md.
"""

from __future__ import annotations

import itertools
import json
import resource
import sys
import time

CONTENT_SIZE = 100_000


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


def main() -> None:
    from cadenza.errors import ExpressionEvaluationError, ExpressionTooComplex
    from cadenza.workflow import compile_expression

    activation = {
        "content": "x" * CONTENT_SIZE,
        "inputs": {"items": list(range(5_000))},
    }
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results = []
    for source in corpus():
        started = time.process_time()
        try:
            compile_expression(source).evaluate(activation)
            outcome = "value"
        except (ExpressionEvaluationError, ExpressionTooComplex):
            outcome = "refused"
        except Exception as error:  # reported, for the test to fail on
            outcome = type(error).__name__
        spent = (time.process_time() - started) * 1000
        results.append({"source": source, "outcome": outcome, "cpuMs": round(spent, 2)})
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline
    json.dump({"results": results, "rssGrowthKiB": growth}, sys.stdout)


if __name__ == "__main__":
    main()
