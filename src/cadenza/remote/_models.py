"""The model clients of a worker: one registry per run it serves, one HTTP client.

In the supervisor a run has its own `ProviderRegistry`; a worker serves many
runs, so it keeps one per run id (a scripted agent keeps its place in its
script across the visits that reach this worker), the most recent few, all
over one shared ``httpx.AsyncClient`` built on first use.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

import anyio
import httpx

from cadenza.kernel import Clock
from cadenza.llm import ProviderRegistry

__all__ = ["RunModels"]

RUNS: Final = 16
"""Runs whose registries are kept; an older one is dropped (it owns no connection)."""


class RunModels:
    """Hands out the `ProviderRegistry` of a run id; `aclose` closes the shared client."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._registries: OrderedDict[str, ProviderRegistry] = OrderedDict()
        self._http: httpx.AsyncClient | None = None

    def __call__(self, run_id: str) -> ProviderRegistry:
        registry = self._registries.get(run_id)
        if registry is None:
            registry = ProviderRegistry(clock=self._clock, http=self._shared_http)
            self._registries[run_id] = registry
            if len(self._registries) > RUNS:
                self._registries.popitem(last=False)
        else:
            self._registries.move_to_end(run_id)
        return registry

    async def aclose(self) -> None:
        """Closes the shared HTTP client, if one was built."""
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    async def _shared_http(self) -> httpx.AsyncClient:
        if self._http is None:
            # Building a client loads the CA bundle: keep that off the event loop.
            http = await anyio.to_thread.run_sync(ProviderRegistry.http_client)
            if self._http is None:
                self._http = http
            else:
                await http.aclose()
        return self._http
