"""forEach over a stream: a JSON-lines file or a Python generator, read as the window moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from cadenza import WorkflowError
from cadenza.workflow import load_workflow
from tests._helpers import run_flow
from tests.conftest import RunYaml, WriteFlow

ECHO = """
def echo(ctx):
    return {"item": ctx.item, "index": ctx.index}
"""


async def test_a_lines_file_gives_one_item_a_line_in_order(
    tmp_path: Path, run_yaml: RunYaml
) -> None:
    """Each non-blank line is one JSON item, at loop[i] in file order; the result lists
    them as a list source's does, and the events know how many there are."""
    (tmp_path / "items.jsonl").write_text('"ann"\n{"name": "bob"}\n\n3\n')
    result = await run_yaml(
        """
        name: lines
        steps:
          - id: each
            handler: "HANDLERS:echo"
            loop: {forEach: {lines: items.jsonl}, maxConcurrency: 2}
        """,
        handlers=ECHO,
    )
    assert result.status == "completed", result.error
    iterations = result.steps["each"].result["iterations"]
    assert [i["item"] for i in iterations] == ["ann", {"name": "bob"}, 3]
    assert result.steps["each[2]"].result == {"item": 3, "index": 2}
    assert result.loops["each"].iterations == 3


async def test_a_bad_line_fails_the_step_naming_file_and_line_before_any_item_runs(
    tmp_path: Path, run_yaml: RunYaml
) -> None:
    (tmp_path / "items.jsonl").write_text("1\n2\n{oops\n4\n")
    result = await run_yaml(
        """
        name: bad
        steps:
          - id: each
            handler: "HANDLERS:echo"
            loop: {forEach: {lines: items.jsonl}}
        """,
        handlers=ECHO,
    )
    assert result.status == "failed"
    error = result.steps["each"].error
    assert error is not None
    assert error.type == "ItemsError"
    assert error.message.startswith("items.jsonl:3: not a JSON value")
    assert not [a for a in result.steps if a.startswith("each[")]


async def test_an_empty_file_is_zero_items_as_an_empty_cel_list_is(
    tmp_path: Path, run_yaml: RunYaml
) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    outputs = []
    for source in ("{lines: empty.jsonl}", '"[]"'):
        result = await run_yaml(
            f"""
            name: nothing
            steps:
              - id: each
                handler: "HANDLERS:echo"
                loop: {{forEach: {source}}}
            """,
            handlers=ECHO,
        )
        assert result.status == "completed", result.error
        step = result.steps["each"]
        outputs.append((step.status, step.content, step.result, result.loops["each"].iterations))
    assert outputs[0] == outputs[1] == ("completed", "", {"iterations": []}, 0)


async def test_a_generator_handler_feeds_the_items_from_the_run_inputs(
    run_yaml: RunYaml,
) -> None:
    """``forEach: {handler: ...}`` gets a handler step's context (the inputs among it);
    with ``outputMode: summary`` the output counts the items."""
    result = await run_yaml(
        """
        name: generated
        inputs: {n: {type: integer}}
        steps:
          - id: each
            handler: "HANDLERS:echo"
            loop: {forEach: {handler: "HANDLERS:numbers"}, outputMode: summary}
        """,
        handlers=ECHO
        + """
def numbers(ctx):
    for n in range(ctx.inputs["n"]):
        yield n * 10
""",
        inputs={"n": 600},
    )
    assert result.status == "completed", result.error
    summary = result.steps["each"].result
    assert summary["total"] == 600
    assert summary["counts"] == {"completed": 600}
    assert result.steps["each"].content == "forEach: 600 of 600 item(s) started (600 completed)"


async def test_an_endless_async_generator_is_read_only_as_far_as_the_items_run(
    tmp_path: Path, run_yaml: RunYaml
) -> None:
    """A generator that never ends cannot have been listed: item 3 fails, nothing more
    starts, and the generator is closed (its ``finally`` runs)."""
    result = await run_yaml(
        """
        name: endless
        steps:
          - id: each
            handler: "HANDLERS:fail_at_three"
            loop: {forEach: {handler: "HANDLERS:forever"}, maxConcurrency: 1, outputMode: summary}
        """,
        handlers="""
from pathlib import Path

async def forever(ctx):
    n = 0
    try:
        while True:
            yield n
            n += 1
    finally:
        (Path(ctx.workflow_dir) / "closed").write_text(str(n))

def fail_at_three(ctx):
    if ctx.item == 3:
        raise ValueError("three is bad")
    return "ok"
""",
    )
    assert result.status == "failed"
    summary = result.steps["each"].result
    assert summary["started"] == 4
    assert summary["total"] is None  # never known: the generator did not end
    assert summary["unfinished"][0]["item"] == 3
    assert "[item 3 failed: ValueError: three is bad]" in (result.steps["each"].content or "")
    # Read a batch ahead at most, never to an end that does not come.
    assert 4 <= int((tmp_path / "closed").read_text()) <= 256


async def test_a_handler_that_gives_no_iterable_fails_the_step_saying_what_it_gave(
    run_yaml: RunYaml,
) -> None:
    result = await run_yaml(
        """
        name: wrong
        steps:
          - id: each
            handler: "HANDLERS:echo"
            loop: {forEach: {handler: "HANDLERS:five"}}
        """,
        handlers=ECHO + "\ndef five(ctx):\n    return 5\n",
    )
    assert result.status == "failed"
    error = result.steps["each"].error
    assert error is not None
    assert "must return an iterable or a generator" in error.message
    assert "int 5" in error.message


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{lines: missing.jsonl}", "file 'missing.jsonl' not found"),
        ("{lines: ../outside.jsonl}", "leads outside the workflow's directory"),
        ("{handler: 'nowhere:items'}", "no module 'nowhere'"),
        ("{lines: a.jsonl, handler: 'x:y'}", "names one source"),
        ("{}", "names one source"),
        ("{lines: a.jsonl, every: 2}", "unknown key 'every' in a forEach source"),
    ],
)
def test_a_stream_that_cannot_be_read_is_a_load_error(
    tmp_path: Path, write_flow: WriteFlow, source: str, message: str
) -> None:
    (tmp_path / "a.jsonl").write_text("1\n")
    flow = write_flow(
        f"""
        name: broken
        steps:
          - id: each
            command: "true"
            loop: {{forEach: {source}}}
        """
    )
    with pytest.raises(WorkflowError) as raised:
        load_workflow(flow)
    assert message in str(raised.value)
    assert "steps[0].loop.forEach" in str(raised.value)


async def test_a_retried_forEach_reads_its_file_again_from_the_start(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """``retries`` re-runs the whole forEach: the second attempt gets every item again."""
    (tmp_path / "items.jsonl").write_text("1\n2\n3\n")
    flow = write_flow(
        """
        name: again
        steps:
          - id: each
            handler: "HANDLERS:flaky"
            retries: 1
            loop: {forEach: {lines: items.jsonl}, maxConcurrency: 1}
        """,
        handlers="""
from pathlib import Path

def flaky(ctx):
    marker = Path(ctx.workflow_dir) / "failed-once"
    if ctx.item == 2 and not marker.exists():
        marker.write_text("")
        raise RuntimeError("once")
    return str(ctx.item)
""",
    )
    result = await run_flow(flow)
    assert result.status == "completed", result.error
    assert result.steps["each"].attempts == 2
    assert [i["item"] for i in result.steps["each"].result["iterations"]] == [1, 2, 3]
