"""`cadenza validate` says ok only to what can run (issue 27, item 5).

Each of these workflows used to validate and then fail at run time: a top-level
step reading a step that lives inside a loop body, an agent with no model from
anywhere, a bare model name no rule gives a provider, an unknown provider. Each
is now a located problem (FILE:LINE:COL: path: message) and exit 2. A provider
whose API key is unset is only a warning: the key may be set where the run runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

_VARIABLES = (
    "CADENZA_MODEL",
    "CADENZA_DEFAULT_PROVIDER",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
)
# Any provider's key or URL variable a developer's shell may hold (docs/providers.md).
_PROVIDER_VARIABLE = re.compile(
    r"_(API_KEY|API_TOKEN|BASE_URL|ENDPOINT|ACCOUNT_ID|ENDPOINT_ID|RESOURCE_NAME|REGION)\Z"
)


def validate(
    tmp_path: Path, text: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "flow.yaml").write_text(text)
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in _VARIABLES and not _PROVIDER_VARIABLE.search(k)
    }
    return subprocess.run(
        [sys.executable, "-m", "cadenza", "validate", "flow.yaml", *args],
        cwd=tmp_path,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def refused(proc: subprocess.CompletedProcess[str], location: str, *words: str) -> str:
    """The one line of stderr at ``location``; exit 2, no traceback, no 'ok'."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "ok" not in proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.startswith(location)]
    assert len(lines) == 1, (location, proc.stderr)
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def passed(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stdout == "flow.yaml: ok\n"


LOOP_BODY = """name: body
steps:
  - id: outer
    loop:
      maxIterations: 2
      steps:
        - id: inner
          command: echo hi
        - id: sibling
          dependsOn: [inner]
          condition: steps.inner.content != ""
          command: echo "$X"
          env: {X: "{{ steps.inner.content }}"}
  - id: after
    dependsOn: [outer]
    condition: steps.inner.content == "hi"
    command: echo x
output: steps.inner.content
"""


def test_a_top_level_condition_and_output_cannot_read_a_loop_body_step(tmp_path: Path) -> None:
    """At run time: "no such key 'inner' in steps (it has: outer)". Inside the loop it is fine."""
    proc = validate(tmp_path, LOOP_BODY)
    condition = refused(
        proc, "flow.yaml:16:16: steps[1].condition:", "steps.inner", "steps[0].loop.steps"
    )
    assert "steps.outer" in condition  # what the step can read instead
    refused(proc, "flow.yaml:18:9: output:", "steps.inner")
    assert len(proc.stderr.splitlines()) == 2, proc.stderr


def test_a_step_in_a_nested_loop_is_hidden_from_its_outer_loop(tmp_path: Path) -> None:
    text = """name: nested
steps:
  - id: outer
    loop:
      maxIterations: 2
      steps:
        - id: middle
          loop:
            maxIterations: 2
            steps:
              - {id: deep, command: echo deep}
              - id: deeper
                dependsOn: [deep]
                command: cat
                stdin: "{{ steps.deep.content }}"
        - id: reader
          dependsOn: [middle]
          command: cat
          stdin: "{{ steps.deep.content }}"
"""
    line = refused(
        validate(tmp_path, text), "flow.yaml:19:19: steps[0].loop.steps[1].stdin:", "steps.deep"
    )
    assert "steps.middle.content" in line  # the step of its own list that runs 'deep'
    # 'deeper' reads 'deep' from inside the same loop body: fine.


NO_MODEL = """name: nomodel
agents:
  writer: {prompt: You write.}
steps:
  - id: draft
    instructions: Write a haiku.
  - id: polish
    agent: writer
    instructions: Polish it.
    dependsOn: [draft]
"""


def test_an_agent_step_with_no_model_anywhere_asks_for_one(tmp_path: Path) -> None:
    proc = validate(tmp_path, NO_MODEL)
    refused(proc, "flow.yaml:6:5: steps[0].instructions:", "no model", "--model")
    refused(proc, "flow.yaml:8:5: steps[1].agent:", "'writer'", "no model", "--model")


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--model", "scripted"), {}),
        ((), {"CADENZA_MODEL": "scripted"}),
        (("--model", "openai:gpt-4o-mini"), {"OPENAI_API_KEY": "sk-test"}),
    ],
)
def test_the_default_model_comes_from_the_flag_or_the_environment(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str]
) -> None:
    """Where a run would get its default model, validate looks too."""
    passed(validate(tmp_path, NO_MODEL, *args, env=env))


def test_a_bad_default_model_is_refused(tmp_path: Path) -> None:
    proc = validate(tmp_path, NO_MODEL, "--model", "opnai:gpt-4o")
    assert proc.returncode == 2
    assert "--model 'opnai:gpt-4o'" in proc.stderr
    assert "did you mean 'openai'" in proc.stderr
    assert "Traceback" not in proc.stderr


