"""500 hostile values reach ``command`` steps through env, stdin and a file, and stay data.

The values (``$(...)``, backticks, quotes, ``;``, newlines, redirections, template
syntax, control characters, right-to-left overrides, 1 MB) are written to a YAML
inputs file and run through the real CLI (``cadenza run --inputs-file``) in one
process: one step prints every value it got through ``env``, one echoes the whole
list it got on stdin, a forEach has the shell read each raw value from stdin and
print it back. Every value must come back byte for byte, and no canary file may
ever appear: many values try to create one.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from tests._helpers import run_flow

from .conftest import run_child

CANARY = "injected-canary"
PATTERNS = [
    "$(touch {c})",
    "`touch {c}`",
    "; touch {c}",
    "' ; touch {c} ; '",
    '" ; touch {c} ; "',
    "\ntouch {c}\n",
    "&& touch {c}",
    "|| touch {c}",
    "| tee {c}",
    "> {c}",
    ">> {c}",
    "$(IFS=_;cmd=touch_{c};$cmd)",
    "${{IFS}}touch${{IFS}}{c}",
    "';touch {c};#",
    '";touch {c};#',
    '\\"; touch {c}; \\"',
    "$((1+1)) $(( $(touch {c}) ))",
    "<(touch {c})",
    "{{{{ inputs.values }}}}",
    "{{{{ steps }}}}",
    "%s%s%s%n",
    "$HOME ${{PATH}} $0 $$ $? $! $@ $*",
    "* ? [a-z] ~ ~root",
    "-n",
    "-e \\x41",
    "--help",
    "\x1b[31mred\x1b[0m",
    "\u202etouch {c}",
    "a\u200bb\ufeffc",
    "漢字 ✓ 🚀 é é",
    "\r\n\r\n",
    "trailing newlines\n\n\n",
    "\t tabs \t",
    " ",
    "",
    "!!python/object/apply:os.system ['touch {c}']",
    "*alias &anchor",
    '{{"json": true}}',
    "x" * 4096,
]
ALPHABET = "$()`'\";|&<>\\\n\t *?[]{}~!#%=-.,:/ab01é漢🚀\u202e\x7f\r"


def hostile_values(canary: Path) -> list[str]:
    """500 values: each pattern against two canary paths, then seeded random mixes."""
    values = []
    for pattern in PATTERNS:
        values.append(pattern.format(c=canary))
        values.append(pattern.format(c=CANARY))
    rng = random.Random(20_261_122)
    while len(values) < 499:
        values.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 80))))
    values.append("$(touch " + str(canary) + ")" + "y" * (1024 * 1024))  # 1 MB
    return values


def flow(count: int) -> str:
    env = "".join(f"\n      V{i}: '{{{{ inputs.small[{i}] }}}}'" for i in range(count))
    printed = " ".join(f'"$V{i}"' for i in range(count))
    return f"""
name: injection
inputs:
  values: {{type: array}}
  small: {{type: array}}
  raw: {{type: array}}
steps:
  - id: via-env
    command: 'printf "%s\\0" {printed}'
    env:{env}
  - id: via-stdin
    command: cat
    stdin: "{{{{ inputs.values }}}}"
  - id: each
    loop:
      forEach: "inputs.raw"
      maxConcurrency: 8
    command: 'value=$(cat; printf x); printf "%s" "${{value%x}}"'
    stdin: "{{{{ item }}}}"
output: "steps"
"""


def test_hostile_values_round_trip_and_never_execute(tmp_path: Path) -> None:
    """Through env, stdin and an inputs file: 500 values come back exactly, nothing runs."""
    canary = tmp_path / "canary-file"
    values = hostile_values(canary)
    assert len(values) == 500
    small = values[:-1]  # the 1 MB value exceeds what one environment variable may hold
    (tmp_path / "flow.yaml").write_text(flow(len(small)))
    raw = [*values[: 2 * len(PATTERNS)], values[-1]]  # the shell reads these one by one
    inputs = {"values": values, "small": small, "raw": raw}
    (tmp_path / "inputs.yaml").write_text(yaml.safe_dump(inputs, allow_unicode=True))
    child = run_child(
        ["-m", "cadenza", "run", "flow.yaml", "--inputs-file", "inputs.yaml", "--json"],
        cwd=tmp_path,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout)
    steps = result["steps"]
    assert steps["via-env"]["content"].split("\0")[:-1] == small
    assert json.loads(steps["via-stdin"]["content"]) == values
    iterations = steps["each"]["result"]["iterations"]
    assert [item["content"] for item in iterations] == raw
    assert not canary.exists()
    assert not list(tmp_path.rglob(f"*{CANARY}*"))


async def test_a_value_too_big_for_the_environment_fails_clearly(tmp_path: Path) -> None:
    """A 1 MB env value is more than the kernel passes: the step fails, saying so; nothing runs."""
    canary = tmp_path / "canary-file"
    (tmp_path / "flow.yaml").write_text(
        """
name: big-env
inputs:
  big: {type: string}
steps:
  - id: show
    command: 'printf "%s" "$BIG"'
    env: {BIG: "{{ inputs.big }}"}
"""
    )
    big = f"$(touch {canary})" + "z" * (1024 * 1024)
    result = await run_flow(tmp_path / "flow.yaml", inputs={"big": big})
    assert result.status == "failed"
    assert result.error is not None
    assert "Argument list too long" in result.error.message
    assert not canary.exists()


@pytest.mark.parametrize("value", ["a\0b", "\0"])
async def test_a_nul_byte_in_env_fails_clearly_and_passes_through_stdin(
    value: str, tmp_path: Path
) -> None:
    """The environment cannot hold NUL: that step fails naming it; stdin carries it intact."""
    (tmp_path / "flow.yaml").write_text(
        """
name: nul
inputs:
  v: {type: string}
steps:
  - id: env
    command: 'printf "%s" "$V"'
    env: {V: "{{ inputs.v }}"}
    onError: continue
  - id: stdin
    command: cat
    stdin: "{{ inputs.v }}"
"""
    )
    result = await run_flow(tmp_path / "flow.yaml", inputs={"v": value})
    assert result.steps["env"].status == "failed"
    assert result.steps["env"].error is not None
    assert "null" in result.steps["env"].error.message.lower()
    assert result.steps["stdin"].content == value
