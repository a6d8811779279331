"""The event stream, for programs that read it: every type, and the data of each.

`RunHandle.events()`, an `EventSubscription`, ``cadenza run --events`` and the
viewer's stream give `Event`s (zenflow's envelope, docs/events.md). An event's
``type`` is one of `EventType`'s members; its ``data`` is a plain dict, which
`payload` reads back as the Struct `PAYLOADS` gives for the type, typed and
checked::

    from cadenza.events import EventType, StepStart, payload

    async for event in handle.events():
        if event.type == EventType.STEP_START:
            started = payload(event, StepStart)
            print(event.step_id, started.kind, started.attempt)

`ZENFLOW` is zenflow's own list of types and keys; `extra_keys` and
`ADDED_TYPES` say what Cadenza adds to it. This module is the public face of
`cadenza.protocols`, an internal seam that also holds the worker wire.
"""

from cadenza.protocols import Event as Event
from cadenza.protocols import EventType as EventType
from cadenza.protocols import Tokens as Tokens
from cadenza.protocols import _payloads
from cadenza.protocols._payloads import *  # noqa: F403  (every payload, as listed there)

__all__ = ["Event", "EventType", "Tokens"]
__all__ += _payloads.__all__
