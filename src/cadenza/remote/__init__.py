"""Remote workers over ZeroMQ: the supervisor's dispatcher, the worker, CURVE keys.

The supervisor keeps every controller and the store; leaf steps (command,
handler, agent) run on worker processes that connect to its `Dispatcher`::

    async with cadenza.Runtime(workers="tcp://127.0.0.1:5555") as runtime:
        result = await runtime.run("flow.yaml")        # steps run on workers

    $ cadenza worker --connect tcp://127.0.0.1:5555 --concurrency 8

A fleet's worker serves every supervisor the store's roll names (`FleetWorker`)::

    $ cadenza worker --store postgresql://db/cadenza --concurrency 8

The wire protocol is in `cadenza.protocols` (docs/protocol.md).
"""

from ._books import DispatcherStatistics as DispatcherStatistics
from ._books import WorkerEvent as WorkerEvent
from ._books import WorkerInfo as WorkerInfo
from ._dispatcher import DEFAULT_MAX_MESSAGE as DEFAULT_MAX_MESSAGE
from ._dispatcher import Dispatcher as Dispatcher
from ._fleet import FleetWorker as FleetWorker
from ._keys import ServerKeys as ServerKeys
from ._keys import WorkerKeys as WorkerKeys
from ._keys import generate_keys as generate_keys
from ._keys import is_local_endpoint as is_local_endpoint
from ._keys import load_server_keys as load_server_keys
from ._keys import load_worker_keys as load_worker_keys
from ._worker import Worker as Worker

__all__ = [
    "DEFAULT_MAX_MESSAGE",
    "Dispatcher",
    "DispatcherStatistics",
    "FleetWorker",
    "ServerKeys",
    "Worker",
    "WorkerEvent",
    "WorkerInfo",
    "WorkerKeys",
    "generate_keys",
    "is_local_endpoint",
    "load_server_keys",
    "load_worker_keys",
]
