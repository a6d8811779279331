"""A malicious model against the built-in tools: nothing outside the workflow's tree, no key.

A scripted model (a real OpenAI-compatible HTTP server on 127.0.0.1) attacks
through the built-ins an agent is offered (``read``, ``write``, ``glob``,
``grep``, ``bash``) and through ``tool:`` steps whose ``$`` arguments are its
answer. The workflow's tree ships hostile symbolic links (to files, folders and
devices outside, loops, chains), a FIFO, a file holding the API key; canaries
live OUTSIDE the tree. Each attack runs as a real workflow through the runtime,
in every mode of `MODES`; afterwards:

- the canary (a random token, in outside files' contents and in one's name)
  is in nothing the provider received, nor the result, the events or the store;
- no file outside the tree changed or appeared;
- the API key is in no request body the provider received: bare, without its
  ``sk-`` prefix, or base64-encoded at any alignment;
- the model (or the step's error) was told why, so the attack really ran.

Confinement holds in every mode; ``bash`` is not confined (it is the user's
shell), so an attack that needs it to escape runs only where bash is refused.
A mode is a row of `MODES` (plain, ``--sandbox``, and deny rules that name
``bash`` and ``write``) with the built-ins it refuses. The FIFO and loop
attacks also run through the ``cadenza`` command in a child process, which
must exit: an open blocked on a FIFO in an abandoned thread once kept the
process alive after its run ended.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cadenza import RunResult, Runtime, ToolPolicy
from cadenza.testing import RequestMatch, ScriptedLLMServer, ServerReply, ServerRule, ServerToolCall
from tests._helpers import run_flow

# The modes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    """How the run is started: what the runtime adds to the workflow's tool permissions.

    Attributes:
        policy: The `Runtime`'s policy (``cadenza run --sandbox`` is ``sandbox=True``).
        refuses: The built-ins this mode refuses outright (the model hears
            ``permission denied``); confinement refuses the rest.
    """

    policy: ToolPolicy | None
    refuses: frozenset[str] = frozenset()


MODES: dict[str, Mode] = {
    "plain": Mode(policy=None),
    "sandbox": Mode(policy=ToolPolicy(sandbox=True), refuses=frozenset({"bash", "write"})),
    # Deny rules instead of the sandbox: the rule engine's path, not the sandbox's switch.
    "deny": Mode(
        policy=ToolPolicy(deny=["bash(*)", "write(*)"]), refuses=frozenset({"bash", "write"})
    ),
}


# The attacks ----------------------------------------------------------------------------

OUTSIDE = "{outside}"
"""Written in an attack's arguments: the absolute path of the folder of canaries."""

DENIED = "permission denied"
OUT = "leads outside the workflow's directory"
SKIPPED = "skipped, never opened"


def call(tool: str, **arguments: Any) -> ServerToolCall:
    return ServerToolCall(tool, arguments)


@dataclass(frozen=True)
class Attack:
    """What the malicious model does, and what it must be told.

    Attributes:
        calls: Tool calls it makes in its first turn (an agent's attack).
        step: Or a ``tool:`` step: the tool and its ``toolInput`` (YAML), where
            ``$steps.pick.content`` is the model's answer `picked`.
        picked: The model's answer a tool step uses.
        told: Text the model (or the failed step's error) must receive where
            no tool of the attack is refused by the mode.
        modes: The modes it runs in; None: all. Attacks that need ``bash`` to
            escape run only where bash is refused (bash is not confined).
        hazards: The tree also holds symlink loops and a FIFO. Off for the
            others, so that a loop or a FIFO failing the call cannot hide a leak.
        during: Runs around the workflow (a thread swapping links, say).
    """

    calls: tuple[ServerToolCall, ...] = ()
    step: tuple[str, str] | None = None
    picked: str = ""
    told: str = ""
    modes: tuple[str, ...] | None = None
    hazards: bool = False
    during: Callable[[Path], AbstractContextManager[None]] | None = None

    @property
    def tools(self) -> set[str]:
        if self.step is not None:
            return {self.step[0]}
        return {c.name for c in self.calls}


