"""A mixed soak run: loops, graphs, forEach and agents, for as long as you ask.

    python benchmarks/soak.py --minutes 30
    python benchmarks/soak.py --minutes 3 --workers 2 --kill-every 60

Keeps ``--concurrency`` runs going at once on one `Runtime` with a SQLite store,
cycling through five workflows: a repeat-until loop, a graph, a 200-item forEach,
agents (a writer and a judged loop) against a local `ScriptedLLMServer` that
answers 429 and 500 between good replies, and a command chain. With
``--workers N`` a second runtime sends the command chain to N ``cadenza worker``
processes, one of which is killed (SIGKILL) and replaced every ``--kill-every``
seconds. Every run must end within ``--run-limit`` seconds, else it counts as
stuck. RSS and open file descriptors are sampled; at the end the script prints
whether they stayed flat (last fifth against the first fifth, after warm-up)
and whether any run got stuck, and exits 1 if not.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import logging
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import structlog

from cadenza import Runtime
from cadenza.testing import RequestMatch, ScriptedLLMServer, ServerReply, ServerRule, ServerToolCall

RSS_FLAT = 32 * 1024 * 1024
"""How much the resident set may grow (last fifth against first) and still be flat."""
FDS_FLAT = 8

HANDLERS = """
def step(ctx):
    return {"iteration": ctx.iteration, "item": ctx.item}
"""

FLOWS = {
    "loop": """
name: soak-loop
steps:
  - id: draft
    handler: "soak_handlers:step"
    loop:
      maxIterations: 30
      until: "iteration >= 19"
""",
    "graph": """
name: soak-graph
steps:
  - id: ping-pong
    graph:
      start: ping
      maxSteps: 20
      states:
        ping: {handler: "soak_handlers:step"}
        pong: {command: printf pong}
      edges:
        - {from: ping, to: pong}
        - {from: pong, to: END, condition: "visits.pong >= 9"}
        - {from: pong, to: ping}
""",
    "foreach": """
name: soak-foreach
steps:
  - id: fan
    handler: "soak_handlers:step"
    loop:
      forEach: "[" + "]"
""",
    "agents": """
name: soak-agents
agents:
  writer:
    model: "openai:soak-writer"
  judge:
    model: "openai:soak-judge"
    resultSchema:
      type: object
      required: [done]
      properties: {done: {type: boolean}}
steps:
  - id: write
    agent: writer
    instructions: "Write a line."
  - id: polish
    dependsOn: [write]
    agent: writer
    instructions: "Polish it."
    loop:
      maxIterations: 3
      untilAgent: judge
""",
    "commands": """
name: soak-commands
steps:
  - id: one
    command: printf one
  - id: two
    dependsOn: [one]
    command: 'printf "%s two" "$PREV"'
    env: {PREV: "{{ steps.one.content }}"}
  - id: three
    dependsOn: [two]
    command: ["sh", "-c", "cat", "-"]
    stdin: "{{ steps.two.content }}"
