"""CURVE: only workers with an authorized key and the right server key get work."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cadenza import Runtime
from cadenza.errors import InsecureEndpoint, KeysError
from cadenza.remote import Dispatcher, WorkerEvent, generate_keys, load_worker_keys

from .conftest import SpawnWorker, Watch, worker_names

FLOW = """
name: guarded
inputs:
  items: {type: array}
steps:
  - id: each
    command: 'echo "$ITEM"'
    env: {ITEM: "{{ item }}"}
    loop: {forEach: "inputs.items"}
"""


def _refusals(events: list[WorkerEvent]) -> set[str]:
    return {e.data["code"] for e in events if e.type == "peer_refused" and e.data}


async def test_only_a_worker_with_an_authorized_key_gets_work(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    """No keys, a wrong server key and an unknown client key are refused and reported;
    the worker with a valid key runs every step."""
    keys, unknown, wrong_server = tmp_path / "keys", tmp_path / "unknown", tmp_path / "wrong"
    generate_keys(keys)
    generate_keys(unknown)  # a key pair the supervisor never authorized...
    shutil.copyfile(keys / "server.key", unknown / "server.key")  # ...for the right server
    generate_keys(wrong_server)  # the right worker pair, but another server's key
    for name in ("worker.key", "worker.key_secret"):
        shutil.copyfile(keys / name, wrong_server / name)
    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW)

    dispatcher = Dispatcher("tcp://127.0.0.1:*", curve_keys=keys, heartbeat=0.2)
    events: Watch[WorkerEvent] = Watch()
    dispatcher.subscribe(events)
    async with Runtime(workers=dispatcher) as runtime:
        spawn_worker(dispatcher.endpoint, "no-keys")
        spawn_worker(dispatcher.endpoint, "wrong-server", "--curve-keys", str(wrong_server))
        spawn_worker(dispatcher.endpoint, "unknown-key", "--curve-keys", str(unknown))
        spawn_worker(dispatcher.endpoint, "valid", "--curve-keys", str(keys))
        await events.wait_for(
            lambda e: (
                _refusals(e) >= {"no-curve", "bad-handshake", "unknown-key"}
                and "valid" in worker_names(e, "worker_connected")
            )
        )
        result = await runtime.run(flow, inputs={"items": list(range(8))})
        workers = dispatcher.workers

    assert result.status == "completed", result.error
    assert {r.worker for a, r in result.steps.items() if a.startswith("each[")} == {"valid"}
    assert worker_names(events.items, "worker_connected") == {"valid"}
    assert [w.name for w in workers] == ["valid"]
    refused_keys = {e.data.get("key") for e in events.items if e.type == "peer_refused" and e.data}
    assert load_worker_keys(unknown).public.decode() in refused_keys
    assert dispatcher.statistics().refused_peers >= 3


def test_a_public_endpoint_without_keys_is_refused() -> None:
    """Binding beyond loopback needs CURVE keys, or an explicit insecure=True."""
    with pytest.raises(InsecureEndpoint, match="--insecure"):
        Runtime(workers="tcp://0.0.0.0:5555")
    Runtime(workers="tcp://0.0.0.0:5555", insecure=True)  # allowed, not yet bound
    Runtime(workers="tcp://127.0.0.1:5555")


def test_keys_are_generated_once_per_name(tmp_path: Path) -> None:
    """A key pair is never overwritten (that would lock out its workers); a new name adds one."""
    written = {p.relative_to(tmp_path).as_posix() for p in generate_keys(tmp_path)}
    assert written == {
        "server.key",
        "server.key_secret",
        "worker.key",
        "worker.key_secret",
        "authorized/worker.key",
    }
    assert (tmp_path / "worker.key_secret").stat().st_mode & 0o077 == 0
    with pytest.raises(KeysError, match="already exists"):
        generate_keys(tmp_path)
    added = {p.name for p in generate_keys(tmp_path, name="gpu-1")}
    assert added == {"gpu-1.key", "gpu-1.key_secret"}
    assert load_worker_keys(tmp_path, name="gpu-1").public != load_worker_keys(tmp_path).public


def test_a_dispatcher_without_authorized_keys_is_refused(tmp_path: Path) -> None:
    """A key directory with nobody authorized is an error, not a supervisor nobody can join."""
    generate_keys(tmp_path)
    (tmp_path / "authorized" / "worker.key").unlink()
    with pytest.raises(KeysError, match="no authorized worker keys"):
        Dispatcher("tcp://127.0.0.1:*", curve_keys=tmp_path)
