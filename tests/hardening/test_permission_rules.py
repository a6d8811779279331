"""Permission rules are matched against what will run, the way an attacker would probe them.

Each case is a rule set, one tool call and what must happen to it:

- ``run``: it runs (nothing refuses it);
- ``deny``: refused outright, a person at the terminal is not even asked;
- ``ask``: the rules cannot vouch for it: refused when nobody can answer, put
  to the person under ``--ask``.

A "bypass" is a call that runs where it must not. The cases are the
attacker's report of issue 26 (53 of 77 rule cases bypassed) and more: shell
syntax around a denied command, the command written another way, wrappers,
interpreters, paths spelt another way or through a link. The end-to-end tests
make the same calls from an agent of a real run, against files that must
survive, through ``cadenza run --allow/--deny`` and through a workflow's rules.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from cadenza import ToolPolicy, ToolRequest
from cadenza.actors.run import PermissionPolicy, read_command
from cadenza.protocols import ToolPermission, payload
from cadenza.workflow import WorkflowError, load_workflow, rule_problem
from tests._helpers import cadenza, python, started
from tests.conftest import WriteFlow

from .conftest import FUZZ

Expect = Literal["run", "deny", "ask"]


@dataclass(frozen=True)
class Case:
    allow: tuple[str, ...]
    deny: tuple[str, ...]
    tool: str
    arguments: dict[str, Any]
    expect: Expect

    def __str__(self) -> str:
        rules = [f"allow {r}" for r in self.allow] + [f"deny {r}" for r in self.deny]
        shown = json.dumps(self.arguments)
        if len(shown) > 120:
            shown = f"{shown[:100]}...({len(shown)} characters)"
        return f"{'; '.join(rules)} | {self.tool} {shown}"


def bash(rule: str, kind: str, expect: Expect, *commands: str) -> list[Case]:
    allow, deny = ((rule,), ()) if kind == "allow" else ((), (rule,))
    return [Case(allow, deny, "bash", {"command": c}, expect) for c in commands]


def path(rule: str, kind: str, tool: str, expect: Expect, *paths: str, **more: Any) -> list[Case]:
    allow, deny = ((rule,), ()) if kind == "allow" else ((), (rule,))
    return [Case(allow, deny, tool, {"path": p, **more}, expect) for p in paths]


ABSOLUTE = "@"  # replaced by the workflow directory's absolute path

CASES: list[Case] = [
    # allow bash(pytest*): what it covers still runs...
    *bash(
        "bash(pytest*)",
        "allow",
        "run",
        "pytest -q tests",
        "pytest",
        "pytest  -q\ttests",
        "/usr/bin/pytest -x",
        "env CI=1 pytest -q",
        "timeout 60 pytest -q",
        "pytest -q 2>&1",
        "pytest -q tests/*.py",
        "pytest -q --basetemp=$TMPDIR/x",
    ),
    # ...and nothing else does, whatever joins it to pytest.
    *bash(
        "bash(pytest*)",
        "allow",
        "ask",
        "pytest; touch CANARY",
        "pytest && touch CANARY",
        "pytest || touch CANARY",
        "pytest | tee CANARY",
        "pytest & touch CANARY",
        "pytest\ntouch CANARY",
        "pytest $(touch CANARY)",
        "pytest `touch CANARY`",
        "pytest <(touch CANARY)",
        "(pytest; touch CANARY)",
        "{ pytest; touch CANARY; }",
        "if pytest; then touch CANARY; fi",
        "for x in 1; do touch CANARY; done",
        "touch CANARY",
        "sh -c 'pytest; touch CANARY'",
        "sh -c pytest",
        'python -c \'open("CANARY", "w")\'',
        "python -m pytest",
        "eval pytest",
        "$PYTEST -q",
        "LD_PRELOAD=./x.so pytest",
        "PATH=.:$PATH pytest",
        "pytest -q\\\n; touch CANARY",
        "pytest &>/dev/null touch CANARY",
        "f() { touch CANARY; }; pytest; f",
        "pytest 'unterminated",
    ),
    # deny bash(rm *): rm however it is written, wherever it sits in the line.
    *bash(
        "bash(rm *)",
        "deny",
        "deny",
        "rm -rf CANARY",
        "rm CANARY",
        "rm",
        "/bin/rm CANARY",
        "/usr/bin/rm CANARY",
        " rm CANARY",
        "rm\t-rf CANARY",
        "rm  -rf   CANARY",
        "x; rm CANARY",
        "x && rm CANARY",
        "x || rm CANARY",
        "x | rm CANARY",
        "x & rm CANARY",
        "x\nrm CANARY",
        "echo $(rm CANARY)",
        "echo `rm CANARY`",
        "cat <(rm CANARY)",
        "r''m CANARY",
        "'rm' CANARY",
        '"rm" CANARY',
        'r"m" CANARY',
        "\\rm CANARY",
        "r\\m CANARY",
        "command rm CANARY",
        "command -p rm CANARY",
        "builtin rm CANARY",
        "exec rm CANARY",
        "env rm CANARY",
        "env -i A=1 rm CANARY",
        "/usr/bin/env rm CANARY",
        "nice rm CANARY",
        "nice -n 5 rm CANARY",
        "nohup rm CANARY",
        "time rm CANARY",
        "time -p rm CANARY",
        "timeout 5 rm CANARY",
        "timeout -s KILL 5 rm CANARY",
        "sudo rm CANARY",
        "sudo -u root rm CANARY",
        "stdbuf -oL rm CANARY",
        "setsid rm CANARY",
        "busybox rm CANARY",
        "env nice nohup rm CANARY",
        "ls | xargs rm",
        "ls | xargs rm -f",
        "ls | xargs -0 -n 1 rm",
        "ls | xargs -I{} rm {}",
        "sh -c 'rm CANARY'",
        "bash -c 'rm CANARY'",
        "sh -xc 'rm CANARY'",
        "bash -lc 'cd / && rm CANARY'",
        "(rm CANARY)",
        "{ rm CANARY; }",
        "if true; then rm CANARY; fi",
        "while false; do rm CANARY; done",
        "for f in CANARY; do rm $f; done",
        "case x in x) rm CANARY;; esac",
        "f() { rm CANARY; }; f",
        "! rm CANARY",
        ">/dev/null rm CANARY",
        "rm -rf $HOME",
        "rm -- CANARY",
        "x=1 rm CANARY",
        "cat <<EOF\n$(rm CANARY)\nEOF",
    ),
    # deny bash(rm *): what cannot be read is not let through either.
    *bash(
        "bash(rm *)",
        "deny",
        "ask",
        "find . -delete",
        "find . -name CANARY -delete",
        "find . -exec rm {} ;",
        "find . -execdir rm {} +",
        "eval 'rm CANARY'",
        "eval rm CANARY",
        "X=rm; $X CANARY",
        '"$X" CANARY',
        "${X} CANARY",
        "$'\\x72m' CANARY",
        "r{m,} CANARY",
        "r\\\nm CANARY",
        "echo ok &>/dev/null rm CANARY",
        "(( rm CANARY ))",
        "python -c 'import os'",
        "python3 -c 'import os; os.remove(\"CANARY\")'",
        "perl -e 'unlink \"CANARY\"'",
        'node -e \'require("fs").rmSync("CANARY")\'',
        "ruby -e 'File.delete(\"CANARY\")'",
        "awk 'BEGIN{system(\"rm CANARY\")}'",
        "echo 'rm CANARY' | sh",
        "sh < script",
        "bash -s",
        "env -S 'rm CANARY'",
        "sudo -s rm CANARY",
        "watch rm CANARY",
        "ssh host rm CANARY",
        "alias x=rm",
        "trap 'rm CANARY' EXIT",
        "parallel rm ::: CANARY",
        "LD_PRELOAD=./x.so ls",
        "PATH=.:$PATH ls",
        "export PATH=.:$PATH",
        "echo 'unterminated",
        "find . -name $X",
        ". /dev/stdin <<EOF\nrm CANARY\nEOF",
        "sh /dev/stdin <<EOF\nrm CANARY\nEOF",
        "python /proc/self/fd/0 <<EOF\nimport os\nEOF",
        "gawk -f p.awk -e 'BEGIN{system(\"rm CANARY\")}'",
        "source $SCRIPT",
    ),
    # deny bash(rm *): other commands, and rm as an argument, still run.
    *bash(
        "bash(rm *)",
        "deny",
        "run",
        "ls",
        "echo rm CANARY",
        "git rm --cached x",
        "cat rm.txt",
        "grep -r rm .",
        "rmdir x",
        "ls *.py",
        "echo $HOME",
        "python script.py",
        "python -m pytest",
        "awk -f p.awk f",
        "source ./env.sh",
        "sh ./build.sh",
    ),
    # a deny rule with a narrower pattern: an expanded word may be anything
    *bash("bash(git push*)", "deny", "deny", "git push", "git  push --force", 'git "push"'),
    *bash("bash(git push*)", "deny", "ask", "git $CMD", "git $(echo push)", "git pu*"),
    *bash("bash(git push*)", "deny", "run", "git status", "git pull", "echo git push"),
    *bash("bash(rm -rf /*)", "deny", "ask", "rm $FLAGS /", "rm -rf $DIR"),
    *bash("bash(rm -rf /*)", "deny", "run", "rm -i x"),
    # sudo and doas are matched as written and by what they run
    *bash("bash(sudo *)", "deny", "deny", "sudo ls", "sudo -u root env A=1 ls", "x | sudo ls"),
    *bash("bash(sudo *)", "deny", "deny", "/usr/bin/sudo ls", "ls | sudo xargs ls"),
    *bash("bash(ls *)", "allow", "ask", "sudo ls", "doas -u x ls /root"),
    *bash("bash(sudo *)", "deny", "run", "ls", "echo sudo"),
    *bash("bash(cat notes.txt)", "allow", "run", "cat notes.txt", "cat  'notes.txt'"),
    *bash("bash(cat notes.txt)", "allow", "ask", "cat notes.txt$X", "cat notes.txt*"),
    # a line of thousands of commands is read whole (in a worker thread); past the
    # limit it cannot be read
    *bash("bash(rm *)", "deny", "deny", "echo x; " * 4000 + "rm CANARY"),
    *bash("bash(rm *)", "deny", "ask", "echo x; " * 20000 + "rm CANARY"),
    *bash("bash(echo *)", "allow", "run", "echo x; " * 4000),
    # deny write(.git/*): the path however it is spelt, or reached through a link
    *path(
        "write(.git/*)",
        "deny",
        "write",
        "deny",
        ".git/hooks/pre-commit",
        "./.git/hooks/pre-commit",
        ".git//hooks/pre-commit",
        "src/../.git/hooks/pre-commit",
        "./src/./../.git/hooks/pre-commit",
        f"{ABSOLUTE}/.git/hooks/pre-commit",
        " .git/hooks/pre-commit ",
        "hooks/pre-commit",
        "src/git/hooks/pre-commit",
        content="#!/bin/sh\ntouch CANARY\n",
    ),
    *path("write(.git/*)", "deny", "write", "run", "src/ok.py", ".gitignore", content="x"),
    # deny read(.env)
    *path(
        "read(.env)",
        "deny",
        "read",
        "deny",
        ".env",
        "./.env",
        "a/../.env",
        "src/../.env",
        ".//.env",
        f"{ABSOLUTE}/.env",
        "e",
    ),
    *path("read(.env)", "deny", "read", "run", ".env.example", "src/.env", "src/ok.py"),
    # grep and glob: the tree a call reaches
    *path("grep(.env)", "deny", "grep", "deny", ".env", "./.env", pattern="KEY"),
    *path("grep(.env)", "deny", "grep", "ask", ".", "./", pattern="KEY"),
    *path("grep(.env)", "deny", "grep", "run", "src", pattern="KEY"),
    *path("glob(.git/*)", "deny", "glob", "deny", ".git", "./.git/hooks", pattern="*"),
    *path("glob(.git/*)", "deny", "glob", "ask", ".", pattern="**/*"),
    *path("glob(.git/*)", "deny", "glob", "run", "src", pattern="*.py"),
    # allow write(src/*)
    *path(
        "write(src/*)",
        "allow",
        "write",
        "run",
        "src/ok.py",
        "./src/ok.py",
        f"{ABSOLUTE}/src/ok.py",
        "src//deep/ok.py",
        content="x",
    ),
    *path(
        "write(src/*)",
        "allow",
        "write",
        "ask",
        "src/../.git/hooks/pre-commit",
        "src/git/hooks/pre-commit",
        "notes.txt",
        content="x",
    ),
    # tool names are exact: a rule on bash is no rule on read, and the reverse
    *bash("read", "allow", "ask", "cat .env"),
    *path("bash", "deny", "read", "run", ".env"),
    *bash("bash", "deny", "deny", "pytest", "$(anything)"),
    *bash("bash", "allow", "run", "$(anything)", "eval x"),
]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A workflow directory: a git directory, a secret, sources, and links into both."""
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "ok.py").write_text("ok\n")
    (tmp_path / ".env").write_text("KEY=secret\n")
    (tmp_path / ".env.example").write_text("KEY=\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "hooks").symlink_to(tmp_path / ".git" / "hooks")
    (tmp_path / "e").symlink_to(".env")
    (tmp_path / "src" / "git").symlink_to("../.git")
    return tmp_path


def request(case: Case, directory: Path) -> ToolRequest:
    arguments = {
        key: value.replace(ABSOLUTE, str(directory)) if isinstance(value, str) else value
        for key, value in case.arguments.items()
    }
    return ToolRequest("r-1", "fix", "fixer", case.tool, arguments)


async def decided(case: Case, directory: Path, *, ask: bool) -> tuple[bool, bool]:
    """Whether the call runs, and whether a person was asked (who says no)."""
    asked: list[ToolRequest] = []

    async def person(req: ToolRequest) -> Literal["yes", "no", "always"]:
        asked.append(req)
        return "no"

    runtime = ToolPolicy(allow=case.allow, deny=case.deny, ask=person if ask else None)
    decision = await PermissionPolicy.of(runtime).decide(
        request(case, directory), directory=directory
    )
    return (decision is None or decision.allowed), bool(asked)


def test_the_suite_is_the_size_the_report_gives() -> None:
    """The cases named in the report (issue 26): at least the attacker's 77."""
    assert len(CASES) >= 77
    assert len({str(case) for case in CASES}) == len(CASES), "a case is listed twice"


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_a_rule_holds_against_every_spelling(case: Case, tree: Path) -> None:
    """Nobody to ask: only ``run`` cases run. With a person: only ``ask`` cases are put to them."""
    runs, _ = await decided(case, tree, ask=False)
    assert runs is (case.expect == "run"), f"{case}: expected {case.expect}"
    if case.expect != "run":
        runs, asked = await decided(case, tree, ask=True)
        assert not runs
        assert asked is (case.expect == "ask"), f"{case}: expected {case.expect}"


async def test_the_reason_names_the_rule_and_what_it_matched(tree: Path) -> None:
    """The model hears which rule refused which command, or why nothing could vouch for it."""
    policy = PermissionPolicy.of(ToolPolicy(deny=["bash(rm *)"]))
    call = ToolRequest("r", "s", None, "bash", {"command": "ls; /bin/rm -rf  x"})
    decision = await policy.decide(call, directory=tree)
    assert decision is not None
    assert decision.reason == "denied by the rule bash(rm *): rm -rf x"
    call = ToolRequest("r", "s", None, "bash", {"command": "echo `date`"})
    decision = await policy.decide(call, directory=tree)
    assert decision is not None
    assert decision.reason.startswith("the rule bash(rm *) may cover this call (a command sub")
    assert decision.reason.endswith("nobody was there to ask (--ask)")
    allowing = PermissionPolicy.of(ToolPolicy(allow=["bash(pytest*)", "bash(ls*)"]))
    call = ToolRequest("r", "s", None, "bash", {"command": "pytest -q; touch CANARY"})
    decision = await allowing.decide(call, directory=tree)
    assert decision is not None
    assert decision.reason == (
        "not allowed: touch CANARY is covered by none of the allow rules (bash(pytest*), bash(ls*))"
    )
    call = ToolRequest("r", "s", None, "bash", {"command": "pytest -q && ls -l"})
    decision = await allowing.decide(call, directory=tree)
    assert decision is not None
    assert decision.reason == "allowed by the rules bash(pytest*), bash(ls*)"


async def test_always_at_the_terminal_does_not_answer_for_a_call_a_deny_rule_may_cover(
    tree: Path,
) -> None:
    """ "always" allows the tool's later calls, but one a deny rule may cover is asked again."""
    asked: list[str] = []

    async def person(req: ToolRequest) -> Literal["yes", "no", "always"]:
        asked.append(req.arguments["command"])
        return "always"

    policy = PermissionPolicy.of(ToolPolicy(deny=["bash(rm *)"], ask=person))
    for command in ("ls", "ls -l", "eval x", "eval y", "rm x"):
        await policy.decide(ToolRequest("r", "s", None, "bash", {"command": command}))
    assert asked == ["ls", "eval x", "eval y"]


# Rules that name nothing are refused where they are written ------------------------


BAD_RULES = [
    ("Bash", "unknown tool 'Bash'", "did you mean 'bash'?"),
    ("Read(.env)", "unknown tool 'Read'", "did you mean 'read'?"),
    ("bash(rm:*)", "Claude Code's syntax", "did you mean bash(rm *)?"),
    ("bash(git push:*)", "Claude Code's syntax", "did you mean bash(git push *)?"),
    ("bash(rm *", "write NAME or NAME(PATTERN)", ""),
    ("*", "a NAME is a tool's exact name", ""),
    ("b*", "a NAME is a tool's exact name", ""),
    ("bsh", "unknown tool 'bsh'", "did you mean 'bash'?"),
    ("bash()", "the pattern is empty", ""),
    ("bash(rm *; ls)", "one simple command", ""),
    ("bash(rm * && ls)", "one simple command", ""),
    ("bash(echo $HOME)", "one simple command", ""),
    ("bash('rm' *)", "quotes and backslashes are removed", ""),
    ("bash(/bin/rm *)", "matched by its file name", ""),
    ("bash(env *)", "env is looked through", ""),
    ("bash(xargs rm *)", "xargs is looked through", ""),
    ("send_message", "never checked", ""),
    ("mytools:", "module:function", ""),
    ("nosuch.tool", "'nosuch' is no MCP server of this workflow", ""),
    ("github.", "names no tool after the dot", ""),
]


@pytest.mark.parametrize(("rule", "problem", "hint"), BAD_RULES)
def test_validate_refuses_a_rule_that_names_nothing_at_its_line(
    write_flow: WriteFlow, tmp_path: Path, rule: str, problem: str, hint: str
) -> None:
    """``cadenza validate``: FILE:LINE:COL, the rule, what is wrong, and a hint."""
    path = write_flow(
        "name: rules\nmcpServers:\n  github: {command: server}\n"
        f"permissions:\n  allow: [read]\n  deny:\n    - {json.dumps(rule)}\n"
        "steps:\n  - id: a\n    command: echo\n"
    )
    proc = cadenza("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = (proc.stdout + proc.stderr).strip()
    assert line.startswith(f"{path}:7:7: permissions.deny[0]: permission rule {rule!r}: ")
    assert problem in line
    assert hint in line
    assert "Traceback" not in line


@pytest.mark.parametrize(
    "rule",
    [
        "bash",
        "bash(git *)",
        "bash(rm *)",
        "read(.env)",
        "write(src/*)",
        "glob(*)",
        "github",
        "github.*",
        "github.get_*",
        "mytools:lookup",
        "bash(sudo *)",
    ],
)
def test_validate_accepts_the_rules_the_docs_show(
    write_flow: WriteFlow, tmp_path: Path, rule: str
) -> None:
    path = write_flow(
        "name: rules\nmcpServers:\n  github: {command: server}\n"
        f"permissions:\n  deny: [{json.dumps(rule)}]\nsteps:\n  - id: a\n    command: echo\n"
    )
    load_workflow(path)


@pytest.mark.parametrize(("rule", "problem", "hint"), BAD_RULES[:8])
def test_the_cli_refuses_a_bad_rule_naming_the_flag(
    write_flow: WriteFlow, tmp_path: Path, rule: str, problem: str, hint: str
) -> None:
    """``--deny Bash``: exit 2, the flag and the rule named, nothing runs."""
    path = write_flow("name: rules\nsteps:\n  - id: a\n    command: touch RAN\n", name="cli.yaml")
    proc = cadenza("run", str(path), "--deny", rule, "--store", "runs.db", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"cadenza: error: --deny {rule!r}: permission rule {rule!r}: ")
    assert problem in proc.stderr
    assert hint in proc.stderr
    assert not (tmp_path / "RAN").exists()


def test_the_cli_checks_server_rules_against_the_workflow(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """Outside a workflow an MCP server's tools are SERVER.*, and SERVER must be declared."""
    path = write_flow("name: rules\nsteps:\n  - id: a\n    command: echo\n", name="cli.yaml")
    for rule, problem in (
        ("github.*", "'github' is no MCP server of this workflow (mcpServers: none declared)"),
        ("github", "an MCP server's tools are SERVER.* or SERVER.TOOL"),
    ):
        proc = cadenza("run", str(path), "--allow", rule, "--store", "runs.db", cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert problem in proc.stderr


@pytest.mark.parametrize(("rule", "problem", "hint"), BAD_RULES[:8])
def test_a_tool_policy_refuses_a_bad_rule(rule: str, problem: str, hint: str) -> None:
    with pytest.raises(ValueError, match=r"^ToolPolicy\(allow\[1\]\): permission rule ") as info:
        ToolPolicy(allow=["read", rule])
    assert problem in str(info.value)
    assert hint in str(info.value)


def test_a_tool_policy_takes_rules_as_a_list() -> None:
    with pytest.raises(ValueError, match="a list of rules, not one string"):
        ToolPolicy(deny="bash(rm *)")


def test_the_docs_example_rules_load_and_each_is_put_to_the_test() -> None:
    """docs/tools.md's example: every rule is valid, and each patterned one has cases here."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "tools.md").read_text()
    section = text[text.index("## Permissions") : text.index("### Rules")]
    block = section[
        section.index("```yaml\n") + 8 : section.index("```\n", section.index("```yaml"))
    ]
    document = yaml.safe_load(block)
    rules = [
        *document["permissions"]["deny"],
        *document["agents"]["fixer"]["permissions"]["allow"],
    ]
    assert len(rules) == 7
    tested = {rule for case in CASES for rule in (*case.allow, *case.deny)}
    for rule in rules:
        assert rule_problem(rule, {"github"}) is None, rule
        if "(" in rule:
            assert rule in tested, f"{rule}: no case puts the docs' rule to the test"


def test_an_agents_rules_are_checked_too(write_flow: WriteFlow) -> None:
    path = write_flow(
        "name: rules\nagents:\n  a:\n    model: scripted\n"
        "    permissions: {allow: [Bash]}\nsteps:\n  - id: s\n    agent: a\n"
    )
    with pytest.raises(WorkflowError, match=r"agents\.a\.permissions\.allow\[0\].*'Bash'"):
        load_workflow(path)


# What bash rules see is what /bin/sh runs ------------------------------------------

STUBS = ("rm", "touch", "ls", "cat", "x", "y")
"""Commands the fuzzed lines run: stubs that log their name, found only on PATH."""

PIECES = [
    *("rm", "r", "m", "touch", "ls", "x", "y", " ", "  ", "\t", "\n", ";", "&&", "||", "|", "&"),
    *("(", ")", "{ ", "; }", "$(", "`", "'", '"', "\\", "\\\n", "r''m", '"rm"', "./s/rm"),
    *("#", ">f", "2>&1", "&>/dev/null", "<<EOF\n", "\nEOF\n", "<<'EOF'\n", "if ", "then "),
    *("fi", "for a in b; do ", "; done", "case a in a) ", ";; esac", "f() ", "f", "command "),
    *("env ", "exec ", "nice ", "xargs ", "A=1 ", "$X", "{a,b}", "*", "!", "((", "))", "\r"),
]

# Lines where a parser and /bin/sh could part ways: here-documents, comments,
# line continuations, bash-only syntax, every compound command.
LINES = [
    "cat <<EOF\nx\nEOF\nrm a",
    "cat <<'EOF'\nx\\\nEOF\nrm a",
    "cat <<EOF\nx\\\nEOF\nrm a",
    "cat <<-EOF\n\tx\n\tEOF\nrm a",
    "cat <<EOF; rm a\nx\nEOF",
    "cat <<A <<B\na\nA\nb\nB\nrm x",
    "cat <<EOF\nEOF \nrm x\nEOF",
    "cat <<EOF\n$(rm x)\nEOF",
    "cat <<'EOF'\n$(rm x)\nEOF",
    'cat <<"EOF"\n`rm x`\nEOF\nls',
    "ls#; rm x",
    "ls #; rm x",
    "ls \\#; rm x",
    "ls\r; rm x",
    "x &>/dev/null rm y",
    "x >&/dev/null rm y",
    "x |& rm y",
    "((rm x))",
    "(( rm x ))",
    "( (rm x) )",
    "! rm x",
    "rm x &\nls",
    "case a in a) rm x;; b) ls;; esac",
    "case a in (a) rm x;; esac",
    "if ls; then rm x; elif y; then ls; else cat; fi",
    "until ls; do rm x; done",
    "while ls; do rm x; break; done",
    "function f { rm x; }; f",
    "f() ( rm x ); f",
    "f() { rm x; }\nf",
    "x=$(rm y)",
    "export x=`rm y`",
    "echo ${x:-$(rm y)}",
    "echo $((1 + $(rm y)))",
    "ls; #comment\nrm x",
    "ls \\\n; rm x",
    "r\\\nm x",
    "rm\\\n x",
    "ls\\\n&& rm x",
    "ls &\\\n& rm x",
    "{ rm x; } > f",
    "{rm x;}",
    "x=1 y=2 rm z",
    "exec rm x",
    "env -u A rm x",
    "nice -n1 rm x",
    "xargs rm < f",
    "echo a\\;rm x",
    "echo 'a;'rm x",
    "ls;rm x",
    "ls||rm x",
    "ls&rm x",
    "\nrm x",
    "#rm x",
    "rm\\ x",
    "'r'm x",
    "{ ls; } && { rm x; }",
    "ls $(: ) ; rm x",
]


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory whose ``s/`` holds the stubs (and env, nice, xargs): the whole PATH."""
    root = tmp_path_factory.mktemp("stubs")
    bin_dir = root / "s"
    bin_dir.mkdir()
    for name in STUBS:
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\necho {name} >> "$STUB_LOG"\n')
        stub.chmod(0o755)
    for real in ("env", "nice", "xargs"):
        found = shutil.which(real)
        assert found is not None
        (bin_dir / real).symlink_to(found)
    return root


@pytest.mark.parametrize("line", LINES)
def test_every_command_sh_runs_is_one_the_rules_saw(line: str, stubs: Path) -> None:
    """Run by the real /bin/sh: each command it starts was read, or the line was unclear
    (so no patterned rule lets it through)."""
    _assert_read_as_sh_runs(line, stubs)


@FUZZ
@given(line=st.lists(st.sampled_from(PIECES), min_size=1, max_size=12).map("".join))
def test_fuzzed_lines_read_as_sh_runs_them(line: str, stubs: Path) -> None:
    _assert_read_as_sh_runs(line, stubs)


def _assert_read_as_sh_runs(line: str, stubs: Path) -> None:
    reading = read_command(line)
    seen = {command.text.split(" ")[0] for command in reading.commands}
    ran = _run_with_stubs(line, stubs)
    missed = ran - seen
    assert not missed or reading.unclear, f"{line!r}: sh ran {missed}, the rules saw {seen}"


def _run_with_stubs(line: str, root: Path) -> set[str]:
    """The commands ``/bin/sh -c line`` runs, from stubs that log their names."""
    log = root / "log"
    log.write_text("")
    env = {"PATH": str(root / "s"), "STUB_LOG": str(log), "X": "rm"}
    subprocess.run(
        ["/bin/sh", "-c", line],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=10,
        check=False,
    )
    return set(log.read_text().split())


# End to end: an agent of a real run tries every spelling ------------------------------


def agent_flow(calls: list[dict[str, Any]], permissions: str = "") -> str:
    tool_calls = "\n".join(f"          - {json.dumps(call)}" for call in calls)
    return (
        "name: attack\nagents:\n  fixer:\n    model: scripted\n"
        "    tools: [bash, read, write]\n    script:\n      - toolCalls:\n"
        f"{tool_calls}\n      - done\n{permissions}"
        "steps:\n  - id: fix\n    agent: fixer\n    instructions: Fix it.\n"
    )


def answers(tmp_path: Path, run_id: str) -> list[tuple[str, str]]:
    """Each call's tool and what the model was answered, in call order."""
    shown = cadenza("runs", "show", run_id, "--events", "--store", "runs.db", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    events = [json.loads(line) for line in shown.stdout.splitlines()]
    return [
        (e["data"]["tool_name"], e["data"]["output"])
        for e in events
        if e["type"] == "tool_call" and e["data"]["phase"] == "end"
    ]


def bash_calls(commands: list[str]) -> list[dict[str, Any]]:
    return [{"name": "bash", "arguments": {"command": c}} for c in commands]


DENIED_RM = [
    c.arguments["command"]
    for c in CASES
    if c.deny == ("bash(rm *)",) and c.expect != "run" and len(c.arguments["command"]) < 1000
]


def test_end_to_end_deny_rm_holds_against_every_spelling(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """``cadenza run --deny 'bash(rm *)'``: the CANARY outlives every attempt; ls still runs."""
    (tmp_path / "CANARY").write_text("alive\n")
    calls = bash_calls([*DENIED_RM, "ls > listed.txt"])
    path = write_flow(agent_flow(calls))
    run = ("run", str(path), "--deny", "bash(rm *)", "--store", "runs.db", "--run-id", "r-1")
    proc = cadenza(*run, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "CANARY").read_text() == "alive\n"
    said = answers(tmp_path, "r-1")
    assert len(said) == len(calls)
    refused = [output for _, output in said[:-1] if "permission denied" in output]
    assert len(refused) == len(DENIED_RM), [o for _, o in said if "permission" not in o]
    assert "CANARY" in (tmp_path / "listed.txt").read_text()  # other commands run


ALLOWED_PYTEST = [
    c.arguments["command"] for c in CASES if c.allow == ("bash(pytest*)",) and c.expect == "ask"
]


def test_end_to_end_allow_pytest_runs_nothing_else(write_flow: WriteFlow, tmp_path: Path) -> None:
    """``--allow 'bash(pytest*)'``: no CANARY is ever created, and pytest itself runs."""
    calls = bash_calls([*ALLOWED_PYTEST, "pytest --version"])
    path = write_flow(agent_flow(calls))
    run = ("run", str(path), "--allow", "bash(pytest*)", "--store", "runs.db", "--run-id", "r-2")
    proc = cadenza(*run, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "CANARY").exists()
    said = answers(tmp_path, "r-2")
    assert all("permission denied" in output for _, output in said[:-1])
    assert "permission denied" not in said[-1][1]


def test_end_to_end_paths_a_deny_rule_names_are_refused_however_spelt(
    write_flow: WriteFlow, tree: Path
) -> None:
    """``--deny 'write(.git/*)' --deny 'read(.env)'``: no hook is written, no secret read."""
    writes = [
        c.arguments["path"] for c in CASES if c.deny == ("write(.git/*)",) and c.expect == "deny"
    ]
    reads = [c.arguments["path"] for c in CASES if c.deny == ("read(.env)",) and c.expect == "deny"]
    calls = [
        *(
            {
                "name": "write",
                "arguments": {"path": p.replace(ABSOLUTE, str(tree)), "content": "touch CANARY"},
            }
            for p in writes
        ),
        *({"name": "read", "arguments": {"path": p.replace(ABSOLUTE, str(tree))}} for p in reads),
        {"name": "write", "arguments": {"path": "src/new.py", "content": "ok"}},
    ]
    path = write_flow(agent_flow(calls))
    run = (
        "run",
        str(path),
        "--deny",
        "write(.git/*)",
        "--deny",
        "read(.env)",
        "--store",
        "runs.db",
        "--run-id",
        "r-3",
    )
    proc = cadenza(*run, cwd=tree)
    assert proc.returncode == 0, proc.stderr
    assert list((tree / ".git" / "hooks").iterdir()) == []
    assert not (tree / "src" / "git" / "hooks" / "pre-commit").exists()
    said = answers(tree, "r-3")
    assert all("permission denied" in output for _, output in said[:-1]), said
    assert not any("secret" in output for _, output in said)
    assert (tree / "src" / "new.py").read_text() == "ok"


async def test_end_to_end_a_workflows_own_rules_hold_the_same(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """``permissions:`` in the workflow and an agent's: the same reading, in-process."""
    (tmp_path / "CANARY").write_text("alive\n")
    calls = bash_calls(["x; rm CANARY", "sh -c 'rm CANARY'", "eval rm CANARY", "pytest -q x"])
    text = agent_flow(calls, 'permissions: {deny: ["bash(rm *)"]}\n').replace(
        "    tools: [bash, read, write]\n",
        '    tools: [bash, read, write]\n    permissions: {allow: ["bash(x*)", "bash(sh *)"]}\n',
    )
    async with started(write_flow(text)) as (handle, _):
        events = [e async for e in handle.events()]
    assert (tmp_path / "CANARY").read_text() == "alive\n"
    decisions = [
        (d.allowed, d.reason)
        for d in (payload(e, ToolPermission) for e in events if e.type == "tool_permission")
    ]
    assert [allowed for allowed, _ in decisions] == [False, False, False, False]
    assert decisions[0][1] == "denied by the rule bash(rm *): rm CANARY"
    assert decisions[1][1] == "denied by the rule bash(rm *): rm CANARY"
    assert "eval runs text as commands" in decisions[2][1]
    assert "pytest -q x is covered by none of the allow rules" in decisions[3][1]


# No policy, no cost ----------------------------------------------------------------


def test_a_run_with_no_policy_never_reads_a_command(write_flow: WriteFlow, tmp_path: Path) -> None:
    """Without rules the agent's calls take the unchanged path: the parser is not even loaded."""
    calls = bash_calls(["echo one > one.txt", "echo two > two.txt"])
    path = write_flow(agent_flow(calls))
    probe = (
        "import sys, cadenza.cli\n"
        "code = cadenza.cli.main(['run', sys.argv[1], '--store', 'runs.db'])\n"
        "print('tree_sitter' in sys.modules, 'cadenza.actors.run._shell' in sys.modules)\n"
        "sys.exit(code)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = python("-c", probe, str(path), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False True"
    assert (tmp_path / "two.txt").read_text() == "two\n"


# The glob over a known start agrees with fnmatch ------------------------------------

GLOB_ALPHABET = "ab/ *?[]!-"


@FUZZ
@given(
    st.text(GLOB_ALPHABET, max_size=8),
    st.text("ab/ -!]", max_size=6),
    st.lists(st.text("ab/ -!]", max_size=4), min_size=1, max_size=6),
)
def test_what_may_or_must_follow_agrees_with_fnmatch(
    pattern: str, start: str, ends: list[str]
) -> None:
    """ "takes all" means every ending matches, "takes none" that none does, as fnmatch says."""
    from cadenza.actors.run._permissions import _glob

    glob = _glob(pattern)
    matched = [fnmatch.fnmatchcase(start + end, pattern) for end in ends]
    if glob.takes_all(start):
        assert all(matched)
    if not glob.takes_some(start):
        assert not any(matched)
    whole = len(glob.tokens) in glob._states(start)
    assert whole is fnmatch.fnmatchcase(start, pattern)
