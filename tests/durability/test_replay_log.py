"""What a resume reads back about the coordinator agent's wakes and scripted replies.

A wake the kill cut off is answered again by the resumed coordinator, and what
it did (its forwards) is void, but for its model calls: the wake that happens
again replays them from the call journal, so the replies of its script stay
had; a wake that ended for a finished step stands. Logs written before wakes
were marked repeat nothing. A post from outside the run stands whatever the run
did after it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from cadenza.actors.run import Outgoing, Replay
from cadenza.protocols import (
    AgentTurn,
    CoordinatorWake,
    Event,
    MessageSent,
    Payload,
    StepStart,
    to_data,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "payloads" / "negotiation.ndjson"
SELLER = "rounds.0.seller"


def log(*entries: tuple[str, str | None, str | None, Payload | None]) -> list[Event]:
    """Events numbered from 1: (type, step id, agent, data)."""
    return [
        Event(kind, "t", "r", seq, step_id, agent, data=None if data is None else to_data(data))
        for seq, (kind, step_id, agent, data) in enumerate(entries, start=1)
    ]


def reply(address: str, agent: str, position: int) -> tuple[str, str, str, AgentTurn]:
    data = AgentTurn(phase="response", model=f"scripted:{agent}", script_position=position)
    return ("agent_turn", address, agent, data)


def wake(phase: str) -> tuple[str, str, str, CoordinatorWake]:
    return ("coordinator_wake", "Coordinator", "broker", CoordinatorWake(phase=phase, from_=SELLER))


OFFER = (
    "message_sent",
    SELLER,
    None,
    MessageSent(from_=SELLER, to="coordinator", text="OFFER 1000", msg_type=0),
)
FORWARD = (
    "message_sent",
    "coordinator",
    None,
    MessageSent(from_="coordinator", to="buyer", text="Seller asks 1000.", msg_type=0),
)
SELLER_RAN = [
    ("step_start", SELLER, "seller", StepStart(kind="agent", attempt=1)),
    reply(SELLER, "seller", 0),
    OFFER,
]
SELLER_DONE = ("step_end", SELLER, "seller", None)


def texts(replay: Replay) -> list[str]:
    return [message.text for message in replay.log.messages]


def test_a_wake_cut_off_is_answered_again_and_what_it_did_is_void() -> None:
    replay = Replay(
        {}, log(*SELLER_RAN, SELLER_DONE, wake("start"), reply("Coordinator", "broker", 0), FORWARD)
    )
    assert replay.log.unanswered == [Outgoing(SELLER, "OFFER 1000")]
    assert texts(replay) == ["OFFER 1000"]
    assert "buyer" not in replay.log.mail
    assert replay.log.coordinator_wakes == 0
    assert replay.log.script_positions == {"seller": {0}, "broker": {0}}


def test_a_reply_a_cut_off_wake_had_stays_had_across_later_kills() -> None:
    """Killed in a wake, resumed (the wake replays its journaled call: no new
    ``agent_turn``), killed again after it: the broker's next wake gets reply 2, not 0.

    The sequence a coordinator chain of kills once produced, which gave a later wake
    the cut-off wake's reply a second time and so forwarded one offer twice.
    """
    resumed = ("run_resumed", None, None, None)
    events = log(
        *SELLER_RAN,
        SELLER_DONE,
        wake("start"),
        reply("Coordinator", "broker", 0),
        FORWARD,
        resumed,
        wake("start"),
        FORWARD,  # sent again by the replayed wake, its model call restated, not stored
        reply("Coordinator", "broker", 1),
        wake("end"),
        resumed,
    )
    replay = Replay({}, events)
    assert replay.log.script_positions == {"seller": {0}, "broker": {0, 1}}
    assert texts(replay) == ["OFFER 1000", "Seller asks 1000."]
    assert replay.log.coordinator_wakes == 1


def test_a_message_no_wake_had_begun_for_is_answered_too() -> None:
    replay = Replay({}, log(*SELLER_RAN, SELLER_DONE))
    assert replay.log.unanswered == [Outgoing(SELLER, "OFFER 1000")]


def test_a_wake_that_ended_for_a_finished_step_stands() -> None:
    events = log(
        *SELLER_RAN,
        wake("start"),
        reply("Coordinator", "broker", 0),
        FORWARD,
        reply("Coordinator", "broker", 1),
        wake("end"),
        SELLER_DONE,
    )
    replay = Replay({}, events)
    assert replay.log.unanswered == []
    assert texts(replay) == ["OFFER 1000", "Seller asks 1000."]
    assert [letter.text for letter in replay.log.mail["buyer"]] == ["Seller asks 1000."]
    assert replay.log.coordinator_wakes == 1
    assert replay.log.script_positions == {"seller": {0}, "broker": {0, 1}}


def test_a_wake_for_a_step_in_flight_is_void_as_the_step_sends_again() -> None:
    events = log(
        *SELLER_RAN, wake("start"), reply("Coordinator", "broker", 0), FORWARD, wake("end")
    )
    replay = Replay({}, events)
    assert replay.log.unanswered == []
    assert texts(replay) == []
    assert replay.log.coordinator_wakes == 0
    # The wake is void but its reply stays had, as the seller's own does: the cut-off
    # seller and the wake that answers it again replay them from the journal (issue 29).
    assert replay.log.script_positions == {"seller": {0}, "broker": {0}}


def test_a_log_written_before_wakes_were_marked_repeats_none() -> None:
    """The fixture's coordinator woke five times, unmarked: no wake is taken for cut off."""
    events: list[Any] = [
        msgspec.json.decode(line, type=Event) for line in FIXTURE.read_text().splitlines()
    ]
    assert (
        sum(e.type == "message_sent" and (e.data or {}).get("to") == "coordinator" for e in events)
        == 5
    )
    replay = Replay({}, events)
    assert replay.log.unanswered == []
    assert len(texts(replay)) == 10


def test_a_post_from_outside_the_run_stands_whatever_the_run_did_next() -> None:
    """A post (``from: api``) made during a wake the kill cut off is neither the wake's
    (void with it) nor a step's still in flight (void at the restart): it stays recorded
    and waits for its step."""
    post = (
        "message_sent",
        "api",
        None,
        MessageSent(from_="api", to="buyer", text="Use plan B.", msg_type=0),
    )
    replay = Replay({}, log(*SELLER_RAN, SELLER_DONE, wake("start"), post))
    assert texts(replay) == ["OFFER 1000", "Use plan B."]
    assert [letter.text for letter in replay.log.mail["buyer"]] == ["Use plan B."]
    assert [letter.sender for letter in replay.log.mail["buyer"]] == ["api"]
