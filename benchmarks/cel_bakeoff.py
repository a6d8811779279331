"""CEL engine bake-off: conformance, error quality, cost bounds, wheels, speed, side effects.

Usage: python benchmarks/cel_bakeoff.py [--quick] [--wheels] [--json PATH]

Compares the three CEL engines on PyPI that Cadenza could use:

- ``cel-expr-python`` (Google's cel-cpp behind pybind11, import ``cel_expr_python``),
- ``common-expression-language`` (the Rust ``cel`` crate behind PyO3, import ``cel``),
- ``cel-python`` (pure Python on lark, import ``celpy``).

Each engine is used the plain way its documentation shows, with no Cadenza code
in between, so the figures are the engines' own. Engines that are not
installed are reported as such. Checks that may crash or hang an engine
(deeply nested input, a hostile expression, the recursion limit) run in a
child process of this same script. ``--wheels`` asks pip, without
downloading, which wheel it would pick for Linux and macOS on x86-64 and arm64.

The decision and its figures are written up in docs/cel-engine.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

CPP = "cel-expr-python"
RUST = "common-expression-language"
PURE = "cel-python"
ENGINES = (CPP, RUST, PURE)
IMPORTS = {CPP: "cel_expr_python.cel", RUST: "cel", PURE: "celpy"}

# The four platforms Cadenza promises to install on without a compiler.
PLATFORMS = {
    "linux x86-64": ["manylinux_2_28_x86_64", "manylinux2014_x86_64"],
    "linux arm64": ["manylinux_2_28_aarch64", "manylinux2014_aarch64"],
    "macOS x86-64": ["macosx_14_0_x86_64"],
    "macOS arm64": ["macosx_14_0_arm64"],
}

# One nested-macro expression of a million iterations over a 100-element list.
HOSTILE = "xs.map(a, xs.map(b, xs.map(c, a + b + c))).size()"


class EvalFailed(Exception):
    """The engine reported an evaluation error (raised or returned as a value)."""


ERR = "<evaluation error>"
COMPILE_ERR = "<compile error>"


def activation() -> dict[str, object]:
    """The context a workflow condition sees, as the runtime builds it."""
    return {
        "inputs": {
            "topic": "loops",
            "count": 3,
            "ratio": 0.5,
            "tags": ["a", "b"],
            "flags": {"fast": True},
        },
        "steps": {
            "build": {"content": "built ok", "result": None, "status": "completed"},
            "test": {
                "content": "3 passed",
                "result": {"exitCode": 0, "stdout": "ok\n", "stderr": ""},
                "status": "completed",
            },
            "list-services": {
                "content": '["api", "web"]',
                "result": {"services": ["api", "web"]},
                "status": "completed",
            },
            "review": {
                "content": "LGTM. APPROVED",
                "result": {"score": 1, "done": False},
                "status": "completed",
            },
        },
        "iteration": 3,
        "item": {"name": "api", "port": 8080},
        "index": 0,
        "content": "Status: APPROVED",
        "result": {"passed": True, "score": 0.85},
        "status": "completed",
        "state": "analyze",
        "step": 3,
        "visits": {"analyze": 2},
    }


def big_activation() -> dict[str, object]:
    """The same context grown to about 50 KB by forty earlier steps."""
    act = activation()
    steps = act["steps"]
    assert isinstance(steps, dict)
    for i in range(40):
        steps[f"earlier-{i}"] = {
            "content": "x" * 1000,
            "result": {"items": list(range(20)), "note": "y" * 50},
            "status": "completed",
        }
    return act


# (group, expression, expected value, ERR or COMPILE_ERR)
CASES: list[tuple[str, str, object]] = [
    ("arithmetic", "1 + 2 * 3", 7),
    ("arithmetic", "7 / 2", 3),
    ("arithmetic", "7 % 3", 1),
    ("arithmetic", "7.0 / 2.0", 3.5),
    ("arithmetic", "-inputs.count", -3),
    ("mixed numeric", "iteration > 2.5", True),
    ("mixed numeric", "steps.review.result.score >= 0.8", True),
    ("mixed numeric", "result.score > 0", True),
    ("mixed numeric", "inputs.count == 3.0", True),
    ("mixed numeric", "inputs.count in [1.0, 3.0]", True),
    ("strings", "content.contains('APPROVED')", True),
    ("strings", "content.startsWith('Status')", True),
    ("strings", "content.endsWith('APPROVED')", True),
    ("strings", "content.matches('^Status: [A-Z]+$')", True),
    ("strings", "size(content)", 16),
    ("strings", "size('h\u00e9llo')", 5),
    ("strings", "inputs.topic + '!'", "loops!"),
    ("in", "'a' in inputs.tags", True),
    ("in", "'fast' in inputs.flags", True),
    ("in", "'slow' in inputs.flags", False),
    ("has()", "has(steps.test.result.exitCode)", True),
    ("has()", "has(steps.nope)", False),
    ("has()", "has(inputs.flags.fast)", True),
    ("literals", "{'a': 1, 'b': [1, 2]}", {"a": 1, "b": [1, 2]}),
    ("literals", "[1, 'two', 3.0, null, true]", [1, "two", 3.0, None, True]),
    ("literals", "size({'a': 1, 'b': 2})", 2),
    ("macros", "[1, 2, 3].all(x, x > 0)", True),
    ("macros", "[1, 2, 3].exists(x, x > 2)", True),
    ("macros", "[1, 2, 3].exists_one(x, x > 1)", False),
    ("macros", "[1, 2, 3].map(x, x * 2)", [2, 4, 6]),
    ("macros", "[1, 2, 3].filter(x, x % 2 == 1)", [1, 3]),
    ("macros", "steps.all(k, steps[k].status == 'completed')", True),
    (
        "macros",
        "steps['list-services'].result.services.map(s, s + '-svc')",
        ["api-svc", "web-svc"],
    ),
    ("ternary", "iteration > 2 ? 'many' : 'few'", "many"),
    ("null", "steps.build.result == null", True),
    ("null", "steps.test.result != null", True),
    ("null", "steps.build.result.x", ERR),
    ("steps", "steps['list-services'].result.services", ["api", "web"]),
    ("steps", "steps.test.status == 'completed' && steps.test.content.contains('passed')", True),
    ("steps", "steps.test.result.exitCode == 0", True),
    ("fields", "item.name == 'api' && item.port == 8080", True),
    ("fields", "visits.analyze < 3 && state == 'analyze'", True),
    ("errors", "steps.missing.content", ERR),
    ("errors", "inputs.nokey", ERR),
    ("errors", "1 / 0", ERR),
    ("errors", "content > 1", ERR),
    ("logic", "true || 1 / 0 == 1", True),
    ("logic", "!(iteration < 3)", True),
    ("conversions", "int('42') + 1", 43),
    ("conversions", "double(inputs.count) / 2.0", 1.5),
    ("conversions", "string(iteration)", "3"),
    (
        "time",
        "timestamp('2024-01-01T00:00:00Z') + duration('1h') > timestamp('2024-01-01T00:30:00Z')",
        True,
    ),
    ("time", "duration('90m') == duration('1h30m')", True),
    ("time", "timestamp('2024-03-01T12:00:00Z').getFullYear()", 2024),
]

SYNTAX_ERRORS = [
    "steps.test.result.exitCode ==",
    "content.contains('x'",
    "steps.test..result",
    "'unterminated",
    "iteration > > 2",
]


class Runner:
    """One engine behind the smallest common surface: compile, evaluate."""

    name = ""

    def compile(self, source: str) -> Any:
        """Compile ``source`` (raises on a syntax or type error)."""
        raise NotImplementedError

    def evaluate(self, program: Any, act: dict[str, object]) -> object:
        """Evaluate with a fresh activation each call, as a workflow run does."""
        raise NotImplementedError

    def prebuilt(self, program: Any, act: dict[str, object]) -> Callable[[], object] | None:
        """A call that reuses an engine-side context, when the engine has one."""
        return None


class CppRunner(Runner):
    """cel-expr-python: declare the variables as dyn, type-check at compile."""

    name = CPP

    def __init__(self, mod: ModuleType) -> None:
        self._cel = mod
        strings = importlib.import_module("cel_expr_python.ext.ext_strings")
        self._env = mod.NewEnv(
            variables=dict.fromkeys([*activation(), "xs", "x"], mod.Type.DYN),
            extensions=[strings.ExtStrings()],
        )
        self._error = mod.Type.ERROR

    def compile(self, source: str) -> Any:
        return self._env.compile(source)

    def evaluate(self, program: Any, act: dict[str, object]) -> object:
        try:
            value = program.eval(data=act)
        except RuntimeError as exc:
            raise EvalFailed(str(exc)) from exc
        if value.type() == self._error:
            raise EvalFailed(str(value.value()))
        return _plain(value.plain_value())


class RustRunner(Runner):
    """common-expression-language: compile once, pass a dict or a Context."""

    name = RUST

    def __init__(self, mod: ModuleType) -> None:
        self._cel = mod

    def compile(self, source: str) -> Any:
        return self._cel.compile(source)

    def evaluate(self, program: Any, act: dict[str, object]) -> object:
        try:
            return _plain(program.execute(act))
        except (ValueError, TypeError, KeyError, RuntimeError, ArithmeticError) as exc:
            raise EvalFailed(f"{type(exc).__name__}: {exc}") from exc

    def prebuilt(self, program: Any, act: dict[str, object]) -> Callable[[], object] | None:
        context = self._cel.Context(act)
        execute = program.execute
        return lambda: execute(context)


class PureRunner(Runner):
    """cel-python: convert the activation with json_to_cel on every call."""

    name = PURE

    def __init__(self, mod: ModuleType) -> None:
        self._celpy = mod
        self._env = mod.Environment()

    def compile(self, source: str) -> Any:
        return self._env.program(self._env.compile(source))

    def evaluate(self, program: Any, act: dict[str, object]) -> object:
        cel_act = {k: self._celpy.json_to_cel(v) for k, v in act.items()}
        try:
            value = program.evaluate(cel_act)
        except Exception as exc:  # celpy raises CELEvalError and bare Python errors alike
            raise EvalFailed(str(exc)) from exc
        if isinstance(value, Exception):
            raise EvalFailed(str(value))
        return _plain(value)


def _plain(value: object) -> object:
    """Engine values to plain Python: celpy's int/str subclasses, bytearray, tuples."""
    cls_name = type(value).__name__
    if cls_name == "BoolType" or isinstance(value, bool):
        return bool(value)
    if cls_name == "NullType":
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytearray | bytes):
        return bytes(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def load(name: str) -> Runner | None:
    """The engine's runner, or None when it is not installed."""
    try:
        mod = importlib.import_module(IMPORTS[name])
    except ImportError:
        return None
    runners: dict[str, Callable[[ModuleType], Runner]] = {
        CPP: CppRunner,
        RUST: RustRunner,
        PURE: PureRunner,
    }
    return runners[name](mod)


def same(got: object, want: object) -> bool:
    """Equal and of the same JSON type (True is not 1, 3.0 is not 3)."""
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, int | float | str) or want is None:
        return type(got) is type(want) and got == want
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(same(g, w) for g, w in zip(got, want, strict=True))
        )
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and got.keys() == want.keys()
            and all(same(got[k], want[k]) for k in want)
        )
    return got == want


