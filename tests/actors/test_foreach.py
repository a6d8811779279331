"""forEach: items from a list or CEL, loop[N] addresses, concurrency caps, failures."""

from __future__ import annotations

from tests._helpers import run_with_events, statuses
from tests._workflows import PROBE
from tests.conftest import RunYaml, WriteFlow

TOLERANT = """
name: tolerant
steps:
  - id: each
    handler: "HANDLERS:check"
    onError: continue
    loop: {forEach: [0, 1, 2], maxConcurrency: 1}
"""
"""``check`` runs on items 0, 1, 2, one at a time; a failed item does not stop the rest."""


async def test_a_literal_list_runs_the_step_once_per_item(run_yaml: RunYaml) -> None:
    """Iteration i runs at loop[i] with item, index and the brief's item_index."""
    result = await run_yaml(
        """
        name: greet
        steps:
          - id: greet
            handler: "HANDLERS:greet"
            loop:
              forEach: ["ann", {"name": "bob"}, 3]
        """,
        handlers="""
        def greet(ctx):
            return f"{ctx.index}/{ctx.brief.item_index}: {ctx.item}"
        """,
    )
    assert result.status == "completed", result.error
    assert result.steps["greet[1]"].content == "1/1: {'name': 'bob'}"
    assert (
        result.steps["greet"].content == "0/0: ann\n\n---\n\n1/1: {'name': 'bob'}\n\n---\n\n2/2: 3"
    )
    iterations = result.steps["greet"].result["iterations"]
    assert [i["item"] for i in iterations] == ["ann", {"name": "bob"}, 3]
    assert iterations[2] == {
        "index": 2,
        "item": 3,
        "status": "completed",
        "content": "2/2: 3",
        "result": None,
    }
    assert result.loops["greet"].iterations == 3
    assert result.loops["greet"].termination_reason == "forEach"


async def test_a_cel_list_feeds_a_multi_step_body(run_yaml: RunYaml) -> None:
    """forEach CEL is evaluated when the step starts; the body runs at loop[i].<id>."""
    result = await run_yaml(
        """
        name: deploy
        steps:
          - id: list-services
            handler: "HANDLERS:services"
          - id: deploy-each
            dependsOn: [list-services]
            loop:
              forEach: "steps.list-services.result.services"
              steps:
                - id: deploy
                  handler: "HANDLERS:deploy"
                - id: verify
                  dependsOn: [deploy]
                  command: 'echo "verified $SERVICE"'
                  env: {SERVICE: "{{ item }}"}
        """,
        handlers="""
        def services(ctx):
            return {"services": ["auth", "billing"]}
        def deploy(ctx):
            return f"deployed {ctx.item} ({ctx.brief.item_index})"
        """,
    )
    assert result.status == "completed", result.error
    assert result.steps["deploy-each[1].deploy"].content == "deployed billing (1)"
    assert result.steps["deploy-each[0].verify"].content == "verified auth\n"
    assert result.steps["deploy-each[0]"].status == "completed"
    assert result.steps["deploy-each[1]"].result["exitCode"] == 0


async def test_a_foreach_that_is_not_a_list_fails_naming_expression_and_type(
    run_yaml: RunYaml,
) -> None:
    """A CEL forEach yielding a map fails the step with the expression and the type it got."""
    result = await run_yaml(
        """
        name: wrong
        steps:
          - id: data
            handler: "HANDLERS:data"
          - id: each
            dependsOn: [data]
            handler: "HANDLERS:data"
            loop: {forEach: "steps.data.result"}
        """,
        handlers="""
        def data(ctx):
            return {"not": "a list"}
        """,
    )
    assert result.status == "failed"
    error = result.steps["each"].error
    assert error is not None
    assert "steps.data.result" in error.message
    assert "map" in error.message
    assert "each[0]" not in result.steps


async def test_max_concurrency_is_never_exceeded_and_no_item_is_dropped(
    run_yaml: RunYaml,
) -> None:
    """A probe handler counts live iterations: the peak is exactly maxConcurrency."""
    result = await run_yaml(
        """
        name: probe
        options: {maxConcurrency: 10}
        steps:
          - id: fan
            handler: "HANDLERS:probe"
            loop:
              forEach: [a, b, c, d, e, f, g, h, i, j, k]
              maxConcurrency: 3
          - id: report
            dependsOn: [fan]
            handler: "HANDLERS:peak_seen"
        """,
        handlers=PROBE,
    )
    assert result.status == "completed", result.error
    assert result.steps["report"].result == {"peak": 3}
    assert [result.steps[f"fan[{i}]"].content for i in range(11)] == [
        f"{i}:{item}" for i, item in enumerate("abcdefghijk")
    ]


async def test_the_run_wide_limit_caps_live_iterations(write_flow: WriteFlow) -> None:
    """Without maxConcurrency, no more iterations are alive than the run's maxConcurrency."""
    path = write_flow(
        """
        name: wide
        options: {maxConcurrency: 4}
        steps:
          - id: fan
            handler: "HANDLERS:probe"
            loop:
              forEach: "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]"
        """,
        handlers=PROBE,
    )
    result, events = await run_with_events(path)
    assert result.status == "completed", result.error
    alive = peak = 0
    for event in events:
        if event.type == "item_start":
            alive += 1
            peak = max(peak, alive)
        elif event.type == "item_end":
            alive -= 1
    assert peak == 4
    assert sum(e.type == "item_end" for e in events) == 20


