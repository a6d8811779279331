"""The inbox belongs to the step, not to one iteration (SPEC section 5, zenflow's
loop-bidirectional walk-through): a forward that reaches iteration 0's worker
after its last request is read by iteration 1's; one that no instance of its
step will ever read is reported, never dropped silently.
"""

from __future__ import annotations

import json
import threading

import anyio

from cadenza import Event, Runtime
from cadenza.testing import (
    RequestMatch,
    ServerReply,
    ServerRule,
    ServerToolCall,
)
from cadenza.testing.pytest_plugin import StartLLMServer
from tests.conftest import WriteFlow

FLOW = """
name: follow
coordinator: {agent: boss}
agents:
  boss: {model: "openai:boss", prompt: "You coordinate."}
  worker: {model: "openai:worker", prompt: "You work."}
steps:
  - id: intro
    command: echo hi
  - id: stages
    dependsOn: [intro]
    loop:
      maxIterations: 2
      steps:
        - id: worker
          agent: worker
          instructions: "Work."
"""


def forward(target: str, text: str) -> ServerToolCall:
    return ServerToolCall("forward_to_agent", {"target_step_id": target, "text": text})


async def test_a_forward_to_a_finished_iteration_reaches_the_next_one(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    boss_may_answer, worker_may_finish = threading.Event(), threading.Event()
    rules = [
        # Iteration 1's worker reads what was meant for iteration 0's.
        ServerRule(["got it"], match=RequestMatch(model="worker", user="use plan B"), name="next"),
        # Iteration 0's last turn: held until the boss has forwarded (after the drain).
        ServerRule(
            [ServerReply("finished", hold=worker_may_finish)],
            match=RequestMatch(model="worker", last_role="tool"),
        ),
        ServerRule(
            [ServerReply("", tool_calls=[ServerToolCall("send_message", {"text": "need input"})])],
            match=RequestMatch(model="worker"),
        ),
        ServerRule(["done"], match=RequestMatch(model="boss", last_role="tool")),
        ServerRule(
            [
                ServerReply(
                    "",
                    tool_calls=[forward("worker", "use plan B"), forward("intro", "too late")],
                    hold=boss_may_answer,
                )
            ],
            match=RequestMatch(model="boss"),
        ),
    ]
    events: list[Event] = []
    server = model_server(rules)
    async with Runtime() as runtime:
        handle = await runtime.start(write_flow(FLOW), on_event=events.append)
        # Worker turn 1 and 2 and the boss's first call are all in: the worker has
        # drained its inbox for its last turn before the boss forwards anything.
        await anyio.to_thread.run_sync(server.wait_for_requests, 3)
        boss_may_answer.set()
        await anyio.to_thread.run_sync(server.wait_for_requests, 4)  # forwarded
        worker_may_finish.set()
        result = await handle.result()
    requests = server.requests
    assert result.status == "completed", result.error
    (next_request,) = [r for r in requests if r.rule == "next"]
    user = "\n".join(m["content"] for m in next_request.body["messages"] if m["role"] == "user")
    assert "## Inbox" in user
    assert "use plan B" in user
    assert [(m.to, m.text) for m in result.undelivered] == [("intro", "too late")]
    undelivered = [e for e in events if e.type == "message_undelivered"]
    assert [(e.step_id, e.data) for e in undelivered] == [("intro", {"to": "intro", "count": 1})]
    assert json.dumps([m.text for m in result.messages]).count("use plan B") == 1
