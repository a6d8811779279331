"""A flood addressed to a new target each time is refused past the run's bound.

Each inbox is bounded per step (``test_flood.py``), but a post to a target of
its own found an empty inbox every time: 200,000 posts of 1 KB grew RSS by
475 MB and the store by 1.1 GB. Now a run holds at most ``RUN_MAIL_BYTES``
(4 MiB) and ``RUN_MAIL_SIZE`` messages waiting for delivery, all its targets
together, and refuses a post past that with `MessageRefused` (HTTP 429),
recording nothing of it; a store keeps at most ``WAITING_COMMAND_BYTES`` of
posts for a run whose owner has not taken them. The full-size runs through
the store: ``python tests/hardening/flood_targets.py STORE 200000 store``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from cadenza import Runtime
from cadenza.actors.run import INBOX_BYTES, RUN_MAIL_BYTES
from cadenza.errors import MessageRefused
from cadenza.serve import create_app
from cadenza.store import WAITING_COMMAND_BYTES
from cadenza.testing import ServerRule
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._workflows import LISTENER

from .conftest import run_child

FLOOD = Path(__file__).with_name("flood_targets.py")
MiB = 1 << 20


def flood(tmp_path: Path, count: int, path: str) -> tuple[dict[str, Any], Path]:
    store = tmp_path / f"{path}-{count}.db"
    child = run_child([str(FLOOD), str(store), str(count), path], cwd=tmp_path, timeout=120)
    assert child.returncode == 0, child.stderr
    report: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return report, store


def assert_bounded(report: dict[str, Any]) -> None:
    assert report["rssPeakKiB"] - report["rssBeforeKiB"] <= 64 * 1024, report
    assert report["storeAfter"] - report["storeBefore"] <= 64 * MiB, report


@pytest.mark.timeout(180)
def test_a_flood_to_a_target_each_is_refused_past_the_runs_bound(tmp_path: Path) -> None:
    """200,000 posts of 1 KB to t0, t1, ...: 4 MiB are taken, the rest refused; RSS and store
    grow by at most 64 MB."""
    report, _ = flood(tmp_path, 200_000, "direct")
    taken = RUN_MAIL_BYTES // 1024
    assert report["status"] == "completed"
    assert (report["taken"], report["refused"]) == (taken, 200_000 - taken)
    assert report["errors"] == ["MessageRefused"]
    assert report["delivered"] == taken  # what was taken is recorded; nothing refused is
    assert report["undelivered"] == 1_000  # no step takes them: reported, the newest 1,000
    assert_bounded(report)


@pytest.mark.timeout(180)
def test_a_flood_through_the_store_meets_the_same_bound_at_the_runs_owner(
    tmp_path: Path,
) -> None:
    """20,000 posts through a second runtime: its owner takes them and keeps 4 MiB."""
    report, store = flood(tmp_path, 20_000, "store")
    assert report["status"] == "completed"
    assert report["taken"] + report["refused"] == 20_000
    assert set(report["errors"]) <= {"MessageRefused"}
    assert report["delivered"] == RUN_MAIL_BYTES // 1024
    assert_bounded(report)
    with sqlite3.connect(store) as connection:
        assert connection.execute("SELECT count(*) FROM commands").fetchone() == (0,)


@pytest.mark.timeout(180)
def test_posts_for_a_stalled_owner_fill_the_store_only_to_its_bound(tmp_path: Path) -> None:
    """10,000 posts for a run whose owner never looks: the store keeps 4 MiB, refuses the rest."""
    report, store = flood(tmp_path, 10_000, "stalled")
    with sqlite3.connect(store) as connection:
        query = "SELECT count(*), sum(length(body)) FROM commands"
        kept, size = connection.execute(query).fetchone()
    assert kept == report["taken"]
    assert WAITING_COMMAND_BYTES - 2 * 1024 < size <= WAITING_COMMAND_BYTES
    assert report["refused"] == 10_000 - kept
    assert report["errors"] == ["MessageRefused"]
    assert report["delivered"] == 0
    assert_bounded(report)


async def test_a_post_past_the_bound_is_429_and_leaves_no_trace(tmp_path: Path) -> None:
    """Over HTTP the refusal is 429 naming the bound; what was refused is not in the run."""
    (tmp_path / "parked.py").write_text(
        "import anyio\n\nasync def park(context):\n    await anyio.sleep_forever()\n"
    )
    (tmp_path / "park.yaml").write_text(
        "name: park\nsteps:\n  - {id: park, handler: 'parked:park'}\n"
    )
    text = "m" * (RUN_MAIL_BYTES // 16)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        transport = httpx.ASGITransport(app=create_app(runtime, root=tmp_path))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            started = await client.post("/api/runs", json={"path": "park.yaml", "runId": "p"})
            assert started.status_code == 201, started.text
            for n in range(16):
                posted = await client.post(
                    "/api/runs/p/messages", json={"target": f"t{n}", "text": text}
                )
                assert posted.status_code == 202, posted.text
            refused = await client.post(
                "/api/runs/p/messages", json={"target": "t16", "text": text}
            )
            assert refused.status_code == 429
            error = refused.json()["error"]
            assert error["type"] == "MessageRefused"
            assert f"its bound is {RUN_MAIL_BYTES}" in error["message"]
            handle = runtime.handle("p")
            assert handle is not None
            with pytest.raises(MessageRefused, match=f"a step's inbox holds {INBOX_BYTES}"):
                await handle.post_message("t17", "x" * (INBOX_BYTES + 1))
            handle.cancel("enough")
            result = await handle.result()
    assert sorted(m.to for m in result.undelivered) == sorted(f"t{n}" for n in range(16))
    assert "t16" not in {m.to for m in result.messages}


async def test_what_waits_still_counts_after_a_resume(
    tmp_path: Path, model_server: StartLLMServer
) -> None:
    """Interrupted with its bound full and resumed, a run refuses a post: replayed mail counts."""
    flow = tmp_path / "listen.yaml"
    flow.write_text(LISTENER)
    hold = threading.Event()
    server = model_server([ServerRule([{"content": "heard", "hold": hold}])])
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        handle = await runtime.start(flow, run_id="r")
        await anyio.to_thread.run_sync(server.wait_for_requests, 1)
        for target in "abcd":  # four steps that do not exist: 4 MiB wait for them
            await handle.post_message(target, "m" * INBOX_BYTES)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        handle = await runtime.resume("r")
        await anyio.to_thread.run_sync(server.wait_for_requests, 2)  # listen runs again
        with pytest.raises(MessageRefused, match="bytes of messages already wait"):
            await handle.post_message("e", "one more")
        hold.set()
        result = await handle.result()
    assert result.status == "completed", result.error
    assert [m.to for m in result.undelivered] == list("abcd")
