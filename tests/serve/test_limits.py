"""What one client may cost the viewer, tested as a flood would: huge bodies, thousands of
event streams, requests sent a byte at a time (docs/api.md, "Limits")."""

from __future__ import annotations

import asyncio
import json
import resource
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from cadenza.serve import BackgroundServer, Limits, ServeOptions

from .conftest import OpenViewer, write_parked
from .test_cli_serve import serving
from .test_live import messages

MB = 1 << 20
ATTACK = 50 * MB
RSS_BOUND = 64 * MB
STREAMS = 5000

if not Path("/proc/self/status").exists():
    pytest.skip("the memory bounds are read from /proc (Linux)", allow_module_level=True)


def rss(pid: int) -> int:
    """The resident set size of process ``pid``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def head(url: str, path: str, token: str | None, *fields: str) -> tuple[socket.socket, bytes]:
    """A connection to ``url`` and the head of a POST to ``path`` (not sent yet)."""
    where = urlsplit(url)
    connection = socket.create_connection((where.hostname, where.port), timeout=30)
    lines = [f"POST {path} HTTP/1.1", f"Host: {where.netloc}", "Content-Type: application/json"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    return connection, ("\r\n".join([*lines, *fields]) + "\r\n\r\n").encode()


def flood(connection: socket.socket, first: bytes, frames: Iterator[bytes]) -> int:
    """Sends ``first`` then ``frames`` until the server stops taking them; the bytes sent.

    An attacker does not wait for an answer: it sends until the connection breaks.
    """
    sent = 0
    try:
        connection.sendall(first)
        for frame in frames:
            connection.sendall(frame)
            sent += len(frame)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def answer(connection: socket.socket) -> bytes:
    """What the server sent before it closed the connection."""
    received = b""
    try:
        while chunk := connection.recv(65536):
            received += chunk
    except ConnectionResetError:  # the server closed with our bytes unread: what came is kept
        pass
    connection.close()
    return received


def zeros(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    block = b"0" * size
    for _ in range(total // size):
        yield block


def chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    for block in zeros(total, size):
        yield b"%x\r\n%s\r\n" % (len(block), block)
    yield b"0\r\n\r\n"


def test_a_50_mb_body_is_refused_while_the_server_grows_under_64_mb(tmp_path: Path) -> None:
    """`cadenza serve` at its defaults: a 50 MB body, declared or chunked, from a client
    holding the token, gets 413 and a closed connection; the server's RSS grows < 64 MB."""
    with serving("--store", "runs.db", cwd=tmp_path) as served:
        # Warm up: the first requests load what the server loads once.
        assert httpx.post(f"{served.url}/api/runs", json={}, headers=served.headers).is_error
        before = rss(served.process.pid)

        connection, first = head(served.url, "/api/runs", served.token, f"Content-Length: {ATTACK}")
        sent_declared = flood(connection, first, zeros(ATTACK))
        declared = answer(connection)
        after_declared = rss(served.process.pid)

        connection, first = head(
            served.url, "/api/runs", served.token, "Transfer-Encoding: chunked"
        )
        sent_chunked = flood(connection, first, chunks(ATTACK))
        chunked = answer(connection)
        after_chunked = rss(served.process.pid)

        alive = httpx.get(f"{served.url}/api/runs", headers=served.headers)
        assert alive.status_code == 200
    for received in (declared, chunked):
        assert received.startswith(b"HTTP/1.1 413 "), received[:200]
        assert b"connection: close" in received.lower()
        assert b"PayloadTooLarge" in received
    growth = max(after_declared, after_chunked) - before
    print(
        f"RSS before {before / MB:.1f} MB; +{(after_declared - before) / MB:.1f} MB after "
        f"{sent_declared / MB:.1f} MB sent with Content-Length, "
        f"+{(after_chunked - before) / MB:.1f} MB after {sent_chunked / MB:.1f} MB chunked"
    )
    assert growth < RSS_BOUND
    assert sent_chunked < ATTACK  # the connection was cut, not read to the end