async def test_a_failed_item_stops_new_items_and_fails_the_step(run_yaml: RunYaml) -> None:
    """After a failure no further item starts; the step fails with the item's error."""
    result = await run_yaml(
        """
        name: halt
        steps:
          - id: each
            handler: "HANDLERS:check"
            loop: {forEach: [0, 1, 2, 3], maxConcurrency: 1}
        """,
        handlers="""
        def check(ctx):
            if ctx.item == 1:
                raise ValueError("item 1 is bad")
            return "ok"
        """,
    )
    assert result.status == "failed"
    record = result.steps["each"]
    assert record.status == "failed"
    assert record.error is not None
    assert "item 1 is bad" in record.error.message
    assert "each[2]" not in result.steps
    assert result.loops["each"].iterations == 2


async def test_on_error_continue_runs_every_item(run_yaml: RunYaml) -> None:
    """With onError: continue every item runs; the step is failed but the run goes on."""
    result = await run_yaml(
        TOLERANT + '  - {id: after, dependsOn: [each], handler: "HANDLERS:after"}\n',
        handlers="""
        def check(ctx):
            if ctx.item == 0:
                raise ValueError("first is bad")
            return "ok"
        def after(ctx):
            return ctx.steps["each"].status
        """,
    )
    assert result.status == "completed", result.error
    assert statuses(result, "each[0]", "each[1]", "each[2]") == ["failed", "completed", "completed"]
    assert result.steps["after"].content == "failed"


async def test_an_empty_list_completes_at_once(run_yaml: RunYaml) -> None:
    """A CEL forEach yielding [] completes with empty content and no iterations."""
    result = await run_yaml(
        """
        name: none
        steps:
          - id: each
            handler: "HANDLERS:never"
            loop: {forEach: "[]"}
        """,
        handlers="""
        def never(ctx):
            raise AssertionError("no item, no call")
        """,
    )
    assert result.status == "completed", result.error
    assert result.steps["each"].content == ""
    assert result.steps["each"].result == {"iterations": []}
    assert result.loops["each"].iterations == 0


async def test_an_item_that_did_not_complete_says_so_in_the_joined_content(
    run_yaml: RunYaml,
) -> None:
    """The step's content keeps a block per item, in order: a failed item's block says it
    failed and why, where it used to be empty; its iteration's own content stays empty."""
    result = await run_yaml(
        TOLERANT,
        handlers="""
        def check(ctx):
            if ctx.item == 1:
                raise ValueError("one is bad\\nand more on a second line")
            return f"ok {ctx.item}"
        """,
    )
    record = result.steps["each"]
    assert record.content == "\n\n---\n\n".join(
        ["ok 0", "[item 1 failed: ValueError: one is bad]", "ok 2"]
    )
    assert [i["content"] for i in record.result["iterations"]] == ["ok 0", "", "ok 2"]


SUMMARY = """
name: summary
steps:
  - id: each
    handler: "HANDLERS:check"
    onError: continue
    loop: {forEach: [0, 1, 2, 3], maxConcurrency: 2, outputMode: summary}
"""
"""``check`` on four items in ``outputMode: summary``; tolerant, so every item runs."""


async def test_a_summary_foreach_counts_items_and_keeps_only_the_failures(
    run_yaml: RunYaml,
) -> None:
    """outputMode summary: the step's output is counts and the items that did not
    complete; the completed items' records are not in the result, the failed one's is."""
    result = await run_yaml(
        SUMMARY,
        handlers="""
        def check(ctx):
            if ctx.item == 2:
                raise ValueError("two is bad\\nand more")
            return f"ok {ctx.item}"
        """,
    )
    assert result.status == "completed", result.error
    record = result.steps["each"]
    assert record.status == "failed"
    assert record.content == (
        "forEach: 4 of 4 item(s) started (3 completed, 1 failed)\n"
        "[item 2 failed: ValueError: two is bad]"
    )
    assert record.result == {
        "total": 4,
        "started": 4,
        "counts": {"completed": 3, "failed": 1},
        "unfinished": [
            {
                "index": 2,
                "item": 2,
                "status": "failed",
                "error": {"type": "ValueError", "message": "two is bad\nand more"},
            }
        ],
    }
    assert sorted(a for a in result.steps if a.startswith("each[")) == ["each[2]"]
    assert result.loops["each"].iterations == 4


async def test_a_summary_foreach_forgets_a_multi_step_body_of_completed_items(
    run_yaml: RunYaml,
) -> None:
    """A body's steps of a completed item leave the result too (``each[i]``,
    ``each[i].a``, ``each[i].b``); the run completes."""
    result = await run_yaml(
        """
        name: body
        steps:
          - id: each
            loop:
              forEach: [1, 2, 3]
              outputMode: summary
              steps:
                - {id: a, handler: "HANDLERS:echo"}
                - {id: b, handler: "HANDLERS:echo", dependsOn: [a]}
        """,
        handlers="""
        def echo(ctx):
            return str(ctx.item)
        """,
    )
    assert result.status == "completed", result.error
    assert result.steps["each"].result["counts"] == {"completed": 3}
    assert [a for a in result.steps if a.startswith("each[")] == []
    assert result.steps["each"].content == "forEach: 3 of 3 item(s) started (3 completed)"
