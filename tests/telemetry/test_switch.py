"""Switching telemetry on: the global provider, CADENZA_OTEL, and life without the extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cadenza import CadenzaError, Runtime
from cadenza.telemetry import INSTALL, OpenTelemetry, TelemetryUnavailable, from_environment

HELLO = """
name: hello
steps:
  - id: greet
    command: "echo hello"
output: "steps.greet.content"
"""


def _python(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-c", textwrap.dedent(code)], cwd, env)


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CADENZA_", "OTEL_"))}
    return subprocess.run(
        args,
        cwd=cwd,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_global_provider_gets_spans_only_when_telemetry_is_on(tmp_path: Path) -> None:
    """OpenTelemetry() sends to the global provider; a runtime without it sends nothing."""
    (tmp_path / "hello.yaml").write_text(HELLO)
    done = _python(
        """
        import asyncio, json
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        import cadenza
        from cadenza.telemetry import OpenTelemetry

        exporter = InMemorySpanExporter()
        telemetry = OpenTelemetry()  # before the global provider is set: found when used
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)

        async def main():
            seen = {}
            for label, chosen in (("off", None), ("on", telemetry)):
                async with cadenza.Runtime(telemetry=chosen) as runtime:
                    await runtime.run("hello.yaml")
                seen[label] = sorted(s.name for s in exporter.get_finished_spans())
                exporter.clear()
            print(json.dumps(seen))

        asyncio.run(main())
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {"off": [], "on": ["run hello", "step greet"]}


def test_cadenza_otel_switches_the_command_line_on(tmp_path: Path) -> None:
    """CADENZA_OTEL=1 with the console exporter: spans on stderr, the output untouched."""
    (tmp_path / "hello.yaml").write_text(HELLO)
    command = [sys.executable, "-m", "cadenza", "run", "hello.yaml"]
    done = _run(command, tmp_path, {"CADENZA_OTEL": "1", "OTEL_TRACES_EXPORTER": "console"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("hello")
    assert '"name": "run hello"' in done.stderr
    assert '"cadenza.address": "greet"' in done.stderr
    assert '"service.name": "cadenza"' in done.stderr

    quiet = _run(command, tmp_path, {"CADENZA_OTEL": "0", "OTEL_TRACES_EXPORTER": "console"})
    assert quiet.returncode == 0, quiet.stderr
    assert "run hello" not in quiet.stderr


def test_cadenza_otel_mistakes_are_reported(tmp_path: Path) -> None:
    (tmp_path / "hello.yaml").write_text(HELLO)
    command = [sys.executable, "-m", "cadenza", "run", "hello.yaml"]
    unknown = _run(command, tmp_path, {"CADENZA_OTEL": "1", "OTEL_TRACES_EXPORTER": "nonesuch"})
    assert unknown.returncode == 2
    assert "no trace exporter 'nonesuch' is installed" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    vague = _run(command, tmp_path, {"CADENZA_OTEL": "maybe"})
    assert vague.returncode == 2
    assert "CADENZA_OTEL='maybe'" in vague.stderr


def test_from_environment_reads_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    assert from_environment({}) is None
    assert from_environment({"CADENZA_OTEL": "0"}) is None
    assert from_environment({"CADENZA_OTEL": "off"}) is None
    with pytest.raises(CadenzaError, match="CADENZA_OTEL='sometimes'"):
        from_environment({"CADENZA_OTEL": "sometimes"})
    monkeypatch.delenv("CADENZA_OTEL", raising=False)
    assert Runtime().telemetry is None
    telemetry = OpenTelemetry()
    assert Runtime(telemetry=telemetry).telemetry is telemetry


def test_cadenza_works_without_opentelemetry(tmp_path: Path) -> None:
    """The core never imports OpenTelemetry; asking for telemetry says what to install."""
    (tmp_path / "hello.yaml").write_text(HELLO)
    done = _python(
        """
        import asyncio, os, sys

        class NoOpenTelemetry:
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] == "opentelemetry":
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, NoOpenTelemetry())
        import cadenza
        from cadenza.telemetry import OpenTelemetry, TelemetryUnavailable

        async def main():
            async with cadenza.Runtime() as runtime:
                print((await runtime.run("hello.yaml")).output.strip())

        asyncio.run(main())
        try:
            OpenTelemetry()
        except TelemetryUnavailable as error:
            print("asked:", error)
        os.environ["CADENZA_OTEL"] = "1"
        try:
            cadenza.Runtime()
        except ImportError as error:
            print("switched on:", error)
        print("imported:", sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "hello"
    assert lines[1] == f"asked: OpenTelemetry is not installed; to send traces: {INSTALL}"
    assert lines[2] == f"switched on: OpenTelemetry is not installed; to send traces: {INSTALL}"
    assert lines[3] == "imported: []"


def test_telemetry_unavailable_is_both_kinds_of_error() -> None:
    """Callers may catch it as Cadenza's own error or as a missing import."""
    assert issubclass(TelemetryUnavailable, CadenzaError)
    assert issubclass(TelemetryUnavailable, ImportError)
