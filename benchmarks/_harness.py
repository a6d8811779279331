"""Shared pieces for the benchmarks: a figure beside its raw floor, a table, JSON.

Every figure is measured next to a raw baseline in the same process and run, so
what a reader compares is a ratio that survives a noisy, shared machine.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Figure:
    """One measured figure and the raw floor it is judged against.

    Attributes:
        group: The benchmark module that produced it (``actors``, ``cel``...).
        name: What was measured, e.g. ``ask round trip``.
        value: The measurement, in ``unit``.
        unit: ``us`` (per operation), ``ops/s``, ``KiB``, ``MiB`` or ``s``.
        baseline: The raw floor in the same unit, or None when there is none.
        baseline_name: What the floor is, e.g. ``asyncio future ask``.
        target: The goal in words, e.g. ``<= 3x raw``.
        ok: Whether the target was met (None when there is no target).
    """

    group: str
    name: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    target: str = ""
    ok: bool | None = None

    @property
    def ratio(self) -> float | None:
        """``value / baseline``: above 1 is slower for times, faster for rates."""
        if not self.baseline:
            return None
        return self.value / self.baseline

    def as_dict(self) -> dict[str, object]:
        """The figure as plain JSON data, ratio included."""
        return {**asdict(self), "ratio": self.ratio}


def best_of(repeats: int, measure: Callable[[], float]) -> float:
    """The median of ``repeats`` measurements, with the collector quiet during each."""
    samples = []
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            samples.append(measure())
        finally:
            gc.enable()
    return statistics.median(samples)


def per_op_us(elapsed_s: float, ops: int) -> float:
    """Microseconds per operation."""
    return elapsed_s / ops * 1e6


def now() -> float:
    """A monotonic high-resolution timestamp in seconds."""
    return time.perf_counter()


def format_table(figures: list[Figure]) -> str:
    """A plain-text table: one row per figure, its floor and the ratio."""
    header = ("group", "figure", "value", "raw floor", "ratio", "target", "ok")
    rows = [header]
    for f in figures:
        ratio = f.ratio
        rows.append(
            (
                f.group,
                f.name,
                f"{f.value:,.2f} {f.unit}",
                f"{f.baseline:,.2f} {f.unit} ({f.baseline_name})" if f.baseline else "-",
                f"{ratio:.2f}x" if ratio is not None else "-",
                f.target or "-",
                {True: "yes", False: "NO", None: "-"}[f.ok],
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
