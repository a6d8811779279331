"""PostgreSQL driver bake-off: asyncpg against psycopg 3 (async), as the store uses them.

Usage: python benchmarks/pg_drivers.py [--rounds N]

On a throwaway server (tests/_postgres.py, fsync on, 127.0.0.1): a committed
single-row INSERT round trip (autocommit), and a 100-row upsert batch in one
transaction (each driver's ``executemany``; psycopg's pipeline mode too).
Drivers that are not installed are reported as such (psycopg is not a Cadenza
dependency: ``pip install 'psycopg[binary]'`` to compare). The decision and its
figures are in docs/deploying.md.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests._postgres import started_cluster, unavailable  # noqa: E402

N = 500
BATCHES = 50
ROWS = [(f"k{i}", '{"a": 1}') for i in range(100)]
UPSERT = "INSERT INTO {t} VALUES ({a}, {b}) ON CONFLICT (k) DO UPDATE SET v = excluded.v"


async def _psycopg(url: str) -> dict[str, float]:
    import psycopg

    figures: dict[str, float] = {}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        await connection.execute(
            "DROP TABLE IF EXISTS p; CREATE TABLE p (k text PRIMARY KEY, v text)"
        )
        started = time.perf_counter()
        for i in range(N):
            await connection.execute("INSERT INTO p VALUES (%s, %s)", (str(i), "{}"))
        figures["committed INSERT"] = (time.perf_counter() - started) / N * 1e6
        upsert = UPSERT.format(t="p", a="%s", b="%s")
        started = time.perf_counter()
        for _ in range(BATCHES):
            async with connection.transaction(), connection.cursor() as cursor:
                await cursor.executemany(upsert, ROWS)
        figures["100-row batch, executemany"] = (time.perf_counter() - started) / BATCHES * 1e6
        started = time.perf_counter()
        for _ in range(BATCHES):
            async with connection.pipeline(), connection.transaction():
                for row in ROWS:
                    await connection.execute(upsert, row)
        figures["100-row batch, pipeline"] = (time.perf_counter() - started) / BATCHES * 1e6
    return figures


async def _asyncpg(url: str) -> dict[str, float]:
    import asyncpg

    figures: dict[str, float] = {}
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(
            "DROP TABLE IF EXISTS a; CREATE TABLE a (k text PRIMARY KEY, v text)"
        )
        started = time.perf_counter()
        for i in range(N):
            await connection.execute("INSERT INTO a VALUES ($1, $2)", str(i), "{}")
        figures["committed INSERT"] = (time.perf_counter() - started) / N * 1e6
        upsert = UPSERT.format(t="a", a="$1", b="$2")
        started = time.perf_counter()
        for _ in range(BATCHES):
            async with connection.transaction():
                await connection.executemany(upsert, ROWS)
        figures["100-row batch, executemany"] = (time.perf_counter() - started) / BATCHES * 1e6
    finally:
        await connection.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="measure each driver this often")
    args = parser.parse_args()
    reason = unavailable()
    if reason is not None:
        print(f"skipped: {reason}")
        return 0
    with started_cluster() as cluster:
        for _ in range(args.rounds):
            for name, measure in (("asyncpg", _asyncpg), ("psycopg", _psycopg)):
                try:
                    figures = asyncio.run(measure(cluster.url()))
                except ImportError:
                    print(f"{name}: not installed")
                    continue
                shown = ", ".join(f"{what} {us:.0f} us" for what, us in figures.items())
                print(f"{name}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
