"""Where a forEach's items come from when they are not a list: a file or a generator.

``forEach: {lines: FILE}`` reads a JSON-lines file and ``forEach: {handler:
module:function}`` a Python function's iterable (a generator, sync or async).
Either is read in batches of `BATCH` as the forEach's window moves, so a
million items are never in memory at once: what is held is one batch, the
items in flight and, in the default output mode, what the step's result keeps
of each item anyway.

Reading never blocks the event loop: the file and a plain generator are read in
a worker thread, a batch at a time (one thread hop per batch, not per item); an
async generator is awaited on the loop, where the forEach's cancellation reaches
it. A resumed run reads its items again from the start (items already recorded
are replayed by index, not run), so the source must give the same items in the
same order: a file left as it was, a generator that is deterministic.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any, Protocol

import msgspec

from cadenza.actors.steps import StepContext, resolve_handler
from cadenza.kernel import call_in_thread
from cadenza.workflow import ItemSource, preview, type_name

__all__ = ["BATCH", "ItemStream", "ItemsError", "open_items"]

BATCH = 256
"""Items read at a time: one thread hop per batch keeps reading off the per-item cost."""

_decode = msgspec.json.Decoder().decode


class ItemsError(Exception):
    """A streamed forEach's source cannot be read: a bad line, a handler that gave no
    iterable. The message names where (``items.jsonl:12``) and what."""


class ItemStream(Protocol):
    """A forEach's items, read a batch at a time."""

    total: int | None
    """How many items in all, when known before they are read (a file's lines)."""

    async def read(self) -> list[Any]:
        """The next batch of items; an empty list once there are no more.

        Raises:
            ItemsError: The source is broken where it was read.
        """
        ...

    async def close(self) -> None:
        """Releases the file or the generator (its ``finally`` blocks run)."""
        ...


async def open_items(source: ItemSource, base_dir: Path, context: StepContext) -> ItemStream:
    """The stream of ``source``'s items, opened (a file counted, a generator started).

    Raises:
        ItemsError: The file has a bad line (all of it is checked here, before any
            item runs), or the handler gave something that is not iterable.
        HandlerError: The handler cannot be imported.
        OSError: The file cannot be read.
    """
    if source.lines is not None:
        path = base_dir / source.lines
        total = await call_in_thread(_count_lines, path, source.lines)
        return _Lines(path, source.lines, total)
    assert source.handler is not None
    handler = resolve_handler(source.handler, base_dir)
    if inspect.isasyncgenfunction(handler) or inspect.iscoroutinefunction(handler):
        value = handler(context)
        if inspect.isawaitable(value):
            value = await value
    else:
        value = await call_in_thread(handler, context)
    return _generated(value, source.handler)


def _count_lines(path: Path, name: str) -> int:
    """The number of items in the file, every line checked (in a worker thread)."""
    count = 0
    with path.open("rb") as file:
        for number, line in enumerate(file, start=1):
            if line.strip():
                _parse(line, name, number)
                count += 1
    return count


def _parse(line: bytes, name: str, number: int) -> Any:
    try:
        return _decode(line)
    except msgspec.DecodeError as error:
        raise ItemsError(f"{name}:{number}: not a JSON value ({error})") from None


class _Lines:
    """A JSON-lines file, one item a non-blank line."""

    def __init__(self, path: Path, name: str, total: int) -> None:
        self.total: int | None = total
        self._path = path
        self._name = name
        self._file: IO[bytes] | None = None
        self._number = 0  # the last line read, for the errors' location

    async def read(self) -> list[Any]:
        return await call_in_thread(self._batch)

    def _batch(self) -> list[Any]:
        if self._file is None:
            self._file = self._path.open("rb")
        items: list[Any] = []
        while len(items) < BATCH:
            line = self._file.readline()
            if not line:
                break
            self._number += 1
            if line.strip():
                items.append(_parse(line, self._name, self._number))
        return items

    async def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _generated(value: Any, reference: str) -> ItemStream:
    if hasattr(value, "__aiter__"):
        return _AsyncItems(value.__aiter__())
    try:
        iterator = iter(value)
    except TypeError:
        raise ItemsError(
            f"forEach handler {reference!r} must return an iterable or a generator (sync or "
            f"async), but it gave {type_name(value)} {preview(value)}"
        ) from None
    return _SyncItems(iterator, len(value) if isinstance(value, list | tuple) else None)


class _SyncItems:
    """A plain iterable: a batch is taken in a worker thread (the generator may block)."""

    def __init__(self, iterator: Iterator[Any], total: int | None) -> None:
        self.total = total
        self._iterator = iterator

    async def read(self) -> list[Any]:
        return await call_in_thread(_take, self._iterator)

    async def close(self) -> None:
        close = getattr(self._iterator, "close", None)
        if close is not None:
            with contextlib.suppress(ValueError):  # running in a thread a cancel abandoned
                close()


def _take(iterator: Iterator[Any]) -> list[Any]:
    return list(itertools.islice(iterator, BATCH))


class _AsyncItems:
    """An async iterable, awaited on the event loop a batch at a time."""

    total: int | None = None

    def __init__(self, iterator: AsyncIterator[Any]) -> None:
        self._iterator = iterator

    async def read(self) -> list[Any]:
        items: list[Any] = []
        while len(items) < BATCH:
            try:
                items.append(await anext(self._iterator))
            except StopAsyncIteration:
                break
        return items

    async def close(self) -> None:
        aclose = getattr(self._iterator, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(RuntimeError):  # awaited by a cancelled read
                await aclose()