async def test_bodies_over_the_limit_get_413_and_at_the_limit_pass(
    tmp_path: Path, open_viewer: OpenViewer
) -> None:
    """A 1,000-byte limit: 1,001 bytes declared or streamed is refused; 1,000 is read."""
    body = json.dumps({"path": "missing.yaml", "inputs": {"x": ""}})
    exact = body.replace('""', '"' + "x" * (1000 - len(body)) + '"').encode()
    assert len(exact) == 1000

    async def streamed(data: bytes) -> AsyncIterator[bytes]:
        for start in range(0, len(data), 100):
            yield data[start : start + 100]

    limits = Limits(max_body=1000)
    async with open_viewer(tmp_path, limits=limits) as (_, client):
        headers = {"content-type": "application/json"}
        over = exact[:-1] + b" }"
        for content in (over, streamed(over)):
            refused = await client.post("/api/runs", content=content, headers=headers)
            assert refused.status_code == 413
            assert refused.json()["error"]["type"] == "PayloadTooLarge"
        for content in (exact, streamed(exact)):
            read = await client.post("/api/runs", content=content, headers=headers)
            assert read.status_code == 404  # read and understood: there is no such file


async def _open_streams(
    url: str, token: str, run_id: str, count: int
) -> tuple[list[asyncio.StreamWriter], int, int]:
    """Opens ``count`` event streams at once, as a flood would, holding every connection.

    Returns the open streams' writers, how many were accepted (200) and how many refused
    (503, the connection then closed by the server).
    """
    where = urlsplit(url)
    request = (
        f"GET /api/runs/{run_id}/events/stream HTTP/1.1\r\nHost: {where.netloc}\r\n"
        f"Authorization: Bearer {token}\r\n\r\n"
    ).encode()
    held: list[asyncio.StreamWriter] = []
    accepted = refused = 0

    async def one() -> None:
        nonlocal accepted, refused
        reader, writer = await asyncio.open_connection(where.hostname, where.port)
        held.append(writer)
        writer.write(request)
        status = await reader.readline()
        if status.startswith(b"HTTP/1.1 200 "):
            accepted += 1
        elif status.startswith(b"HTTP/1.1 503 "):
            await reader.read()  # to the end: the server closes a refused connection
            refused += 1
        else:
            raise AssertionError(status)

    for start in range(0, count, 250):  # in waves, as the listen backlog allows
        async with asyncio.timeout(60):
            await asyncio.gather(*(one() for _ in range(min(250, count - start))))
    return held, accepted, refused


