"""Keeping secrets out of errors, reprs and logs.

``redact`` masks what looks like a credential in free text: the values of
secrets Cadenza knows about (API keys and tokens from the environment, and any
``register_secret`` adds), ``sk-...`` keys, ``Bearer ...`` tokens and the
values of credential-named keys in JSON-ish or ``key=value`` text.
``redact_processor`` applies it to every string of a structlog event.

``scrub`` is the narrower pass over everything a run records (step outputs,
model text, errors, events, messages, results): it masks only the known
secrets, so ordinary output that merely talks about ``api_key=`` keeps its
words. A known secret is recognised in every form this module can derive
from it: whole, without its vendor prefix (``sk-``, ``sk-ant-``, ``ghp_``...),
percent-encoded, and base64 (standard and URL-safe, at any alignment, so the
key inside a ``Basic`` credential or an encoded blob is found too).

Masking is best effort for text Cadenza did not produce; the rule that holds is
that Cadenza itself never puts a key into an error, a repr or a log field.
"""

from __future__ import annotations

import base64
import functools
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Final, NamedTuple

import msgspec

__all__ = [
    "MASK",
    "known_secrets",
    "redact",
    "redact_processor",
    "register_secret",
    "register_secrets_from",
    "scrub",
    "secret_forms",
    "secrets_from",
]

MASK: Final = "***"
"""What a masked value is replaced with."""

# Shorter values are not masked: they would garble ordinary text, and a real
# credential is never this short.
_MIN_SECRET_LENGTH: Final = 6

# Besides *_API_KEY and *_TOKEN: AWS's secret key and its Bedrock API key
# (AWS_SECRET_ACCESS_KEY, AWS_BEARER_TOKEN_BEDROCK), which neither pattern ends.
_SECRET_VARIABLE = re.compile(
    r"(?:_API_KEY|_TOKEN|_SECRET_ACCESS_KEY)\Z|\AAWS_BEARER_TOKEN_", re.IGNORECASE
)
_KEY_NAMES = r"[\w-]*_api_key|api[_-]?key|x-api-key|authorization|[\w-]*_token|access_token"
_KEY_VALUE = re.compile(
    rf"""(?P<key>(?P<kq>["']?)\b(?:{_KEY_NAMES})(?P=kq)\s*[:=]\s*)
    (?P<value>"[^"]*"|'[^']*'|(?:(?:Bearer|Basic|Token)\s+)?[^\s"',;&}}\])]+)""",
    re.IGNORECASE | re.VERBOSE,
)
_SK_KEY = re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}")
_BEARER = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=\-]{6,}", re.IGNORECASE)
_SENSITIVE_FIELD = re.compile(rf"\A(?:{_KEY_NAMES}|password|secret)\Z", re.IGNORECASE)
# Vendor prefixes of well-known keys: the rest of the key is a secret on its own.
_VENDOR_PREFIX = re.compile(
    r"\A(?:sk-(?:ant-(?:api\d+-|admin\d+-)?|proj-|svcacct-)?|gh[pousr]_|github_pat_"
    r"|xox[abpr]-|glpat-|hf_|AIza)"
)
# A derived form shorter than this is not masked (it would match ordinary text).
_MIN_FORM_LENGTH: Final = 12

# Replaced, never mutated, so a redact() on another thread (a log call) never
# sees the set change under it.
_known: frozenset[str] = frozenset()


class _Masking(NamedTuple):
    """What `scrub` masks a set of known secrets with."""

    known: frozenset[str]
    pattern: re.Pattern[str]
    # The forms, each looked for with ``in`` before the pattern replaces them: a
    # substring search in C is several times faster than the alternation's.
    forms: tuple[str, ...]
    shortest: int  # the length of the shortest form: a shorter string is not searched
    # The forms as they appear in a JSON document (None: a form has a character JSON
    # escapes, so its JSON text differs and only a walk over the value finds it).
    encoded: tuple[bytes, ...] | None


_masking = _Masking(_known, re.compile("(?!)"), (), 0, None)
_to_json = msgspec.json.Encoder().encode


def secrets_from(environ: Mapping[str, str]) -> frozenset[str]:
    """The values of every ``*_API_KEY``, ``*_TOKEN`` and ``*_SECRET_ACCESS_KEY`` variable
    (and ``AWS_BEARER_TOKEN_*``) in ``environ``."""
    return frozenset(
        value
        for name, value in environ.items()
        if _SECRET_VARIABLE.search(name) and len(value) >= _MIN_SECRET_LENGTH
    )


def register_secret(value: str) -> None:
    """Mask ``value`` from now on wherever ``redact`` runs (logs included)."""
    global _known
    if len(value) >= _MIN_SECRET_LENGTH and value not in _known:
        _known = _known | {value}


