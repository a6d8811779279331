"""SIGKILL at 34 points of a 20-iteration agent loop and a forEach; every run comes back.

Each kill is real: a ``cadenza`` process kills itself with SIGKILL at a failpoint
(after N events, inside the store's transaction, at a step boundary), and a
new process resumes it from the store: a SQLite file, then a PostgreSQL
database (the module runs once per durable backend). Every resumed run must equal the
golden, uninterrupted one; the model server's log must show no repeated call
for a step that had finished before the kill, and at most one repeated call per
step that was in flight.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cadenza import RunResult
from cadenza.testing import CrashHarness, KillPoint, ScriptedLLMServer, compare_results
from tests.conftest import DURABLE_KINDS, new_database

from .workload import calls_by_step, crash_and_count, rules, write_workload

# Where single kills land: early, mid and late in the run, at every kind of failpoint.
SINGLE = [
    KillPoint.after_events(7),
    KillPoint.after_events(120),
    KillPoint.after_events(333),
    KillPoint.at("store.before_commit", 4),
    KillPoint.at("store.after_commit", 30),
    KillPoint.at("step.before_work", 12),
    KillPoint.at("step.before_record", 41),
    KillPoint.at("step.after_record", 55),
    KillPoint.at("step.before_record", 70),
    KillPoint.at("store.after_commit", 80),
]
# Chains: the run is killed, then each resume is killed again, then one finishes.
CHAINS = [
    [KillPoint.after_events(n) for n in (40, 60, 60, 60, 60, 60)],
    [KillPoint.at("step.after_record", n) for n in (5, 9, 9, 9, 9, 9)],
    [KillPoint.at("store.before_commit", n) for n in (10, 12, 12, 12, 12, 12)],
    [KillPoint.at("step.before_work", n) for n in (20, 3, 15, 2, 18, 4)],
]


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer(rules()) as server:
        yield server


@pytest.fixture(scope="module", params=DURABLE_KINDS)
def store(request: pytest.FixtureRequest) -> str | None:
    """The store the processes share: None for SQLite (the harness's file), or a URL."""
    if request.param == "postgres":
        return new_database(request.getfixturevalue("postgres_cluster"))
    return None


@pytest.fixture(scope="module")
def harness(
    tmp_path_factory: pytest.TempPathFactory, server: ScriptedLLMServer, store: str | None
) -> Iterator[CrashHarness]:
    directory = tmp_path_factory.mktemp("crash")
    flow = write_workload(directory)
    with CrashHarness(
        flow, directory=directory / "runs", environ=server.environ(), store=store
    ) as harness:
        yield harness


@pytest.fixture(scope="module")
def golden(harness: CrashHarness, server: ScriptedLLMServer) -> RunResult:
    before = len(server.requests)
    result = harness.golden()
    assert result.status == "completed"
    calls = calls_by_step(server.requests[before:])
    assert set(calls.values()) == {1}  # each step asks the model once
    assert sum(calls.values()) == result.usage.llm_calls == 45
    return result


def test_every_single_kill_resumes_to_the_golden_result(
    harness: CrashHarness, server: ScriptedLLMServer, golden: RunResult
) -> None:
    """One SIGKILL at each of 10 points: the resumed run equals the golden run."""
    kills = 0
    for index, point in enumerate(SINGLE):
        result, tally = crash_and_count(harness, server, [point], f"single-{index}")
        assert tally.kills == 1, f"{point} was never reached"
        kills += tally.kills
        assert compare_results(golden, result) == [], point
        assert tally.repeated_completed == 0, point
        assert all(count <= 1 for count in tally.repeated_in_flight.values()), point
        # A repeated call counts in usage when the killed one's answer was recorded.
        repeated = sum(tally.repeated_in_flight.values())
        assert golden.usage.llm_calls <= result.usage.llm_calls, point
        assert result.usage.llm_calls <= golden.usage.llm_calls + repeated, point
    assert kills == len(SINGLE)


def test_a_run_killed_again_during_each_resume_still_comes_back(
    harness: CrashHarness, server: ScriptedLLMServer, golden: RunResult
) -> None:
    """Four chains of six SIGKILLs each (resumes killed too) end equal to the golden run."""
    kills = 0
    for index, chain in enumerate(CHAINS):
        result, tally = crash_and_count(harness, server, chain, f"chain-{index}")
        assert tally.kills == len(chain), f"chain {index} ran out before its last kill"
        kills += tally.kills
        assert compare_results(golden, result) == [], chain
        assert tally.repeated_completed == 0, chain
        assert all(count <= 1 for count in tally.repeated_in_flight.values()), chain
    assert kills + len(SINGLE) >= 30