MODELS = """name: models
agents:
  local: {model: llama3}
  typo: {model: "opnai:gpt-4o"}
  slash: {model: foo/bar}
  fine: {model: "scripted"}
steps:
  - {id: a, agent: local, instructions: hi}
  - {id: b, agent: typo, instructions: hi}
  - {id: c, agent: slash, instructions: hi}
  - {id: d, agent: fine, instructions: hi, model: "foo:bar"}
"""


def test_unknown_providers_and_bare_names_no_rule_places_are_located(tmp_path: Path) -> None:
    proc = validate(tmp_path, MODELS)
    refused(proc, "flow.yaml:3:11: agents.local.model:", "'llama3'", "CADENZA_DEFAULT_PROVIDER")
    refused(proc, "flow.yaml:4:10: agents.typo.model:", "'opnai'", "did you mean 'openai'")
    refused(proc, "flow.yaml:5:11: agents.slash.model:", "unknown provider 'foo'")
    refused(proc, "flow.yaml:11:44: steps[3].model:", "unknown provider 'foo'")
    assert len(proc.stderr.splitlines()) == 4, proc.stderr


def test_a_default_provider_places_bare_names(tmp_path: Path) -> None:
    text = "name: m\nsteps:\n  - {id: a, instructions: hi, model: llama3}\n"
    refused(validate(tmp_path, text), "flow.yaml:3:31: steps[0].model:", "'llama3'")
    passed(validate(tmp_path, text, env={"CADENZA_DEFAULT_PROVIDER": "ollama"}))


def test_a_missing_api_key_only_warns(tmp_path: Path) -> None:
    """gpt-4o goes to openai by zenflow's rule; OPENAI_API_KEY unset is a warning, exit 0."""
    text = "name: m\nsteps:\n  - {id: a, instructions: hi, model: gpt-4o}\n"
    proc = validate(tmp_path, text)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "flow.yaml: ok\n"
    (warning,) = proc.stderr.splitlines()
    assert warning.startswith("flow.yaml:3:31: steps[0].model: warning:"), warning
    assert "OPENAI_API_KEY is not set" in warning
    passed(validate(tmp_path, text, env={"OPENAI_API_KEY": "sk-test"}))


def test_a_missing_key_of_the_default_model_only_warns(tmp_path: Path) -> None:
    proc = validate(tmp_path, NO_MODEL, "--model", "anthropic:claude-sonnet-4-5")
    assert proc.returncode == 0, proc.stderr
    assert "ANTHROPIC_API_KEY is not set" in proc.stderr
    assert "warning" in proc.stderr


def test_a_judge_and_the_coordinator_need_a_model_too(tmp_path: Path) -> None:
    text = """name: judged
agents:
  writer: {script: ["draft"]}
  judge:
    resultSchema: {type: object, required: [done], properties: {done: {type: boolean}}}
  boss: {prompt: You coordinate.}
coordinator: {agent: boss}
steps:
  - id: draft
    agent: writer
    instructions: Write.
    loop: {maxIterations: 2, untilAgent: judge}
"""
    proc = validate(tmp_path, text)
    refused(proc, "flow.yaml:7:15: coordinator.agent:", "agent 'boss' has no model")
    refused(proc, "flow.yaml:12:30: steps[0].loop.untilAgent:", "agent 'judge' has no model")
    assert len(proc.stderr.splitlines()) == 2, proc.stderr
    passed(validate(tmp_path, text, "--model", "scripted"))


