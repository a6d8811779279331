"""Who may use the viewer: the token, loopback host names, same-origin JSON writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cadenza.serve import ServeError, ServeOptions

from .conftest import OpenViewer


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


def test_listening_beyond_loopback_needs_a_token(tmp_path: Path) -> None:
    """0.0.0.0 without a token is refused; with one, or on loopback, it is allowed."""
    with pytest.raises(ServeError, match="token"):
        ServeOptions(host="0.0.0.0", root=tmp_path).check()
    ServeOptions(host="0.0.0.0", root=tmp_path, token="t").check()
    ServeOptions(host="127.0.0.2", root=tmp_path).check()
    ServeOptions(host="::1", root=tmp_path).check()
    with pytest.raises(ServeError, match="not a directory"):
        ServeOptions(root=tmp_path / "missing").check()


def test_import_cadenza_loads_no_web_server() -> None:
    """`import cadenza` (and the CLI module) import neither Starlette nor uvicorn."""
    code = (
        "import sys, cadenza, cadenza.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