@pytest.fixture
def many_files() -> Iterator[None]:
    """Room for 5,000 connections in this process (and the server it starts)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = STREAMS + 1000
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"needs {needed} open files; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.timeout(180)  # 5,000 connections: about 10 s, 35 s on a loaded machine
async def test_5000_event_streams_are_capped_at_the_default_and_the_server_answers(
    tmp_path: Path, many_files: None
) -> None:
    """`cadenza serve` at its defaults: 5,000 streams opened and held on a running run;
    the first 100 (the default cap) are served, every other one gets 503 and is closed,
    and the server still answers."""
    write_parked(tmp_path)
    # A new connection per request: one kept alive over the flood would be closed idle.
    fresh = httpx.Limits(max_keepalive_connections=0)
    with serving("--store", "runs.db", cwd=tmp_path) as served:
        assert served.token is not None
        async with httpx.AsyncClient(
            base_url=served.url, headers=served.headers, limits=fresh, timeout=30
        ) as owner:
            started = await owner.post("/api/runs", json={"path": "park.yaml", "runId": "p"})
            assert started.status_code == 201, started.text
            held, accepted, refused = await _open_streams(served.url, served.token, "p", STREAMS)
            try:
                alive = await owner.get("/api/runs/p")
                assert alive.status_code == 200
                assert alive.json()["status"] == "running"
                print(f"{STREAMS} streams: {accepted} accepted, {refused} refused with 503")
                assert (accepted, refused) == (Limits().max_streams, STREAMS - accepted)
            finally:
                for writer in held:
                    writer.close()
            cancelled = await owner.post("/api/runs/p/cancel", json={})
            assert cancelled.status_code == 202


def test_a_streams_place_is_given_back_when_it_ends(tmp_path: Path) -> None:
    """Cap 2: a third stream gets 503 (JSON, why); once one ends, a new one is served."""
    write_parked(tmp_path)
    limits = Limits(max_streams=2, max_connections=10)
    options = ServeOptions(store=tmp_path / "runs.db", root=tmp_path, port=0, limits=limits)
    with (
        BackgroundServer(options) as server,
        httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as client,
        httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as other,
    ):
        started = client.post("/api/runs", json={"path": "park.yaml", "runId": "p"})
        assert started.status_code == 201, started.text
        path = "/api/runs/p/events/stream"
        with client.stream("GET", path) as first, other.stream("GET", path) as second:
            assert (first.status_code, second.status_code) == (200, 200)
            with httpx.Client(base_url=server.url, headers=server.headers) as third:
                refused = third.get(path)
            assert refused.status_code == 503
            assert refused.json()["error"]["type"] == "Unavailable"
            assert refused.headers["connection"] == "close"
            assert client.post("/api/runs/p/cancel", json={}).status_code == 202
            # The run ended: both streams end, each giving its place back before its end.
            for stream in (first, second):
                assert [m for m in messages(stream) if m.get("event") == "end"]
        with client.stream("GET", path) as again:
            assert again.status_code == 200


def test_half_sent_requests_are_answered_408_and_closed(tmp_path: Path) -> None:
    """A 0.5 s limit: a connection that sends nothing, half a head, half a body (declared
    or chunked), or half of its second request, gets 408 and is closed; an event stream
    opened before them all still flows (a request received whole is not timed)."""
    write_parked(tmp_path)
    limits = Limits(request_timeout=0.5)
    options = ServeOptions(store=tmp_path / "runs.db", root=tmp_path, port=0, limits=limits)
    with (
        BackgroundServer(options) as server,
        httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as client,
    ):
        started = client.post("/api/runs", json={"path": "park.yaml", "runId": "p"})
        assert started.status_code == 201, started.text
        where = urlsplit(server.url)
        auth = f"Authorization: Bearer {server.token}\r\n"
        post = f"POST /api/runs HTTP/1.1\r\nHost: {where.netloc}\r\n{auth}"
        post += "Content-Type: application/json\r\n"
        whole = f"GET /api/runs HTTP/1.1\r\nHost: {where.netloc}\r\n{auth}\r\n"
        slow = {
            "nothing": "",
            "half a head": post[:40],
            "half a body": post + 'Content-Length: 100\r\n\r\n{"path": "',
            "half a chunked body": post + 'Transfer-Encoding: chunked\r\n\r\n10\r\n{"pa',
            "half of a second request": whole + whole[:30],
        }
        with client.stream("GET", "/api/runs/p/events/stream") as stream:
            assert stream.status_code == 200
            for what, sent in slow.items():
                connection = socket.create_connection((where.hostname, where.port), timeout=30)
                connection.sendall(sent.encode())
                received = answer(connection)  # until the server closes it
                last = received[received.rfind(b"HTTP/1.1 ") :]
                assert last.startswith(b"HTTP/1.1 408 "), (what, received)
                assert b"RequestTimeout" in last, what
            assert client.post("/api/runs/p/cancel", json={}).status_code == 202
            ends = [m for m in messages(stream) if m.get("event") == "end"]
            assert '"cancelled"' in ends[0]["data"]


def test_without_the_token_a_half_sent_body_is_refused_at_once(tmp_path: Path) -> None:
    """No token, a body promised and never sent: 401 and the connection closed, no wait."""
    options = ServeOptions(store=None, root=tmp_path, port=0)  # the default 10 s limit
    with BackgroundServer(options) as server:
        connection, first = head(server.url, "/api/runs", None, "Content-Length: 1000000")
        connection.sendall(first + b'{"path": "')
        received = answer(connection)
    assert received.startswith(b"HTTP/1.1 401 "), received
    assert b"connection: close" in received.lower()