""",
}
FLOWS["foreach"] = FLOWS["foreach"].replace(
    '"[" + "]"', '"[' + ", ".join(str(i) for i in range(200)) + ']"'
)


def llm_rules() -> list[ServerRule]:
    """The judge says done on its second verdict; everyone meets 429s and 500s on the way."""
    good = [ServerReply(content="A line."), ServerReply(content="A better line.")] * 2
    faults = [
        ServerReply(status=429, headers={"Retry-After": "0"}),
        *good,
        ServerReply(status=500),
        *good,
    ]
    verdicts = [
        ServerReply(tool_calls=[ServerToolCall("submit_result", {"done": False})]),
        ServerReply(status=500),
        ServerReply(tool_calls=[ServerToolCall("submit_result", {"done": True})]),
    ]
    return [
        ServerRule(verdicts, match=RequestMatch(tools="submit_result"), after="cycle"),
        ServerRule(faults, after="cycle"),
    ]


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Workers:
    """``cadenza worker`` processes; `kill_one` SIGKILLs the oldest and starts another."""

    def __init__(self, endpoint: str, count: int, cwd: Path) -> None:
        self.endpoint = endpoint
        self.cwd = cwd
        self.processes = [self._start() for _ in range(count)]
        self.killed = 0

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "cadenza", "worker", "--connect", self.endpoint],
            cwd=self.cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def kill_one(self) -> None:
        victim = self.processes.pop(0)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        self.killed += 1
        self.processes.append(self._start())

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def soak(args: argparse.Namespace) -> int:
    with (
        tempfile.TemporaryDirectory() as directory,
        ScriptedLLMServer(llm_rules(), keep=200) as server,
    ):
        root = Path(directory)
        (root / "soak_handlers.py").write_text(HANDLERS)
        sys.path.insert(0, str(root))
        paths = {}
        for name, text in FLOWS.items():
            paths[name] = root / f"{name}.yaml"
            paths[name].write_text(text)
        os.environ.update(server.environ())
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        workers = Workers(endpoint, args.workers, root) if args.workers else None
        counts: collections.Counter[str] = collections.Counter()
        stuck: list[str] = []
        errors: list[str] = []
        injected_failures: list[str] = []
        samples: list[tuple[float, int, int, int]] = []
        started = time.monotonic()
        end = started + args.minutes * 60
        try:
            async with (
                Runtime(store=root / "runs.db") as local,
                Runtime(store=root / "remote.db", workers=endpoint if workers else None) as remote,
            ):
                names = itertools.cycle([*FLOWS, *(["remote"] if workers else [])])

                async def one_run(name: str) -> None:
                    runtime = remote if name == "remote" else local
                    path = paths["commands" if name == "remote" else name]
                    handle = await runtime.start(path)
                    with anyio.move_on_after(args.run_limit) as scope:
                        result = await handle.result()
                        counts[f"{name}:{result.status}"] += 1
                        error = result.error
                        if error is not None and error.type == "LLMHTTPError":
                            injected_failures.append(error.message)
                        elif error is not None and len(errors) < 10:
                            errors.append(f"{name}: {error.type}: {error.message}")
                    if scope.cancelled_caught:
                        stuck.append(f"{name} {handle.run_id}")
                        handle.cancel("stuck in the soak")

                async def driver() -> None:
                    while time.monotonic() < end:
                        await one_run(next(names))

                async def sampler() -> None:
                    next_kill = time.monotonic() + args.kill_every
                    while time.monotonic() < end:
                        await anyio.sleep(args.sample)
                        await local.prune(keep=50)
                        await remote.prune(keep=50)
                        done = sum(counts.values())
                        elapsed = time.monotonic() - started
                        samples.append((elapsed, rss(), open_fds(), done))
                        print(
                            f"{elapsed:7.0f}s  RSS {rss() / 2**20:7.1f} MiB  fds {open_fds():4}  "
                            f"runs {done:6}  stuck {len(stuck)}",
                            flush=True,
                        )
                        if workers is not None and time.monotonic() >= next_kill:
                            workers.kill_one()
                            next_kill = time.monotonic() + args.kill_every

                async with anyio.create_task_group() as group:
                    for _ in range(args.concurrency):
                        group.start_soon(driver)
                    group.start_soon(sampler)
        finally:
            if workers is not None:
                workers.stop()
            os.environ.pop("OPENAI_BASE_URL", None)
        for error in errors:
            print(f"error: {error[:300]}")
        requests = server.request_count
        return report(args, counts, stuck, samples, workers, requests, len(injected_failures))


def report(
    args: argparse.Namespace,
    counts: collections.Counter[str],
    stuck: list[str],
    samples: list[tuple[float, int, int, int]],
    workers: Workers | None,
    requests: int,
    injected: int,
) -> int:
    print()
    print(f"duration            {args.minutes:g} min, {args.concurrency} runs at a time")
    for key, count in sorted(counts.items()):
        print(f"  {key:<22} {count}")
    print(f"model requests      {requests} (429/500 injected between good replies)")
    if workers is not None:
        print(f"workers killed      {workers.killed}")
    usable = samples[1:] if len(samples) > 5 else samples
    if len(usable) < 2:
        print("too few samples to judge flatness (run longer)")
        return 1
    fifth = max(1, len(usable) // 5)
    first, last = usable[:fifth], usable[-fifth:]
    rss_growth = statistics.mean(s[1] for s in last) - statistics.mean(s[1] for s in first)
    fds_growth = statistics.mean(s[2] for s in last) - statistics.mean(s[2] for s in first)
    rss_flat = rss_growth < RSS_FLAT
    fds_flat = fds_growth <= FDS_FLAT
    print(
        f"RSS                 {first[0][1] / 2**20:.1f} -> {last[-1][1] / 2**20:.1f} MiB "
        f"(first fifth -> last fifth: {rss_growth / 2**20:+.1f} MiB): "
        f"{'flat' if rss_flat else 'GROWING'}"
    )
    print(
        f"open fds            {first[0][2]} -> {last[-1][2]} "
        f"({fds_growth:+.1f}): {'flat' if fds_flat else 'GROWING'}"
    )
    failed = {k: v for k, v in counts.items() if not k.endswith(":completed")}
    print(f"runs not completed  {sum(failed.values())} {dict(failed) if failed else ''}")
    print(f"  of which a model call ran out of retries on injected errors: {injected}")
    print(f"stuck runs          {len(stuck)} {stuck[:5] if stuck else ''}")
    # Every run must end with an explicit status; failing after its retries on the
    # injected 429/500s is such an ending (shared fault slots can line up for one caller).
    ok = rss_flat and fds_flat and not stuck and sum(failed.values()) == injected
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main() -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, required=True, help="how long to soak")
    parser.add_argument("--concurrency", type=int, default=4, help="runs at once")
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--run-limit", type=float, default=120.0, help="seconds before stuck")
    parser.add_argument("--workers", type=int, default=0, help="remote worker processes")
    parser.add_argument("--kill-every", type=float, default=180.0, help="seconds between kills")
    args = parser.parse_args()
    return anyio.run(soak, args)


if __name__ == "__main__":
    sys.exit(main())
