"""A message flood cannot fill memory or the store: drops are counted, not kept.

200,000 posts of 1 KB to one agent whose model call is held: the inbox takes
1 MiB of text (1,024 messages), the rest are dropped. Dropped messages used to
be recorded whole (a ``message_sent`` and a ``message_dropped`` event each, and
every one in ``result.messages``): 1 GB of RSS and 1.2 GB of store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .conftest import run_child

FLOOD = Path(__file__).with_name("flood.py")


def flood(tmp_path: Path, count: int) -> dict[str, Any]:
    child = run_child([str(FLOOD), str(tmp_path / f"flood-{count}.db"), str(count)], cwd=tmp_path)
    assert child.returncode == 0, child.stderr
    report: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return report


def test_a_flood_is_counted_not_kept(tmp_path: Path) -> None:
    small, large = flood(tmp_path, 20_000), flood(tmp_path, 200_000)
    assert large["status"] == "completed"
    accepted = (1 << 20) // 1024
    assert large["drops"][-1] == 200_000 - accepted  # every drop counted
    assert len(large["drops"]) <= 200_000 // 1_000 + 2  # coalesced events
    assert (large["messages"], large["omitted"]) == (1_000, accepted - 1_000)
    assert large["rssAfterKiB"] - large["rssBeforeKiB"] < 64 * 1024
    assert large["storeBytes"] < 10 * 1024 * 1024
    # What the store holds does not grow with the flood: only accepted messages.
    assert large["storeBytes"] < small["storeBytes"] * 1.1
