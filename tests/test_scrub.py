"""What a run records is scrubbed of known secrets wherever they hide in its data.

`scrub` runs on every event and record of a run once a secret is known (a store
URL's password is one), so it skips what cannot hold a secret; these tests put
the secret where a skip would miss it: as a dict key, deep in lists, as the
whole string, in its encoded forms, and in a string just long enough.
"""

from __future__ import annotations

import base64
import urllib.parse

from cadenza._redact import MASK, register_secret, scrub

SECRET = "scrub-canary-7f3a9c"


def _leaks(value: object) -> bool:
    return SECRET in repr(value)


def test_a_secret_anywhere_in_plain_data_is_masked() -> None:
    register_secret(SECRET)
    hidden = {
        "ok": "nothing here",
        SECRET: 1,
        "deep": [[{"x": [f"pre{SECRET}post"]}], 2, None],
        "whole": SECRET,
    }
    scrubbed = scrub(hidden)
    assert not _leaks(scrubbed)
    assert scrubbed["whole"] == MASK
    assert scrubbed["deep"][0][0]["x"] == [f"pre{MASK}post"]
    assert scrubbed["ok"] == "nothing here"
    assert _leaks(hidden)  # the caller's data is not changed in place


def test_the_encoded_forms_of_a_secret_are_masked_too() -> None:
    register_secret(SECRET)
    quoted = urllib.parse.quote(SECRET, safe="")
    encoded = base64.b64encode(f"user:{SECRET}".encode()).decode()
    scrubbed = scrub({"url": f"x?p={quoted}", "auth": [f"Basic {encoded}"]})
    assert quoted not in scrubbed["url"]
    assert scrubbed["auth"][0] != f"Basic {encoded}"


def test_data_without_a_secret_comes_back_as_itself() -> None:
    register_secret(SECRET)
    data = {"status": "completed", "items": [1, "a", {"k": "scrub-canary-7f3a9"}]}
    assert scrub(data) is data
