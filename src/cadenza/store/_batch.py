"""What both durable writers do with a batch: group its writes into runs of one statement."""

from __future__ import annotations

from typing import Any

__all__ = ["queue_run"]


def queue_run(
    tables: dict[str, list[tuple[Any, list[tuple[Any, ...]]]]],
    statement: Any,
    parameters: tuple[Any, ...],
) -> None:
    """Adds one write to ``tables``: per table, runs of one statement in queue order.

    A statement repeated back to back becomes one ``executemany``; tables are
    written one after the other, so a batch costs a few round trips, not one a row.
    """
    runs = tables.get(statement.table)
    if runs is None:
        tables[statement.table] = [(statement, [parameters])]
    elif runs[-1][0] is statement:
        runs[-1][1].append(parameters)
    else:
        runs.append((statement, [parameters]))
