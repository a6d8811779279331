"""``options.isolation: worktree-per-step``: each writing step in a git worktree of its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cadenza.workflow import WorkflowError, load_workflow
from tests._helpers import run_flow, started
from tests.conftest import WriteFlow

# Each writes out.txt, says so in a directory outside the repository, waits for
# the other to have written too, then reads out.txt back: in one shared
# directory one of them would read the other's text.
PARALLEL = """
name: parallel-writers
options: {isolation: worktree-per-step}
steps:
  - id: left
    command: >-
      echo left > out.txt && touch "$SYNC/left" &&
      while [ ! -e "$SYNC/right" ]; do sleep 0.02; done && cat out.txt && ls
    env: {SYNC: "{{ inputs.sync }}"}
  - id: right
    command: >-
      echo right > out.txt && touch "$SYNC/right" &&
      while [ ! -e "$SYNC/left" ]; do sleep 0.02; done && cat out.txt && ls
    env: {SYNC: "{{ inputs.sync }}"}
inputs:
  sync: {type: string}
"""


def git(repository: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repository, capture_output=True, text=True, check=True
    )
    return done.stdout


def repository(path: Path) -> Path:
    """A git repository holding the workflow file, one commit."""
    git(path, "init", "--quiet", "--initial-branch=main")
    git(path, "config", "user.email", "test@example.com")
    git(path, "config", "user.name", "Test")
    (path / "README").write_text("the project\n")
    git(path, "add", "--all")
    git(path, "commit", "--quiet", "-m", "start")
    return path


async def test_parallel_steps_writing_one_path_do_not_see_each_other(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """Both write out.txt at once; each reads its own back; each change is on its own branch."""
    path = write_flow(PARALLEL)
    repo = repository(path.parent)
    sync = tmp_path.parent / f"{tmp_path.name}-sync"
    sync.mkdir()
    result = await run_flow(path, inputs={"sync": str(sync)}, run_id="r-iso")
    assert result.status == "completed", result.error
    assert str(result.steps["left"].content).split() == ["left", "README", "flow.yaml", "out.txt"]
    assert str(result.steps["right"].content).split() == [
        "right",
        "README",
        "flow.yaml",
        "out.txt",
    ]
    assert not (repo / "out.txt").exists()  # the main checkout is untouched
    worktrees = git(repo, "worktree", "list", "--porcelain")
    assert worktrees.count("worktree ") == 1  # both removed
    for step in ("left", "right"):
        branch = f"cadenza/r-iso/{step}-1"
        assert git(repo, "show", f"{branch}:out.txt") == f"{step}\n"


async def test_a_failed_step_keeps_its_worktree_and_says_where(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """The half-done work of a failed step is there to look at; the run reports the path."""
    path = write_flow(
        """
        name: failing
        options: {isolation: worktree-per-step}
        steps:
          - id: half
            command: "echo started > progress.txt && exit 3"
        """
    )
    repository(path.parent)
    async with started(path) as (handle, _):
        events = [event async for event in handle.events()]
    result = await handle.result()
    assert result.status == "failed"
    kept = [e for e in events if e.type == "worktree_kept"]
    assert len(kept) == 1
    where = Path(kept[0].data["path"])  # type: ignore[index]
    assert (where / "progress.txt").read_text() == "started\n"
    assert str(where) in (kept[0].message or "")
    assert not (path.parent / "progress.txt").exists()


async def test_an_agents_tools_work_inside_its_worktree(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """``write`` and ``bash`` of an agent land in its worktree and on its branch, not in place."""
    path = write_flow(
        """
        name: agent-writes
        options: {isolation: worktree-per-step}
        agents:
          scribe:
            model: scripted
            tools: [write, bash]
            script:
              - toolCalls:
                  - {name: write, arguments: {path: notes/today.md, content: "written"}}
                  - {name: bash, arguments: {command: "pwd > where.txt"}}
              - "done"
        steps:
          - id: scribe
            agent: scribe
            instructions: "Write it down."
        """
    )
    repo = repository(path.parent)
    result = await run_flow(path, run_id="r-agent")
    assert result.status == "completed", result.error
    assert not (repo / "notes").exists()
    assert not (repo / "where.txt").exists()
    branch = "cadenza/r-agent/scribe-1"
    assert git(repo, "show", f"{branch}:notes/today.md") == "written"
    ran_in = Path(git(repo, "show", f"{branch}:where.txt").strip())
    assert ran_in != repo
    assert "cadenza-worktrees" in ran_in.parts


async def test_outside_a_git_repository_the_step_fails_saying_why(write_flow: WriteFlow) -> None:
    """No repository to take worktrees of: a clear failure, not a step run in place."""
    path = write_flow(
        """
        name: no-repo
        options: {isolation: worktree-per-step}
        steps:
          - id: write
            command: "echo x > x.txt"
        """
    )
    result = await run_flow(path)
    assert result.status == "failed"
    assert result.error is not None
    assert "worktree-per-step needs the workflow's directory" in result.error.message
    assert not (path.parent / "x.txt").exists()


def test_an_unknown_isolation_is_refused_at_load(write_flow: WriteFlow) -> None:
    """A misspelt strategy is a load error, not a run without isolation."""
    path = write_flow(
        "name: typo\noptions: {isolation: worktree-per-stpe}\n"
        "steps:\n  - {id: a, command: 'true'}\n"
    )
    with pytest.raises(WorkflowError, match=r"options\.isolation"):
        load_workflow(path)
