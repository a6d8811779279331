"""Whether this process can rebuild a stored run: the Python code its document names.

A workflow built in Python keeps its predicates and its unnamed handlers in the
process that built it (``cadenza.build``): the stored document holds markers and
registry names for them. Another process (``cadenza resume``, a supervisor)
that resumed such a run would fail it at the first predicate, and the
application that built it could not resume it afterwards. `check_rebuildable`
finds what is missing before anything runs, so the run is left as it was.
"""

from __future__ import annotations

from cadenza.actors.steps import HandlerError, resolve_handler
from cadenza.errors import RunNeedsCode
from cadenza.workflow import (
    PYTHON_PREFIX,
    CodeReference,
    LoadedWorkflow,
    code_references,
    is_registered,
    module_exists,
)

__all__ = ["check_rebuildable", "missing_code"]


def check_rebuildable(run_id: str, document: LoadedWorkflow) -> None:
    """Raises `RunNeedsCode` when this process lacks Python code the run's workflow names."""
    missing = missing_code(document)
    if missing:
        raise RunNeedsCode(run_id, missing)


def missing_code(document: LoadedWorkflow) -> list[str]:
    """What ``document`` needs that this process does not have, each said once, in order:
    ``predicate 'my_app.checks:<lambda>'``, ``handler of step 'spin.work'``...

    Nothing is imported but Cadenza's own modules (where the handlers registered
    by `cadenza.build` and `cadenza.loops` live): a user module is only looked
    for, as the validator does at load.
    """
    missing: dict[str, None] = {}  # ordered, without repeats
    for reference in code_references(document):
        why = _missing(reference)
        if why is not None:
            missing[why] = None
    return list(missing)


def _missing(reference: CodeReference) -> str | None:
    text = reference.reference
    if reference.kind == "predicate":
        name = text.removeprefix(PYTHON_PREFIX)
        return None if is_registered(text) else f"predicate {name!r}"
    top = text.partition(":")[0].split(".", 1)[0]
    if top == "cadenza" and reference.kind == "handler":
        try:  # a registry entry (HANDLERS.f7): only the process that built the run has it
            resolve_handler(text, reference.base_dir)
        except HandlerError:
            return f"handler of step {reference.where!r}"
        return None
    if not top.isidentifier() or module_exists(top, reference.base_dir):
        return None  # whatever else is wrong with it is for the step to report
    return f"{reference.kind} {text!r} (no module {top!r} here)"