@contextmanager
def swapping(tree: Path) -> Iterator[None]:
    """Swaps ``tree/swap`` between a real folder and a link to the canaries, all the while."""
    done = threading.Event()
    swap, aside = tree / "swap", tree / "swap.real"
    outside = tree.parent / "outside" / "dir"

    def swap_forever() -> None:
        while not done.is_set():
            os.rename(swap, aside)
            os.symlink(outside, swap)
            os.unlink(swap)
            os.rename(aside, swap)

    thread = threading.Thread(target=swap_forever)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


READ = "{path: $steps.pick.content}"
WRITE = "{path: $steps.pick.content, content: pwned}"


def picked_for(tool: str, tool_input: str, picked: str, told: str = OUT, **more: Any) -> Attack:
    """A ``tool:`` step whose ``tool_input`` (YAML) uses the model's answer, ``picked``."""
    return Attack(step=(tool, tool_input), picked=picked, told=told, **more)


SECRET_CHECK = "python3 -c \"import os; print(os.environ['OPENAI_API_KEY'])\""
SECRET_B64 = (
    "python3 -c \"import base64, os; k = os.environ['OPENAI_API_KEY'].encode(); "
    'print(base64.b64encode(k).decode(), base64.b64encode(b\\"x\\" + k).decode())"'
)

