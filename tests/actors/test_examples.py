"""The loop, forEach and graph examples run to their documented outcomes."""

from __future__ import annotations

import asyncio

from cadenza import RunResult, Runtime
from cadenza.kernel import SystemClock
from tests._helpers import EXAMPLES, statuses


class InstantSleepClock(SystemClock):
    """Real timers, but ``sleep`` (a loop's delay) returns at once and is recorded."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(0)


async def run(name: str, clock: SystemClock | None = None) -> RunResult:
    async with Runtime(clock=clock) as runtime:
        return await runtime.run(EXAMPLES / name)


async def test_reflection_until_the_critic_approves() -> None:
    """Three drafts, each judged by the critic; the third is approved and is the output."""
    result = await run("reflection.yaml")
    assert result.status == "completed", result.error
    assert result.loops["reflection"].termination_reason == "judge"
    assert result.steps["reflection.1.untilAgent"].result == {
        "done": False,
        "reason": "Better. Now say why that matters for concurrency.",
    }
    assert result.steps["reflection.2.untilAgent"].result["done"] is True
    assert "reflection.3" not in result.steps
    assert result.output == result.steps["reflection.2"].content
    assert str(result.output).endswith("so it needs no locks.")


async def test_retry_until_valid_waits_between_attempts() -> None:
    """Two bad attempts (one failed, one too small), then a valid config is applied."""
    clock = InstantSleepClock()
    result = await run("retry-until-valid.yaml", clock)
    assert result.status == "completed", result.error
    assert statuses(result, "produce.0", "produce.1", "produce.2") == ["failed", *["completed"] * 2]
    assert clock.sleeps == [1.0, 1.0]
    assert '"replicas":3' in str(result.output)


async def test_test_fix_retest_runs_real_pytest_until_green() -> None:
    """pytest fails twice, a fix lands after each, the third run is green."""
    result = await run("test-fix-retest.yaml")
    assert result.status == "completed", result.error
    first = ["test_add", "test_add_negative", "test_mean"]
    assert result.steps["repair.0.test"].result["failed"] == first
    assert result.steps["repair.1.test"].result["failed"] == ["test_mean"]
    assert result.steps["repair.2.test"].result["exitCode"] == 0
    assert result.steps["repair.2.fix"].status == "skipped"
    assert str(result.output).startswith("green: 3 passed")


async def test_foreach_deploy_deploys_and_verifies_every_service() -> None:
    """Each service is deployed and verified at deploy-each[N]."""
    result = await run("foreach-deploy.yaml")
    assert result.status == "completed", result.error
    assert result.steps["deploy-each[3].verify"].content == "verified email in staging\n"
    assert result.output == "4 services deployed: auth, billing, search, email"


async def test_tool_router_routes_until_finished() -> None:
    """The analyst routes to search, then calc, then finishes."""
    result = await run("tool-router.yaml")
    assert result.status == "completed", result.error
    assert result.graphs["router"].path == ["analyze", "search", "analyze", "calc", "analyze"]
    assert result.steps["router.1.search"].content == (
        "search (asked by analyze): the answer is six times seven"
    )
    assert result.output == "FINISHED: 42 is the answer"


async def test_negotiation_ends_in_a_deal() -> None:
    """Seller and buyer alternate until the buyer accepts on the sixth move."""
    result = await run("negotiation.yaml")
    assert result.status == "completed", result.error
    assert result.graphs["negotiate"].path == ["seller", "buyer"] * 3
    assert result.output == "DEAL at 800."
