"""Runs the benchmarks, prints a table and writes JSON.

Usage: python benchmarks/run.py [--quick] [--json PATH] [GROUP ...]

Each ``bench_GROUP.py`` beside this file exposes ``run(quick: bool) -> list[Figure]``.
Figures are ratios against raw floors measured in the same run; see _harness.py.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import Figure, format_table  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for CI smoke runs")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "latest.json")
    parser.add_argument("groups", nargs="*", help="bench_GROUP modules to run (default: all)")
    parser.add_argument(
        "--items", type=int, help="fleet: the forEach's items (20,000; 1000000 for issue 30)"
    )
    args = parser.parse_args()
    available = sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    groups = args.groups or available
    unknown = sorted(set(groups) - set(available))
    if unknown:
        parser.error(f"unknown benchmark group(s) {unknown}; have {available}")
    figures: list[Figure] = []
    for group in groups:
        module = importlib.import_module(f"bench_{group}")
        if args.items is not None and hasattr(module, "ITEMS"):
            setattr(module, "ITEMS", args.items)  # noqa: B010 (a module's, not typed)
        group_figures: list[Figure] = module.run(args.quick)
        print(format_table(group_figures), end="\n\n", flush=True)
        figures.extend(group_figures)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "python": platform.python_version(),
                "machine": platform.machine(),
                "quick": args.quick,
                "figures": [f.as_dict() for f in figures],
            },
            indent=2,
        )
    )
    print(f"wrote {args.json}")
    missed = [f for f in figures if f.ok is False]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
