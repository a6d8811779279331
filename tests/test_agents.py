"""Agent steps end to end: real providers against a real local model server."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

import cadenza
from cadenza import Event, Runtime
from cadenza.actors.run import INBOX_BYTES
from cadenza.errors import MessageRefused
from cadenza.protocols import MessageSent, ToolCall, payload
from cadenza.testing import RecordedRequest, RequestMatch, ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import CLI, run_flow
from tests._workflows import LISTENER, MESSAGING, TELL_THEN_LISTEN
from tests.conftest import WriteFlow

REVIEWED = """
name: reviewed
agents:
  writer:
    model: "{provider}:test-model"
    prompt: "You are a writer."
  reviewer:
    model: "{provider}:test-model"
    prompt: "You are a reviewer."
    resultSchema:
      type: object
      required: [verdict, score]
      properties:
        verdict: {{type: string}}
        score: {{type: integer, minimum: 0, maximum: 10}}
steps:
  - id: write
    agent: writer
    instructions: "Write about {{{{ inputs.topic }}}}."
  - id: review
    agent: reviewer
    dependsOn: [write]
    instructions: "Review the draft."
inputs:
  topic: {{type: string, default: actors}}
output: "steps.review.result"
"""

RULES = [
    ServerRule(["A short draft about actors."], match={"system": "writer"}, name="writer"),
    ServerRule(
        [
            {
                "tool_calls": [
                    {"name": "submit_result", "arguments": {"verdict": "ok", "score": 11}}
                ]
            },
            {
                "content": "Solid draft.",
                "tool_calls": [
                    {"name": "submit_result", "arguments": {"verdict": "ok", "score": 8}}
                ],
            },
        ],
        match={"system": "reviewer"},
        name="reviewer",
    ),
]


def text_of(request: RecordedRequest) -> str:
    """Everything a request showed the model, whatever the wire format."""
    return json.dumps(request.body)


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_writer_and_reviewer_against_a_real_server(
    wire: str, write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """A two-agent DAG: the reviewer sees the draft, its bad submit is corrected, result kept."""
    server = model_server(RULES, wire=wire)  # type: ignore[arg-type]
    result = await run_flow(write_flow(REVIEWED.format(provider=wire)))
    requests = server.requests
    assert result.status == "completed", result.error
    assert result.output == {"verdict": "ok", "score": 8}
    assert result.steps["review"].content == "Solid draft."
    assert result.usage.llm_calls == 3
    reviews = [r for r in requests if r.rule == "reviewer"]
    assert "A short draft about actors." in text_of(reviews[0]), "dependency content not injected"
    assert "Write about actors." in text_of(next(r for r in requests if r.rule == "writer"))
    assert "score" in text_of(reviews[1]), "the schema error did not go back to the model"
    assert "maximum" in text_of(reviews[1])


async def test_never_submitting_fails_the_step(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """An agent with a resultSchema that never calls submit_result fails with zenflow's words."""
    rules = [ServerRule(["I will not call the tool."])]
    model_server(rules)
    result = await run_flow(write_flow(REVIEWED.format(provider="openai")))
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.address == "review"
    assert result.error.message == "resultSchema defined but submit_result never called"


BUDGET = """
name: budget
options: {maxTokens: 100}
agents:
  talker:
    model: "openai:test-model"
steps:
  - id: one
    agent: talker
    instructions: "Talk."
  - id: two
    dependsOn: [one]
    agent: talker
    instructions: "Talk more."
  - id: three
    dependsOn: [two]
    agent: talker
    instructions: "Talk even more."
"""


