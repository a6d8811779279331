"""How a step ends: the `StepFinished` report to its controller, and `StepFailure`.

Every actor that runs a step (leaf, replayed, waiting for a person, container)
ends by sending its controller one `StepFinished` through a `Report`; the work of
a leaf step raises `StepFailure` for a failure it expects (a non-zero exit, a
timeout, a model that never submitted), and `work_error` turns anything raised
into the `ErrorInfo` the record keeps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from cadenza.errors import CadenzaError
from cadenza.protocols import ErrorInfo, StepRecord

__all__ = ["Report", "StepFailure", "StepFinished", "work_error"]


class StepFinished(msgspec.Struct, frozen=True):
    """A child tells its controller that it has a final, durable outcome."""

    step_id: str
    record: StepRecord


Report = Callable[[StepFinished], Awaitable[None]]
"""How a child reaches its controller (usually ``controller_ref.send``)."""


class StepFailure(Exception):
    """The work of a step failed in an expected way (non-zero exit, timeout...)."""

    def __init__(self, error: ErrorInfo, content: str | None = None, result: Any = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.content = content
        self.result = result


def work_error(error: BaseException, address: str) -> ErrorInfo:
    """Describes an exception raised by a step's work, for the record."""
    if isinstance(error, StepFailure):
        return error.error
    if isinstance(error, CadenzaError):
        return ErrorInfo(type=type(error).__name__, message=str(error), address=address)
    return ErrorInfo(
        type=type(error).__name__, message=str(error) or type(error).__name__, address=address
    )
