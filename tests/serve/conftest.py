"""Fixtures for the viewer's tests: an API client over ASGI, workflows, a held chat model."""

from __future__ import annotations

import textwrap
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import httpx
import pytest

from cadenza import RunResult, Runtime
from cadenza.serve import Limits, create_app
from cadenza.testing import RequestMatch, ServerReply, ServerRule
from cadenza.testing.pytest_plugin import StartLLMServer

OpenViewer = Callable[..., AbstractAsyncContextManager[tuple[Runtime, httpx.AsyncClient]]]
ViewRun = Callable[
    [str, str, str], AbstractAsyncContextManager[tuple[Runtime, httpx.AsyncClient, RunResult]]
]

REFLECTION = """\
name: watched-reflection
description: A writer drafts and a critic reviews until it approves; then a person decides.
agents:
  writer:
    prompt: "You are a writer. Write one short paragraph."
    model: "openai:gpt-test"
  critic:
    prompt: "You are a critic. Reply APPROVED when the draft is good."
    model: "openai:gpt-test"
steps:
  - id: reflection
    loop:
      maxIterations: 4
      until: "steps.critique.content.contains('APPROVED')"
      steps:
        - id: write
          agent: writer
          instructions: "Write about actor runtimes."
        - id: critique
          agent: critic
          dependsOn: [write]
          instructions: "Review the draft."
  - id: approve
    dependsOn: [reflection]
    human:
      prompt: "Publish the final draft?"
      schema:
        type: object
        properties: {publish: {type: boolean}, note: {type: string}}
        required: [publish]
output: "steps.approve.content"
"""

SCRIPTED = """\
name: scripted-reflection
agents:
  writer: {prompt: "You are a writer.", script: ["Draft one", "Draft two"]}
  critic: {prompt: "You are a critic.", script: ["Too vague", "APPROVED"]}
steps:
  - id: reflection
    loop:
      maxIterations: 4
      until: "steps.critique.content.contains('APPROVED')"
      steps:
        - {id: write, agent: writer, instructions: "Write."}
        - {id: critique, agent: critic, dependsOn: [write], instructions: "Review."}
  - id: approve
    dependsOn: [reflection]
    human:
      prompt: "Publish it?"
      schema: {type: object, properties: {publish: {type: boolean}}, required: [publish]}
output: "steps.approve.content"
"""

ECHO = """\
name: echo
steps:
  - {id: hello, command: "echo hello"}
output: "steps.hello.content"
"""


def write(root: Path, name: str, text: str) -> Path:
    """Writes a workflow file under ``root``; returns its path."""
    path = root / name
    path.write_text(textwrap.dedent(text))
    return path


def write_parked(root: Path) -> Path:
    """Writes ``park.yaml``, one step ``park`` that waits until cancelled; returns its path."""
    (root / "parked.py").write_text(
        "import anyio\n\nasync def park(context):\n    await anyio.sleep_forever()\n"
    )
    return write(root, "park.yaml", "name: park\nsteps:\n  - {id: park, handler: 'parked:park'}\n")


@pytest.fixture
def open_viewer() -> OpenViewer:
    """Opens a runtime on a store and the viewer's API over it, as an httpx client."""

    @asynccontextmanager
    async def open_(
        root: Path,
        *,
        store: Path | None = None,
        token: str | None = None,
        limits: Limits | None = None,
    ) -> AsyncIterator[tuple[Runtime, httpx.AsyncClient]]:
        async with Runtime(store=store or root / "runs.db") as runtime:
            app = create_app(runtime, root=root, token=token, limits=limits or Limits())
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1:8321"
            ) as client:
                yield runtime, client

    return open_


@pytest.fixture
def view_run(tmp_path: Path, open_viewer: OpenViewer) -> ViewRun:
    """The viewer over ``tmp_path`` after a first run: ``view_run(name, text, run_id)``
    writes ``text`` as ``name``, runs it as ``run_id`` to its end or its first wait, and
    opens the viewer; it gives the runtime, the client and that run's result."""

    @asynccontextmanager
    async def view(
        name: str, text: str, run_id: str
    ) -> AsyncIterator[tuple[Runtime, httpx.AsyncClient, RunResult]]:
        write(tmp_path, name, text)
        async with open_viewer(tmp_path) as (runtime, client):
            yield runtime, client, await runtime.run(tmp_path / name, run_id=run_id)

    return view


class HeldCritic:
    """Chat-model rules for `REFLECTION`: the critic's answers wait for the test.

    The writer answers at once ("Draft one", "Draft two"); the critic's first
    answer ("Too vague") waits for ``first``, its second ("APPROVED") for ``second``.
    """

    def __init__(self) -> None:
        self.first = threading.Event()
        self.second = threading.Event()
        self.rules = [
            ServerRule(
                ["Draft one", "Draft two"], match=RequestMatch(system="You are a writer"), name="w"
            ),
            ServerRule(
                [
                    ServerReply("Too vague: name a runtime.", hold=self.first),
                    ServerReply("APPROVED", hold=self.second),
                ],
                match=RequestMatch(system="You are a critic"),
                name="critic",
            ),
        ]

    def release(self) -> None:
        """Lets every held answer go (at teardown, so nothing waits)."""
        self.first.set()
        self.second.set()


@pytest.fixture
def critic(model_server: StartLLMServer) -> Iterator[HeldCritic]:
    """A chat model whose critic waits for the test; OPENAI_* point at it."""
    held = HeldCritic()
    model_server(held.rules)
    try:
        yield held
    finally:
        held.release()
