"""OpenTelemetry traces of runs: an optional extra, off by default.

    pip install 'cadenza[otel]'

    from cadenza.telemetry import OpenTelemetry

    async with cadenza.Runtime(telemetry=OpenTelemetry()) as runtime:
        await runtime.run("flow.yaml")

Each run becomes one trace: a span for the run, each step attempt, loop
iteration, forEach item, control-loop iteration, model call and tool call,
nested by address (``dev-cycle.0.implement`` under the iteration
``dev-cycle.0``, under the loop step ``dev-cycle``, under the run). The spans
are built from the run's events by a journal subscriber, with the events'
own timestamps: with telemetry off nothing is subscribed and a run pays
nothing; with it on, an event that opens or closes no span costs one dict
lookup. The span model is in docs/api.md ("OpenTelemetry").

A supervisor (a runtime with ``recover`` or ``capacity``) also gives the
fleet's figures as metrics (`OpenTelemetry.fleet_metrics`): its capacity, runs and steps,
its workers' load, and the queue's depth and oldest age, the figures
``cadenza fleet`` shows.

``CADENZA_OTEL=1`` in the environment switches telemetry on for every
`cadenza.Runtime` built without a ``telemetry`` argument, the command line's
included (`from_environment`).

This module imports ``opentelemetry`` only when telemetry is switched on, so
``import cadenza`` works without the extra.
"""

from ._switch import ENVIRONMENT as ENVIRONMENT
from ._switch import INSTALL as INSTALL
from ._switch import OpenTelemetry as OpenTelemetry
from ._switch import TelemetryUnavailable as TelemetryUnavailable
from ._switch import from_environment as from_environment

__all__ = ["ENVIRONMENT", "INSTALL", "OpenTelemetry", "TelemetryUnavailable", "from_environment"]
