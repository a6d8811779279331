"""Store URLs: telling a PostgreSQL URL from a file path, and showing one without its password."""

from __future__ import annotations

import urllib.parse
from typing import TypeGuard

from cadenza._redact import MASK

__all__ = ["is_postgres_url", "redacted_url", "url_password"]

_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(spec: object) -> TypeGuard[str]:
    """Whether ``spec`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return isinstance(spec, str) and spec.lower().startswith(_SCHEMES)


def url_password(url: str) -> str | None:
    """The password in ``url``'s user part, or None when it carries none."""
    try:
        return urllib.parse.urlsplit(url).password
    except ValueError:  # a malformed port: no password can be told apart either
        return None


def redacted_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: safe to print or log."""
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:
        return f"{url.split('://', 1)[0]}://{MASK}"  # unparseable: show nothing but the scheme
    if not password:
        return url
    user, _, host = parts.netloc.rpartition("@")
    name = user.split(":", 1)[0]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{name}:{MASK}@{host}"))
