"""An agent step on a worker runs no tool its supervisor has not committed the call for.

The worker sends each model and tool call back for the run's journal; a tool runs
only once the supervisor confirms (``durable``) that the model call asking for it
is committed. Here the supervisor is SIGKILLed holding that call uncommitted
(failpoint ``call.before_confirm``): the worker must give the step up without
running the tool, and the resumed run, which asks the model again, runs each
tool its answers ask for once.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from cadenza.testing import ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import CLI, cadenza
from tests.conftest import WriteFlow

pytestmark = pytest.mark.timeout(120)

FLOW = """
name: appender
agents:
  appender:
    model: openai:gpt-test
    tools: [bash]
    resultSchema: {type: object}
steps:
  - id: append
    agent: appender
    instructions: "Append the numbers."
"""


def replies(count: int) -> list[ServerReply]:
    """Reply k asks bash to append k to lines.txt; the last submits the result as well."""
    scripted = []
    for k in range(1, count + 1):
        calls = [ServerToolCall("bash", {"command": f"echo {k} >> lines.txt"})]
        if k == count:
            calls.append(ServerToolCall("submit_result", {"done": True}))
        scripted.append(ServerReply(content=f"call {k}", tool_calls=calls))
    return scripted


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_a_supervisor_killed_before_committing_a_call_leaves_its_tool_unrun(
    model_server: StartLLMServer, write_flow: WriteFlow, tmp_path: Path
) -> None:
    server = model_server([ServerRule(replies(3))])
    write_flow(FLOW)
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    killed = {**os.environ, "CADENZA_FAILPOINT": "call.before_confirm:1"}
    supervisor = subprocess.Popen(
        [*CLI, "run", "flow.yaml", "--store", "runs.db", "--run-id", "r-1", "--workers", endpoint],
        cwd=tmp_path,
        env=killed,
        stderr=subprocess.PIPE,
    )
    worker = subprocess.Popen(
        [*CLI, "worker", "--connect", endpoint, "--name", "w"],
        cwd=tmp_path,
        env={**os.environ},
        stderr=subprocess.PIPE,
    )
    try:
        _, supervisor_log = supervisor.communicate(timeout=60)
        assert supervisor.returncode == -signal.SIGKILL, supervisor_log.decode()
        assert server.request_count == 1  # the worker asked the model once, then waited
        # Drained, the worker leaves once its job is over: the job gave up waiting for
        # a confirmation that could not come, or (the bug this guards against) went on.
        worker.send_signal(signal.SIGTERM)
        _, worker_log = worker.communicate(timeout=60)
    finally:
        for process in (supervisor, worker):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert worker.returncode == 0, worker_log.decode()
    assert not (tmp_path / "lines.txt").exists(), "a tool ran for a call nobody committed"

    resumed = cadenza("resume", "r-1", "--store", "runs.db", cwd=tmp_path)

    assert resumed.returncode == 0, resumed.stderr
    # The uncommitted call was asked again (the script answers it with its next reply):
    # each tool the answers asked for ran once, and only those.
    assert server.request_count == 3
    assert (tmp_path / "lines.txt").read_text().split() == ["2", "3"]
