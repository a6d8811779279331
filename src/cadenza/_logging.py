"""Logging: the library writes to the standard ``logging`` module; the CLI shows it.

A library must stay silent until its application configures logging. So
Cadenza's loggers (`get_logger`) are structlog loggers over the standard
library's ``logging.getLogger("cadenza...")``: an application that configures
nothing sees warnings and errors on stderr (Python's last-resort handler) and
no debug line anywhere; one that configures ``logging`` gets Cadenza's records
like any library's. A record's message is its event and its fields, as a
structlog user reads them (``llm_attempt call='openai' attempt=2 ...``, a
traceback last, on lines of its own), so ``logging.basicConfig`` shows them
whole; a handler that wants them apart finds the event in
``record.cadenza_event`` and the fields in ``record.cadenza_fields``. Every
field (a traceback too) is redacted before it leaves.

The command line configures the ``cadenza`` logger itself (`configure_logging`):
text lines on stderr, or, when the events stream is on stderr too, one JSON
object per line (``{"type": "log", ...}``), so that stream stays NDJSON.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping, MutableMapping
from typing import Any

import structlog

from ._redact import redact, redact_processor

__all__ = ["EVENT", "FIELDS", "configure_logging", "get_logger"]

FIELDS = "cadenza_fields"
"""The attribute of a ``logging.LogRecord`` that holds a Cadenza record's fields."""

EVENT = "cadenza_event"
"""The attribute of a ``logging.LogRecord`` that holds a Cadenza record's bare event name."""


def _message(event: str, fields: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """``event key=%r ...`` and the values: the fields as structlog's key-value renderer
    writes them, with a message template that is the same for every record of the event
    (what a handler that groups records by ``record.msg`` groups by)."""
    template = [event.replace("%", "%%")]
    values = []
    for key, value in fields.items():
        if key != "exception":
            template.append(f" {key.replace('%', '%%')}=%r")
            values.append(value)
    if fields.get("exception"):
        template.append("\n%s")  # a traceback on lines of its own, last
        values.append(fields["exception"])
    return "".join(template), tuple(values)


def _to_stdlib(
    logger: object, method_name: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    event = str(event_dict.pop("event", ""))
    event_dict.pop("level", None)
    fields = dict(event_dict)
    template, values = _message(event, fields)
    return (template, *values), {"extra": {FIELDS: fields, EVENT: event}}


_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,  # first: a disabled level costs one check
    structlog.processors.format_exc_info,  # before redaction: a traceback is text to scrub
    redact_processor,
    _to_stdlib,
]


class _BoundLogger(structlog.stdlib.BoundLogger):
    """structlog's stdlib logger that asks the level before it builds a record.

    structlog's own ``filter_by_level`` drops a disabled record only once its event
    dict is made (~3 us): a debug line on a hot path (each model call's) cost that
    when nobody listened. The standard logger caches its answer.
    """

    def debug(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if not self._logger.isEnabledFor(logging.DEBUG):
            return None
        return super().debug(event, *args, **kw)

    def info(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if not self._logger.isEnabledFor(logging.INFO):
            return None
        return super().info(event, *args, **kw)


def get_logger(name: str) -> Any:
    """A structlog logger that writes to the standard ``logging`` logger ``name``."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=_PROCESSORS,
        wrapper_class=_BoundLogger,
        cache_logger_on_first_use=True,
    )


class _Text(logging.Formatter):
    """``2026-01-01T00:00:00Z [warning ] event key=value``, like structlog's console."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
        line = f"{stamp} [{record.levelname.lower():<8}] {record.getMessage()}"
        if record.exc_info and not hasattr(record, EVENT):  # another library's: not redacted yet
            return f"{line}\n{redact(self.formatException(record.exc_info))}"
        return line


class _Json(logging.Formatter):
    """One JSON object per record, in the events stream's envelope: ``type`` ``log``."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = {
            "type": "log",
            "timestamp": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "message": getattr(record, EVENT, None) or record.getMessage(),
            "data": getattr(record, FIELDS, {}),
        }
        return json.dumps(line, default=str)


def configure_logging(level: str | None = None, *, json_lines: bool = False) -> None:
    """Shows Cadenza's records on stderr at ``level`` (default ``CADENZA_LOG_LEVEL`` or warning).

    With ``json_lines``, each record is one JSON object (for ``--events``).
    """
    name = (level or os.environ.get("CADENZA_LOG_LEVEL") or "warning").upper()
    numeric = logging.getLevelNamesMapping().get(name, logging.WARNING)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Json() if json_lines else _Text())
    root = logging.getLogger("cadenza")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    root.propagate = False
    # The PostgreSQL driver's pool retries a lost connection by itself and says so
    # with a traceback at warning level; Cadenza says what it costs a run. Shown
    # when debugging only (else Python's last-resort handler would print it).
    driver = logging.getLogger("asyncpg")
    for old in list(driver.handlers):
        driver.removeHandler(old)
    driver.addHandler(handler if numeric <= logging.DEBUG else logging.NullHandler())
    driver.propagate = False
