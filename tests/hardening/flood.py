"""A message flood: 200,000 posts of 1 KB to one agent whose model call is held.

Run as a script (``python tests/hardening/flood.py STORE [COUNT]``) it floods a
run on a SQLite store at STORE and prints one JSON object: the result's message
count and omitted count, the drop counts its ``message_dropped`` events report,
the peak RSS before and after the flood, and the store's size after the run.
``test_flood.py`` runs it in a child process; the figures are quoted in
docs/hardening.md.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: find tests/
from tests._workflows import LISTENER


async def flood(store: Path, count: int) -> dict[str, object]:
    import anyio

    from cadenza import Event, Runtime
    from cadenza.testing import ScriptedLLMServer, ServerRule

    hold = threading.Event()
    drops: list[int] = []

    def watch(event: Event) -> None:
        if event.type == "message_dropped" and event.data is not None:
            drops.append(int(event.data["dropped"]))

    with tempfile.TemporaryDirectory() as tmp:
        flow = Path(tmp) / "flow.yaml"
        flow.write_text(LISTENER)
        with ScriptedLLMServer([ServerRule([{"content": "heard", "hold": hold}])]) as server:
            os.environ.update(server.environ())
            text = "x" * 1024
            async with Runtime(store=store) as runtime:
                handle = await runtime.start(flow, on_event=watch)
                await anyio.to_thread.run_sync(server.wait_for_requests, 1)
                before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                for _ in range(count):
                    await handle.post_message("listen", text)
                hold.set()
                result = await handle.result()
                after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "status": result.status,
        "messages": len(result.messages),
        "omitted": result.messages_omitted,
        "drops": drops,
        "rssBeforeKiB": before,
        "rssAfterKiB": after,
        "storeBytes": sum(p.stat().st_size for p in store.parent.glob(store.name + "*")),
    }


def main() -> None:
    import anyio

    store = Path(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    json.dump(anyio.run(flood, store, count), sys.stdout)


if __name__ == "__main__":
    main()
