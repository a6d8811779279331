"""Who may use the viewer: the token, loopback host names, same-origin JSON writes."""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cadenza.serve import BackgroundServer, ServeError, ServeOptions

from .conftest import SCRIPTED, OpenViewer, write


async def test_a_token_is_required_for_everything_when_given(
    tmp_path: Path, open_viewer: OpenViewer
) -> None:
    """Without the token: 401 for the page, the API and the OpenAPI file; with it: 200."""
    async with open_viewer(tmp_path, token="s3cret") as (_, client):
        for path in ("/", "/api/runs", "/openapi.json", "/static/app.css"):
            refused = await client.get(path)
            assert refused.status_code == 401, path
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert "token" in refused.json()["error"]["message"]
        wrong = await client.get("/api/runs", headers={"Authorization": "Bearer guess"})
        assert wrong.status_code == 401
        right = await client.get("/api/runs", headers={"Authorization": "Bearer s3cret"})
        assert right.status_code == 200
        document = await client.get("/openapi.json", headers={"Authorization": "Bearer s3cret"})
        assert document.json()["security"] == [{"bearer": []}]


async def test_a_browser_trades_the_token_in_the_address_for_a_cookie(
    tmp_path: Path, open_viewer: OpenViewer
) -> None:
    """GET /?token=T answers the page with an HttpOnly cookie that then lets requests in."""
    async with open_viewer(tmp_path, token="s3cret") as (_, client):
        page = await client.get("/", params={"token": "s3cret"})
        assert page.status_code == 200
        assert "<title>Cadenza runs</title>" in page.text
        cookie = page.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        assert "s3cret" not in cookie  # a digest of the token, never the token itself
        assert (await client.get("/api/runs")).status_code == 200  # the client kept the cookie
        client.cookies.clear()
        assert (await client.get("/api/runs")).status_code == 401
        bad = await client.get("/", params={"token": "guess"})
        assert bad.status_code == 401


async def test_without_a_token_the_api_is_open_and_says_so(
    tmp_path: Path, open_viewer: OpenViewer
) -> None:
    """No token configured: requests need none, and the OpenAPI file asks for none."""
    async with open_viewer(tmp_path) as (_, client):
        assert (await client.get("/api/runs")).status_code == 200
        assert "security" not in (await client.get("/openapi.json")).json()


async def test_only_loopback_host_names_are_answered(
    tmp_path: Path, open_viewer: OpenViewer
) -> None:
    """A Host that is not loopback (DNS rebinding) is refused with 403."""
    async with open_viewer(tmp_path) as (_, client):
        for host in ("127.0.0.1:8321", "localhost:8321", "[::1]:8321", "localhost"):
            assert (await client.get("/api/runs", headers={"Host": host})).status_code == 200
        for host in ("attacker.example:8321", "127.0.0.1.attacker.example", ""):
            refused = await client.get("/api/runs", headers={"Host": host})
            assert refused.status_code == 403, host


async def test_writes_must_be_same_origin_json(tmp_path: Path, open_viewer: OpenViewer) -> None:
    """A form post is refused (415); a cross-origin JSON post is refused (403)."""
    async with open_viewer(tmp_path) as (_, client):
        form = await client.post("/api/runs", data={"path": "x.yaml"})
        assert form.status_code == 415
        plain = await client.post("/api/runs/x/cancel")
        assert plain.status_code == 415
        cross = await client.post(
            "/api/runs", json={"path": "x.yaml"}, headers={"Origin": "http://attacker.example"}
        )
        assert cross.status_code == 403
        same = await client.post(
            "/api/runs", json={"path": "x.yaml"}, headers={"Origin": "http://127.0.0.1:8321"}
        )
        assert same.status_code == 404  # let through: there is no such workflow file


def test_no_token_is_for_loopback_only(tmp_path: Path) -> None:
    """Asking for no token is refused beyond loopback, and beside a token; a server
    with no token given (it makes one) may listen anywhere."""
    with pytest.raises(ServeError, match="loopback address only"):
        ServeOptions(host="0.0.0.0", root=tmp_path, no_token=True).check()
    with pytest.raises(ServeError, match="conflict"):
        ServeOptions(root=tmp_path, token="t", no_token=True).check()
    ServeOptions(host="0.0.0.0", root=tmp_path).check()
    ServeOptions(host="127.0.0.2", root=tmp_path, no_token=True).check()
    ServeOptions(host="::1", root=tmp_path, no_token=True).check()
    with pytest.raises(ServeError, match="not a directory"):
        ServeOptions(root=tmp_path / "missing").check()


def test_a_server_makes_its_own_token_unless_told_not_to(tmp_path: Path) -> None:
    """BackgroundServer with no token: a random one, asked of every request."""
    with BackgroundServer(ServeOptions(store=None, root=tmp_path, port=0)) as server:
        assert server.token is not None
        assert server.page_url == f"{server.url}/?token={server.token}"
        assert httpx.get(f"{server.url}/api/runs").status_code == 401
        assert httpx.get(f"{server.url}/api/runs", headers=server.headers).status_code == 200
    options = ServeOptions(store=None, root=tmp_path, port=0, no_token=True)
    with BackgroundServer(options) as server:
        assert server.token is None
        assert server.page_url == f"{server.url}/"
        assert httpx.get(f"{server.url}/api/runs").status_code == 200


TOKEN = "s3cret-Token-0123456789"


