"""Loading workflows: files, text and Python-built documents, with their includes.

One load is a :class:`_Session`: it reads the root document, runs the three layers
(``_yaml`` positions, ``_schema`` types, ``_validate`` rules) and, through the
validator's include callback, loads every included or control workflow the same
way, relative to the file that names it. A file is loaded once per session however
often it is included; include cycles and nesting deeper than 5 are problems at the
``include:`` that closes them. Problems come back sorted by file, then position.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgspec

from ._files import FileRefused, read_capped, resolve_inside
from ._models import ModelRules
from ._problems import (
    DocPath,
    Problem,
    Reporter,
    WorkflowError,
    did_you_mean,
    suggestion_budget,
)
from ._schema import BROKEN, check_schema
from ._spec import Workflow
from ._validate import Validator
from ._yaml import parse_yaml

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_INCLUDE_DEPTH",
    "LoadedWorkflow",
    "build_loaded",
    "load_workflow",
    "load_workflow_text",
    "validate_file",
    "validate_workflow",
]

MAX_FILE_BYTES = 1 << 20
"""Largest workflow file accepted (zenflow's cap)."""
MAX_INCLUDE_DEPTH = 5
"""Deepest chain of includes below a root workflow."""


@dataclass(frozen=True)
class LoadedWorkflow:
    """A valid workflow with everything it references loaded.

    Attributes:
        workflow: The document, with ``@file`` prompts and instructions read in.
        path: The file it came from (absolute, symlinks resolved), or None for text.
        base_dir: Where its relative paths (contextFiles, cwd, includes) resolve.
        includes: The workflows its steps include or its control steps run, keyed
            by the reference exactly as written (``include: deploy`` -> ``"deploy"``).
    """

    workflow: Workflow
    path: Path | None
    base_dir: Path
    includes: Mapping[str, LoadedWorkflow] = field(default_factory=dict)


def load_workflow(path: str | os.PathLike[str]) -> LoadedWorkflow:
    """Load and validate a workflow file and everything it includes.

    Raises:
        WorkflowError: With every problem found, in this file or an included one;
            a missing or unreadable file is one problem naming the path.
    """
    session = _Session()
    loaded = session.load_file(Path(path), os.fspath(path), ())
    return session.result(loaded)


def load_workflow_text(
    text: str, *, filename: str = "<string>", base_dir: Path | None = None
) -> LoadedWorkflow:
    """Load a workflow from YAML or JSON text; relative paths resolve in ``base_dir``.

    ``base_dir`` defaults to the current directory.

    Raises:
        WorkflowError: With every problem found.
    """
    session = _Session()
    directory = Path(base_dir or Path.cwd()).absolute()
    loaded = session.load_text(text, filename, directory, None, ())
    return session.result(loaded)


def validate_file(
    path: str | os.PathLike[str], *, models: ModelRules | None = None
) -> list[Problem]:
    """Every problem of a workflow file and its includes; empty when it is valid.

    With ``models`` (the caller's rules for model specs, see `ModelRules`) the
    models are checked too, and what a run would lack here comes back as problems
    of ``severity == "warning"``, which do not make the file invalid.
    """
    session = _Session(models=models)
    session.load_file(Path(path), os.fspath(path), ())
    return session.sorted_problems(warnings=True)


def validate_workflow(
    workflow: Workflow,
    *,
    base_dir: Path | None = None,
    filename: str = "<python>",
    includes: Mapping[str, LoadedWorkflow] | None = None,
) -> list[Problem]:
    """Every problem of a workflow built in Python, by the same rules as files.

    Problems carry their document path (``steps[2].loop.until``) at line 0, column 0.
    Includes and ``@file`` references resolve in ``base_dir`` (default: the current
    directory); ``includes`` holds workflows already loaded (or built), by the
    reference the steps use, which are taken as they are rather than read from files.
    """
    session = _Session()
    session.build(workflow, base_dir, filename, includes or {})
    return session.sorted_problems()


def build_loaded(
    workflow: Workflow,
    *,
    base_dir: Path | None = None,
    filename: str = "<python>",
    includes: Mapping[str, LoadedWorkflow] | None = None,
) -> LoadedWorkflow:
    """`validate_workflow`, returning the loaded workflow (``@file`` text read in).

    Raises:
        WorkflowError: With every problem found.
    """
    session = _Session()
    return session.result(session.build(workflow, base_dir, filename, includes or {}))


@dataclass
class _Session:
    problems: list[Problem] = field(default_factory=list)
    order: dict[str, int] = field(default_factory=dict)
    # Resolved path -> (the loaded file or None when it had problems, include height).
    done: dict[Path, tuple[LoadedWorkflow | None, int]] = field(default_factory=dict)
    root: Path | None = None
    """Where included and @ files must live: the first workflow's directory (``_files``)."""
    models: ModelRules | None = None
    warnings: list[Problem] = field(default_factory=list)

    def root_of(self, base_dir: Path) -> Path:
        if self.root is None:
            self.root = base_dir.resolve()
        return self.root

    def result(self, loaded: tuple[LoadedWorkflow | None, int]) -> LoadedWorkflow:
        if loaded[0] is None or self.problems:
            raise WorkflowError(self.sorted_problems())
        return loaded[0]

    def sorted_problems(self, *, warnings: bool = False) -> list[Problem]:
        found = [*self.problems, *self.warnings] if warnings else self.problems
        return sorted(found, key=lambda p: (self.order.get(p.file, 0), p.line, p.column))

    def build(
        self,
        workflow: Workflow,
        base_dir: Path | None,
        filename: str,
        built: Mapping[str, LoadedWorkflow],
    ) -> tuple[LoadedWorkflow | None, int]:
        directory = Path(base_dir or Path.cwd()).absolute()
        try:
            raw = msgspec.to_builtins(workflow)
        except (TypeError, ValueError) as exc:
            return self.whole_file(filename, f"cannot be checked: {exc}")
        return self.load_document(raw, Reporter(filename), directory, None, (), built)

    def whole_file(self, name: str, message: str, *, line: int = 0) -> tuple[None, int]:
        """A problem of the file as a whole (at ``line`` 1, column 1, when it has a place)."""
        self.order.setdefault(name, len(self.order))
        self.problems.append(Problem(name, line, 1 if line else 0, "", message))
        return None, 0

    def load_file(
        self, path: Path, name: str, chain: tuple[tuple[Path, str], ...]
    ) -> tuple[LoadedWorkflow | None, int]:
        try:
            data = read_capped(path, MAX_FILE_BYTES)
        except FileRefused as refused:
            return self.whole_file(name, f"cannot read workflow file {name!r}: {refused}")
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return self.whole_file(name, f"cannot read workflow file {name!r}: {reason}")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            column = exc.start - data.rfind(b"\n", 0, exc.start)
            self.order.setdefault(name, len(self.order))
            self.problems.append(Problem(name, line, column, "", "the file is not UTF-8 text"))
            return None, 0
        # Resolved, so that a file reached by two spellings is one file (cycles, caching).
        path = path.resolve()
        self.root_of(path.parent)
        return self.load_text(text, name, path.parent, path, chain)

    def load_text(
        self,
        text: str,
        name: str,
        base_dir: Path,
        path: Path | None,
        chain: tuple[tuple[Path, str], ...],
    ) -> tuple[LoadedWorkflow | None, int]:
        self.order.setdefault(name, len(self.order))
        if len(text) > MAX_FILE_BYTES or len(text.encode(errors="replace")) > MAX_FILE_BYTES:
            return self.whole_file(name, "the document is larger than 1 MiB, the cap for workflows")
        if name.endswith(".json"):
            # Tabs are JSON whitespace but YAML indentation errors; outside strings (the
            # only place valid JSON has them) a space means the same, at the same column.
            text = text.replace("\t", " ")
        parsed = parse_yaml(text, name)
        if parsed.problems:
            self.problems.extend(parsed.problems)
            return None, 0
        if parsed.value is None:
            message = "the document is empty; a workflow needs name and steps"
            return self.whole_file(name, message, line=1)
        reporter = Reporter(name, parsed.source)
        return self.load_document(parsed.value, reporter, base_dir, path, chain)

    @suggestion_budget()  # bounded "did you mean" work per document
    def load_document(
        self,
        raw: Any,
        reporter: Reporter,
        base_dir: Path,
        path: Path | None,
        chain: tuple[tuple[Path, str], ...],
        built: Mapping[str, LoadedWorkflow] = MappingProxyType({}),
    ) -> tuple[LoadedWorkflow | None, int]:
        self.order.setdefault(reporter.file, len(self.order))
        clean = check_schema(raw, reporter)
        if clean is BROKEN:
            self.problems.extend(reporter.problems)
            return None, 0
        try:
            workflow = msgspec.convert(clean, Workflow)
        except msgspec.ValidationError as exc:  # the schema layer should have caught it
            reporter.add((), f"invalid workflow: {exc}")
            self.problems.extend(reporter.problems)
            return None, 0
        here = (*chain, (path or base_dir / reporter.file, reporter.file))
        includes: dict[str, LoadedWorkflow] = {}
        height = 0
        failed = False  # an include failed: its problems are reported, this file fails too

        def include(at: DocPath, ref: str) -> Workflow | None:
            nonlocal height, failed
            if ref in built:  # built in Python: loaded (and checked) already
                child, child_height = self.built(reporter, at, built[ref], len(here))
            else:
                child, child_height = self.include(reporter, at, ref, workflow, here)
            height = max(height, child_height + 1)
            if child is None:
                failed = True
                return None
            includes[ref] = child
            return child.workflow

        agents = raw.get("agents")
        names = frozenset(agents) if isinstance(agents, dict) else frozenset(workflow.agents)
        validator = Validator(
            workflow,
            reporter,
            base_dir=base_dir,
            root=self.root_of(base_dir),
            agent_names=names,
            include=include,
            models=self.models,
        )
        validator.run()
        self.problems.extend(reporter.problems)
        self.warnings.extend(reporter.warnings)
        if reporter.problems or failed:
            return None, height
        if validator.replacements:
            for at, text in validator.replacements.items():
                _assign(clean, at, text)
            workflow = msgspec.convert(clean, Workflow)
        if validator.prices is not None:  # ``prices: FILE``, read in
            workflow = msgspec.structs.replace(workflow, prices=validator.prices)
        return LoadedWorkflow(workflow, path, base_dir, MappingProxyType(includes)), height

    def built(
        self, reporter: Reporter, at: DocPath, child: LoadedWorkflow, depth: int
    ) -> tuple[LoadedWorkflow | None, int]:
        height = _height(child)
        if depth + height > MAX_INCLUDE_DEPTH:
            name = child.workflow.name
            reporter.add_rule(at, f"includes nest deeper than {MAX_INCLUDE_DEPTH} through {name}")
            return None, height
        return child, height

    def include(
        self,
        reporter: Reporter,
        at: DocPath,
        ref: str,
        parent: Workflow,
        chain: tuple[tuple[Path, str], ...],
    ) -> tuple[LoadedWorkflow | None, int]:
        target = parent.includes.get(ref, ref)
        base = chain[-1][0].parent
        shown = target if len(target) <= 200 else target[:200] + "..."
        try:
            path = resolve_inside(self.root_of(base), base, target)
            found = path.is_file()
        except FileRefused as refused:
            reporter.add_rule(at, f"include {shown!r}: {refused}")
            return None, 0
        except OSError as exc:  # a name too long for the file system, say
            reporter.add_rule(at, f"include {shown!r}: the path cannot be used: {exc.strerror}")
            return None, 0
        name = os.path.normpath(os.path.join(os.path.dirname(chain[-1][1]), target))
        names = [n for _, n in chain]
        if any(path == p for p, _ in chain):
            start = next(i for i, (p, _) in enumerate(chain) if p == path)
            cycle = " -> ".join([*names[start:], name])
            reporter.add_rule(at, f"include cycle: {cycle}")
            return None, 0
        if not found:
            hint = "" if ref in parent.includes else did_you_mean(ref, parent.includes)
            reporter.add_rule(at, f"workflow {target!r} not found in {base}{hint}")
            return None, 0
        if len(chain) > MAX_INCLUDE_DEPTH:
            nest = " -> ".join([*names, name])
            reporter.add_rule(at, f"includes nest deeper than {MAX_INCLUDE_DEPTH}: {nest}")
            return None, 0
        if path not in self.done:
            self.done[path] = self.load_file(path, name, chain)
        loaded, height = self.done[path]
        if loaded is not None and len(chain) + height > MAX_INCLUDE_DEPTH:
            # Loaded fine from a shallower place, but too deep from here.
            reporter.add_rule(at, f"includes nest deeper than {MAX_INCLUDE_DEPTH} through {name}")
            return None, height
        return loaded, height


def _height(loaded: LoadedWorkflow) -> int:
    """How deep the includes below ``loaded`` nest (0: it includes nothing)."""
    return max((_height(child) + 1 for child in loaded.includes.values()), default=0)


def _assign(document: Any, path: DocPath, value: Any) -> None:
    """Set the value at ``path`` inside a plain document."""
    for part in path[:-1]:
        document = document[part]
    document[path[-1]] = value