def test_validate_loads_no_http_client(tmp_path: Path) -> None:
    """Checking models reads the provider table without importing httpx (or the runtime)."""
    (tmp_path / "flow.yaml").write_text(MODELS)
    code = (
        "import sys\n"
        "from cadenza.cli import main\n"
        "code = main(['validate', 'flow.yaml'])\n"
        "assert code == 2, code\n"
        "assert 'httpx' not in sys.modules, 'httpx was imported'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


# zenflow's prefixes, one agent each (the native-wire four are another module's).
PROVIDERS = """name: providers
agents:
  a: {model: anthropic/claude-sonnet-4-6}
  b: {model: azure/gpt-4o}
  c: {model: azure-deployment/gpt-4o-prod}
  d: {model: cerebras/llama-3.3-70b}
  e: {model: cloudflare/@cf/meta/llama-3.1-8b-instruct}
  f: {model: cohere/command-r-plus}
  g: {model: compat/qwen2.5}
  h: {model: deepinfra/meta-llama/Llama-3.3-70B-Instruct}
  i: {model: deepseek/deepseek-chat}
  j: {model: fireworks/accounts/fireworks/models/llama-v3p1-8b-instruct}
  k: {model: fptcloud/DeepSeek-V3}
  l: {model: groq/llama-3.3-70b-versatile}
  m: {model: minimax/MiniMax-M2}
  n: {model: mistral/mistral-large-latest}
  o: {model: nvidia/meta/llama-3.1-8b-instruct}
  p: {model: ollama/llama3.1}
  q: {model: openai/gpt-4o}
  r: {model: openrouter/anthropic/claude-sonnet-4}
  s: {model: perplexity/sonar}
  t: {model: runpod/llama}
  u: {model: together/meta-llama/Llama-3-8b}
  v: {model: vllm/Qwen/Qwen2.5-7B}
  w: {model: xai/grok-4}
steps:
  - {id: go, agent: a, instructions: hi}
"""

UNSET = {
    "a": "ANTHROPIC_API_KEY",
    "b": "AZURE_OPENAI_API_KEY (or AZURE_API_KEY)",
    "c": "AZURE_OPENAI_API_KEY (or AZURE_API_KEY)",
    "d": "CEREBRAS_API_KEY",
    "e": "CLOUDFLARE_API_TOKEN",
    "f": "COHERE_API_KEY",
    "h": "DEEPINFRA_API_KEY",
    "i": "DEEPSEEK_API_KEY",
    "j": "FIREWORKS_API_KEY",
    "k": "FPT_API_KEY",
    "l": "GROQ_API_KEY",
    "m": "MINIMAX_API_KEY",
    "n": "MISTRAL_API_KEY",
    "o": "NVIDIA_API_KEY",
    "q": "OPENAI_API_KEY",
    "r": "OPENROUTER_API_KEY",
    "s": "PERPLEXITY_API_KEY",
    "t": "RUNPOD_API_KEY",
    "u": "TOGETHER_AI_API_KEY (or TOGETHER_API_KEY)",
    "w": "XAI_API_KEY",
}


def test_every_provider_resolves_and_an_unset_key_only_warns(tmp_path: Path) -> None:
    """No key set anywhere: each provider that needs one is a warning naming it, exit 0.

    ollama, and compat and vllm (local servers that may take no key), need none.
    """
    proc = validate(tmp_path, PROVIDERS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "flow.yaml: ok\n"
    warnings = dict(re.findall(r"agents\.(\w)\.model: warning: (.+?) is not set", proc.stderr))
    assert warnings == UNSET, proc.stderr


def test_a_variable_the_url_needs_is_warned_about_too(tmp_path: Path) -> None:
    """Cloudflare's key set but not its account id: the warning names the id."""
    text = "name: m\nsteps:\n  - {id: a, instructions: hi, model: 'cloudflare:@cf/m'}\n"
    proc = validate(tmp_path, text, env={"CLOUDFLARE_API_TOKEN": "t"})
    assert proc.returncode == 0, proc.stderr
    (warning,) = proc.stderr.splitlines()
    assert "CLOUDFLARE_ACCOUNT_ID (or CLOUDFLARE_BASE_URL) is not set" in warning, warning
    env = {"CLOUDFLARE_API_TOKEN": "t", "CLOUDFLARE_ACCOUNT_ID": "0f1e"}
    passed(validate(tmp_path, text, env=env))


def test_together_takes_either_of_its_key_variables(tmp_path: Path) -> None:
    text = "name: m\nsteps:\n  - {id: a, instructions: hi, model: together/llama}\n"
    passed(validate(tmp_path, text, env={"TOGETHER_API_KEY": "t"}))
    passed(validate(tmp_path, text, env={"TOGETHER_AI_API_KEY": "t"}))


def test_a_misspelt_provider_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    text = "name: m\nsteps:\n  - {id: a, instructions: hi, model: grokk/llama}\n"
    refused(validate(tmp_path, text), "flow.yaml:3:31: steps[0].model:", "'grokk'", "did you mean")


def test_a_loop_that_asks_for_more_at_once_than_its_run_allows_is_warned(
    tmp_path: Path,
) -> None:
    """The run's maxConcurrency (5 by default) bounds a forEach's too: said, not silent."""
    text = (
        "name: fan\nsteps:\n  - id: each\n    command: 'true'\n"
        "    loop: {forEach: [1, 2, 3], maxConcurrency: 64}\n"
    )
    proc = validate(tmp_path, text)
    assert proc.returncode == 0, proc.stderr
    (warning,) = proc.stderr.splitlines()
    assert warning.startswith("flow.yaml:5:"), warning
    assert "steps[0].loop.maxConcurrency: warning: 64 at once" in warning
    assert "the default of 5" in warning
    allowed = validate(
        tmp_path, text.replace("name: fan\n", "name: fan\noptions: {maxConcurrency: 64}\n")
    )
    passed(allowed)
    assert allowed.stderr == ""
    proc = validate(
        tmp_path, text.replace("name: fan\n", "name: fan\noptions: {maxConcurrency: 8}\n")
    )
    assert "(options.maxConcurrency: 8), so at most 8 run at once" in proc.stderr
