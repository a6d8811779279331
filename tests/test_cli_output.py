"""What the cadenza command shows a person: progress, summaries, hints, stored runs."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests._helpers import EXAMPLES, cadenza
from tests.conftest import WriteFlow

from ._terminal import Terminal

SLOW = """
name: live
steps:
  - id: warm-up
    command: "echo warm"
  - id: slow
    dependsOn: [warm-up]
    command: "while [ ! -e released ]; do sleep 0.05; done; echo released"
"""

APPROVAL = """
name: approval
steps:
  - id: approve
    human: {prompt: "Ship it?", schema: {type: object, properties: {ok: {type: boolean}}}}
  - id: ship
    dependsOn: [approve]
    command: "echo shipped"
"""


def test_reflection_prints_the_accepted_draft(tmp_path: Path) -> None:
    """examples/reflection.yaml ends with the draft the critic approved, not its comments."""
    proc = cadenza("run", str(EXAMPLES / "reflection.yaml"), "--store", "runs.db", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.rstrip("\n").splitlines()[-1]
    assert last.startswith("Actors own their state and talk only by messages")
    assert "Too vague" not in proc.stdout


def test_a_terminal_shows_the_run_id_then_running_steps_with_their_time(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """On a TTY: the run id when it starts; a running step with its elapsed time, kept
    up to date while nothing else happens; the step's end once it finishes."""
    run = ("run", str(write_flow(SLOW)), "--store", "runs.db", "--run-id", "r-live")
    with Terminal(*run, cwd=tmp_path) as tty:
        started = tty.read_until(r"run r-live \(live\) started")
        tty.read_until(r"✓ warm-up")
        running = tty.read_until(r"⋯ slow\s+running [1-9]\d*s")  # a second later: redrawn
        assert started.start() < running.start()
        (tmp_path / "released").touch()
        tty.read_until(r"✓ slow")
        assert tty.wait() == 0
    assert "run r-live (live): completed" in tty.lines()


FAN = """
name: fan
inputs:
  items: {type: array}
steps:
  - id: fan
    loop:
      forEach: "inputs.items"
      maxConcurrency: 2
      steps:
        - id: work
          handler: "HANDLERS:work"
          onError: continue
output: "'fanned out'"
"""

FAN_HANDLERS = """
def work(context):
    if context.index % 997 == 3:  # 11 of 10,000 fail
        raise ValueError(f"bad item {context.index}")
    return "done"
"""


@pytest.mark.timeout(300)  # two runs of 10,000 items, on a machine that may be busy
def test_a_large_foreach_on_a_terminal_counts_its_items_instead_of_listing_them(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """10,000 items on a real terminal: the finished items are counted on the forEach's
    line, not printed one by one, so the terminal gets a few hundred lines (not one or
    more per item); the first failures are shown; the summary is the one a pipe gets."""
    flow = str(write_flow(FAN, handlers=FAN_HANDLERS))
    (tmp_path / "items.json").write_text(json.dumps({"items": list(range(10_000))}))
    run = ("run", flow, "--inputs-file", "items.json", "--run-id", "r-fan")
    command = [sys.executable, "-m", "cadenza", *run, "--store", "piped.db"]
    with (
        subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, text=True) as piped,
        Terminal(*run, "--store", "tty.db", cwd=tmp_path) as tty,
    ):  # side by side: the machine's cores are shared
        assert tty.wait(seconds=240) == 0
        piped_summary, _ = piped.communicate(timeout=240)
    assert piped.returncode == 0

    screen = tty.text.replace("\r\n", "\n")
    assert screen.count("\n") <= 300, f"{screen.count(chr(10))} lines"
    assert len(screen.encode()) <= 64_000
    progress, summary = screen.split("run r-fan (fan): completed\n")
    assert "run r-fan (fan): completed\n" + summary == piped_summary
    assert re.search(r"⋯ fan\[…\]  [\d,]+/10,000 done, [1-9]\d* failed", progress), progress
    assert re.search(r"✓ fan  \S+  10,000/10,000 done, 11 failed\n", progress), progress
    assert "✓ fan[" not in progress  # no item's end has a line of its own
    told = re.findall(r"✗ fan\[(\d+)\]\.work  \S+ ValueError: bad item \d+", progress)
    assert told == ["3", "1000", "1997", "2994", "3991"]  # the first five; the summary has all
    assert summary.count("failed, the run went on") == 11


