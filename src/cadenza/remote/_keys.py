"""CURVE key files, and which endpoints may be bound without them.

`generate_keys` writes what ``cadenza keys generate DIR`` writes, in ZeroMQ's
certificate format (``zmq.auth``)::

    DIR/server.key             the supervisor's public key: every worker needs it
    DIR/server.key_secret      the supervisor's key pair: the supervisor only
    DIR/worker.key             a worker's public key
    DIR/worker.key_secret      that worker's key pair: the workers only
    DIR/authorized/worker.key  the public keys the supervisor lets in

``--name NAME`` writes ``NAME.key`` and ``NAME.key_secret`` instead of the
worker's, so each worker can have its own identity; the server pair is made
once and kept. Secret files are readable by their owner only.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

from cadenza._logging import get_logger
from cadenza.errors import InsecureEndpoint, KeysError

__all__ = [
    "ServerKeys",
    "WorkerKeys",
    "check_endpoint",
    "generate_keys",
    "is_local_endpoint",
    "load_server_keys",
    "load_worker_keys",
]

_log = get_logger("cadenza.remote")

SERVER = "server"
WORKER = "worker"
AUTHORIZED = "authorized"


@dataclass(frozen=True, slots=True)
class ServerKeys:
    """The supervisor's key pair and the worker public keys it accepts (all Z85)."""

    public: bytes
    secret: bytes
    authorized: frozenset[bytes]


@dataclass(frozen=True, slots=True)
class WorkerKeys:
    """A worker's key pair and the public key of the supervisor it trusts (all Z85)."""

    public: bytes
    secret: bytes
    server: bytes


def generate_keys(directory: str | os.PathLike[str], *, name: str = WORKER) -> list[Path]:
    """Writes a server key pair (unless there is one) and a worker pair called ``name``.

    Returns:
        The files written.

    Raises:
        KeysError: ``name`` is not a plain file name, or its keys already exist
            (a new pair would lock out the workers that have the old one).
    """
    if not name or name == SERVER or Path(name).name != name or name.startswith("."):
        raise KeysError(f"{name!r} cannot name a worker key pair")
    if not zmq.has("curve"):
        raise KeysError("this libzmq has no CURVE support")
    root = Path(directory)
    if (root / f"{name}.key").exists() or (root / f"{name}.key_secret").exists():
        raise KeysError(f"{root / name}.key already exists; remove it first or choose --name")
    (root / AUTHORIZED).mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if not (root / f"{SERVER}.key_secret").exists():
        written.extend(Path(p) for p in zmq.auth.create_certificates(root, SERVER))
    public, secret = (Path(p) for p in zmq.auth.create_certificates(root, name))
    written += [public, secret]
    allowed = root / AUTHORIZED / public.name
    shutil.copyfile(public, allowed)
    written.append(allowed)
    for path in written:
        if path.name.endswith(".key_secret"):
            path.chmod(0o600)
    return written


def load_server_keys(directory: str | os.PathLike[str]) -> ServerKeys:
    """The supervisor's keys from a key directory.

    Raises:
        KeysError: ``server.key_secret`` is missing or bad, or no worker key is authorized.
    """
    root = Path(directory)
    public, secret = _load(root / f"{SERVER}.key_secret")
    if secret is None:
        raise KeysError(f"{root / SERVER}.key_secret holds no secret key")
    folder = root / AUTHORIZED
    try:
        authorized = frozenset(zmq.auth.load_certificates(folder))
    except (OSError, ValueError) as error:
        raise KeysError(f"cannot read the authorized keys in {str(folder)!r}: {error}") from None
    if not authorized:
        raise KeysError(f"no authorized worker keys in {str(folder)!r}; run cadenza keys generate")
    return ServerKeys(public=public, secret=secret, authorized=authorized)


def load_worker_keys(directory: str | os.PathLike[str], *, name: str | None = None) -> WorkerKeys:
    """A worker's keys: ``NAME.key_secret`` when it exists, else ``worker.key_secret``.

    Raises:
        KeysError: A file is missing, unreadable or holds no key.
    """
    root = Path(directory)
    own = root / f"{name}.key_secret" if name else None
    if own is None or not own.exists():
        own = root / f"{WORKER}.key_secret"
    public, secret = _load(own)
    if secret is None:
        raise KeysError(f"{own} holds no secret key")
    server, _ = _load(root / f"{SERVER}.key")
    return WorkerKeys(public=public, secret=secret, server=server)


def _load(path: Path) -> tuple[bytes, bytes | None]:
    try:
        return zmq.auth.load_certificate(path)
    except (OSError, ValueError) as error:
        raise KeysError(f"cannot read the key file {str(path)!r}: {error}") from None


def is_local_endpoint(endpoint: str) -> bool:
    """True for ``ipc://``, ``inproc://`` and TCP on a loopback address or ``localhost``."""
    scheme, _, rest = endpoint.partition("://")
    if scheme in ("ipc", "inproc"):
        return True
    if scheme != "tcp":
        return False
    host = rest.rsplit(":", 1)[0].split(";")[-1].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # '*', an interface or a host name: assume it is reachable
        return False


_ANY_HOST = frozenset({"0.0.0.0", "::", "*", ""})
_PROBE = ("192.0.2.1", 9)
"""A documentation address (RFC 5737): a UDP socket "connected" to it tells which local
address the default route leaves from, without sending a packet."""


def advertised_endpoint(bound: str) -> str:
    """Where a worker of another host connects to reach the endpoint ``bound``.

    A TCP endpoint bound to every interface (``0.0.0.0``, ``::``, ``*``) names
    none a worker could dial: the address this host's default route leaves
    from stands in for it (else the host's name). Any other endpoint is its
    own address. ``--advertise`` overrides this where the guess is wrong (NAT,
    several networks).
    """
    scheme, _, rest = bound.partition("://")
    host, colon, port = rest.rpartition(":")
    if scheme != "tcp" or not colon or host.strip("[]") not in _ANY_HOST:
        return bound
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(_PROBE)
            address = str(probe.getsockname()[0])
    except OSError:  # no route at all: the name is the best left
        address = socket.gethostname()
    return f"tcp://{address}:{port}"


def check_endpoint(endpoint: str, *, keys: bool, insecure: bool) -> None:
    """Refuses to expose a supervisor without keys beyond this machine.

    Raises:
        InsecureEndpoint: ``endpoint`` is not local, ``keys`` is False and so is
            ``insecure``.
    """
    if insecure and not keys:
        _log.warning(
            "insecure_endpoint",
            endpoint=endpoint,
            risk="without CURVE keys any process that reaches this endpoint can take steps"
            " and read the environment and inputs they are sent",
        )
    if keys or insecure or is_local_endpoint(endpoint):
        return
    raise InsecureEndpoint(
        f"refusing to bind {endpoint!r} without CURVE keys: any host that reaches it could run "
        "steps; give --curve-keys DIR (cadenza keys generate DIR), bind 127.0.0.1, "
        "or pass --insecure on a trusted network"
    )
