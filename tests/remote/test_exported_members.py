"""The remote package and the wire protocol re-export their public names completely."""

from __future__ import annotations

import cadenza.protocols
import cadenza.remote


def test_all_is_complete() -> None:
    """Every public name of cadenza.remote is in __all__ exactly once."""
    public = {name for name in vars(cadenza.remote) if not name.startswith("_")}
    assert set(cadenza.remote.__all__) == public
    assert len(cadenza.remote.__all__) == len(public)


def test_wire_messages_are_exported() -> None:
    """Each wire message of both unions is public in cadenza.protocols."""
    messages = {
        *cadenza.protocols.WorkerMessage.__args__,
        *cadenza.protocols.SupervisorMessage.__args__,
        *cadenza.protocols.WorkOrder.__args__,
    }
    assert {m.__name__ for m in messages} <= set(cadenza.protocols.__all__)
