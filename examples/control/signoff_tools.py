"""Handlers of examples/control-signoff.yaml: a writer and a reviewer without a model."""

from __future__ import annotations

import re
from typing import Any

from cadenza import StepContext

CLAIM = "Cadenza 2.0 is out: durable control loops with 10x faster resumes."
PLAIN = "Cadenza 2.0 is out: durable control loops that resume where they stopped."


def announce(context: StepContext) -> dict[str, Any]:
    """Writes the announcement; a person's feedback about the number removes it."""
    feedback = str(context.inputs["feedback"]).lower()
    return {"text": PLAIN if "number" in feedback else CLAIM}


def review(context: StepContext) -> dict[str, Any]:
    """Passes plain claims; a number ("10x") goes to a person."""
    text = str(context.inputs["result"]["text"])
    claim = re.search(r"\d+x", text)
    if claim is not None:
        return {
            "passed": False,
            "score": 0.7,
            "feedback": f"It claims {claim.group(0)!r}; only a person can sign that off.",
            "recommend": "escalate",
        }
    return {"passed": True, "score": 0.9, "feedback": "Clear and accurate."}