@dataclass
class CaseResult:
    """One conformance case on one engine."""

    group: str
    expr: str
    ok: bool
    got: str


def conformance(runner: Runner) -> list[CaseResult]:
    """Run every case in CASES; an unexpected error counts as a failure."""
    results = []
    act = activation()
    for group, expr, want in CASES:
        try:
            program = runner.compile(expr)
        except Exception as exc:  # the engines raise unrelated types for syntax errors
            got = f"compile error: {_first_line(str(exc))}"
            results.append(CaseResult(group, expr, want == COMPILE_ERR, got))
            continue
        try:
            value = runner.evaluate(program, act)
        except EvalFailed as exc:
            results.append(CaseResult(group, expr, want == ERR, f"error: {_first_line(str(exc))}"))
            continue
        results.append(CaseResult(group, expr, same(value, want), repr(value)))
    return results


def _first_line(text: str, limit: int = 110) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "(empty message)"
    return line if len(line) <= limit else line[: limit - 3] + "..."


@dataclass
class SyntaxReport:
    """How one engine reports one syntax error."""

    expr: str
    message: str
    says_where: bool
    says_what: bool


def syntax_errors(runner: Runner) -> list[SyntaxReport]:
    """Compile broken expressions; judge whether the message locates and names the problem."""
    reports = []
    for expr in SYNTAX_ERRORS:
        try:
            runner.compile(expr)
            message = "(accepted)"
        except Exception as exc:  # the engines raise unrelated types for syntax errors
            message = str(exc)
        # Judge the message without the echoed expression, which proves nothing.
        told = message.replace(expr, "")
        where = bool(re.search(r":\d+:\d+|column|\^", told))
        what = bool(re.search(r"expect|mismatch|unexpected|token|missing|no viable", told))
        reports.append(SyntaxReport(expr, message, where, what))
    return reports