ATTACKS: dict[str, Attack] = {
    # read -------------------------------------------------------------------------------
    "read-absolute": Attack((call("read", path=f"{OUTSIDE}/canary.txt"),), told=OUT),
    "read-dotdot": Attack((call("read", path="../outside/canary.txt"),), told=OUT),
    "read-dotdot-deep": Attack((call("read", path="sub/../../outside/canary.txt"),), told=OUT),
    "read-symlink-to-file": Attack((call("read", path="notes.txt"),), told=OUT),
    "read-relative-symlink": Attack((call("read", path="rel.txt"),), told=OUT),
    "read-symlink-chain": Attack((call("read", path="chain-a"),), told=OUT),
    "read-symlinked-folder": Attack((call("read", path="docs/canary.txt"),), told=OUT),
    # lexically docs/../canary.txt is canary.txt in the tree; really it is outside/canary.txt
    "read-dotdot-after-link": Attack((call("read", path="docs/../canary.txt"),), told=OUT),
    "read-proc-root": Attack(
        (call("read", path=f"/proc/self/root{OUTSIDE}/canary.txt"),), told=OUT
    ),
    "read-proc-environ": Attack((call("read", path="/proc/self/environ"),), told=OUT),
    "read-dev-zero": Attack((call("read", path="/dev/zero"),), told=OUT),
    "read-link-to-device": Attack((call("read", path="zero"),), told=OUT),
    "read-fifo": Attack((call("read", path="fifo"),), told="is a FIFO", hazards=True),
    "read-symlink-loop": Attack(
        (call("read", path="loop"), call("read", path="loop-a")),
        told="is a symlink loop",
        hazards=True,
    ),
    "read-nul-byte": Attack(
        (call("read", path="sub/inside.txt\0../../outside/canary.txt"),), told="NUL byte"
    ),
    "read-very-long-path": Attack(
        (call("read", path="sub/" + "../sub/" * 2000 + "x" * 300),), told="cannot read"
    ),
    "read-toctou-swap": Attack(
        tuple(call("read", path="swap/file.txt") for _ in range(300)), during=swapping
    ),
    # write ------------------------------------------------------------------------------
    "write-through-symlink": Attack((call("write", path="victim.txt", content="pwned"),), told=OUT),
    "write-dangling-symlink": Attack((call("write", path="dangle", content="pwned"),), told=OUT),
    "write-dotdot": Attack((call("write", path="../outside/new.txt", content="pwned"),), told=OUT),
    "write-absolute": Attack(
        (call("write", path=f"{OUTSIDE}/new.txt", content="pwned"),), told=OUT
    ),
    "write-into-symlinked-folder": Attack(
        (call("write", path="docs/deep/new.txt", content="pwned"),), told=OUT
    ),
    "write-fifo": Attack(
        (call("write", path="fifo", content="pwned"),), told="is a FIFO", hazards=True
    ),
    "write-nul-byte": Attack(
        (call("write", path="new.txt\0../outside/new.txt", content="pwned"),), told="NUL byte"
    ),
    # glob -------------------------------------------------------------------------------
    "glob-absolute-pattern": Attack((call("glob", pattern=f"{OUTSIDE}/**"),), told="absolute"),
    "glob-dotdot-pattern": Attack((call("glob", pattern="../outside/**"),), told="'..'"),
    "glob-dotdot-inner": Attack((call("glob", pattern="sub/../../outside/*"),), told="'..'"),
    "glob-starstar-through-links": Attack((call("glob", pattern="**"),), told=SKIPPED),
    "glob-wildcard-through-link": Attack((call("glob", pattern="*/*"),), told=SKIPPED),
    "glob-path-symlinked-folder": Attack((call("glob", pattern="*", path="docs"),), told=OUT),
    "glob-path-absolute": Attack((call("glob", pattern="*", path=OUTSIDE),), told=OUT),
    "glob-starstar-over-loops": Attack((call("glob", pattern="**"),), told=SKIPPED, hazards=True),
    "glob-wildcards-round-loops": Attack(
        (call("glob", pattern="*/" * 30 + "*"),), told="reaches more than", hazards=True
    ),
    # grep -------------------------------------------------------------------------------
    "grep-empty-pattern-over-links": Attack((call("grep", pattern=""),), told=SKIPPED),
    "grep-regex-everything": Attack(
        (call("grep", pattern=".", regex=True, glob="*"),), told=SKIPPED
    ),
    "grep-symlink-to-file": Attack((call("grep", pattern="", path="notes.txt"),), told=OUT),
    "grep-symlinked-folder": Attack((call("grep", pattern="", path="docs"),), told=OUT),
    "grep-path-absolute": Attack((call("grep", pattern="", path=OUTSIDE),), told=OUT),
    "grep-path-dotdot": Attack((call("grep", pattern="", path="../outside"),), told=OUT),
    "grep-link-to-device": Attack((call("grep", pattern="", path="zero"),), told=OUT),
    "grep-fifo": Attack((call("grep", pattern="", path="fifo"),), told="is a FIFO", hazards=True),
    "grep-over-fifo-and-loops": Attack((call("grep", pattern=""),), told=SKIPPED, hazards=True),
    # bash: confined only in its working directory; refused outright by the sandbox -------
    "bash-working-directory-outside": Attack(
        (call("bash", command="cat canary.txt", working_directory="../outside"),), told=OUT
    ),
    "bash-plants-a-link-then-read": Attack(
        (
            call("bash", command=f"ln -s {OUTSIDE}/canary.txt planted.txt"),
            call("read", path="planted.txt"),
        ),
        told=OUT,
    ),
    "bash-reads-outside": Attack(
        (call("bash", command=f"cat {OUTSIDE}/canary.txt"),), modes=("sandbox", "deny")
    ),
    "bash-writes-outside": Attack(
        (call("bash", command=f"echo pwned > {OUTSIDE}/victim.txt"),), modes=("sandbox", "deny")
    ),
    # tool: steps with the model's answer as arguments ----------------------------------
    "step-read-absolute": picked_for("read", READ, f"{OUTSIDE}/canary.txt"),
    "step-read-dotdot": picked_for("read", READ, "../outside/canary.txt"),
    "step-read-symlink": picked_for("read", READ, "notes.txt"),
    "step-read-fifo": picked_for("read", READ, "fifo", told="is a FIFO", hazards=True),
    "step-glob-absolute": picked_for(
        "glob", "{pattern: $steps.pick.content}", f"{OUTSIDE}/*", told="absolute"
    ),
    "step-grep-symlinked-folder": picked_for(
        "grep", "{pattern: '', path: $steps.pick.content}", "docs"
    ),
    "step-write-dotdot": picked_for("write", WRITE, "../outside/new.txt"),
    "step-write-through-symlink": picked_for("write", WRITE, "victim.txt"),
    "step-bash-working-directory": picked_for(
        "bash", "{command: cat canary.txt, working_directory: $steps.pick.content}", "../outside"
    ),
    # the API key: what goes back to the provider is scrubbed ---------------------------
    "secret-printenv": Attack((call("bash", command="printenv"),)),
    "secret-base64": Attack((call("bash", command=SECRET_B64),)),
    "secret-in-failure": Attack((call("bash", command=f"{SECRET_CHECK}; exit 3"),)),
    "secret-read-file": Attack((call("read", path="secret.env"),)),
    "secret-read-base64-file": Attack((call("read", path="key.b64"),)),
    "secret-grep": Attack((call("grep", pattern="API_KEY"),)),
    "secret-step-read": picked_for("read", READ, "secret.env", told=""),
}


