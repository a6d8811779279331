"""Shared fixtures: workflow files and handler modules written into a temp dir."""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

_counter = itertools.count()

WriteFlow = Callable[..., Path]


@pytest.fixture
def write_flow(tmp_path: Path) -> WriteFlow:
    """Writes a workflow (and optional handler module) into tmp_path; returns its path.

    ``handlers`` is Python source; it is saved as a uniquely named module and the
    token ``HANDLERS`` in the YAML is replaced by that module's name.
    """

    def write(yaml_text: str, *, handlers: str | None = None, name: str = "flow.yaml") -> Path:
        text = textwrap.dedent(yaml_text)
        if handlers is not None:
            module = f"handlers_{next(_counter)}_{tmp_path.name.replace('-', '_')}"
            (tmp_path / f"{module}.py").write_text(textwrap.dedent(handlers))
            text = text.replace("HANDLERS", module)
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
