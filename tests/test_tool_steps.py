"""zenflow's tool steps (section 4.1): one tool call with ``toolInput``, no model.

Built-ins (``read``, ``write``, ``glob``, ``grep``, ``bash``) against real files
and real subprocesses, Python tools, ``$`` expressions, the bash security rule,
and the common step keys, through the Python API and once through the CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cadenza import RunResult, Runtime, ToolPolicy
from cadenza.testing import ServerRule
from cadenza.testing.pytest_plugin import StartLLMServer
from cadenza.workflow import WorkflowError, load_workflow
from tests._helpers import run_flow, started
from tests._processes import running
from tests.conftest import RunYaml, WriteFlow


def error_of(result: RunResult, address: str) -> tuple[str, str]:
    error = result.steps[address].error
    assert error is not None, result.steps[address]
    return error.type, error.message


# zenflow's own example ----------------------------------------------------------------


async def test_zenflow_three_step_example(
    write_flow: WriteFlow, tmp_path: Path, model_server: StartLLMServer
) -> None:
    """An agent names a file, `read` reads it (the `$` path), and the next agent sees it."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "app.yaml").write_text("port: 8080\nworkers: 4\n")
    path = write_flow(
        """
        name: config-review
        agents:
          analyst:
            description: "Finds things."
            script: ["config/app.yaml\\n"]
          reviewer:
            description: "Reviews configs."
            model: "openai:test-model"
        steps:
          - id: find-config
            agent: analyst
            instructions: Find the path to the main config file and return it.
          - id: read-config
            dependsOn: [find-config]
            tool: read
            toolInput:
              path: $steps["find-config"].content
          - id: review
            dependsOn: [read-config]
            agent: reviewer
            instructions: Review the config and suggest improvements.
        """
    )
    server = model_server([ServerRule(["Use more workers."])])
    result = await run_flow(path)
    requests = server.requests
    assert result.status == "completed", result.error
    read = result.steps["read-config"]
    assert (read.status, read.result) == ("completed", None)
    assert read.content == "port: 8080\nworkers: 4\n"
    assert result.output == "Use more workers."
    assert "port: 8080" in json.dumps(requests[0].body), "the tool's content was not injected"


# Built-in tools -------------------------------------------------------------------------