def _forgeries(token: str, name: str) -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """What an attacker might send instead of the token: (what, headers, query);
    ``name`` is the name of the server's cookie."""
    digest = hashlib.sha256(token.encode()).hexdigest()
    return [
        ("nothing", {}, {}),
        ("a wrong token", {"Authorization": "Bearer guess"}, {}),
        ("the token upper-cased", {"Authorization": f"Bearer {token.upper()}"}, {}),
        ("the token lower-cased", {"Authorization": f"Bearer {token.lower()}"}, {}),
        ("a prefix of the token", {"Authorization": f"Bearer {token[:8]}"}, {}),
        ("the token and more", {"Authorization": f"Bearer {token}{token}"}, {}),
        ("an empty bearer", {"Authorization": "Bearer "}, {}),
        ("the token as Basic", {"Authorization": f"Basic {token}"}, {}),
        ("the token as the scheme", {"Authorization": token}, {}),
        ("the token in a cookie", {"Cookie": f"{name}={token}"}, {}),
        ("the digest under the old name", {"Cookie": f"cadenza_token={digest}"}, {}),
        ("another token's cookie", {"Cookie": f"{name}={hashlib.sha256(b'x').hexdigest()}"}, {}),
        ("a wrong token in the query", {}, {"token": "guess"}),
        ("the token in the query, other case", {}, {"token": token.swapcase()}),
        ("the token under another key", {}, {"Token": token}),
    ]


async def test_without_the_exact_token_every_door_is_shut(
    tmp_path: Path, open_viewer: OpenViewer
) -> None:
    """Every forgery gets 401 on every route: reading, streaming, starting, answering a
    waiting `human:` step (the run stays waiting), cancelling, resuming, messaging."""
    write(tmp_path, "review.yaml", SCRIPTED)
    async with open_viewer(tmp_path, token=TOKEN) as (runtime, client):
        await runtime.run(tmp_path / "review.yaml", run_id="r")
        login = await client.get("/", params={"token": TOKEN})
        name = login.headers["set-cookie"].split("=", 1)[0]
        reads = [
            "/",
            "/openapi.json",
            "/static/app.css",
            "/api/runs",
            "/api/runs/r",
            "/api/runs/r/events/stream",
            "/api/runs/r/inputs",
            "/api/workflows",
        ]
        writes = {
            "/api/runs": {"path": "review.yaml"},
            "/api/runs/r/signal": {"address": "approve", "data": {"publish": True}},
            "/api/runs/r/cancel": {},
            "/api/runs/r/resume": {},
            "/api/runs/r/messages": {"target": "approve", "text": "hi"},
        }
        for what, headers, query in _forgeries(TOKEN, name):
            client.cookies.clear()
            for path in reads:
                refused = await client.get(path, headers=headers, params=query)
                assert refused.status_code == 401, (what, path)
            for path, body in writes.items():
                refused = await client.post(path, json=body, headers=headers, params=query)
                assert refused.status_code == 401, (what, path)
                assert refused.headers["connection"] == "close"
        query_on_post = await client.post(
            "/api/runs/r/signal", json=writes["/api/runs/r/signal"], params={"token": TOKEN}
        )
        assert query_on_post.status_code == 401
        assert (await runtime.get_run("r")).status == "waiting"
        assert list(await runtime.pending_inputs("r")) == ["approve"]


def test_import_cadenza_loads_no_web_server() -> None:
    """`import cadenza` (and the CLI module) import neither Starlette nor uvicorn."""
    code = (
        "import sys, cadenza, cadenza.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_token_never_reaches_the_access_log(tmp_path: Path) -> None:
    """With the access log on: a login by address, a wrong guess, the token's key
    percent-encoded: every request is logged, the token in none of them."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    keep = Keep()
    options = ServeOptions(store=None, root=tmp_path, port=0)
    with BackgroundServer(options, log_level="info") as server:
        access = logging.getLogger("uvicorn.access")
        access.addHandler(keep)
        try:
            token = server.token
            assert token is not None
            assert httpx.get(server.page_url).status_code == 200
            assert httpx.get(f"{server.url}/api/runs?%74oken={token}").status_code == 200
            assert httpx.get(f"{server.url}/api/runs?limit=5&TOKEN={token}").status_code == 401
            assert httpx.get(f"{server.url}/api/runs?token=guess&x=1").status_code == 401
        finally:
            access.removeHandler(keep)
    assert len(lines) == 4, lines
    assert not [line for line in lines if token in line or "guess" in line], lines
    assert "GET /?token=*** HTTP/1.1" in lines[0]
    assert "/api/runs?token=***&x=1" in lines[3]


async def test_two_servers_on_one_host_keep_their_cookies_apart(
    tmp_path: Path, open_viewer: OpenViewer
) -> None:
    """A browser logged in to servers on two ports (cookies ignore ports) stays in to both."""
    async with (
        open_viewer(tmp_path, token="first-token-0123456789") as (_, first),
        open_viewer(tmp_path, store=tmp_path / "b.db", token="second-token-0123456") as (
            _,
            second,
        ),
    ):
        await first.get("/", params={"token": "first-token-0123456789"})
        await second.get("/", params={"token": "second-token-0123456"})
        jar = httpx.Cookies()
        jar.update(first.cookies)
        jar.update(second.cookies)  # one browser's jar: both cookies, for one host
        assert len(jar) == 2
        for client in (first, second):
            client.cookies = jar
            assert (await client.get("/api/runs")).status_code == 200
