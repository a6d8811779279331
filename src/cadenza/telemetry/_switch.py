"""Switching telemetry on: `OpenTelemetry`, `from_environment` (re-exported by the package)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from cadenza.errors import CadenzaError

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricExporter
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer, TracerProvider

    from cadenza.actors import RunJournal

    from ._metrics import FleetMetrics

__all__ = ["ENVIRONMENT", "INSTALL", "OpenTelemetry", "TelemetryUnavailable", "from_environment"]

ENVIRONMENT = "CADENZA_OTEL"
"""The environment variable that switches telemetry on: ``1`` (or true, yes, on)."""

INSTALL = "pip install 'cadenza[otel]'"
"""What installs the packages telemetry needs."""

_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"", "0", "false", "no", "off"})


class TelemetryUnavailable(CadenzaError, ImportError):
    """Telemetry was asked for, but OpenTelemetry (or the exporter named) is not installed."""


class OpenTelemetry:
    """Sends each run's spans to an OpenTelemetry tracer provider, and a supervisor's
    figures to a meter provider.

    Args:
        tracer_provider: Where spans go; None: the global provider
            (``opentelemetry.trace.set_tracer_provider``), looked up when spans
            are made, so it may be set after this is built.
        meter_provider: Where the fleet's metrics go (`fleet_metrics`); None: the
            global provider (``opentelemetry.metrics.set_meter_provider``).

    Raises:
        TelemetryUnavailable: ``opentelemetry-api`` is not installed (``pip
            install 'cadenza[otel]'``).
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        _require_api()
        from opentelemetry import trace

        from cadenza._version import __version__

        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self._tracer: Tracer = trace.get_tracer(
            "cadenza", __version__, tracer_provider=tracer_provider
        )
        self._fleet: FleetMetrics | None = None
        # from_environment: the meter provider it sets up, on first use (a supervisor's).
        self._meters: Callable[[], MeterProvider | None] | None = None

    def fleet_metrics(self) -> FleetMetrics:
        """The fleet's metrics on this telemetry's meter provider, made on first use.

        `cadenza.Runtime` asks for them when it supervises (``recover`` or
        ``capacity``), and feeds them at each beat on the roll; docs/deploying.md
        lists them.

        Raises:
            TelemetryUnavailable: The metrics exporter ``OTEL_METRICS_EXPORTER`` names
                is not installed (`from_environment`).
        """
        if self._fleet is None:
            from opentelemetry import metrics

            from cadenza._version import __version__

            from ._metrics import FleetMetrics

            if self._meters is not None:
                self.meter_provider, self._meters = self._meters(), None
            meter = metrics.get_meter("cadenza", __version__, meter_provider=self.meter_provider)
            self._fleet = FleetMetrics(meter)
        return self._fleet

    def attach(self, journal: RunJournal) -> Callable[[], None]:
        """Starts turning one run's events into spans; returns the function that stops.

        `cadenza.Runtime` calls it for each run it starts or resumes, and calls the
        returned function when the run's task ends: spans a cancelled or crashed
        run left open are ended then, marked ``cadenza.status: interrupted``.
        """
        from ._spans import RunSpans

        spans = RunSpans(self._tracer, journal)
        unsubscribe = journal.subscribe(spans.on_event)

        def detach() -> None:
            unsubscribe()
            spans.close()

        return detach

    def __repr__(self) -> str:
        provider = "global" if self.tracer_provider is None else repr(self.tracer_provider)
        meters = "global" if self.meter_provider is None else repr(self.meter_provider)
        return f"OpenTelemetry(tracer_provider={provider}, meter_provider={meters})"


