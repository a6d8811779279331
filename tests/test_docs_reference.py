"""The reference docs cannot drift from the code.

- Every ```yaml block of the docs below starts with ``# file: NAME`` (written to a
  scratch directory, and validated when it is a workflow) or ``# fragment`` (a
  piece of a document: it must parse as YAML). Every ``sh`` block of
  docs/concepts.md runs, in order, in that directory.
- docs/yaml-reference.md has a table per workflow Struct naming exactly its
  fields' document keys, with their defaults.
- docs/cli.md names every subcommand, option and choice of the argparse parser,
  the exit codes and the environment variables the code reads.
- docs/troubleshooting.md names every error class under CadenzaError, every
  error ``type`` a run records, and the validation messages it quotes are real.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import yaml

import cadenza
from cadenza.errors import CadenzaError
from cadenza.workflow import WorkflowError, _spec, load_workflow, load_workflow_text

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SRC = ROOT / "src" / "cadenza"
PAGES = ("concepts.md", "yaml-reference.md", "cli.md", "coming-from.md", "troubleshooting.md")
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
FILE = re.compile(r"^# file: (\S+)\n")


def _blocks(page: str) -> list[tuple[str, str]]:
    return BLOCK.findall((DOCS / page).read_text())


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` (``## Name``) up to the next heading of its level or above."""
    level = len(heading) - len(heading.lstrip("#"))
    match = re.search(rf"^{re.escape(heading)}(?:[ \t].*)?$", text, re.M)
    assert match is not None, f"no heading {heading!r}"
    rest = text[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


# Blocks: workflows validate, concepts.md runs ------------------------------------


def _write_files(page: str, directory: Path) -> list[Path]:
    written = []
    for language, body in _blocks(page):
        named = FILE.match(body)
        if named is not None:
            path = directory / named.group(1)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
            written.append(path)
        elif language == "yaml":
            assert body.startswith("# fragment"), (
                f"{page}: a yaml block must start with '# file: NAME' or '# fragment':\n{body}"
            )
            yaml.safe_load(body)
    return written


def _is_workflow(path: Path) -> bool:
    if path.suffix not in (".yaml", ".yml", ".json"):
        return False
    document = yaml.safe_load(path.read_text())
    return isinstance(document, dict) and "steps" in document


@pytest.mark.parametrize("page", PAGES)
def test_every_yaml_block_is_a_valid_workflow_or_a_fragment(page: str, tmp_path: Path) -> None:
    workflows = [path for path in _write_files(page, tmp_path) if _is_workflow(path)]
    for path in workflows:
        try:
            load_workflow(path)
        except WorkflowError as error:
            pytest.fail(f"{page}: {path.name} is invalid:\n{error}")
    if page in ("concepts.md", "yaml-reference.md", "coming-from.md"):
        assert workflows, f"{page} shows no workflow"
    if workflows:  # and through the command line, as a reader would check them
        cadenza_bin = Path(sys.executable).parent / "cadenza"
        proc = subprocess.run(
            [str(cadenza_bin), "validate", *(path.name for path in workflows)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, (page, proc.stdout, proc.stderr)


def test_concepts_runs_as_written(tmp_path: Path) -> None:
    """Every sh block of concepts.md exits 0 (lines that expect otherwise say `|| echo`)."""
    bin_dir = Path(sys.executable).parent
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    ran = 0
    for language, body in _blocks("concepts.md"):
        named = FILE.match(body)
        if named is not None:
            (tmp_path / named.group(1)).write_text(body)
            continue
        if language != "sh":
            continue
        for line in body.strip().splitlines():
            proc = subprocess.run(
                line,
                shell=True,
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert proc.returncode == 0, (line, proc.stdout, proc.stderr)
            assert "Traceback" not in proc.stderr, (line, proc.stderr)
            ran += 1
    assert ran >= 10
    # What the page says happened, happened.
    assert (tmp_path / "cycle.json").exists()
    result = msgspec.json.decode((tmp_path / "cycle.json").read_bytes())
    assert result["loops"]["dev-cycle"] == {
        "iterations": 2,
        "terminationReason": "judge",
        "flagged": False,
    }
    assert {"dev-cycle.0.implement", "dev-cycle.0.untilAgent", "dev-cycle.1.review"} <= set(
        result["steps"]
    )


# docs/yaml-reference.md: one table per Struct, exactly its fields ----------------

SPEC_STRUCTS = {
    name: cls
    for name, cls in vars(_spec).items()
    if inspect.isclass(cls) and issubclass(cls, _spec._Spec) and not name.startswith("_")
}
INHERITS = {"State": "Step"}
"""A section that says "every key of Step except ..." and tables only its own keys."""
ROW = re.compile(r"^\| `([^`]+)` \|([^|]*)\|([^|]*)\|", re.M)


def _table(section: str) -> dict[str, str]:
    """Key -> default cell of the reference table in a section."""
    return {key: default.strip() for key, _type, default in ROW.findall(section)}


def _default_cell(field: msgspec.structs.FieldInfo) -> str | None:
    """What the default column must say for a field (None: no value, shown as —)."""
    if field.required:
        return "required"
    if field.default_factory is not msgspec.NODEFAULT:
        return "`[]`" if field.default_factory is list else "`{}`"
    value = field.default
    if value is None or value is msgspec.UNSET:
        return None
    if isinstance(value, msgspec.Struct):
        return "`{}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "":
        return '`""`'
    return f"`{value}`"


def test_struct_list_is_complete() -> None:
    """The public Structs of the spec module are the ones the workflow package exports."""
    assert set(SPEC_STRUCTS) == {name for name in _spec.__all__ if name in SPEC_STRUCTS}, (
        "a Struct is missing from _spec.__all__"
    )
    assert {"Workflow", "Step", "State", "Loop", "Graph", "Control"} <= set(SPEC_STRUCTS)


@pytest.mark.parametrize("name", sorted(SPEC_STRUCTS))
def test_yaml_reference_documents_every_field(name: str) -> None:
    text = (DOCS / "yaml-reference.md").read_text()
    documented = _table(_section(text, f"## {name}"))
    fields = {f.encode_name: f for f in msgspec.structs.fields(SPEC_STRUCTS[name])}
    inherited: set[str] = set()
    if name in INHERITS:
        parent = _table(_section(text, f"## {INHERITS[name]}"))
        inherited = set(parent) & set(fields)
    missing = set(fields) - set(documented) - inherited
    unknown = set(documented) - set(fields)
    assert not missing, f"## {name} does not document {sorted(missing)}"
    assert not unknown, f"## {name} documents keys {name} does not have: {sorted(unknown)}"
    for key, cell in documented.items():
        expected = _default_cell(fields[key])
        if expected is None:
            assert cell.startswith("—"), f"{name}.{key}: default should be —, not {cell!r}"
        else:
            assert cell.startswith(expected), f"{name}.{key}: default {cell!r}, want {expected}"


def test_yaml_reference_sections_are_structs() -> None:
    """Every ## section with a key table is a Struct (no stale section)."""
    text = (DOCS / "yaml-reference.md").read_text()
    for heading in re.findall(r"^## (\w+)\s*$", text, re.M):
        if _table(_section(text, f"## {heading}")):
            assert heading in SPEC_STRUCTS, f"## {heading} is not a Struct of _spec.py"


# docs/cli.md: every subcommand, option and choice of the parser ------------------


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    from cadenza.cli._main import _parser

    parser = _parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(actions) == 1
    return dict(actions[0].choices)


def test_cli_documents_every_subcommand() -> None:
    text = (DOCS / "cli.md").read_text()
    subcommands = _subcommands()
    headings = set(re.findall(r"^## cadenza (\S+)\s*$", text, re.M))
    assert headings == set(subcommands), (
        f"undocumented: {sorted(set(subcommands) - headings)}; "
        f"documented but gone: {sorted(headings - set(subcommands))}"
    )
    table = text[: text.index("## Exit codes")]
    for name in subcommands:
        assert f"`cadenza {name}`" in table, f"the command table lacks cadenza {name}"
    assert "`cadenza --version`" in text


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_cli_documents_every_option(name: str) -> None:
    section = _section((DOCS / "cli.md").read_text(), f"## cadenza {name}")
    words: list[str] = []
    for action in _subcommands()[name]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        words += action.option_strings
        if not action.option_strings and action.choices:
            words += [str(choice) for choice in action.choices]
        if isinstance(action.choices, (list, tuple)) and action.option_strings:
            words += [str(choice) for choice in action.choices]
    for word in words:
        assert f"`{word}" in section, f"## cadenza {name} does not mention `{word}`"
    assert "Exit" in section or "exit" in section, f"## cadenza {name} gives no exit codes"


def test_cli_documents_exit_codes() -> None:
    from cadenza.cli._output import EXIT_CODES

    section = _section((DOCS / "cli.md").read_text(), "## Exit codes")
    rows = dict(re.findall(r"^\| `(\d)` \| (.*) \|$", section, re.M))
    assert set(rows) == {"0", "1", "2", "3"}
    for status, code in EXIT_CODES.items():
        if status != "running":  # a run still running never reaches the exit code
            assert status in rows[str(code)], f"exit {code} should say {status!r}"


def _environment_variables() -> set[str]:
    """Every CADENZA_* name in the source, and what the model providers read."""
    from cadenza.llm import _registry

    names: set[str] = set(_registry._VARIABLES)
    for path in SRC.rglob("*.py"):
        names |= set(re.findall(r"[\"'](CADENZA_[A-Z_]+)[\"']", path.read_text()))
    read = re.compile(
        r"environ(?:\.get)?\(\s*[\"']([A-Z][A-Z0-9_]+)[\"']|environ\[[\"']([A-Z0-9_]+)"
    )
    for path in SRC.rglob("*.py"):
        for match in read.finditer(path.read_text()):
            names.add(match.group(1) or match.group(2))
    return names


def test_cli_documents_environment_variables() -> None:
    section = _section((DOCS / "cli.md").read_text(), "## Environment variables")
    names = _environment_variables()
    assert {"CADENZA_MODEL", "OPENAI_API_KEY", "CADENZA_IDEMPOTENCY_KEY"} <= names
    missing = sorted(name for name in names if f"`{name}`" not in section)
    assert not missing, f"## Environment variables does not name {missing}"


# docs/troubleshooting.md: every error a user can see -------------------------------


def _error_classes() -> set[type[BaseException]]:
    """CadenzaError and every subclass, after importing every module of the package."""
    with warnings.catch_warnings():  # walking imports the deprecated cadenza.runtime alias
        warnings.simplefilter("ignore", DeprecationWarning)
        for module in pkgutil.walk_packages(cadenza.__path__, "cadenza."):
            if module.name.endswith("__main__"):
                continue  # runs the command line
            try:
                importlib.import_module(module.name)
            except ImportError:  # an optional extra that is not installed
                continue
    found: set[type[BaseException]] = {CadenzaError}
    todo: list[type[BaseException]] = [CadenzaError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found and not sub.__name__.startswith("_"):
                found.add(sub)
                todo.append(sub)
    return found


def _recorded_error_types() -> set[str]:
    """The literal ``type`` of every ErrorInfo the code builds."""
    pattern = re.compile(r"ErrorInfo\(\s*(?:type=)?[\"']([A-Za-z]+)[\"']")
    return {m for path in SRC.rglob("*.py") for m in pattern.findall(path.read_text())}


def _http_error_types() -> set[str]:
    pattern = re.compile(r"\b[45]\d\d\s*[,:]\s*[\"']([A-Z][A-Za-z]+)[\"']")
    return {m for path in (SRC / "serve").glob("*.py") for m in pattern.findall(path.read_text())}


def _troubleshooting() -> str:
    return (DOCS / "troubleshooting.md").read_text()


def _exception_names() -> set[str]:
    return {cls.__name__ for cls in _error_classes()}


ERROR_TABLES = {
    "exception-classes": (
        _exception_names,
        {"WorkflowError", "LLMHTTPError", "LeaseHeld", "HandlerError", "BudgetExceeded"},
        "## Exceptions",
        "| `{}` |",
    ),
    "recorded-error-types": (
        _recorded_error_types,
        {"CommandFailed", "Timeout", "Cancelled", "NoEdgeMatched", "ControlStopped"},
        "## Error types in a run",
        "| `{}` |",
    ),
    "http-error-types": (
        _http_error_types,
        {"BadRequest", "NotFound", "Unauthorized", "UnsupportedMediaType"},
        "## HTTP API errors",
        "`{}`",
    ),
}


@pytest.mark.parametrize(
    ("names_of", "known", "heading", "row"), ERROR_TABLES.values(), ids=ERROR_TABLES.keys()
)
def test_troubleshooting_names_every_error(
    names_of: Callable[[], set[str]], known: set[str], heading: str, row: str
) -> None:
    """Every exception class, recorded error type and HTTP error type has its row."""
    names = names_of()
    assert known <= names  # the finder finds
    section = _section(_troubleshooting(), heading)
    missing = sorted(name for name in names if row.format(name) not in section)
    assert not missing, f"{heading} has no row for {missing}"


def test_troubleshooting_explains_every_exit_code() -> None:
    section = _section(_troubleshooting(), "## Exit codes")
    assert set(re.findall(r"^\| `(\d)` \|", section, re.M)) == {"0", "1", "2", "3"}


def _doc(steps: str, head: str = "") -> str:
    """A one-line-per-part workflow: ``name: x``, ``head``, then ``steps`` (flow style)."""
    return f"name: x\n{head}steps: {steps}\n"


ECHO = "command: echo"
GRAPH = "{id: g, graph: {start: %s, states: {a: {command: echo}}%s}}"
BROKEN: list[tuple[str, str]] = [
    # (a broken document, the part of its problem that troubleshooting.md quotes)
    ("steps: [{id: a, command: echo}]\n", "the workflow needs 'name'"),
    (
        _doc(f"[{{id: a, {ECHO}, dependOn: []}}]"),
        "unknown key 'dependOn' in a step; did you mean 'dependsOn'?",
    ),
    (_doc(f"[{{id: a, {ECHO}, retries: two}}]"), "expected an integer, got a string"),
    (
        _doc(f"[{{id: a, {ECHO}}}]", "options: {onStepFailure: skip}\n"),
        "'skip' is not one of abort, cascade, skip-dependents",
    ),
    (_doc(f"[{{id: Build, {ECHO}}}]"), "id 'Build' must match"),
    (_doc(f"[{{id: a, {ECHO}}}, {{id: a, {ECHO}}}]"), "duplicate step id"),
    (_doc(f"[{{id: a, {ECHO}, dependsOn: [b]}}]"), "unknown step 'b' in dependsOn"),
    (
        _doc(
            f"[{{id: a, loop: {{maxIterations: 2, steps: [{{id: inner, {ECHO}}}]}}}},"
            f" {{id: b, {ECHO}, dependsOn: [inner]}}]"
        ),
        "is declared in steps[0].loop.steps, another scope",
    ),
    (
        _doc(
            f"[{{id: outer, loop: {{maxIterations: 2, steps: [{{id: inner, {ECHO}}}]}}}},"
            f" {{id: b, {ECHO}, dependsOn: [outer], condition: 'steps.inner.status != \"\"'}}]"
        ),
        "reads steps.inner, but 'inner' is a step of steps[0].loop.steps, a loop body",
    ),
    (
        _doc(f"[{{id: a, {ECHO}, dependsOn: [b]}}, {{id: b, {ECHO}, dependsOn: [a]}}]"),
        "dependency cycle: a -> b -> a",
    ),
    (
        _doc("[{id: a, agent: writr}]", "agents: {writer: {}}\n"),
        "unknown agent 'writr' (defined: writer)",
    ),
    (
        _doc(f"[{{id: a, {ECHO}, handler: 'm:f'}}]"),
        "a step does one thing, but this one has both 'command' and 'handler'",
    ),
    (_doc("[{id: a}]"), "this step has nothing to do"),
    (
        _doc(f"[{{id: a, {ECHO}, loop: {{maxIterations: 2, steps: [{{id: b, {ECHO}}}]}}}}]"),
        "loop.steps cannot be combined with 'command'",
    ),
    (
        _doc(f"[{{id: a, {ECHO}, loop: {{until: 'true'}}}}]"),
        "a repeat-until loop needs maxIterations",
    ),
    (
        _doc(f"[{{id: a, {ECHO}, loop: {{forEach: [1], until: 'true'}}}}]"),
        "forEach cannot be combined with until",
    ),
    (_doc(f"[{{id: a, {ECHO}, loop: {{forEach: []}}}}]"), "forEach is an empty list"),
    (
        _doc(
            f"[{{id: a, {ECHO}, loop: {{maxIterations: 2, untilAgent: j}}}}]",
            "agents: {j: {resultSchema: {type: object}}}\n",
        ),
        "must submit {done: boolean}, but its resultSchema has no boolean property 'done'",
    ),
    (_doc("[{id: a, command: 'echo {{ inputs.x }}'}]"), "command must not contain {{ }} templates"),
    (_doc("[{id: a, handler: 'm:f', env: {A: b}}]"), "env applies to command steps only"),
    (
        _doc(f"[{{id: a, {ECHO}, condition: 'steps.a.content =='}}]"),
        "invalid CEL in condition: syntax error",
    ),
    (
        _doc(f"[{{id: a, {ECHO}, condition: 'stepz.a.status == \"completed\"'}}]"),
        "invalid CEL in condition: unknown name 'stepz'",
    ),
    (
        _doc(f"[{{id: a, {ECHO}, condition: '\"yes\"'}}]"),
        "condition must be true or false, but '\"yes\"' is always a string",
    ),
    (
        _doc(f"[{{id: a, {ECHO}, timeout: '90'}}]"),
        "is not a duration like '30s', '5m' or '1h30m'",
    ),
    (
        _doc("[" + GRAPH % ("b", ", edges: [{from: a, to: END}]") + "]"),
        "start 'b' is not a state of this graph",
    ),
    (
        _doc("[" + GRAPH % ("a", "") + "]"),
        "has no outgoing edge; add one (to END if the graph should finish there)",
    ),
    (_doc("[" + GRAPH % ("a", ", edges: [{from: a, to: b}]") + "]"), "edge to unknown state"),
    (_doc("[{id: a, include: nowhere.yaml}]"), "not found in"),
    (
        _doc("[{id: a, include: nowhere.yaml, condition: 'true'}]"),
        "an include step cannot have condition",
    ),
    (_doc(f"[{{id: a, {ECHO}}}]", "version: 2\n"), "unsupported version 2"),
    (_doc(f"[{{id: a, {ECHO}}}]", "name: y\n"), "duplicate key 'name'"),
    ("name: x\nsteps: [\n", "invalid YAML"),
    ("name: x\nsteps:\n\t- id: a\n", "a tab character"),
    ("# nothing yet\n", "the document is empty"),
    (
        _doc(f"[{{id: a, {ECHO}}}]", "inputs: {n: {type: integer, default: 'x'}}\n"),
        "the default does not fit",
    ),
]


@pytest.mark.parametrize(("document", "quoted"), BROKEN, ids=[q[:40] for _, q in BROKEN])
def test_troubleshooting_quotes_real_validation_messages(
    document: str, quoted: str, tmp_path: Path
) -> None:
    with pytest.raises(WorkflowError) as caught:
        load_workflow_text(document, filename="flow.yaml", base_dir=tmp_path)
    messages = [problem.message for problem in caught.value.problems]
    assert any(quoted in message for message in messages), (quoted, messages)
    section = _section(_troubleshooting(), "## Validation problems")
    assert f"`{quoted}" in section, f"## Validation problems does not quote {quoted!r}"


# docs/index.md lists every page; links between the new pages resolve --------------


def test_index_lists_every_page() -> None:
    text = (DOCS / "index.md").read_text()
    pages = sorted(p.name for p in DOCS.glob("*.md") if p.name != "index.md")
    missing = [page for page in pages if f"]({page})" not in text]
    assert not missing, f"docs/index.md does not list {missing}"


@pytest.mark.parametrize("page", [*PAGES, "index.md"])
def test_relative_links_resolve(page: str) -> None:
    text = (DOCS / page).read_text()
    for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", text):
        assert (DOCS / target).exists(), f"{page} links to missing {target}"
    for target, anchor in re.findall(r"\]\(([^)#:\s]*)#([^)\s]+)\)", text):
        linked = (DOCS / target).read_text() if target else text
        slugs = {
            re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", linked, re.M)
        }
        assert anchor in slugs, f"{page}: no heading for #{anchor} in {target or page}"


def test_the_tree_in_errors_names_every_error() -> None:
    """cadenza/errors.py draws the exception tree; every CadenzaError subclass is in it."""
    import cadenza.errors

    tree = cadenza.errors.__doc__ or ""
    names = {c.__name__ for c in _error_classes()}
    missing = sorted(name for name in names if not re.search(rf"\b{name}\b", tree))
    assert not missing, f"the tree in cadenza/errors.py does not name {missing}"