async def test_token_budget_stops_the_run_after_one_call_past_it(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """maxTokens: checked before each call, so the run overshoots by at most one call."""
    rules = [
        ServerRule([{"content": "words", "usage": {"prompt_tokens": 60, "completion_tokens": 20}}])
    ]
    server = model_server(rules)
    result = await run_flow(write_flow(BUDGET))
    calls = len(server.requests)
    assert calls == 2  # 80 tokens < 100 allows a second call; 160 >= 100 stops the third
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.type == "BudgetExceeded"
    assert "160 of 100 tokens" in result.error.message
    assert result.usage.prompt_tokens + result.usage.completion_tokens == 160


CANARY = "sk-canary-7f3a9c1e5b"


def test_api_key_never_leaks(
    write_flow: WriteFlow, tmp_path: Path, llm_server: StartLLMServer
) -> None:
    """A run that fails on purpose: the key is nowhere in stdout, stderr, result, events, store."""
    rules = [ServerRule([{"status": 401, "body": {"error": {"message": f"bad key {CANARY}"}}}])]
    path = write_flow(REVIEWED.format(provider="openai"))
    server = llm_server(rules)
    env = {**server.environ(api_key=CANARY), "PATH": "/usr/bin:/bin", "CADENZA_LOG_LEVEL": "debug"}
    proc = subprocess.run(
        [*CLI, "run", str(path), "--json", "--events", "--store", str(tmp_path / "runs.db")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["status"] == "failed"
    assert CANARY not in proc.stdout + proc.stderr
    connection = sqlite3.connect(tmp_path / "runs.db")
    events = connection.execute("SELECT count(*) FROM events").fetchone()[0]
    connection.close()
    assert events > 0
    for stored in tmp_path.glob("runs.db*"):  # the database, its WAL and shared memory
        assert CANARY.encode() not in stored.read_bytes(), stored


async def test_coordinator_forwards_a_message_into_the_next_step(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """send_message wakes the coordinator agent; its forward lands in the listener's Inbox."""
    server = model_server([ServerRule(["heard"])])
    result = await run_flow(write_flow(MESSAGING))
    prompt = text_of(server.requests[0])
    assert result.status == "completed", result.error
    assert "## Inbox" in prompt
    assert "price is 42" in prompt
    routes = [(m.from_, m.to, m.text) for m in result.messages]
    assert routes == [
        ("tell", "coordinator", "tell the listener: price is 42"),
        ("coordinator", "listener", "price is 42"),
    ]


SLOW_DESK = (
    """
name: slow-desk
coordinator: {agent: boss}
agents:
  boss: {model: "openai:boss", prompt: "You coordinate."}
  teller: {model: "openai:teller"}
  listener: {model: "openai:listener"}
"""
    + TELL_THEN_LISTEN
)


def slow_desk_rules(*holds: threading.Event) -> list[ServerRule]:
    """``tell`` sends "price is 42"; the boss's forward of it waits for each hold in turn."""
    forward = ServerToolCall(
        "forward_to_agent", {"target_step_id": "listener", "text": "price is 42"}
    )
    told = ServerToolCall("send_message", {"text": "price is 42"})
    return [
        ServerRule(["done"], match=RequestMatch(model="boss", last_role="tool")),
        ServerRule(
            [ServerReply(tool_calls=[forward], hold=hold) for hold in holds],
            match=RequestMatch(model="boss"),
        ),
        ServerRule(["told"], match=RequestMatch(model="teller", last_role="tool")),
        ServerRule([ServerReply(tool_calls=[told])], match=RequestMatch(model="teller")),
        ServerRule(["heard"], match=RequestMatch(model="listener"), name="listener"),
    ]


def forwarded_before_listening(events: list[Event]) -> bool:
    order = [(e.type, e.step_id) for e in events if e.type in ("message_sent", "step_start")]
    return order.index(("message_sent", "coordinator")) < order.index(("step_start", "listener"))


async def test_a_dependent_starts_after_the_coordinator_answered_its_dependency(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """The forward a step's message caused is in its dependent's first prompt, however slow.

    The coordinator agent's reply is held until ``tell`` has recorded its end:
    from then on nothing but causality keeps ``listener`` from starting (and
    reading an empty inbox) before the forward lands.
    """
    boss_may_answer = threading.Event()
    events: list[Event] = []

    def watch(event: Event) -> None:
        events.append(event)
        if event.type == "step_end" and event.step_id == "tell":
            boss_may_answer.set()

    server = model_server(slow_desk_rules(boss_may_answer))
    async with Runtime() as runtime:
        handle = await runtime.start(write_flow(SLOW_DESK), on_event=watch)
        result = await handle.result()
    (listening,) = [r for r in server.requests if r.rule == "listener"]
    assert result.status == "completed", result.error
    assert "price is 42" in text_of(listening)
    assert result.undelivered == []
    assert forwarded_before_listening(events)


async def test_a_resumed_run_answers_a_replayed_step_before_its_dependent_starts(
    write_flow: WriteFlow, model_server: StartLLMServer, tmp_path: Path
) -> None:
    """Interrupted inside the wake ``tell``'s message caused: on resume, ``tell`` is replayed
    and the coordinator answers its message again; ``listener`` starts after that forward.
    """
    never, boss_may_answer = threading.Event(), threading.Event()
    ended, events = anyio.Event(), list[Event]()

    def first(event: Event) -> None:
        if event.type == "step_end" and event.step_id == "tell":
            ended.set()

    def again(event: Event) -> None:
        events.append(event)
        if event.type == "step_replayed" and event.step_id == "tell":
            boss_may_answer.set()

    path, store = write_flow(SLOW_DESK), tmp_path / "runs.db"
    server = model_server(slow_desk_rules(never, boss_may_answer))
    async with Runtime(store=store, shutdown_deadline=0) as runtime:
        handle = await runtime.start(path, run_id="desk", on_event=first)
        await ended.wait()
        await anyio.to_thread.run_sync(server.wait_for_requests, 3)  # the boss's is in
    assert (await handle.result()).status == "running"
    async with Runtime(store=store) as runtime:
        result = await (await runtime.resume("desk", on_event=again)).result()
    listening = [r for r in server.requests if r.rule == "listener"]
    assert result.status == "completed", result.error
    assert [("price is 42" in text_of(r)) for r in listening] == [True]
    assert result.undelivered == []
    assert forwarded_before_listening(events)


TOOLS = """
name: tools
agents:
  calc:
    model: "openai:test-model"
    tools: ["HANDLERS:add", "send_message"]
steps:
  - id: sum
    agent: calc
    instructions: "Add two and three."
"""


async def test_python_tools_get_schemas_and_errors_go_back_to_the_model(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """A Python tool's schema comes from its signature; bad arguments and raises are reported."""
    rules = [
        ServerRule(
            [
                {"tool_calls": [{"name": "add", "arguments": {"a": "two", "b": 3}}]},
                {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]},
                {"tool_calls": [{"name": "add", "arguments": {"a": -1, "b": 3}}]},
                "The sum is 5.",
            ]
        )
    ]
    path = write_flow(
        TOOLS,
        handlers='''
        def add(a: int, b: int = 0) -> int:
            """Adds two whole numbers."""
            if a < 0:
                raise ValueError("no negatives")
            return a + b
        ''',
    )
    server = model_server(rules)
    result = await run_flow(path)
    bodies = [r.body for r in server.requests]
    assert result.status == "completed", result.error
    assert result.steps["sum"].content == "The sum is 5."
    offered = {t["function"]["name"]: t["function"] for t in bodies[0]["tools"]}
    assert set(offered) == {"add", "send_message"}
    assert offered["add"]["description"] == "Adds two whole numbers."
    assert offered["add"]["parameters"]["required"] == ["a"]
    tool_replies = [m["content"] for m in bodies[-1]["messages"] if m["role"] == "tool"]
    assert "invalid arguments" in tool_replies[0]
    assert tool_replies[1] == "5"
    assert "ValueError: no negatives" in tool_replies[2]


async def test_a_full_step_inbox_drops_with_an_event(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """Messages past a step's 10,000-message inbox are dropped, counted, with a reason."""
    hold = threading.Event()
    path = write_flow(LISTENER)
    events: list[cadenza.Event] = []
    server = model_server([ServerRule([{"content": "heard", "hold": hold}])])
    async with Runtime() as runtime:
        handle = await runtime.start(path, on_event=events.append)
        await anyio.to_thread.run_sync(server.wait_for_requests, 1)
        for n in range(10_003):
            await handle.post_message("listen", f"message {n}")
        hold.set()
        result = await handle.result()
    assert result.status == "completed"
    dropped = [e.data for e in events if e.type == "message_dropped" and e.data is not None]
    assert [d["dropped"] for d in dropped] == [1, 3]  # the first drop, then the run's total
    assert all(d["reason"] == "inbox full" and "text" not in d for d in dropped)
    assert len(result.messages) == 1_000  # the newest; the rest are counted
    assert result.messages_omitted == 10_000 - 1_000


async def test_a_posted_message_is_from_api_not_the_coordinator(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """A post from outside the run is recorded, and shown to the agent, as from ``api``:
    the run's coordinator never sent it."""
    first_turn = threading.Event()
    path = write_flow(LISTENER)
    said = {"name": "send_message", "arguments": {"text": "listening"}}
    replies: list[Any] = [{"tool_calls": [said], "hold": first_turn}, {"content": "heard"}]
    events: list[cadenza.Event] = []
    server = model_server([ServerRule(replies)])
    async with Runtime() as runtime:
        handle = await runtime.start(path, on_event=events.append)
        await anyio.to_thread.run_sync(server.wait_for_requests, 1)
        await runtime.post_message(handle.run_id, "listen", "use plan B")
        first_turn.set()
        result = await handle.result()
        requests = server.requests
    assert result.status == "completed", result.error
    assert "from api (info): use plan B" in json.dumps(requests[1].body)
    posted = [m for m in result.messages if m.text == "use plan B"]
    assert [(m.from_, m.to) for m in posted] == [("api", "listen")]
    sent = [(e.step_id, payload(e, MessageSent)) for e in events if e.type == "message_sent"]
    assert [(step, m.from_) for step, m in sent if m.to == "listen"] == [("api", "api")]


async def test_a_step_inbox_holds_at_most_a_mebibyte_of_undrained_text(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """Past 1 MiB of undrained text a message is dropped; a drain makes room again."""
    first_turn, second_turn = threading.Event(), threading.Event()
    path = write_flow(LISTENER)
    said = {"name": "send_message", "arguments": {"text": "listening"}}
    replies: list[Any] = [
        {"tool_calls": [said], "hold": first_turn},
        {"content": "heard", "hold": second_turn},
    ]
    events: list[cadenza.Event] = []
    big = 400 * 1024
    server = model_server([ServerRule(replies)])
    async with Runtime() as runtime:
        handle = await runtime.start(path, on_event=events.append)
        await anyio.to_thread.run_sync(server.wait_for_requests, 1)
        for mark in "ABC":  # C would make 1.2 MiB
            await handle.post_message("listen", mark * big)
        first_turn.set()
        requests = await anyio.to_thread.run_sync(server.wait_for_requests, 2)
        await handle.post_message("listen", "D" * big)  # A and B were drained
        second_turn.set()
        result = await handle.result()
    assert result.status == "completed", result.error
    inbox = json.dumps(requests[1].body)
    assert "A" * big in inbox
    assert "B" * big in inbox
    assert "C" * 1024 not in inbox
    dropped = [e.data for e in events if e.type == "message_dropped" and e.data is not None]
    assert [d["dropped"] for d in dropped] == [1]
    assert "bytes of messages wait for 'listen'" in dropped[0]["reason"]
    assert [m.text[0] for m in result.undelivered] == ["D"]


MEMORY = """
name: memory
agents:
  poet: {{model: "openai:m", prompt: "You are a poet."}}
steps:
  - id: verse
    agent: poet
    instructions: "Write the next verse."
    loop:
      maxIterations: 3
      memory: {memory}
      feedback: false
"""


FULL_RUN = """
name: full
coordinator: {agent: boss}
agents:
  boss:
    script:
      - toolCalls: [{name: forward_to_agent, arguments: {target_step_id: listener, text: "hi"}}]
      - "noted"
  teller: {model: "openai:m"}
  listener: {script: ["heard"]}
steps:
  - {id: tell, agent: teller, instructions: "Tell."}
  - {id: listener, dependsOn: [tell], agent: listener, instructions: "Listen."}
"""


async def test_a_run_holding_its_bound_of_messages_refuses_posts_and_forwards(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """4 MiB wait for steps that never start: a post raises, a forward is a tool error."""
    hold = threading.Event()
    said = {"name": "send_message", "arguments": {"text": "tell the listener"}}
    events: list[cadenza.Event] = []
    server = model_server([ServerRule([{"tool_calls": [said], "hold": hold}, "told"])])
    async with Runtime() as runtime:
        handle = await runtime.start(write_flow(FULL_RUN), on_event=events.append)
        await anyio.to_thread.run_sync(server.wait_for_requests, 1)
        for target in "abcd":  # four full inboxes of steps that do not exist
            await handle.post_message(target, "m" * INBOX_BYTES)
        with pytest.raises(MessageRefused, match="bytes of messages already wait"):
            await handle.post_message("listener", "one byte too many")
        hold.set()
        result = await handle.result()
    assert result.status == "completed", result.error
    calls = [payload(e, ToolCall) for e in events if e.type == "tool_call"]
    ended = [(c.tool_name, c.error) for c in calls if c.phase == "end"]
    assert [name for name, _ in ended] == ["send_message", "forward_to_agent"]
    assert "refuses the message" in str(ended[1][1])
    assert [(m.to, len(m.text)) for m in result.undelivered] == [
        (target, INBOX_BYTES) for target in "abcd"
    ]
    assert all(m.to != "listener" for m in result.messages)  # neither refused one is recorded


@pytest.mark.parametrize(
    ("memory", "seen_in_third"),
    [
        ("fresh", []),
        ("accumulate", ["verse one", "verse two"]),
        ("{window: 1}", ["verse two"]),
    ],
)
async def test_loop_memory_modes_decide_what_an_agent_remembers(
    write_flow: WriteFlow, model_server: StartLLMServer, memory: str, seen_in_third: list[str]
) -> None:
    """memory: fresh forgets, accumulate keeps every visit, window: N keeps the last N."""
    rules = [ServerRule(["verse one", "verse two", "verse three"])]
    server = model_server(rules)
    result = await run_flow(write_flow(MEMORY.format(memory=memory)))
    third = server.requests[2].messages
    assert result.status == "completed", result.error
    remembered = [m["content"] for m in third if m["role"] == "assistant"]
    assert remembered == seen_in_third
    assert [m["role"] for m in third].count("system") == 1


PARALLEL = """
name: parallel
agents:
  alpha: {model: "openai:test-model", prompt: "You are alpha."}
  beta: {model: "openai:test-model", prompt: "You are beta."}
steps:
  - {id: a, agent: alpha, instructions: "Speak."}
  - {id: b, agent: beta, instructions: "Speak."}
"""


async def test_agents_running_at_once_each_count_only_their_own_tokens(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """Two agent steps in flight together: each step_end carries its own usage, not the sum."""
    rules = [
        ServerRule(
            [{"content": "a", "usage": {"prompt_tokens": 10, "completion_tokens": 1}}],
            match={"system": "alpha"},
        ),
        ServerRule(
            [{"content": "b", "usage": {"prompt_tokens": 100, "completion_tokens": 10}}],
            match={"system": "beta"},
        ),
    ]
    model_server(rules)
    async with Runtime() as runtime:
        result = await runtime.run(write_flow(PARALLEL))
        events = await runtime.stored_events(result.run_id)
    ends = {
        e.step_id: (e.tokens.prompt, e.tokens.completion)
        for e in events
        if e.type == "step_end" and e.tokens is not None
    }
    assert ends == {"a": (10, 1), "b": (100, 10)}
    assert result.usage.prompt_tokens == 110


RETRIES = """
name: retries
options: {{maxRetries: {workflow}}}
agents:
  writer: {{model: "openai:test-model"}}
steps:
  - id: write
    agent: writer
    instructions: "Write."
    {step}
"""


@pytest.mark.parametrize(
    ("workflow", "step", "calls", "status"),
    [
        (0, "", 1, "failed"),  # the workflow says never retry
        (0, "maxRetries: 2", 3, "completed"),  # the step's own setting wins
        (1, "", 2, "failed"),  # one retry, and the second answer is a 500 too
    ],
)
async def test_max_retries_bounds_each_model_call(
    write_flow: WriteFlow,
    model_server: StartLLMServer,
    workflow: int,
    step: str,
    calls: int,
    status: str,
) -> None:
    """zenflow's maxRetries: retries of one model call on 5xx, from the step, else options."""
    flaky = ServerReply(status=500, headers={"Retry-After": "0"})
    rules = [ServerRule([flaky, flaky, ServerReply(content="Done.")])]
    server = model_server(rules)
    result = await run_flow(write_flow(RETRIES.format(workflow=workflow, step=step)))
    assert server.request_count == calls
    assert result.status == status
    if status == "failed":
        assert result.error is not None
        assert result.error.type == "LLMHTTPError"


async def test_runs_of_one_runtime_share_its_http_client(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """The runtime's one HTTP client serves every run: later runs reuse its connection."""
    server = model_server([ServerRule(["done"])])
    path = write_flow(
        'name: one\nagents:\n  a: {model: "openai:m", prompt: "p"}\n'
        "steps:\n  - {id: s, agent: a, instructions: go}\n"
    )
    async with Runtime() as runtime:
        for _ in range(3):
            result = await runtime.run(path)
            assert result.status == "completed"
    ports = {request.client_port for request in server.requests}
    assert len(server.requests) == 3
    assert len(ports) == 1, f"each run opened its own connection: ports {sorted(ports)}"