def from_environment(environ: Mapping[str, str] | None = None) -> OpenTelemetry | None:
    """Telemetry as ``CADENZA_OTEL`` asks: None when it is unset or ``0``.

    Spans go to the global tracer provider when the application (or
    ``opentelemetry-instrument``) has set one. Otherwise one is set up here
    from the standard variables: ``OTEL_TRACES_EXPORTER`` (default ``otlp``,
    which needs ``opentelemetry-exporter-otlp``; ``console`` prints spans on
    stderr; several are comma-separated), ``OTEL_SERVICE_NAME`` (default
    ``cadenza``), ``OTEL_RESOURCE_ATTRIBUTES`` and the exporter's own
    ``OTEL_EXPORTER_OTLP_*``; spans are sent in batches, flushed at exit.

    Metrics (a supervisor's, `OpenTelemetry.fleet_metrics`) likewise go to the
    global meter provider when one is set, else to one set up when a supervisor
    first asks: ``OTEL_METRICS_EXPORTER`` (default: as ``OTEL_TRACES_EXPORTER``),
    exported every ``OTEL_METRIC_EXPORT_INTERVAL`` milliseconds (default 60000)
    and at exit.

    Raises:
        TelemetryUnavailable: OpenTelemetry or the exporter named is not installed.
        CadenzaError: ``CADENZA_OTEL`` is neither on nor off.
    """
    environ = os.environ if environ is None else environ
    value = environ.get(ENVIRONMENT, "").strip().lower()
    if value in _OFF:
        return None
    if value not in _ON:
        raise CadenzaError(
            f"{ENVIRONMENT}={environ[ENVIRONMENT]!r}: use 1 to send traces, 0 (or unset) not to"
        )
    _require_api()
    telemetry = OpenTelemetry(_global_provider(environ))
    telemetry._meters = lambda: _global_meter_provider(environ)
    return telemetry


def _require_api() -> None:
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError as error:
        raise TelemetryUnavailable(
            f"OpenTelemetry is not installed; to send traces: {INSTALL}"
        ) from error


def _global_provider(environ: Mapping[str, str]) -> TracerProvider | None:
    """None (the global provider) when one is set, else a new SDK provider, made global."""
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as error:
        raise TelemetryUnavailable(
            f"{ENVIRONMENT}: the OpenTelemetry SDK is not installed; {INSTALL}"
        ) from error
    names = [n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    exporters = [_exporter(name) for name in names if name and name != "none"]
    named = "OTEL_SERVICE_NAME" in environ or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    provider = TracerProvider(
        resource=Resource.create({} if named else {"service.name": "cadenza"})
    )
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


def _exporter(name: str) -> SpanExporter:
    if name == "console":  # stdout is the run's (``--json``): spans go to stderr
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)
    found = entry_points(group="opentelemetry_traces_exporter", name=name)
    if not found:
        hint = "pip install opentelemetry-exporter-otlp" if name.startswith("otlp") else ""
        raise TelemetryUnavailable(
            f"{ENVIRONMENT}: no trace exporter {name!r} is installed (OTEL_TRACES_EXPORTER)"
            + (f"; {hint}" if hint else "")
            + "; OTEL_TRACES_EXPORTER=console prints spans on stderr"
        )
    exporter: SpanExporter = next(iter(found)).load()()
    return exporter


def _global_meter_provider(environ: Mapping[str, str]) -> MeterProvider | None:
    """None (the global provider) when one is set, else a new SDK provider, made global."""
    from opentelemetry import metrics
    from opentelemetry.metrics import NoOpMeterProvider

    if not isinstance(metrics.get_meter_provider(), (NoOpMeterProvider, _proxy_meters())):
        return None
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
    except ImportError as error:
        raise TelemetryUnavailable(
            f"{ENVIRONMENT}: the OpenTelemetry SDK is not installed; {INSTALL}"
        ) from error
    traces = environ.get("OTEL_TRACES_EXPORTER", "otlp")
    names = [n.strip() for n in environ.get("OTEL_METRICS_EXPORTER", traces).split(",")]
    readers = [
        PeriodicExportingMetricReader(_metric_exporter(name))
        for name in names
        if name and name != "none"
    ]
    named = "OTEL_SERVICE_NAME" in environ or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    provider = MeterProvider(
        readers, resource=Resource.create({} if named else {"service.name": "cadenza"})
    )
    metrics.set_meter_provider(provider)
    return provider


def _proxy_meters() -> type:
    """The API's stand-in provider, until an application sets one (not public API)."""
    from opentelemetry.metrics._internal import _ProxyMeterProvider

    return _ProxyMeterProvider


def _metric_exporter(name: str) -> MetricExporter:
    if name == "console":  # stdout is the command's: figures go to stderr
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(out=sys.stderr)
    found = entry_points(group="opentelemetry_metrics_exporter", name=name)
    if not found:
        hint = "pip install opentelemetry-exporter-otlp" if name.startswith("otlp") else ""
        raise TelemetryUnavailable(
            f"{ENVIRONMENT}: no metrics exporter {name!r} is installed (OTEL_METRICS_EXPORTER,"
            " else OTEL_TRACES_EXPORTER)"
            + (f"; {hint}" if hint else "")
            + "; OTEL_METRICS_EXPORTER=console prints metrics on stderr"
        )
    exporter: MetricExporter = next(iter(found)).load()()
    return exporter