async def test_write_then_read_round_trips_and_stays_inside_the_workflow_dir(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """write creates directories and says what it did; read returns the bytes; ../ is refused."""
    path = write_flow(
        """
        name: files
        options: {onStepFailure: skip-dependents}
        steps:
          - id: save
            tool: write
            toolInput: {path: out/notes.md, content: "héllo {{ not a template }}\\n"}
          - id: load
            dependsOn: [save]
            tool: read
            toolInput: {path: out/notes.md}
          - id: escape
            tool: write
            toolInput: {path: ../escaped.txt, content: "no"}
        """
    )
    result = await run_flow(path)
    assert result.steps["save"].content == "wrote 28 bytes to out/notes.md"
    assert (tmp_path / "out" / "notes.md").read_text() == "héllo {{ not a template }}\n"
    assert result.steps["load"].content == "héllo {{ not a template }}\n"
    assert result.steps["escape"].status == "failed"
    kind, message = error_of(result, "escape")
    assert kind == "ToolError"
    assert message.startswith("write: '../escaped.txt' leads outside the workflow's directory")
    assert not (tmp_path.parent / "escaped.txt").exists()


async def test_read_fails_clearly_for_a_missing_or_too_large_file(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """A missing file names where it was looked for; past 1 MiB the step fails, saying so."""
    (tmp_path / "big.txt").write_bytes(b"x" * (1024 * 1024 + 1))
    (tmp_path / "exact.txt").write_bytes(b"y" * (1024 * 1024))
    path = write_flow(
        """
        name: reads
        steps:
          - {id: missing, tool: read, toolInput: {path: nope.txt}}
          - {id: big, tool: read, toolInput: {path: big.txt}}
          - {id: exact, tool: read, toolInput: {path: exact.txt}}
        """
    )
    result = await run_flow(path)
    assert error_of(result, "missing") == (
        "ToolError",
        f"read: no file 'nope.txt' (looked for {tmp_path / 'nope.txt'})",
    )
    kind, message = error_of(result, "big")
    assert kind == "ToolError"
    assert "larger than read's limit of 1048576 bytes (1 MiB)" in message
    exact = result.steps["exact"].content
    assert exact == "y" * (1024 * 1024)


async def test_glob_lists_matches_sorted(run_yaml: RunYaml, tmp_path: Path) -> None:
    """glob: ** crosses directories; with `path`, matches are shown under it; none is ''."""
    for name in ("src/b.py", "src/a.py", "src/pkg/c.py", "src/notes.txt", "top.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    result = await run_yaml(
        """
        name: globs
        steps:
          - {id: everywhere, tool: glob, toolInput: {pattern: "**/*.py"}}
          - {id: under, tool: glob, toolInput: {pattern: "*.py", path: src}}
          - {id: nothing, tool: glob, toolInput: {pattern: "*.rs"}}
        """
    )
    assert result.steps["everywhere"].content == "src/a.py\nsrc/b.py\nsrc/pkg/c.py\ntop.py"
    assert result.steps["under"].content == "src/a.py\nsrc/b.py"
    assert (result.steps["nothing"].status, result.steps["nothing"].content) == ("completed", "")


async def test_grep_prints_file_line_text_and_is_bounded(run_yaml: RunYaml, tmp_path: Path) -> None:
    """Fixed strings by default (zenflow), regex: true for patterns, glob filters file names."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x = 1\n# TODO: a.b\nTODO later\n")
    (tmp_path / "src" / "b.txt").write_text("TODO in text\n")
    (tmp_path / "src" / "blob.bin").write_bytes(b"TODO\0binary")
    (tmp_path / "many.log").write_text("hit\n" * 1005)
    result = await run_yaml(
        """
        name: greps
        steps:
          - {id: fixed, tool: grep, toolInput: {pattern: "a.b", path: src}}
          - {id: regex, tool: grep, toolInput: {pattern: "^TODO", path: src, regex: true}}
          - {id: only-py, tool: grep, toolInput: {pattern: TODO, path: src, glob: "*.py"}}
          - {id: many, tool: grep, toolInput: {pattern: hit, path: many.log}}
          - {id: bad, tool: grep, toolInput: {pattern: "(", regex: true}}
        """
    )
    assert result.steps["fixed"].content == "src/a.py:2:# TODO: a.b"
    assert result.steps["regex"].content == "src/a.py:3:TODO later\nsrc/b.txt:1:TODO in text"
    assert result.steps["only-py"].content == "src/a.py:2:# TODO: a.b\nsrc/a.py:3:TODO later"
    many = (result.steps["many"].content or "").splitlines()
    assert many[:2] == ["many.log:1:hit", "many.log:2:hit"]
    assert len(many) == 1001
    assert many[-1].startswith("[... stopped after 1000 matching lines")
    kind, message = error_of(result, "bad")
    assert kind == "ToolError"
    assert message.startswith("grep: invalid regular expression '('")


async def test_bash_runs_like_a_command_step(write_flow: WriteFlow, tmp_path: Path) -> None:
    """stdout is the content, in the workflow's directory; a non-zero exit fails the step."""
    path = write_flow(
        """
        name: shell
        steps:
          - id: ok
            tool: bash
            toolInput: {command: 'pwd; echo "$CADENZA_STEP_ADDRESS"; echo noise >&2'}
          - id: broken
            tool: bash
            toolInput: {command: "echo partial; echo 'it broke' >&2; exit 3"}
          - id: elsewhere
            tool: bash
            toolInput: {command: pwd, working_directory: sub}
        """
    )
    (tmp_path / "sub").mkdir()
    result = await run_flow(path)
    ok = result.steps["ok"]
    assert (ok.status, ok.content, ok.result) == ("completed", f"{tmp_path}\nok\n", None)
    assert error_of(result, "broken") == ("CommandFailed", "exit code 3: it broke")
    assert result.steps["broken"].content == "partial\n"
    assert result.steps["elsewhere"].content == f"{tmp_path / 'sub'}\n"


async def test_bash_timeouts_kill_the_command(write_flow: WriteFlow, tmp_path: Path) -> None:
    """The step's timeout and bash's own timeout_seconds both end the process group."""
    path = write_flow(
        f"""
        name: slow
        steps:
          - id: step-timeout
            timeout: 1s
            tool: bash
            toolInput: {{command: 'echo $$ > {tmp_path}/one.pid; exec sleep 300'}}
          - id: own-timeout
            tool: bash
            toolInput:
              command: 'echo $$ > {tmp_path}/two.pid; exec sleep 300'
              timeout_seconds: 1
        """
    )
    result = await run_flow(path)
    assert error_of(result, "step-timeout") == ("Timeout", "timed out after 1s")
    own = error_of(result, "own-timeout")
    assert own == ("Timeout", "timed out after 1s (its timeout_seconds)")
    assert not running(tmp_path / "one.pid")
    assert not running(tmp_path / "two.pid")


# Python tools ----------------------------------------------------------------------------


async def test_a_python_tool_gets_tool_input_as_checked_arguments(run_yaml: RunYaml) -> None:
    """toolInput becomes keyword arguments, converted and checked as a model's call would be."""
    result = await run_yaml(
        """
        name: python-tools
        steps:
          - id: greet
            command: "printf world"
          - id: add
            tool: "HANDLERS:add"
            toolInput: {a: 2, b: 3}
          - id: shout
            dependsOn: [greet]
            tool: "HANDLERS:shout"
            toolInput: {text: $steps.greet.content, times: 2}
          - id: wrong-type
            tool: "HANDLERS:add"
            toolInput: {a: two}
          - id: unknown-arg
            tool: "HANDLERS:add"
            toolInput: {a: 1, c: 3}
          - id: raises
            tool: "HANDLERS:add"
            toolInput: {a: -1}
        """,
        handlers='''
        def add(a: int, b: int = 0) -> dict:
            """Adds two whole numbers."""
            if a < 0:
                raise ValueError("no negatives")
            return {"sum": a + b}

        async def shout(text: str, times: int) -> str:
            return " ".join([text.upper()] * times)
        ''',
    )
    add = result.steps["add"]
    assert (add.status, add.content, add.result) == ("completed", '{"sum":5}', None)
    assert result.steps["shout"].content == "WORLD WORLD"
    kind, message = error_of(result, "wrong-type")
    assert kind == "ToolError"
    assert "invalid arguments: Expected `int`, got `str` - at `$.a`" in message
    kind, message = error_of(result, "unknown-arg")
    assert (kind, "invalid arguments" in message, "`c`" in message) == ("ToolError", True, True)
    assert error_of(result, "raises") == ("ValueError", "no negatives")


async def test_a_blocked_sync_python_tool_is_ended_by_the_step_timeout(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """A sync tool runs in a worker thread; the step's timeout ends the step even if
    the function never returns (the thread is abandoned, as a handler's is)."""
    path = write_flow(
        """
        name: blocked
        steps:
          - id: stuck
            timeout: 1s
            tool: "HANDLERS:block"
        """,
        handlers="""
        import threading
        gate = threading.Event()
        def block() -> str:
            gate.wait()
            return "late"
        """,
    )
    try:
        result = await run_flow(path)
    finally:  # let the abandoned thread finish
        for module in list(sys.modules.values()):
            if (getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
                module.gate.set()
    assert error_of(result, "stuck") == ("Timeout", "timed out after 1s")


async def test_an_unknown_tool_fails_naming_the_built_ins(write_flow: WriteFlow) -> None:
    """zenflow's custom tools have no Cadenza equivalent by name: the step says what exists."""
    path = write_flow("name: x\nsteps:\n  - {id: deploy, tool: deploy}\n")
    result = await run_flow(path)
    kind, message = error_of(result, "deploy")
    assert kind == "ToolError"
    assert message == (
        "unknown tool 'deploy': the built-in tools are bash, glob, grep, read, write; "
        "a Python function is named 'package.module:function'"
    )


# $ expressions ----------------------------------------------------------------------------


def test_a_bad_expression_is_a_located_validation_problem(write_flow: WriteFlow) -> None:
    path = write_flow(
        """
        name: bad
        steps:
          - id: a
            command: echo
          - id: b
            tool: read
            toolInput:
              path: $steps.a.content +
        """
    )
    with pytest.raises(WorkflowError) as caught:
        load_workflow(path)
    (problem,) = caught.value.problems
    assert (problem.line, problem.path) == (9, "steps[1].toolInput.path")
    assert problem.message.startswith("invalid CEL in toolInput.path")


async def test_expression_errors_at_run_time_name_the_field(write_flow: WriteFlow) -> None:
    """A `$` value must give a string; a missing key is named, with the keys there are."""
    path = write_flow(
        """
        name: runtime
        steps:
          - id: info
            command: "echo hi"
          - id: not-a-string
            dependsOn: [info]
            tool: read
            toolInput: {path: $steps.info.result.exitCode}
          - id: missing
            dependsOn: [info]
            tool: read
            toolInput: {path: $steps.info.result.file}
        """
    )
    result = await run_flow(path)
    assert error_of(result, "not-a-string") == (
        "ExpressionEvaluationError",
        "toolInput.path: 'steps.info.result.exitCode' must give a string, but it gave int 0 "
        "(convert it with string(...))",
    )
    kind, message = error_of(result, "missing")
    assert kind == "ExpressionEvaluationError"
    assert message.startswith("toolInput.path: 'steps.info.result.file': no such key 'file'")


async def test_dollar_values_are_data_never_code(write_flow: WriteFlow, tmp_path: Path) -> None:
    """Model output reaching write's content is written as text; nothing in it runs."""
    hostile = "$(touch pwned) `touch pwned2`; {{ inputs.x }}"
    path = write_flow(
        """
        name: data
        steps:
          - id: model
            handler: "HANDLERS:model"
          - id: save
            dependsOn: [model]
            tool: write
            toolInput: {path: saved.txt, content: $steps.model.content}
          - id: listed
            tool: glob
            dependsOn: [save]
            toolInput: {pattern: "pwned*"}
        """,
        handlers=f"def model(ctx):\n    return {hostile!r}\n",
    )
    result = await run_flow(path)
    assert result.status == "completed", result.error
    assert (tmp_path / "saved.txt").read_text() == hostile
    assert result.steps["listed"].content == ""


def test_a_bash_command_from_an_expression_is_rejected(write_flow: WriteFlow) -> None:
    """SPEC section 1: no value is spliced into a shell line, so bash takes no `$` command."""
    path = write_flow(
        """
        name: splice
        steps:
          - id: plan
            command: "echo ls"
          - id: run-it
            dependsOn: [plan]
            tool: bash
            toolInput:
              command: $steps.plan.content
        """
    )
    with pytest.raises(WorkflowError) as caught:
        load_workflow(path)
    (problem,) = caught.value.problems
    assert (problem.line, problem.path) == (10, "steps[1].toolInput.command")
    assert problem.message.startswith("the command of a bash tool step cannot be a $ expression")
    assert "Use a command step and pass the value through env" in problem.message


# Confinement: what stays possible, and the policy for arguments the run chose ------------


async def test_links_inside_the_tree_work_and_links_out_are_skipped_with_a_note(
    run_yaml: RunYaml, tmp_path: Path
) -> None:
    """Real paths decide: a link to a file or folder of the tree is followed by read, listed
    by glob and searched by grep; one leading out is named in a note, never opened."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("TODO: ship\n")
    (tmp_path / "current").symlink_to("src")
    (tmp_path / "readme.py").symlink_to(tmp_path / "src" / "main.py")  # absolute, inside
    (tmp_path.parent / f"{tmp_path.name}-outside.py").write_text("TODO: leaked\n")
    (tmp_path / "leak.py").symlink_to(tmp_path.parent / f"{tmp_path.name}-outside.py")
    result = await run_yaml(
        """
        name: links
        steps:
          - {id: via-folder, tool: read, toolInput: {path: current/main.py}}
          - {id: via-file, tool: read, toolInput: {path: readme.py}}
          - {id: absolute, tool: read, toolInput: {path: TREE/src/main.py}}
          - {id: listed, tool: glob, toolInput: {pattern: "*.py"}}
          - {id: through, tool: glob, toolInput: {pattern: "*/*.py"}}
          - {id: found, tool: grep, toolInput: {pattern: TODO, glob: "*.py"}}
        """.replace("TREE", str(tmp_path))
    )
    assert result.status == "completed", result.error
    for address in ("via-folder", "via-file", "absolute"):
        assert result.steps[address].content == "TODO: ship\n"
    note = "[skipped, never opened: leak.py (leads outside the workflow's directory)]"
    assert result.steps["listed"].content == f"readme.py\n{note}"
    # `*` may have named a folder through the link: it is not followed, and said so
    assert result.steps["through"].content == f"current/main.py\nsrc/main.py\n{note}"
    found = result.steps["found"].content
    assert found == f"readme.py:1:TODO: ship\nsrc/main.py:1:TODO: ship\n{note}"


async def test_a_tool_step_with_a_dollar_value_asks_the_policy_as_a_model_call_does(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """Under the sandbox a `$` write is refused (recorded); a literal one is the author's."""
    path = write_flow(
        """
        name: chosen
        steps:
          - {id: pick, command: "printf picked.txt"}
          - id: chosen
            dependsOn: [pick]
            tool: write
            toolInput: {path: $steps.pick.content, content: "x"}
          - id: written
            tool: write
            toolInput: {path: literal.txt, content: "y"}
          - id: looked
            dependsOn: [pick]
            tool: read
            toolInput: {path: $steps.pick.content}
            onError: continue
        """
    )
    async with Runtime(permissions=ToolPolicy(sandbox=True)) as runtime:
        handle = await runtime.start(path)
        events = [event async for event in handle.events()]
        result = await handle.result()
    assert error_of(result, "chosen") == (
        "PermissionDenied",
        "write: permission denied: the run is sandboxed: only read, glob and grep may run",
    )
    assert not (tmp_path / "picked.txt").exists()
    assert (tmp_path / "literal.txt").read_text() == "y"
    assert error_of(result, "looked")[0] == "ToolError"  # allowed; there is no such file
    decisions = [(e.step_id, e.data) for e in events if e.type == "tool_permission"]
    assert decisions == [
        (
            "chosen",
            {
                "tool_name": "write",
                "tool_call_id": "chosen:1",
                "allowed": False,
                "by": "sandbox",
                "reason": "the run is sandboxed: only read, glob and grep may run",
            },
        )
    ]


# Common step keys, events, the CLI ---------------------------------------------------------


async def test_condition_retries_and_foreach_apply_to_tool_steps(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """A false condition skips; retries re-run a failed call; loop variables reach `$`."""
    (tmp_path / "a.txt").write_text("A")
    (tmp_path / "b.txt").write_text("B")
    path = write_flow(
        """
        name: keys
        steps:
          - id: never
            condition: "false"
            tool: write
            toolInput: {path: never.txt, content: "x"}
          - id: flaky
            retries: 2
            tool: bash
            toolInput: {command: "test -f once || { touch once; exit 1; }; echo second"}
          - id: each
            loop:
              forEach: ["a.txt", "b.txt"]
              steps:
                - id: load
                  tool: read
                  toolInput: {path: $item}
        """
    )
    result = await run_flow(path)
    assert result.steps["never"].status == "skipped"
    assert not (tmp_path / "never.txt").exists()
    flaky = result.steps["flaky"]
    assert (flaky.status, flaky.attempts, flaky.content) == ("completed", 2, "second\n")
    loaded = [result.steps[f"each[{i}].load"].content for i in (0, 1)]
    assert loaded == ["A", "B"]


async def test_a_tool_step_announces_its_call(write_flow: WriteFlow, tmp_path: Path) -> None:
    """step_start (kind tool), a tool_call start/end pair with input and output, step_end."""
    (tmp_path / "in.txt").write_text("content")
    path = write_flow("name: ev\nsteps:\n  - {id: r, tool: read, toolInput: {path: in.txt}}\n")
    async with started(path) as (handle, _):
        events = [e for e in [event async for event in handle.events()] if e.step_id == "r"]
    assert [e.type for e in events] == ["step_start", "tool_call", "tool_call", "step_end"]
    assert (events[0].data or {}).get("kind") == "tool"
    start, end = events[1].data, events[2].data
    assert start == {
        "phase": "start",
        "tool_name": "read",
        "tool_call_id": "r:1",
        "input": '{"path":"in.txt"}',
    }
    assert end is not None
    assert (end["phase"], end["output"], end["error"]) == ("end", "content", None)


def test_cli_runs_a_tool_step(write_flow: WriteFlow, tmp_path: Path) -> None:
    """`cadenza run --json`: the tool step's content and null result in the result JSON."""
    (tmp_path / "notes.txt").write_text("one\ntwo\n")
    write_flow(
        """
        name: cli-tools
        steps:
          - id: count
            tool: grep
            toolInput: {pattern: o, path: notes.txt}
        output: "steps.count.content"
        """
    )
    proc = subprocess.run(
        [sys.executable, "-m", "cadenza", "run", "flow.yaml", "--json", "--store", "runs.db"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "completed"
    assert result["output"] == "notes.txt:1:one\nnotes.txt:2:two"
    assert result["steps"]["count"]["result"] is None