def register_secrets_from(environ: Mapping[str, str]) -> None:
    """Register the value of every secret variable in ``environ`` (see `secrets_from`)."""
    global _known
    found = secrets_from(environ)
    if not found <= _known:
        _known = _known | found


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every credential-looking part replaced by ``***``.

    Args:
        text: Any text: an error body, a URL, a log message.
        secrets: Values to mask besides the registered ones, e.g. the API key
            of the call that failed.

    Returns:
        The text with known secrets, ``sk-...`` keys, ``Bearer``/``Basic``
        credentials and the values of credential-named keys
        (``api_key``, ``*_API_KEY``, ``authorization``, ``x-api-key``,
        ``*_token``) masked.
    """
    known = _known.union(s for s in secrets if len(s) >= _MIN_SECRET_LENGTH)
    if known:
        text = _secret_pattern(known).sub(MASK, text)
    text = _KEY_VALUE.sub(_mask_value, text)
    text = _SK_KEY.sub("sk-" + MASK, text)
    return _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)


def known_secrets() -> frozenset[str]:
    """The secrets registered so far (empty: `scrub` has nothing to do)."""
    return _known


def scrub(value: Any) -> Any:
    """``value`` with every known secret masked in every string it holds, in every form.

    For what a run records: strings, and the dicts and lists of plain data
    (keys included); other values pass unchanged. Returns ``value`` itself
    when nothing needed masking, so the common case copies nothing; with no
    secret known it is one check.
    """
    global _masking
    known, masking = _known, _masking
    if not known:
        return value
    if masking.known is not known:  # new secrets: their pattern (once per set, not per call)
        masking = _masking = _mask_with(known)
    if masking.encoded is not None and isinstance(value, dict | list):
        # One search of the value's JSON text (built and searched in C) clears the
        # common case, where walking it in Python cost a check per string.
        try:
            text = _to_json(value)
        except (TypeError, ValueError):  # not plain JSON data: the walk decides
            pass
        else:
            if not any(form in text for form in masking.encoded):
                return value
    return _scrub(value, masking)


def _scrub(value: Any, masking: _Masking) -> Any:
    # Every event of a run passes here once a secret is known (a store URL's password):
    # a string shorter than any masked form (a key, a status) is not searched, and a
    # dict or list is copied only once something in it had to be masked.
    if isinstance(value, str):
        if len(value) < masking.shortest or not any(form in value for form in masking.forms):
            return value
        return masking.pattern.sub(MASK, value)
    if isinstance(value, dict):
        for k, v in value.items():
            if _scrub(k, masking) is not k or _scrub(v, masking) is not v:
                return {_scrub(k, masking): _scrub(v, masking) for k, v in value.items()}
        return value
    if isinstance(value, list):
        for item in value:
            if _scrub(item, masking) is not item:
                return [_scrub(item, masking) for item in value]
        return value
    return value


def secret_forms(secret: str) -> frozenset[str]:
    """The forms of ``secret`` that are masked: whole, unprefixed, percent-encoded, base64."""
    forms = {secret}
    bare = _VENDOR_PREFIX.sub("", secret)
    if len(bare) >= _MIN_FORM_LENGTH:
        forms.add(bare)
    forms.add(urllib.parse.quote(secret, safe=""))
    raw = secret.encode()
    for offset in range(3):
        # A secret inside a longer base64 text is encoded at one of three alignments;
        # the characters that depend only on its own bytes are the same at each.
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        core = encoded[-(-offset // 3) * 4 : ((offset + len(raw)) // 3) * 4]
        core = core[4:] if offset else core  # the first group mixes in the padding
        for form in (core, core.replace("+", "-").replace("/", "_")):
            if len(form) >= _MIN_FORM_LENGTH:
                forms.add(form)
    return frozenset(forms)


def redact_processor(
    logger: object, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor that redacts every string in the event, however nested.

    Values of credential-named fields (``api_key``, ``authorization``...) are
    masked whole. Put it after ``format_exc_info`` (so tracebacks are text by
    then) and before the renderer.
    """
    for key, value in event_dict.items():
        event_dict[key] = _redact_field(key, value)
    return event_dict


def _redact_field(key: object, value: Any) -> Any:
    if isinstance(key, str) and _SENSITIVE_FIELD.match(key) and value is not None:
        return MASK
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: _redact_field(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_field(None, item) for item in value]
    if isinstance(value, tuple):
        return tuple(_redact_field(None, item) for item in value)
    return value


def _mask_value(match: re.Match[str]) -> str:
    value = match.group("value")
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match.group('key')}{quote}{MASK}{quote}"


@functools.lru_cache(maxsize=32)
def _mask_with(secrets: frozenset[str]) -> _Masking:
    forms = frozenset().union(*(secret_forms(secret) for secret in secrets))
    # Only a form JSON writes as itself is found in a JSON text: msgspec escapes
    # quotes, backslashes and control characters, nothing else.
    plain = not any(c in '"\\' or c < " " for form in forms for c in form)
    encoded = tuple(form.encode() for form in forms) if plain else None
    shortest = min(len(form) for form in forms)
    return _Masking(secrets, _secret_pattern(secrets), tuple(forms), shortest, encoded)


@functools.lru_cache(maxsize=32)
def _secret_pattern(secrets: frozenset[str]) -> re.Pattern[str]:
    forms = frozenset().union(*(secret_forms(secret) for secret in secrets))
    # Longest first, so a secret that contains another is masked whole.
    ordered = sorted(forms, key=len, reverse=True)
    return re.compile("|".join(re.escape(s) for s in ordered))


register_secrets_from(os.environ)