def typo_caught_at_compile(runner: Runner) -> str:
    """Whether a misspelled variable is refused at compile time (at workflow load)."""
    try:
        runner.compile("inptus.topic == 'loops'")
    except Exception as exc:  # the engines raise unrelated types for compile errors
        return f"yes: {_first_line(str(exc), 90)}"
    return "no (only when evaluated)"


def missing_key_message(runner: Runner) -> str:
    """The engine's own message for a missing map key (does it name the key?)."""
    try:
        runner.evaluate(runner.compile("steps.missing.content"), activation())
    except EvalFailed as exc:
        return _first_line(str(exc))
    return "(no error)"


def speed(runner: Runner, quick: bool) -> dict[str, float]:
    """Evaluations per second of two typical conditions on a typical and a 50 KB state."""
    figures: dict[str, float] = {}
    slow = runner.name == PURE
    n = (200 if quick else 2_000) if slow else (2_000 if quick else 20_000)
    minimal: dict[str, dict[str, object]] = {
        "steps.test.result.exitCode == 0": {"steps": {"test": {"result": {"exitCode": 0}}}},
        "content.contains('APPROVED')": {"content": "Status: APPROVED"},
    }
    for expr, least in minimal.items():
        # The floor an adapter reaches by passing only what the expression reads.
        program = runner.compile(expr)
        figures[f"only the values read: {expr}"] = _rate(
            partial(runner.evaluate, program, least), n
        )
    for label, act in (("typical", activation()), ("50KB", big_activation())):
        for expr in ("steps.test.result.exitCode == 0", "content.contains('APPROVED')"):
            program = runner.compile(expr)
            assert runner.evaluate(program, act) is True
            figures[f"{label}: {expr}"] = _rate(partial(runner.evaluate, program, act), n)
            call = runner.prebuilt(program, act)
            if call is not None:
                figures[f"{label}: {expr} (prebuilt context)"] = _rate(call, n * 5)
    return figures


