"""A private tracer provider whose spans the tests read back, and span-tree helpers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cadenza.telemetry import OpenTelemetry


class _Starts(SpanProcessor):
    """Remembers every span started, to check that each one was ended."""

    def __init__(self) -> None:
        self.started: list[Span] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started.append(span)


class Traces:
    """Spans of the runs of a `Runtime(telemetry=traces.telemetry)`."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self._starts = _Starts()
        self.provider = TracerProvider()
        self.provider.add_span_processor(self._starts)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.telemetry = OpenTelemetry(tracer_provider=self.provider)

    def spans(self) -> list[ReadableSpan]:
        """Every span ended so far, in the order they ended."""
        return list(self.exporter.get_finished_spans())

    @property
    def started(self) -> int:
        return len(self._starts.started)

    def clear(self) -> None:
        self.exporter.clear()
        self._starts.started.clear()


@pytest.fixture
def traces() -> Iterator[Traces]:
    collected = Traces()
    yield collected
    collected.provider.shutdown()


def run_span(spans: list[ReadableSpan]) -> ReadableSpan:
    """The one root span: the run's."""
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == 1, [s.name for s in roots]
    return roots[0]


def at(spans: list[ReadableSpan], address: str, name: str | None = None) -> list[ReadableSpan]:
    """The spans of an address (``name``: only those so named), oldest first.

    Times are the events' (milliseconds): spans that start in the same one keep
    the order they ended in, which is their order when they ran one after another.
    """
    found = [
        s
        for s in spans
        if (s.attributes or {}).get("cadenza.address") == address
        and (name is None or s.name == name)
    ]
    return sorted(found, key=lambda s: s.start_time or 0)


def one(spans: list[ReadableSpan], address: str, name: str) -> ReadableSpan:
    found = at(spans, address, name)
    assert len(found) == 1, (address, name, [s.name for s in at(spans, address)])
    return found[0]


def parent(spans: list[ReadableSpan], span: ReadableSpan) -> ReadableSpan:
    assert span.parent is not None, span.name
    (found,) = [s for s in spans if s.context is not None and s.context == span.parent]
    return found


def attribute(span: ReadableSpan, key: str) -> object:
    return (span.attributes or {}).get(key)


def exception_messages(span: ReadableSpan) -> list[str]:
    return [
        str((e.attributes or {}).get("exception.message"))
        for e in span.events
        if e.name == "exception"
    ]


def nanoseconds(stamp: str) -> int:
    """An event's timestamp (``2026-11-21T10:00:00.123Z``) as epoch nanoseconds."""
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000
