"""A kind of step that exists only in the tests: ``echo`` says its text ``times`` times.

This module is the whole kind: its YAML key and block, its checks, its label,
what it does, here or on a worker. It is registered with one line,
``register_step_kind(ECHO)`` in the process that loads or runs it, and
``CADENZA_STEP_KINDS=tests.echo_kind:ECHO`` for the ``cadenza`` processes the
tests start (tests/test_step_kinds.py). Nothing else in Cadenza names it.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import msgspec

from cadenza.actors.steps import LeafKind, LeafStep, WorkSite
from cadenza.workflow.kinds import Body, DocPath, KindChecks

__all__ = ["ECHO", "Echo", "EchoBlock"]


class EchoBlock(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``echo: {text, times}``: ``text`` is a template; ``times`` is 1 to 10."""

    text: str
    times: Annotated[int, msgspec.Meta(ge=1, le=10)] = 1


class Echo(LeafKind):
    """Says its rendered text ``times`` times; its result says where it ran."""

    name = "echo"
    spec = EchoBlock

    def check(self, body: Body, path: DocPath, depth: int, at: KindChecks) -> None:
        super().check(body, path, depth, at)  # the block's types: times within 1..10
        block = (body.kind_block or {}).get(self.name)
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            at.exprs.template((*path, self.name, "text"), block["text"], field="echo.text")

    def label(self, body: Body) -> str:
        return f"echo x{self.options(body).times}"

    def prepare(self, actor: LeafStep, site: WorkSite) -> Any:
        block: EchoBlock = self.options(actor.step)
        return {"text": actor.render(block.text), "times": block.times}

    async def execute(self, data: Any, site: WorkSite) -> tuple[str, Any]:
        said = " ".join([data["text"]] * data["times"])
        where = {"pid": os.getpid(), "on_worker": site.on_worker, "key": site.idempotency_key}
        return said, {"said": said, **where}


ECHO = Echo()