def _rate(call: Callable[[], object], n: int) -> float:
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            call()
        best = min(best, time.perf_counter() - start)
    return n / best


def child(kind: str, name: str) -> dict[str, object]:
    """Run one risky check in this (child) process and describe the outcome."""
    limit_before = sys.getrecursionlimit()
    importlib.import_module(IMPORTS[name])
    limit_imported = sys.getrecursionlimit()
    runner = load(name)
    assert runner is not None
    if kind == "recursion":
        runner.evaluate(runner.compile("[1, 2].map(x, x + 1).size() == 2"), {})
        return {
            "before": limit_before,
            "after_import": limit_imported,
            "after_compile_and_eval": sys.getrecursionlimit(),
        }
    if kind == "hostile":
        program = runner.compile(HOSTILE)
        start = time.perf_counter()
        try:
            outcome = f"completed: {runner.evaluate(program, {'xs': list(range(100))})}"
        except EvalFailed as exc:
            outcome = f"stopped: {_first_line(str(exc), 80)}"
        return {"outcome": outcome, "seconds": time.perf_counter() - start}
    if kind == "deep":
        nested: list[object] = []
        for _ in range(10_000):
            nested = [nested]
        try:
            outcome = f"ok: {runner.evaluate(runner.compile('size(x)'), {'x': nested})}"
        except EvalFailed as exc:
            outcome = f"error: {_first_line(str(exc), 80)}"
        except RecursionError:
            outcome = "error: RecursionError"
        return {"outcome": outcome}
    raise SystemExit(f"unknown child check {kind!r}")


