"""Whether two runs of one workflow came out the same, as a user would judge it.

Two runs are "the same" when a user could not tell them apart by their results:
status, output, error, and for every address its status, content, result and
error; the loops, the graphs and the messages. Not compared: the run ids,
durations, attempt counts (a step in flight when the process died runs again as
a later attempt) and usage (that repeated call is counted). A resumed run is
compared with an uninterrupted one this way (`cadenza.testing.CrashHarness`),
and an offline replay with its record (``cadenza replay``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from cadenza.protocols import ErrorInfo, RunResult, StepRecord

__all__ = ["compare_results"]


def _error(error: ErrorInfo | None) -> tuple[str, str] | None:
    return None if error is None else (error.type, error.message)


def _step(record: StepRecord) -> tuple[Any, ...]:
    return (record.status, record.content, _plain(record.result), _error(record.error))


def _plain(value: Any) -> Any:
    return msgspec.to_builtins(value)


def compare_results(golden: RunResult, other: RunResult) -> list[str]:
    """Every way ``other`` differs from ``golden`` that a user would notice; empty if none."""
    differences = [
        f"{name}: {getattr(golden, name)!r} != {getattr(other, name)!r}"
        for name in ("status", "output")
        if getattr(golden, name) != getattr(other, name)
    ]
    if _error(golden.error) != _error(other.error):
        differences.append(f"error: {golden.error!r} != {other.error!r}")
    for address in sorted(set(golden.steps) | set(other.steps)):
        mine, theirs = golden.steps.get(address), other.steps.get(address)
        if mine is None or theirs is None:
            which = "golden" if mine is None else "other"
            differences.append(f"steps[{address!r}]: missing from the {which} run")
        elif _step(mine) != _step(theirs):
            differences.append(f"steps[{address!r}]: {_step(mine)!r} != {_step(theirs)!r}")
    for name in ("loops", "graphs", "messages"):
        mine_value, theirs_value = _plain(getattr(golden, name)), _plain(getattr(other, name))
        if mine_value != theirs_value:
            differences.append(f"{name}: {mine_value!r} != {theirs_value!r}")
    return differences
