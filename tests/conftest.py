"""Shared fixtures: workflow files and runs of them (``write_flow``, ``run_yaml``), a
scripted chat model (``llm_server``, ``model_server``), run stores of each backend.

The helpers they are built on are in ``tests/_helpers.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import textwrap
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import pytest

from cadenza import RunResult, _redact
from cadenza.store import RunStore, make_store
from cadenza.testing import RuleLike, ScriptedLLMServer
from cadenza.testing.pytest_plugin import StartLLMServer
from cadenza.testing.pytest_plugin import llm_server as llm_server
from tests._helpers import run_flow
from tests._postgres import Cluster, started_cluster, unavailable

_counter = itertools.count()

WriteFlow = Callable[..., Path]


class RunYaml(Protocol):
    """The ``run_yaml`` fixture: write a workflow as ``write_flow`` does, run it."""

    def __call__(
        self,
        yaml_text: str,
        *,
        handlers: str | None = None,
        inputs: Mapping[str, Any] | None = None,
    ) -> Awaitable[RunResult]: ...


Wire = Literal["openai", "anthropic", "gemini", "vertex-anthropic", "bedrock"]
"""The wire formats a scripted chat model speaks."""


@pytest.fixture
def write_flow(tmp_path: Path) -> WriteFlow:
    """Writes a workflow (and optional handler module) into tmp_path; returns its path.

    ``handlers`` is Python source; it is saved as a uniquely named module and the
    token ``HANDLERS`` in the YAML is replaced by that module's name.
    """

    def write(yaml_text: str, *, handlers: str | None = None, name: str = "flow.yaml") -> Path:
        text = textwrap.dedent(yaml_text)
        if handlers is not None:
            module = f"handlers_{next(_counter)}_{tmp_path.name.replace('-', '_')}"
            (tmp_path / f"{module}.py").write_text(textwrap.dedent(handlers))
            text = text.replace("HANDLERS", module)
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


@pytest.fixture
def run_yaml(write_flow: WriteFlow) -> RunYaml:
    """Writes a workflow (and its handler module) as ``write_flow`` does; runs it to its result."""

    async def run(
        yaml_text: str, *, handlers: str | None = None, inputs: Mapping[str, Any] | None = None
    ) -> RunResult:
        return await run_flow(write_flow(yaml_text, handlers=handlers), inputs=inputs)

    return run


@pytest.fixture
def model_server(llm_server: StartLLMServer, monkeypatch: pytest.MonkeyPatch) -> StartLLMServer:
    """Starts a scripted chat model that the test's runs talk to.

    Like ``llm_server``, and the provider's ``*_BASE_URL`` and ``*_API_KEY`` point
    at it for the rest of the test, as a user's environment would.
    """

    def start(rules: Sequence[RuleLike], *, wire: Wire = "openai") -> ScriptedLLMServer:
        server = llm_server(rules, wire=wire)
        for name, value in server.environ().items():
            monkeypatch.setenv(name, value)
        return server

    return start


@pytest.fixture(autouse=True)
def _forget_secrets_afterwards() -> Iterator[None]:
    """Each test starts with the secrets known before it, not with every earlier test's.

    The registry is process-wide, as in a service; a whole session would otherwise
    gather hundreds of keys, and scrubbing costs grow with them (docs/hardening.md).
    """
    known = _redact._known
    yield
    _redact._known = known


# -- run stores: one conformance suite, every backend -----------------------------------

_databases = itertools.count()


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    """A throwaway PostgreSQL server for the whole session (tests/_postgres.py).

    Skips, saying why, where PostgreSQL is not installed (``apt-get install postgresql``).
    """
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    with started_cluster() as cluster:
        yield cluster


async def _create_database(admin_url: str, name: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(admin_url)
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()


def new_database(cluster: Cluster) -> str:
    """Creates an empty database on ``cluster``; its URL, password included."""
    name = f"test_{next(_databases)}"
    asyncio.run(_create_database(cluster.url(), name))
    return cluster.url(name)


@pytest.fixture
def postgres_url(postgres_cluster: Cluster) -> str:
    """The URL (password included) of a database of its own for this test, empty."""
    return new_database(postgres_cluster)


@dataclass(frozen=True)
class StoreFactory:
    """Makes stores of one backend, all on the same data (a reopened store sees it).

    Attributes:
        kind: ``memory``, ``sqlite`` or ``postgres``.
        spec: What ``--store`` and ``Runtime(store=...)`` take for it: a path, a
            URL, or None for memory (where every store made is a new, empty one).
    """

    kind: str
    spec: str | None

    def __call__(self) -> RunStore:
        return make_store(self.spec)

    @asynccontextmanager
    async def opened(self, count: int) -> AsyncIterator[list[RunStore]]:
        """``count`` stores on this data, as that many processes have, open for the block."""
        async with AsyncExitStack() as stack:
            stores = [self() for _ in range(count)]
            for store in stores:
                await store.open()
                stack.push_async_callback(store.close)
            yield stores


def assert_no_password(spec: str | None, *texts: str) -> None:
    """Fails if the password of the store URL ``spec`` appears in any of ``texts``."""
    password = None if spec is None else urllib.parse.urlsplit(spec).password
    if password:
        for text in texts:
            assert password not in text, text


STORE_KINDS = ("memory", "sqlite", "postgres")
DURABLE_KINDS = ("sqlite", "postgres")


def _factory(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    if kind == "postgres":
        return StoreFactory(kind, request.getfixturevalue("postgres_url"))
    if kind == "sqlite":
        return StoreFactory(kind, str(tmp_path / "runs.db"))
    return StoreFactory(kind, None)


@pytest.fixture(params=STORE_KINDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """Each backend in turn: memory, SQLite, PostgreSQL (skipped where it is not installed)."""
    return _factory(request.param, request, tmp_path)


@pytest.fixture(params=DURABLE_KINDS)
def durable_store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """Each backend that outlives its process: SQLite, PostgreSQL."""
    return _factory(request.param, request, tmp_path)


@pytest.fixture
async def store(store_factory: StoreFactory) -> AsyncIterator[RunStore]:
    """An open store of each backend, closed after the test."""
    store = store_factory()
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts (it appends them); every one is gone when it ends."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