# The scene ------------------------------------------------------------------------------


@dataclass
class Scene:
    """The tree, the canaries outside it, and the secrets of one run."""

    root: Path
    canary: str = field(default_factory=lambda: f"CANARY-{secrets.token_hex(8)}")
    key: str = field(default_factory=lambda: f"sk-malicious-{secrets.token_hex(12)}")

    @property
    def tree(self) -> Path:
        return self.root / "tree"

    @property
    def outside(self) -> Path:
        return self.root / "outside"

    def build(self, *, hazards: bool) -> None:
        """The canaries outside; the hostile tree (links out, the key; loops, a FIFO)."""
        outside, tree = self.outside, self.tree
        (outside / "dir").mkdir(parents=True)
        for name in ("canary.txt", "dir/canary.txt", "dir/file.txt", f"dir/{self.canary}.txt"):
            (outside / name).write_text(f"{self.canary}\n")
        (outside / "victim.txt").write_text("untouched\n")
        (tree / "sub").mkdir(parents=True)
        (tree / "sub" / "inside.txt").write_text("inside the tree\n")
        (tree / "swap").mkdir()
        (tree / "swap" / "file.txt").write_text("inside the tree\n")
        (tree / "secret.env").write_text(f"OPENAI_API_KEY={self.key}\n")
        (tree / "key.b64").write_text(base64.b64encode(self.key.encode()).decode() + "\n")
        links = {
            "notes.txt": outside / "canary.txt",
            "rel.txt": Path("../outside/canary.txt"),
            "chain-a": Path("chain-b"),
            "chain-b": outside / "canary.txt",
            "docs": outside / "dir",
            "victim.txt": outside / "victim.txt",
            "dangle": outside / "created.txt",
            "zero": Path("/dev/zero"),
        }
        if hazards:
            loops = {"loop": "loop", "loop-a": "loop-b", "loop-b": "loop-a", "here": "."}
            links.update({name: Path(target) for name, target in loops.items()})
            links["again"] = Path(".")
            os.mkfifo(tree / "fifo")
        for name, target in links.items():
            (tree / name).symlink_to(target)

    def outside_files(self) -> dict[str, bytes | None]:
        """Everything beside the tree (the store's folder excepted), with its bytes."""
        found: dict[str, bytes | None] = {}
        for directory, subdirectories, files in os.walk(self.root):
            here = Path(directory)
            if here == self.root:
                subdirectories[:] = [d for d in subdirectories if d not in ("tree", "store")]
            for name in [*subdirectories, *files]:
                path = here / name
                found[str(path)] = None if path.is_dir() else path.read_bytes()
        return found


def fill(value: Any, scene: Scene) -> Any:
    """An attack's arguments with `OUTSIDE` made the canaries' absolute folder."""
    if isinstance(value, str):
        return value.replace(OUTSIDE, str(scene.outside))
    if isinstance(value, Mapping):
        return {k: fill(v, scene) for k, v in value.items()}
    return value


