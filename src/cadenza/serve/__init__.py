"""``cadenza serve``: watch runs in a browser, over an HTTP API (docs/api.md).

Needs the ``serve`` extra (``pip install 'cadenza[serve]'``: Starlette and
uvicorn); ``import cadenza`` never imports this package.

    from cadenza.serve import BackgroundServer, ServeOptions

    with BackgroundServer(ServeOptions(store="runs.db", port=0)) as server:
        print("open", server.page_url)  # http://127.0.0.1:PORT/?token=...

A service that owns a `cadenza.Runtime` mounts the viewer with
``create_app(runtime)`` beside its own routes.
"""

from ._app import create_app as create_app
from ._limits import Limits as Limits
from ._openapi import openapi_document as openapi_document
from ._server import BackgroundServer as BackgroundServer
from ._server import ServeError as ServeError
from ._server import ServeOptions as ServeOptions
from ._server import serve as serve

__all__ = [
    "BackgroundServer",
    "Limits",
    "ServeError",
    "ServeOptions",
    "create_app",
    "openapi_document",
    "serve",
]
