"""The API keeps to its OpenAPI document: Schemathesis against a real server, bounded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.core.result import Ok

from cadenza import Runtime
from cadenza.serve import BackgroundServer, ServeOptions, openapi_document

from .conftest import ECHO, SCRIPTED, write

DOCS = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
TOKEN = "schema-test-token"
EXAMPLES_PER_OPERATION = 30
EXAMPLE_RUN_ID = openapi_document()["paths"]["/api/runs/{run_id}"]["get"]["parameters"][0][
    "example"
]


def test_docs_openapi_json_is_the_servers_document() -> None:
    """docs/openapi.json is what a server with a token serves (regenerate it if not)."""
    regenerate = (
        "python -c 'import json, cadenza.serve as s; "
        "print(json.dumps(s.openapi_document(), indent=2))' > docs/openapi.json"
    )
    assert json.loads(DOCS.read_text()) == openapi_document(token=True), regenerate


def _seed(store: Path, root: Path) -> None:
    """A finished run under the document's example id, and a run waiting for a person."""

    async def seed() -> None:
        async with Runtime(store=store) as runtime:
            await runtime.run(root / "echo.yaml", run_id=EXAMPLE_RUN_ID)
            await runtime.run(root / "review.yaml", run_id="waiting-run")

    anyio.run(seed)


def test_api_answers_every_generated_request_within_its_schema(tmp_path: Path) -> None:
    """No 5xx, and every answer's status, content type and body fit the document."""
    root = tmp_path / "root"
    root.mkdir()
    write(root, "echo.yaml", ECHO)
    write(root, "review.yaml", SCRIPTED)
    store = tmp_path / "runs.db"
    _seed(store, root)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    options = ServeOptions(store=store, root=root, port=0, token=TOKEN, poll=0.05)
    with BackgroundServer(options) as server:
        schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json", headers=auth)
        results = list(schema.get_all_operations())
        assert all(isinstance(result, Ok) for result in results)  # the document loads whole
        operations = [result.ok() for result in results if isinstance(result, Ok)]
        assert len(operations) == 15
        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(
                max_examples=EXAMPLES_PER_OPERATION,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def check(case: schemathesis.Case[Any]) -> None:
                case.call_and_validate(base_url=server.url, headers=auth, timeout=10)

            check()