def test_a_resumed_foreach_counts_the_items_that_ended_before_it_stopped(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """Two items end, the third waits for a person; resumed on a terminal, the forEach's
    end line counts all three, though only the third ends in the resumed process."""
    flow = write_flow(
        "name: asks\nsteps:\n  - id: fan\n    loop:\n      forEach: '[0, 1, 2]'\n"
        "      steps:\n        - {id: work, command: 'echo work'}\n"
        "        - {id: ask, dependsOn: [work], condition: 'index == 2', human: {prompt: 'ok?'}}\n"
    )
    waiting = cadenza("run", str(flow), "--store", "runs.db", "--run-id", "r", cwd=tmp_path)
    assert waiting.returncode == 3, waiting.stderr
    answer = ("signal", "r", "fan[2].ask", "--data", "{}", "--store", "runs.db")
    assert cadenza(*answer, cwd=tmp_path).returncode == 0
    with Terminal("resume", "r", "--store", "runs.db", cwd=tmp_path) as tty:
        assert tty.wait() == 0
    assert re.search(r"✓ fan  \S+  3 done\n", tty.text.replace("\r\n", "\n")), tty.text


def test_hints_carry_a_non_default_store_and_work_when_pasted(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """The answer and resume commands printed for a run in another store name that store,
    quoted; pasted as printed, they answer and finish the run."""
    flow = write_flow(APPROVAL)
    (tmp_path / "my stores").mkdir()
    store = "my stores/runs.db"
    waiting = cadenza("run", str(flow), "--store", store, "--run-id", "r", cwd=tmp_path)
    assert waiting.returncode == 3, waiting.stderr
    hint = re.search(r"answer: (cadenza signal .*)", waiting.stdout)
    assert hint is not None, waiting.stdout
    assert hint.group(1) == "cadenza signal r approve --data JSON --store 'my stores/runs.db'"

    answer = [word if word != "JSON" else '{"ok": true}' for word in shlex.split(hint.group(1))]
    signalled = cadenza(*answer[1:], cwd=tmp_path)
    assert signalled.returncode == 0, signalled.stderr
    resume = re.search(r"continue it with: (cadenza resume .*)", signalled.stdout)
    assert resume is not None, signalled.stdout
    resumed = cadenza(*shlex.split(resume.group(1))[1:], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "run r (approval): completed" in resumed.stdout


def test_hints_for_the_default_store_stay_short(write_flow: WriteFlow, tmp_path: Path) -> None:
    """Without --store the hint is the plain command."""
    waiting = cadenza("run", str(write_flow(APPROVAL)), "--run-id", "r", cwd=tmp_path)
    assert "    answer: cadenza signal r approve --data JSON\n" in waiting.stdout


def run_beside(flow: Path) -> subprocess.CompletedProcess[str]:
    """``cadenza run FLOW --store runs.db`` in the workflow's folder, as a user runs it."""
    return cadenza("run", str(flow), "--store", "runs.db", cwd=flow.parent)


def test_the_summary_names_steps_that_failed_while_the_run_went_on(write_flow: WriteFlow) -> None:
    """onError: continue: the run completes, and the summary says which step failed and why."""
    proc = run_beside(
        write_flow(
            "name: tolerant\nsteps:\n  - id: lint\n    command: 'echo two warnings >&2; exit 3'\n"
            "    onError: continue\n  - id: build\n    command: 'echo built'\n"
        )
    )
    assert proc.returncode == 0, proc.stderr
    assert "✗ lint failed, the run went on: CommandFailed: exit code 3: two warnings" in (
        proc.stdout
    )
    assert "build" not in proc.stdout.split("went on")[0]


def test_a_run_whose_output_failed_prints_no_fallback_output(write_flow: WriteFlow) -> None:
    """The output expression fails: the error is printed, not the last step's text."""
    proc = run_beside(
        write_flow(
            "name: no-output\nsteps:\n  - id: a\n    command: 'echo FALLBACK-TEXT'\n"
            "output: 'int(steps.a.content)'\n"
        )
    )
    assert proc.returncode == 1
    assert "error: ExpressionEvaluationError: output:" in proc.stdout
    assert "FALLBACK-TEXT" not in proc.stdout


def test_a_cancelled_run_prints_no_fallback_output(write_flow: WriteFlow, tmp_path: Path) -> None:
    """SIGINT while a step runs: the run is cancelled, and no step's text is shown as output."""
    flow = write_flow(
        "name: stopped\nsteps:\n  - id: first\n    command: 'echo FALLBACK-TEXT'\n"
        "  - id: slow\n    dependsOn: [first]\n    command: 'sleep 60'\n"
    )
    command = [sys.executable, "-m", "cadenza", "run", str(flow), "--store", "runs.db", "--events"]
    with subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            event = json.loads(line)
            if event["type"] == "step_start" and event.get("stepId") == "slow":
                proc.send_signal(signal.SIGINT)
                break
        stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "(stopped): cancelled" in stdout
    assert "FALLBACK-TEXT" not in stdout


def test_runs_list_shows_when_each_run_started_and_how_long_it_took(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """One line per run: id, status, start time, duration, workflow."""
    flow = write_flow("name: listed\nsteps:\n  - id: a\n    command: 'echo'\n")
    cadenza("run", str(flow), "--store", "runs.db", "--run-id", "r-1", cwd=tmp_path)
    listing = cadenza("runs", "list", "--store", "runs.db", cwd=tmp_path).stdout
    pattern = r"r-1  completed  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d +\d+(\.\d)?(ms|s)  listed\n"
    assert re.fullmatch(pattern, listing), listing


def test_runs_show_is_readable_on_a_terminal_and_json_otherwise(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """On a TTY: status, every step with its status and duration, the error, the output.
    With --json, or into a pipe, the result JSON as before."""
    flow = write_flow(
        "name: shown\nsteps:\n  - id: check\n    command: 'echo lint failed >&2; exit 1'\n"
        "    onError: continue\n  - id: make\n    command: 'echo made it'\n"
        "output: steps.make.content\n"
    )
    cadenza("run", str(flow), "--store", "runs.db", "--run-id", "r-1", cwd=tmp_path)
    with Terminal("runs", "show", "r-1", "--store", "runs.db", cwd=tmp_path) as tty:
        assert tty.wait() == 0
    lines = tty.lines()
    assert lines[0] == "run r-1 (shown): completed"
    assert re.fullmatch(r"  started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d, took \S+", lines[1])
    assert re.fullmatch(
        r"    ✗ check  failed +\S+  CommandFailed: exit code 1: lint failed", lines[3]
    )
    assert re.fullmatch(r"    ✓ make   completed +\S+", lines[4])
    assert "made it" in lines
    assert "{" not in tty.text

    with Terminal("runs", "show", "r-1", "--json", "--store", "runs.db", cwd=tmp_path) as tty:
        assert tty.wait() == 0
    assert json.loads(tty.text)["output"] == "made it\n"
    piped = cadenza("runs", "show", "r-1", "--store", "runs.db", cwd=tmp_path)
    assert json.loads(piped.stdout)["steps"]["check"]["status"] == "failed"
