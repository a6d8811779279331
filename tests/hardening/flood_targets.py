"""A message flood by address: posts of 1 KB, each to a target of its own.

Run as a script (``python tests/hardening/flood_targets.py STORE COUNT PATH``)
it starts a run on a SQLite store at STORE whose one agent step's model call is
held, posts COUNT messages of 1 KB to ``t0``, ``t1``, ... (targets no step of
the run will ever take), lets the run end, and prints one JSON object: how
many posts were taken and refused, the resident set size before the flood and
its peak and end after it (``VmRSS``/``VmHWM`` of ``/proc/self/status``), and
the store's size (the file with its WAL) before the flood and after the run.

PATH ``direct`` posts through the runtime that drives the run; ``store``
through a second runtime on the same file, which records each post as a
command in the store for the first to take (as a replica would); ``stalled``
the same, but the first never looks for commands (a stalled owner).
``test_flood_targets.py`` runs it in a child process; the figures are quoted
in docs/hardening.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: find tests/
from tests._workflows import LISTENER

POSTERS = 16
"""Posts in flight at once through the store (each waits for its commit: they share them)."""


def status_kib(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def reset_peak() -> None:
    """Starts ``VmHWM`` over from the current RSS (Linux 4.0+; else it keeps the old peak)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def store_bytes(store: Path) -> int:
    """The store's size on disk: the file, its WAL and shared-memory index."""
    return sum(path.stat().st_size for path in store.parent.glob(store.name + "*"))


async def taken_up(store: Path) -> None:
    """Waits until the run's owner has taken every command from the store."""
    import sqlite3

    import anyio

    def waiting() -> int:
        with sqlite3.connect(store) as connection:
            return int(connection.execute("SELECT count(*) FROM commands").fetchone()[0])

    with anyio.fail_after(60):
        while await anyio.to_thread.run_sync(waiting):  # noqa: ASYNC110 (another process's table)
            await anyio.sleep(0.05)


async def flood(store: Path, count: int, path: str, size: int = 1024) -> dict[str, Any]:
    import anyio

    from cadenza import Runtime
    from cadenza.errors import CadenzaError
    from cadenza.testing import ScriptedLLMServer, ServerRule

    hold = threading.Event()
    text = "x" * size
    taken = refused = 0
    errors: set[str] = set()

    with tempfile.TemporaryDirectory() as tmp:
        flow = Path(tmp) / "flow.yaml"
        flow.write_text(LISTENER)
        with ScriptedLLMServer([ServerRule([{"content": "heard", "hold": hold}])]) as server:
            os.environ.update(server.environ())
            owner, other = Runtime(store=store), Runtime(store=store)
            # A stalled owner never looks: the posts pile up in the store.
            owner.command_interval = 3600.0 if path == "stalled" else 0.05
            async with owner, other:
                handle = await owner.start(flow, run_id="flood")
                await anyio.to_thread.run_sync(server.wait_for_requests, 1)
                post = handle.post_message if path == "direct" else None

                async def one(n: int) -> None:
                    nonlocal taken, refused
                    try:
                        if post is not None:
                            await post(f"t{n}", text)
                        else:
                            await other.post_message("flood", f"t{n}", text)
                        taken += 1
                    except CadenzaError as error:
                        refused += 1
                        errors.add(type(error).__name__)

                async def poster(first: int, last: int) -> None:
                    for n in range(first, last, posters):
                        await one(n)

                async def posts(first: int, last: int) -> None:
                    async with anyio.create_task_group() as group:
                        for n in range(first, first + posters):
                            group.start_soon(poster, n, last)

                posters = 1 if path == "direct" else POSTERS
                rss_start, store_before = status_kib("VmRSS"), store_bytes(store)
                # Through the store, the first hundredth starts what any busy process
                # starts once (the worker threads of the store's reads, and their
                # allocator arenas): the flood's memory is measured from there, its
                # store from the start.
                warm = 0 if path == "direct" else count // 100
                await posts(0, warm)
                reset_peak()
                rss_before = status_kib("VmRSS")
                await posts(warm, count)
                if path == "store":
                    await taken_up(store)
                hold.set()
                result = await handle.result()
                rss_peak, rss_after = status_kib("VmHWM"), status_kib("VmRSS")
    return {
        "status": result.status,
        "taken": taken,
        "refused": refused,
        "errors": sorted(errors),
        "delivered": len(result.messages) + result.messages_omitted,
        "undelivered": len(result.undelivered),
        "rssStartKiB": rss_start,
        "rssBeforeKiB": rss_before,
        "rssPeakKiB": rss_peak,
        "rssAfterKiB": rss_after,
        "storeBefore": store_before,
        "storeAfter": store_bytes(store),
    }


def main() -> None:
    import anyio

    store, count, path = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 1024
    json.dump(anyio.run(flood, store, count, path, size), sys.stdout)


if __name__ == "__main__":
    main()
