"""CURVE: only workers with an authorized key and the right server key get work."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import anyio
import pytest

from cadenza import Runtime
from cadenza.errors import InsecureEndpoint, KeysError
from cadenza.remote import Dispatcher, Worker, WorkerEvent, generate_keys, load_worker_keys
from tests._helpers import CLI, DEADLINE, Sink

from .conftest import ECHO_EACH, SpawnWorker, worker_names


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
    flow.write_text(ECHO_EACH)

    dispatcher = Dispatcher("tcp://127.0.0.1:*", curve_keys=keys, heartbeat=0.2)
    events: Sink[WorkerEvent] = Sink()
    dispatcher.subscribe(events)
    async with Runtime(workers=dispatcher) as runtime:
        spawn_worker(dispatcher.endpoint, "no-keys")
        spawn_worker(dispatcher.endpoint, "wrong-server", "--curve-keys", str(wrong_server))
        spawn_worker(dispatcher.endpoint, "unknown-key", "--curve-keys", str(unknown))
        spawn_worker(dispatcher.endpoint, "valid", "--curve-keys", str(keys))
        await events.until(
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


def _keys_of_every_kind(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The supervisor's keys; a pair it never authorized; the right pair, another server's key."""
    keys, unknown, wrong_server = tmp_path / "keys", tmp_path / "unknown", tmp_path / "wrong"
    generate_keys(keys)
    generate_keys(unknown)
    shutil.copyfile(keys / "server.key", unknown / "server.key")
    generate_keys(wrong_server)
    for name in ("worker.key", "worker.key_secret"):
        shutil.copyfile(keys / name, wrong_server / name)
    return keys, unknown, wrong_server


def _worker(endpoint: str, name: str, *options: str) -> subprocess.Popen[bytes]:
    """``cadenza worker`` in the foreground, its stderr (the log lines) to read."""
    command = [*CLI, "worker", "--connect", endpoint, "--name", name, *options]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def _read_until(process: subprocess.Popen[bytes], *markers: str) -> list[str]:
    """The process's stderr lines up to the first that holds every one of ``markers``."""
    assert process.stderr is not None
    lines: list[str] = []
    with anyio.fail_after(DEADLINE):
        while not lines or not all(marker in lines[-1] for marker in markers):
            line = await anyio.to_thread.run_sync(process.stderr.readline, abandon_on_cancel=True)
            assert line, f"the worker exited ({process.poll()}) before {markers!r}: {lines}"
            lines.append(line.decode())
    return lines


def _end(processes: Iterable[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.kill()
        process.communicate()  # reaps it and closes its pipe


async def test_a_refused_worker_says_why_and_how_to_fix_it(tmp_path: Path) -> None:
    """Only the supervisor saw the refusal; now the worker says it too, once per cause,
    with the fix (the flag to pass, the key to authorize), and keeps trying, saying why."""
    keys, unknown, wrong_server = _keys_of_every_kind(tmp_path)
    async with (
        Dispatcher("tcp://127.0.0.1:*", curve_keys=keys, heartbeat=0.2) as curve,
        Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2) as plain,
    ):
        workers = {
            "no-curve": _worker(curve.endpoint, "no-keys"),
            "bad-handshake": _worker(curve.endpoint, "w", "--curve-keys", str(wrong_server)),
            "unknown-key": _worker(curve.endpoint, "u", "--curve-keys", str(unknown)),
            "unexpected-curve": _worker(plain.endpoint, "k", "--curve-keys", str(keys)),
        }
        said: dict[str, list[str]] = {}

        async def listen(code: str) -> None:
            # On a busy machine a first handshake can be cut off before its refusal is
            # read: the worker says that unsure cause, and the sure one at a later try.
            said[code] = await _read_until(workers[code], "worker_reconnecting", f"='{code}'")

        try:
            async with anyio.create_task_group() as group:
                for code in workers:
                    group.start_soon(listen, code)
            running = [code for code, process in workers.items() if process.poll() is None]
        finally:
            _end(workers.values())

    assert running == list(workers)  # none gave up
    fixes = {
        "no-curve": "start it with --curve-keys DIR",
        "bad-handshake": "copy the supervisor's server.key there",
        "unknown-key": f"key {load_worker_keys(unknown).public.decode()}: copy",
        "unexpected-curve": "start this worker without --curve-keys",
    }
    for code, lines in said.items():
        refusals = [line for line in lines if "worker_refused" in line]
        codes = [line.split("code='", 1)[1].split("'", 1)[0] for line in refusals]
        # Each cause once, though every retry was refused; the sure one last. (A session
        # whose handshakes were only cut off says so, unsure, before it reconnects.)
        assert codes[-1] == code, lines
        assert len(set(codes)) == len(codes), lines
        assert set(codes[:-1]) <= {"bad-handshake", "handshake"}, lines
        assert " [error   ] worker_refused " in refusals[-1]
        assert fixes[code] in refusals[-1]
        assert f"cause='{code}'" in lines[-1]  # worker_reconnecting says why


async def test_a_refused_worker_gets_in_once_the_supervisor_is_reconfigured(
    tmp_path: Path,
) -> None:
    """The worker keeps trying: a supervisor restarted without keys on the same endpoint
    takes it, with nothing done to the worker."""
    keys, _, _ = _keys_of_every_kind(tmp_path)
    async with Dispatcher("tcp://127.0.0.1:*", curve_keys=keys, heartbeat=0.2) as curve:
        endpoint = curve.endpoint
        worker = _worker(endpoint, "patient")
        try:
            await _read_until(worker, "worker_refused")
        except BaseException:
            _end([worker])
            raise
    try:
        async with Dispatcher(endpoint, heartbeat=0.2) as plain:
            events: Sink[WorkerEvent] = Sink()
            plain.subscribe(events)
            await events.until(lambda e: "patient" in worker_names(e, "worker_connected"))
    finally:
        _end([worker])


async def test_a_second_supervisor_in_one_process_still_answers_handshakes(
    tmp_path: Path,
) -> None:
    """The first dispatcher's ZAP handler, stopped, took the next one's with it: a second
    supervisor in one process (a test, a service restarting its runtime) answered none."""
    keys, unknown, _ = _keys_of_every_kind(tmp_path)
    for _ in range(2):
        async with Dispatcher("tcp://127.0.0.1:*", curve_keys=keys, heartbeat=0.2) as dispatcher:
            events: Sink[WorkerEvent] = Sink()
            dispatcher.subscribe(events)
            worker = Worker(dispatcher.endpoint, curve_keys=unknown)
            async with anyio.create_task_group() as group:
                group.start_soon(worker.run)
                await events.until(lambda e: "unknown-key" in _refusals(e))
                worker.stop()
