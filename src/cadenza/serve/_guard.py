"""Who may use the viewer: a bearer token, loopback host names, same-origin writes.

An ASGI middleware in front of everything the server answers:

* **Token.** With a token configured (``cadenza serve`` makes one unless told
  ``--no-token``), every request needs it: an ``Authorization: Bearer TOKEN``
  header, or the server's cookie. A browser gets the cookie by opening
  ``/?token=TOKEN`` once (HttpOnly, SameSite=Strict, holding a digest of the
  token, named after the token so that servers on other ports of the same host
  keep theirs); the page then drops the token from its address bar. Tokens are
  compared in constant time, exactly: another case is another token.
* **Host names.** A server bound to loopback answers only requests whose
  ``Host`` is a loopback name (``127.0.0.1``, ``localhost``, ``[::1]``), so a web
  page cannot reach it through DNS rebinding.
* **Writes.** A ``POST`` must send JSON (``Content-Type: application/json``) and,
  when the browser names an ``Origin``, come from the server's own origin: a
  page elsewhere cannot start, answer or cancel runs (no cross-site requests).

A refused request's connection is closed: its body is never read.
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import CookieError, SimpleCookie
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from ._limits import refuse

__all__ = ["Guard", "cookie_name", "is_loopback_host"]

_LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost."})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def cookie_name(token: str) -> str:
    """The name of the cookie that carries ``token``'s digest (cookies ignore ports)."""
    return "cadenza_token_" + hashlib.sha256(b"cookie name\x00" + token.encode()).hexdigest()[:12]


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (an address or name, no port) means this machine only."""
    name = host.strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # a name, not an address: only "localhost" is known to be local
        return False


def _host_name(header: str) -> str:
    """The name part of a ``Host`` header (``127.0.0.1:8321`` -> ``127.0.0.1``)."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class Guard:
    """The middleware. ``token`` None: no token asked; ``loopback``: check ``Host``."""

    def __init__(self, app: ASGIApp, *, token: str | None, loopback: bool) -> None:
        self.app = app
        self.token = token.encode() if token else None
        # The cookie holds a digest of the token, never the token itself.
        self.cookie = hashlib.sha256(self.token).hexdigest() if self.token else ""
        self.cookie_name = cookie_name(token) if token else ""
        self.loopback = loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if self.loopback and not is_loopback_host(_host_name(host)):
            await refuse(
                send, 403, "Forbidden", f"this server answers loopback names only, not {host!r}"
            )
            return
        set_cookie = False
        if self.token is not None:
            allowed, set_cookie = self._authorized(scope, headers)
            if not allowed:
                await refuse(
                    send,
                    401,
                    "Unauthorized",
                    "this server needs its token: send 'Authorization: Bearer TOKEN', "
                    "or open /?token=TOKEN in a browser",
                    [(b"www-authenticate", b'Bearer realm="cadenza"')],
                )
                return
        if scope["method"] == "POST":
            kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if kind != "application/json":
                await refuse(
                    send, 415, "UnsupportedMediaType", "send the request body as application/json"
                )
                return
            origin = headers.get("origin")
            if origin is not None and urlsplit(origin).netloc != host:
                await refuse(send, 403, "Forbidden", f"cross-origin request from {origin!r}")
                return
        if set_cookie:
            send = _with_cookie(send, self.cookie_name, self.cookie)
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope, headers: dict[str, str]) -> tuple[bool, bool]:
        """Whether the request carries the token, and whether to hand it the cookie."""
        assert self.token is not None
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and credentials:
            return secrets.compare_digest(credentials.strip().encode(), self.token), False
        cookies: SimpleCookie = SimpleCookie()
        try:
            cookies.load(headers.get("cookie", ""))
        except CookieError:  # a malformed Cookie header carries no token
            cookies = SimpleCookie()
        if self.cookie_name in cookies:
            return secrets.compare_digest(
                cookies[self.cookie_name].value.encode(), self.cookie.encode()
            ), False
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if scope["method"] == "GET" and query.get("token"):
            return secrets.compare_digest(query["token"][0].encode(), self.token), True
        return False, False


def _with_cookie(send: Send, name: str, digest: str) -> Send:
    cookie = f"{name}={digest}; HttpOnly; SameSite=Strict; Path=/".encode("latin-1")

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = [*message.get("headers", []), (b"set-cookie", cookie)]
        await send(message)

    return sending
