"""The ``cadenza`` command: run, validate, graph, runs, resume, signal, replay, serve, worker...

``_main`` parses the command line and runs each command; ``_durable``,
``_replay``, ``_remote`` and ``_serve`` add the durable-run, offline replay,
worker and viewer commands;
``_output`` is everything a run prints (live progress, the summary, ``runs``
tables) and the waiting for a run's end.
"""

from ._main import main as main

__all__ = ["main"]
