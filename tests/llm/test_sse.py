"""Server-sent events cut anywhere: the payloads are those of the stream read whole."""

from __future__ import annotations

import random

import pytest

from cadenza.llm._stream import SSEParser

# Streams as providers and proxies send them: OpenAI's data lines, Anthropic's event
# lines, CRLF line ends, an event of several data lines, comments, "data:" without
# its space, an id line, blank lines to spare, and a last event with no blank line.
STREAMS = {
    "openai": b'data: {"a": 1}\n\ndata: {"b": 2}\n\ndata: [DONE]\n\n',
    "anthropic": b'event: message_start\ndata: {"type": "start"}\n\n'
    b'event: ping\ndata: {"type": "ping"}\n\nevent: message_stop\ndata: {"type": "stop"}\n\n',
    "crlf": b'data: {"a": 1}\r\n\r\ndata: {"b": 2}\r\n\r\n',
    "multi-line": b'data: {"a":\ndata: 1}\n\ndata: x\n\n',
    "comments and ids": b": keep-alive\n\nid: 7\ndata: seven\n\n:\ndata:no-space\n\n",
    "extra blank lines": b"\n\n\ndata: one\n\n\n\ndata: two\n\n",
    "unterminated": b"data: one\n\ndata: last",
    "event without data": b"event: ping\n\ndata: after\n\n",
    "mixed line ends": b"data: one\n\ndata: two\r\n\r\ndata: three\n\n",
}

EXPECTED = {
    "openai": [b'{"a": 1}', b'{"b": 2}'],
    "anthropic": [b'{"type": "start"}', b'{"type": "ping"}', b'{"type": "stop"}'],
    "crlf": [b'{"a": 1}', b'{"b": 2}'],
    "multi-line": [b'{"a":\n1}', b"x"],
    "comments and ids": [b"seven", b"no-space"],
    "extra blank lines": [b"one", b"two"],
    "unterminated": [b"one", b"last"],
    "event without data": [b"after"],
    "mixed line ends": [b"one", b"two", b"three"],
}


def _read(chunks: list[bytes]) -> list[bytes]:
    parser = SSEParser()
    payloads = []
    for chunk in chunks:
        payloads += parser.feed(chunk)
    return payloads + parser.close()


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_a_stream_read_whole_gives_its_events(name: str) -> None:
    assert _read([STREAMS[name]]) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_a_stream_cut_at_any_byte_gives_the_same_events(name: str) -> None:
    stream = STREAMS[name]
    for cut in range(len(stream) + 1):
        assert _read([stream[:cut], stream[cut:]]) == EXPECTED[name], cut


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_a_stream_in_random_pieces_gives_the_same_events(name: str) -> None:
    stream = STREAMS[name]
    rng = random.Random(name)
    for _ in range(200):
        cuts = sorted(rng.sample(range(len(stream) + 1), k=min(6, len(stream))))
        pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert _read(pieces) == EXPECTED[name], cuts


def test_streams_one_after_another_in_one_read() -> None:
    """Every kind of event in one chunk, then byte by byte: the same payloads in order."""
    stream = b"".join(STREAMS[name] for name in sorted(STREAMS) if name != "unterminated")
    expected = [p for name in sorted(STREAMS) if name != "unterminated" for p in EXPECTED[name]]
    assert _read([stream]) == expected
    assert _read([stream[i : i + 1] for i in range(len(stream))]) == expected


@pytest.mark.parametrize("name", sorted(set(STREAMS) - {"unterminated"}))
def test_an_event_comes_out_of_the_read_that_ends_it(name: str) -> None:
    """Not at the end of the stream: an observer sees the text as it arrives."""
    stream = STREAMS[name]
    parser = SSEParser()
    assert parser.feed(stream) == EXPECTED[name]
    assert parser.close() == []
