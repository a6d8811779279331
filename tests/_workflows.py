"""Workflow texts that more than one test file runs, each written once.

A file's own workflows stay in it; one moves here when a second file needs it.
``HANDLERS`` stands for the handler module ``write_flow`` saves.
"""

from __future__ import annotations

LISTENER = """
name: inbox
agents:
  ear: {model: "openai:m"}
steps:
  - id: listen
    agent: ear
    instructions: Listen.
"""
"""One agent step, ``listen``, on a chat model at ``OPENAI_BASE_URL``: a step to post to."""

TELL_THEN_LISTEN = """
steps:
  - id: tell
    agent: teller
    instructions: "Tell."
  - id: listener
    dependsOn: [tell]
    agent: listener
    instructions: "Listen."
"""
"""The steps of a desk: ``tell`` talks, then ``listener`` listens."""

MESSAGING = (
    """
name: messaging
coordinator: {agent: boss}
agents:
  boss:
    prompt: "You coordinate."
    script:
      - toolCalls:
          - name: forward_to_agent
            arguments: {target_step_id: listener, text: "price is 42"}
      - "done"
  teller:
    script:
      - {toolCalls: [{name: send_message, arguments: {text: "tell the listener: price is 42"}}]}
      - "told"
  listener:
    model: "openai:test-model"
"""
    + TELL_THEN_LISTEN
)
"""``tell`` sends a message; the scripted coordinator forwards it to ``listener``,
whose model (at ``OPENAI_BASE_URL``) should find it in its inbox."""

ROUTER = """
name: router
steps:
  - id: router
    graph:
      start: analyze
      maxSteps: 12
      states:
        analyze: {handler: "HANDLERS:analyze"}
        toolA: {handler: "HANDLERS:tool_a"}
        toolB: {handler: "HANDLERS:tool_b", feedback: false}
      edges:
        - {from: analyze, to: toolA, condition: "content == 'USE_A'"}
        - {from: analyze, to: toolB, condition: "content == 'USE_B' && visits.analyze == step - 1"}
        - {from: analyze, to: END}
        - {from: toolA, to: analyze}
        - {from: toolB, to: analyze, description: back}
"""
"""A graph that routes analyze -> toolA -> analyze -> toolB -> analyze -> END with
`ROUTER_HANDLERS`."""

ROUTER_HANDLERS = """
def analyze(ctx):
    answers = {None: "USE_A", "A-result": "USE_B", "B-result": "FINISHED"}
    return answers[ctx.brief.routed_content]

def tool_a(ctx):
    return "A-result"

def tool_b(ctx):
    return "B-result"
"""

PROBE = """
import asyncio

alive = 0
peak = 0

async def probe(ctx):
    global alive, peak
    alive += 1
    peak = max(peak, alive)
    for _ in range(20):  # stay alive across many turns of the event loop
        await asyncio.sleep(0)
    alive -= 1
    return f"{ctx.index}:{ctx.item}"

def peak_seen(ctx):
    return {"peak": peak}
"""
"""Handlers: ``probe`` counts the probes alive at once; ``peak_seen`` answers the most."""

HANG = """
import asyncio

async def hang(ctx):
    await asyncio.Event().wait()
"""
"""A handler, ``hang``, that runs until it is cancelled."""

FLAKY_COMMAND = (
    "n=$(cat flaky.count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > flaky.count;"
    ' test "$n" -ge 2 && echo "ran $n times"'
)
"""A shell command that fails its first run and then says how many runs it took, counting
them in ``flaky.count`` in its working directory."""


def flaky(**more: str) -> str:
    """The step ``flaky`` (`FLAKY_COMMAND`, run in the workflow's folder) as a YAML flow
    map; ``more`` adds keys (YAML values)."""
    keys = {"id": "flaky", "command": f"'{FLAKY_COMMAND}'", "cwd": ".", **more}
    return "{" + ", ".join(f"{key}: {value}" for key, value in keys.items()) + "}"


def bash_then_read(command: str, *, permissions: str = "", approve: bool = False) -> str:
    """Agent ``fixer`` at step ``fix``: one turn asks for two calls, ``bash`` running
    ``command`` and a ``read`` of notes.txt, the next says "done". ``permissions`` are
    lines at the workflow's top level; ``approve`` puts a person's go-ahead (step
    ``approve``) before it."""
    head = "  - id: approve\n    human: {prompt: 'Go?'}\n" if approve else ""
    after = "    dependsOn: [approve]\n" if approve else ""
    return f"""
name: tools
agents:
  fixer:
    model: scripted
    tools: [bash, read]
    script:
      - toolCalls:
          - {{name: bash, arguments: {{command: "{command}"}}}}
          - {{name: read, arguments: {{path: notes.txt}}}}
      - "done"
{permissions}
steps:
{head}  - id: fix
{after}    agent: fixer
    instructions: "Fix it."
"""
