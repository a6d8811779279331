"""Logging for the command line: structlog to stderr, redacted, quiet by default.

The library never configures logging for its embedder; the CLI does, so that
logs never mix with ``--json`` on stdout and never show a secret.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog

from cadenza._redact import redact_processor

__all__ = ["configure_logging"]


def configure_logging(level: str | None = None) -> None:
    """Sends structlog output to stderr at ``level`` (default ``CADENZA_LOG_LEVEL`` or warning)."""
    name = (level or os.environ.get("CADENZA_LOG_LEVEL") or "warning").upper()
    numeric = logging.getLevelNamesMapping().get(name, logging.WARNING)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_processor,
            structlog.processors.format_exc_info,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