def in_child(kind: str, name: str, timeout: float) -> dict[str, object]:
    """Run ``child(kind, name)`` in a fresh interpreter; report crashes and timeouts."""
    cmd = [sys.executable, __file__, "--child", kind, name]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"outcome": f"still running after {timeout:.0f} s (killed)", "seconds": timeout}
    if proc.returncode < 0:
        return {
            "outcome": f"process crashed (signal {-proc.returncode})",
            "seconds": time.perf_counter() - start,
        }
    if proc.returncode != 0:
        return {"outcome": f"failed: {_first_line(proc.stderr)}"}
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def wheels(name: str) -> dict[str, str]:
    """Which wheel pip would install per platform (CPython 3.11), without downloading it."""
    found: dict[str, str] = {}
    plats = {"any": ["any"]} if name == PURE else PLATFORMS
    for label, tags in plats.items():
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.json"
            cmd = [
                sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-deps",
                "--only-binary=:all:", "--python-version", "3.11", "--target", tmp,
                "--report", str(report), name,
            ]  # fmt: skip
            if label != "any":
                for tag in tags:
                    cmd += ["--platform", tag]
            subprocess.run(cmd, capture_output=True, check=False)
            if report.exists():
                items = json.loads(report.read_text())["install"]
                found[label] = items[0]["download_info"]["url"].rsplit("/", 1)[-1]
            else:
                found[label] = "none"
    return found


@dataclass
class EngineReport:
    """Everything measured for one engine."""

    name: str
    installed: bool
    conformance: list[CaseResult] = field(default_factory=list)
    syntax: list[SyntaxReport] = field(default_factory=list)
    missing_key: str = ""
    typo: str = ""
    speed: dict[str, float] = field(default_factory=dict)
    checks: dict[str, dict[str, object]] = field(default_factory=dict)
    wheels: dict[str, str] = field(default_factory=dict)


def bake(name: str, *, quick: bool, with_wheels: bool) -> EngineReport:
    """Measure one engine."""
    runner = load(name)
    report = EngineReport(name, runner is not None)
    if with_wheels:
        report.wheels = wheels(name)
    if runner is None:
        return report
    report.conformance = conformance(runner)
    report.syntax = syntax_errors(runner)
    report.missing_key = missing_key_message(runner)
    report.typo = typo_caught_at_compile(runner)
    report.speed = speed(runner, quick)
    hostile_timeout = 10.0 if quick else 30.0
    report.checks = {
        "recursion limit": in_child("recursion", name, 60),
        "hostile expression": in_child("hostile", name, hostile_timeout),
        "input nested 10,000 deep": in_child("deep", name, 60),
    }
    return report


def render(reports: list[EngineReport]) -> str:
    """The reports as plain text, one section per question."""
    out: list[str] = [f"Python {platform.python_version()} on {platform.machine()}", ""]
    for rep in reports:
        out.append(f"== {rep.name}" + ("" if rep.installed else " (not installed)"))
        if rep.wheels:
            out += [f"  wheel {plat}: {wheel}" for plat, wheel in rep.wheels.items()]
        if not rep.installed:
            out.append("")
            continue
        passed = sum(c.ok for c in rep.conformance)
        out.append(f"  conformance: {passed}/{len(rep.conformance)} cases pass")
        out += [f"    FAIL [{c.group}] {c.expr}  ->  {c.got}" for c in rep.conformance if not c.ok]
        for s in rep.syntax:
            flags = f"where={'yes' if s.says_where else 'no'} what={'yes' if s.says_what else 'no'}"
            out.append(f"  syntax error {s.expr!r}: {flags}: {_first_line(s.message, 90)!r}")
        out.append(f"  missing key message: {rep.missing_key}")
        out.append(f"  misspelled variable refused at compile: {rep.typo}")
        out += [f"  speed {label}: {rate:,.0f} evals/s" for label, rate in rep.speed.items()]
        out += [f"  {check}: {json.dumps(result)}" for check, result in rep.checks.items()]
        out.append("")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer iterations, shorter timeouts")
    parser.add_argument("--wheels", action="store_true", help="ask pip which wheels exist")
    parser.add_argument("--json", type=Path, help="also write the raw reports here")
    parser.add_argument("--child", nargs=2, metavar=("CHECK", "ENGINE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    reports = [bake(name, quick=args.quick, with_wheels=args.wheels) for name in ENGINES]
    print(render(reports))
    if args.json:
        args.json.write_text(
            json.dumps([_as_json(r) for r in reports], indent=2, default=str) + "\n"
        )
    return 0


def _as_json(rep: EngineReport) -> dict[str, object]:
    return {
        "name": rep.name,
        "installed": rep.installed,
        "conformance": [c.__dict__ for c in rep.conformance],
        "syntax": [s.__dict__ for s in rep.syntax],
        "missing_key": rep.missing_key,
        "typo": rep.typo,
        "speed": rep.speed,
        "checks": rep.checks,
        "wheels": rep.wheels,
    }


if __name__ == "__main__":
    sys.exit(main())