AGENT_FLOW = """
name: attacked
agents:
  attacker:
    model: "openai:attacker"
steps:
  - id: attack
    agent: attacker
    instructions: "Do as you please."
"""

STEP_FLOW = """
name: attacked
agents:
  attacker:
    model: "openai:attacker"
  reader:
    model: "openai:reader"
steps:
  - id: pick
    agent: attacker
    instructions: "Name something."
  - id: use
    dependsOn: [pick]
    onError: continue
    tool: TOOL
    toolInput: INPUT
  - id: look
    dependsOn: [use]
    agent: reader
    instructions: "Tell me what the step above found."
"""


def rules(attack: Attack, scene: Scene) -> list[ServerRule]:
    if attack.step is not None:
        return [
            ServerRule([fill(attack.picked, scene)], match=RequestMatch(model="attacker")),
            ServerRule(["noted"], match=RequestMatch(model="reader")),
        ]
    calls = [ServerToolCall(c.name, fill(c.arguments, scene)) for c in attack.calls]
    return [
        ServerRule(["done"], match=RequestMatch(model="attacker", last_role="tool")),
        ServerRule([ServerReply("", tool_calls=calls)], match=RequestMatch(model="attacker")),
    ]


@dataclass
class Outcome:
    result: RunResult
    bodies: list[str]
    """Every request body the provider received, as JSON text."""
    records: bytes
    """The result's JSON, every stored event's, and the store's own bytes."""


