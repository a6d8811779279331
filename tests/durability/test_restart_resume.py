"""A supervisor's restart cut off by a crash (kill -9) is made once, after the resume.

The failed step's record is durable before its list hears of it; the resumed run
replays that failure and its list restarts the step then, or, when the restart
had begun, runs it again as work that was in flight. Either way the command runs
twice in all (its first, failing run and one restart) and the log holds one
``step_restart``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cadenza.testing import CrashHarness, KillPoint
from tests._helpers import read_run
from tests._workflows import flaky
from tests.conftest import WriteFlow

FLAKY = f"""
name: restarted
options: {{supervisor: {{strategy: one_for_one}}}}
steps:
  - {flaky()}
  - id: after
    dependsOn: [flaky]
    command: echo after
"""


@pytest.mark.parametrize(
    "kill",
    [
        KillPoint.at("step.after_record", 1),  # the failure is durable, the restart not begun
        KillPoint.at("step.before_work", 2),  # the restart is recorded as started
        KillPoint.at("step.after_record", 2),  # the restart's success is durable
    ],
    ids=str,
)
def test_a_restart_cut_off_by_a_crash_is_made_once(
    tmp_path: Path, write_flow: WriteFlow, kill: KillPoint
) -> None:
    flow = write_flow(FLAKY)
    with CrashHarness(flow, directory=tmp_path / "runs") as harness:
        outcome = harness.crash(kill)
    assert outcome.kills == 1
    result = outcome.result
    assert result.status == "completed", result.error
    assert result.steps["flaky"].content == "ran 2 times\n"
    assert result.steps["after"].status == "completed"
    assert (tmp_path / "flaky.count").read_text() == "2\n"
    log = read_run(tmp_path / "runs" / "runs.db", outcome.run_id).events
    assert [e.step_id for e in log if e.type == "step_restart"] == ["flaky"]
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
