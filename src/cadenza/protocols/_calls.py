"""The journal inside a step: each model call and tool call an execution completed.

An agent step records every call when it completes (`CallRecord`), so that a
resumed run continues inside the step instead of calling the model and running
the tools again, a fork reuses what its source recorded, and ``cadenza replay``
runs a recorded run offline. The record's ``body`` is plain JSON text: what the
call answered (a model's reply, a tool's output), as the layer above encodes it.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

__all__ = ["CALL_BODY_LIMIT", "CallKind", "CallRecord"]

CallKind = Literal["model", "tool"]

CALL_BODY_LIMIT: Final = 1 << 20
"""Bytes of a call's body a store keeps in the call's own row; a larger body is kept
once per run, by the digest of its text, however many calls answered it."""


class CallRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One completed call of a step's execution.

    Attributes:
        address: The step's address.
        attempt: The execution (the step's attempt) that made it.
        seq: Its place among that execution's calls, from 1.
        kind: ``model`` (one completion, retries included) or ``tool``.
        digest: What was asked, as a SHA-256 hex digest (a model call's request;
            a tool call's name and arguments): a replay that asks otherwise has
            diverged from the record.
        body: What it answered, as JSON text.
    """

    address: str
    attempt: int
    seq: int
    kind: CallKind
    digest: str
    body: str