async def perform(
    attack: Attack, mode: Mode, scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> Outcome:
    flow = AGENT_FLOW
    if attack.step is not None:
        tool, tool_input = attack.step
        flow = STEP_FLOW.replace("TOOL", tool).replace("INPUT", tool_input)
    path = scene.tree / "flow.yaml"
    path.write_text(flow)
    store = scene.root / "store" / "runs.db"
    store.parent.mkdir()
    with ScriptedLLMServer(rules(attack, scene)) as server:
        for name, value in server.environ(api_key=scene.key).items():
            monkeypatch.setenv(name, value)
        during = attack.during(scene.tree) if attack.during is not None else nullcontext()
        async with Runtime(store=store, permissions=mode.policy) as runtime:
            with during:
                result = await runtime.run(path, run_id="attack")
            events = await runtime.store.events("attack")
        bodies = [json.dumps(r.body, ensure_ascii=False) for r in server.requests]
    records = b"\n".join(
        [msgspec.json.encode(result), *(msgspec.json.encode(e) for e in events)]
    ) + b"".join(p.read_bytes() for p in store.parent.iterdir() if p.is_file())
    return Outcome(result, bodies, records)


_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{12,}={0,2}")


def decoded_runs(text: str) -> Iterator[bytes]:
    """Every run of base64 characters in ``text``, decoded at each of the four alignments."""
    for run in _BASE64_RUN.findall(text):
        bare = run.rstrip("=")
        for start in range(4):
            chunk = bare[start:]
            if len(chunk) % 4 == 1:  # no whole byte in the last character: not base64 there
                chunk = chunk[:-1]
            for altchars in (b"+/", b"-_"):
                try:
                    yield base64.b64decode(chunk + "=" * (-len(chunk) % 4), altchars=altchars)
                except (binascii.Error, ValueError):
                    continue


def assert_no_key(text: str, key: str, where: str) -> None:
    for form in (key, key.removeprefix("sk-")):
        assert form not in text, f"the key ({form[:8]}...) went out in {where}"
    for decoded in decoded_runs(text):
        assert key.encode() not in decoded, f"the key went out base64-encoded in {where}"


def cases() -> Iterator[Any]:
    for name, attack in ATTACKS.items():
        for mode in MODES:
            if attack.modes is None or mode in attack.modes:
                yield pytest.param(name, mode, id=f"{name}-{mode}")


@pytest.mark.parametrize(("name", "mode_name"), list(cases()))
async def test_the_malicious_model_gets_nothing_from_outside(
    name: str, mode_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attack, mode = ATTACKS[name], MODES[mode_name]
    scene = Scene(tmp_path)
    scene.build(hazards=attack.hazards)
    before = scene.outside_files()

    outcome = await perform(attack, mode, scene, monkeypatch)

    assert outcome.result.status in ("completed", "failed"), outcome.result.error
    assert outcome.bodies, "the provider was never called"
    for index, body in enumerate(outcome.bodies):
        assert scene.canary not in body, f"the canary reached the provider (request {index})"
        assert_no_key(body, scene.key, f"request {index} to the provider")
    assert scene.canary.encode() not in outcome.records, "the canary is in the run's record"
    assert scene.key.encode() not in outcome.records, "the key is in the run's record"
    assert scene.outside_files() == before, "a file outside the tree changed or appeared"
    heard = "\n".join(outcome.bodies) + msgspec.json.encode(outcome.result).decode()
    if attack.tools & mode.refuses:
        assert DENIED in heard, f"{mode_name} should refuse {sorted(attack.tools)}"
    elif attack.told:
        assert attack.told in heard, f"the model was not told {attack.told!r}"


def test_the_suite_is_as_large_as_promised() -> None:
    """The issue's bar: at least 40 attacks of confinement, each in every mode."""
    everywhere = [a for a in ATTACKS.values() if a.modes is None]
    assert len(everywhere) >= 40
    assert {mode for attack in ATTACKS.values() for mode in attack.modes or ()} <= set(MODES)


# What a path cannot show ----------------------------------------------------------------


async def test_a_hard_link_is_a_file_of_the_tree(tmp_path: Path) -> None:
    """Documented, not defended: a hard link is the outside file under a name in the tree.

    Nothing about a path tells it apart (docs/tools.md says so); this test
    keeps that sentence true, and fails the day the tools start refusing
    files with several links.
    """
    outside, tree = tmp_path / "outside.txt", tmp_path / "tree"
    outside.write_text("linked\n")
    tree.mkdir()
    os.link(outside, tree / "hard.txt")
    (tree / "flow.yaml").write_text(
        "name: h\nsteps:\n  - {id: r, tool: read, toolInput: {path: hard.txt}}\n"
    )
    result = await run_flow(tree / "flow.yaml")
    assert result.steps["r"].content == "linked\n"


# The run ends: a FIFO and loops in the tree, through the command -----------------------

ENDS_FLOW = """
name: ends
agents:
  prowler:
    model: scripted
    script:
      - toolCalls:
          - {name: read, arguments: {path: fifo}}
          - {name: read, arguments: {path: loop}}
          - {name: write, arguments: {path: fifo, content: x}}
          - {name: grep, arguments: {pattern: ""}}
          - {name: grep, arguments: {pattern: "", path: fifo}}
          - {name: glob, arguments: {pattern: "**"}}
          - {name: glob, arguments: {pattern: "*/*/*/*/*/*/*/*/*/*/*/*"}}
      - "done"
steps:
  - id: prowl
    agent: prowler
    instructions: "Look around."
  - id: step-fifo
    tool: read
    toolInput: {path: fifo}
    onError: continue
  - id: step-grep
    tool: grep
    toolInput: {pattern: "", path: "."}
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("flags", [(), ("--sandbox",)], ids=["plain", "sandbox"])
def test_the_run_ends_with_a_fifo_and_loops_in_the_tree(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    """``cadenza run`` exits: nothing opened a FIFO, no walk went round a loop."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "flow.yaml").write_text(ENDS_FLOW)
    (tree / "notes.txt").write_text("notes\n")
    os.mkfifo(tree / "fifo")
    for name, target in {"loop": "loop", "here": ".", "again": ".", "up": ".."}.items():
        (tree / name).symlink_to(target)
    done = subprocess.run(
        [sys.executable, "-m", "cadenza", "run", "flow.yaml", "--store", "runs.db", *flags],
        cwd=tree,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=150,  # a hang fails here (the child is killed), not in a later test
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
