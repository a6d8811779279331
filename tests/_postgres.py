"""A throwaway PostgreSQL cluster for the tests and benchmarks: initdb, pg_ctl, gone after.

Debian's ``postgresql`` package (``.ci/run`` installs it) puts the server's
programs in ``/usr/lib/postgresql/VERSION/bin``. ``initdb`` refuses to run as
root, and CI and the development machines run as root: there the cluster is
created and run as Debian's ``postgres`` account through ``runuser``, in a data
directory that account owns. As any other user it runs as that user.

The server listens on 127.0.0.1 on a free port only (its unix socket stays in
the temporary directory), and host connections need a password (SCRAM), so
every URL the tests use carries one: a test that prints a URL's password fails.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Cluster", "find_binaries", "started_cluster", "unavailable"]

PASSWORD_BYTES = 12


def find_binaries() -> Path | None:
    """The newest ``/usr/lib/postgresql/*/bin`` holding initdb and pg_ctl, or None."""
    root = Path("/usr/lib/postgresql")
    if not root.is_dir():
        return None
    versions = sorted(
        (p for p in root.iterdir() if (p / "bin" / "initdb").exists()),
        key=lambda p: int(p.name) if p.name.isdigit() else 0,
    )
    return versions[-1] / "bin" if versions else None


def unavailable() -> str | None:
    """Why no throwaway cluster can be started here, or None when one can."""
    if find_binaries() is None:
        return (
            "PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb is missing): "
            "apt-get install postgresql to run the PostgreSQL store tests"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' account to run initdb as"
        if shutil.which("runuser") is None:
            return "running as root and runuser (util-linux) is missing"
    return None


@dataclass(frozen=True)
class Cluster:
    """A running throwaway server.

    Attributes:
        host: Always 127.0.0.1.
        port: The port it listens on.
        user: The superuser's name.
        password: The superuser's password (host connections need it).
        directory: The temporary directory holding the data and the socket.
        options: The server's command-line options (``pg_ctl -o``).
    """

    host: str
    port: int
    user: str
    password: str
    directory: Path
    options: str = ""

    def url(self, database: str = "postgres") -> str:
        """A ``postgresql://`` URL for ``database``, password included."""
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{database}"

    def stop(self) -> None:
        """Stops the server (``fast``: sessions are ended, as in a real restart)."""
        _pg_ctl("-D", str(self.directory / "data"), "-m", "fast", "-w", "stop")

    def start(self) -> None:
        """Starts the stopped server again, on the same port, with the same options."""
        data, log = self.directory / "data", self.directory / "server.log"
        _pg_ctl("-D", str(data), "-l", str(log), "-o", self.options, "-w", "-t", "60", "start")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _as_owner(argv: list[str]) -> list[str]:
    """``argv`` run as the cluster's owner: ``postgres`` when we are root."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _run(program: str, *argv: str) -> None:
    """Runs one of the server's programs as the cluster's owner.

    Raises:
        RuntimeError: It failed (its output is in the message).
    """
    binaries = find_binaries()
    if binaries is None:
        raise RuntimeError(unavailable() or "PostgreSQL is not installed")
    done = subprocess.run(
        _as_owner([str(binaries / program), *argv]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{program} failed: {done.stdout}{done.stderr}")


def _pg_ctl(*argv: str) -> None:
    _run("pg_ctl", *argv)


@contextlib.contextmanager
def started_cluster(*, fsync: bool = True) -> Iterator[Cluster]:
    """Creates and starts a cluster in a temporary directory; stops and removes it after.

    Raises:
        RuntimeError: initdb or pg_ctl failed (their output is in the message).
    """
    if find_binaries() is None:
        raise RuntimeError(unavailable() or "PostgreSQL is not installed")
    # Not under pytest's basetemp: its parents are root's and closed to others.
    directory = Path(tempfile.mkdtemp(prefix="cadenza-pg-"))
    data, log = directory / "data", directory / "server.log"
    password = secrets.token_hex(PASSWORD_BYTES)
    (directory / "pwfile").write_text(password + "\n")
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        for path in (directory, directory / "pwfile"):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    port = _free_port()
    try:
        _run(
            "initdb", "-D", str(data), "-U", "postgres", "-E", "UTF8", "--no-sync",
            "--auth-local=trust", "--auth-host=scram-sha-256",
            f"--pwfile={directory / 'pwfile'}",
        )  # fmt: skip
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={port} "
            f"-c unix_socket_directories={directory} -c fsync={'on' if fsync else 'off'} "
            "-c max_connections=200"
        )
        _pg_ctl("-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start")
        try:
            yield Cluster("127.0.0.1", port, "postgres", password, directory, options)
        finally:
            with contextlib.suppress(RuntimeError):  # a test may have stopped it already
                _pg_ctl("-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
