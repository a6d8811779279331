"""Building an agent step's first user message: instructions plus what it should see.

Sections follow zenflow's habits: the instructions first, then revision
feedback, the graph state that routed here, the forEach item, the content of
each dependency, context files and the inbox. Every dependency is capped at
16 KB and the whole prompt at 120 KB; a cut is marked, never silent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec

from cadenza.actors.run import Brief

__all__ = ["DEPENDENCY_CAP", "PROMPT_CAP", "build_prompt", "cap"]

DEPENDENCY_CAP = 16 * 1024
"""Bytes of one dependency's content injected into a prompt."""

PROMPT_CAP = 120 * 1024
"""Bytes of a whole prompt."""


def cap(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` UTF-8 bytes, with the cut marked."""
    data = text.encode()
    if len(data) <= limit:
        return text
    kept = data[:limit].decode(errors="ignore")
    return f"{kept}\n[... truncated {len(data) - len(kept.encode())} bytes]"


def build_prompt(
    instructions: str,
    *,
    brief: Brief,
    item: object = None,
    dependencies: Sequence[tuple[str, str]] = (),
    context: str | None = None,
    context_files: Iterable[tuple[str, str]] = (),
    inbox: Sequence[str] = (),
) -> str:
    """The user message of an agent step's first turn.

    Args:
        instructions: The rendered instructions.
        brief: What the controller passed on (feedback, routing, forEach index).
        item: The forEach item, shown as JSON when ``brief.item_index`` is set.
        dependencies: ``(step id, content)`` of the step's dependencies.
        context: Extra material for judges (the iteration's outputs).
        context_files: ``(path, text)`` of the step's ``contextFiles``.
        inbox: Messages waiting for the agent, one text each.
    """
    parts = [instructions.strip() or "Do your task."]
    if brief.feedback:
        parts.append(f"## Revision feedback\n{cap(brief.feedback, DEPENDENCY_CAP)}")
    if brief.routed_from is not None and brief.routed_content is not None:
        routed = cap(brief.routed_content, DEPENDENCY_CAP)
        parts.append(f"## Input from {brief.routed_from}\n{routed}")
    if brief.previous:
        parts.append(f"## Your previous output\n{cap(brief.previous, DEPENDENCY_CAP)}")
    if brief.item_index is not None:
        encoded = msgspec.json.encode(item).decode()
        parts.append(f"## forEach Item (index: {brief.item_index})\n{encoded}")
    for step_id, content in dependencies:
        parts.append(f"## Output of {step_id}\n{cap(content, DEPENDENCY_CAP)}")
    if context:
        parts.append(cap(context, PROMPT_CAP // 2))
    for path, text in context_files:
        parts.append(f"## File {path}\n{cap(text, DEPENDENCY_CAP)}")
    if inbox:
        parts.append("## Inbox\n" + "\n".join(f"- {text}" for text in inbox))
    return cap("\n\n".join(parts), PROMPT_CAP)


def read_context_files(base_dir: Path, paths: Iterable[str]) -> list[tuple[str, str]]:
    """Reads ``contextFiles``; a missing file is named in the prompt, not fatal."""
    files = []
    for relative in paths:
        path = base_dir / relative
        try:
            with path.open("rb") as handle:
                data = handle.read(DEPENDENCY_CAP + 1)
            files.append((relative, data.decode(errors="replace")))
        except OSError as error:
            files.append((relative, f"[could not read {relative}: {error.strerror}]"))
    return files
