"""A slow consumer at full size: 1,000,000 tells to an actor that takes 1 ms each.

    python benchmarks/soak_inbox.py                 # 1,000,000 messages (~20 minutes)
    python benchmarks/soak_inbox.py --messages 20000

The producer sends through a bounded inbox (``--inbox``, 100) with the awaiting
``Supervisor.tell``: it must be held back (never more than the inbox ahead of the
consumer), resident memory must stay within 64 MB of where it started, and every
message must arrive, in order, with no dead letter. Prints the figures and exits 1
if any of the three fails. The CI-sized check is
``tests/hardening/test_slow_consumer.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from cadenza.kernel import Actor, DeadLetter, Supervisor

RSS_LIMIT = 64 * 1024 * 1024


def rss() -> int:
    """Current resident set size in bytes (Linux ``/proc``)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


class SlowConsumer(Actor):
    """Takes 1 ms per message; checks order as it goes."""

    def __init__(self, total: int, done: asyncio.Event) -> None:
        self.total = total
        self.done = done
        self.received = 0
        self.out_of_order = 0

    async def receive(self, message: Any) -> None:
        await asyncio.sleep(0.001)
        if message != self.received:
            self.out_of_order += 1
        self.received += 1
        if self.received == self.total:
            self.done.set()


async def soak(total: int, inbox: int, every: int) -> int:
    dead: list[DeadLetter] = []
    done = asyncio.Event()
    consumer = SlowConsumer(total, done)
    async with Supervisor(on_dead_letter=dead.append) as supervisor:
        supervisor.spawn("consumer", lambda: consumer, inbox_size=inbox)
        baseline = peak = rss()
        furthest_ahead = 0
        started = time.monotonic()
        for sent in range(total):
            await supervisor.tell("consumer", sent)
            ahead = sent + 1 - consumer.received
            furthest_ahead = max(furthest_ahead, ahead)
            if sent % every == 0:
                now = rss()
                peak = max(peak, now)
                rate = consumer.received / max(time.monotonic() - started, 1e-9)
                print(
                    f"{sent:>9} sent  {consumer.received:>9} handled  {rate:7.0f}/s  "
                    f"RSS {now / 2**20:7.1f} MiB  ahead {ahead}",
                    flush=True,
                )
        await done.wait()
        elapsed = time.monotonic() - started
        peak = max(peak, rss())
    growth = peak - baseline
    print()
    print(f"messages            {total:,} through an inbox of {inbox}")
    print(f"elapsed             {elapsed:,.1f} s ({total / elapsed:,.0f} messages/s)")
    print(f"RSS at start        {baseline / 2**20:,.1f} MiB")
    print(f"RSS peak            {peak / 2**20:,.1f} MiB (growth {growth / 2**20:,.1f} MiB)")
    print(f"producer ahead      at most {furthest_ahead} messages (inbox {inbox})")
    print(f"delivered           {consumer.received:,} (out of order: {consumer.out_of_order})")
    print(f"dead letters        {len(dead)}")
    ok = (
        growth < RSS_LIMIT
        and furthest_ahead <= inbox + 2
        and consumer.received == total
        and consumer.out_of_order == 0
        and not dead
    )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--inbox", type=int, default=100)
    parser.add_argument("--every", type=int, default=50_000, help="print a sample this often")
    args = parser.parse_args()
    return asyncio.run(soak(args.messages, args.inbox, args.every))


if __name__ == "__main__":
    sys.exit(main())
