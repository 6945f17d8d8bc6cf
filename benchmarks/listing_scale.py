"""Listing commands on a large log: median wall time of `episodes list` (plain, a rare and a common
`--search`, `--snapshot`) and `memories list` of one user with many memories.

    python benchmarks/listing_scale.py [--episodes 200000] [--memories 100000] [--pg URL]

Seeds a fresh SQLite file (and, with ``--pg``, a fresh schema on that server, dropped afterwards)
in bulk: ``--episodes`` episodes over 500 users, one served policy version per four episodes and
five saved snapshots, one rare query word near the oldest end; one user ``ann`` with ``--memories``
memories. Then runs each command three times in-process (typer's CliRunner) and prints the median.
To compare with an older release, run the same command in its checkout.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert, text
from typer.testing import CliRunner

from memabra._cli import app
from memabra.storage import make_engine, upgrade
from memabra.storage._models import EpisodeRow, PolicySnapshotRow, RegistryRow, table_of

_WORDS = "printer invoice weather oslo lyon refund password laptop meeting budget train flight hotel".split()
_ROOT = "linear-abc"
_CASES = {
    "episodes list": ["episodes", "list"],
    "episodes list --search zanzibar (rare)": ["episodes", "list", "--search", "zanzibar"],
    "episodes list --search printer (common)": ["episodes", "list", "--search", "printer"],
    f"episodes list --snapshot {_ROOT}+1000": ["episodes", "list", "--snapshot", f"{_ROOT}+1000"],
    "memories list --user ann": ["memories", "list", "--user", "ann"],
}
_BATCH = 5000


def _insert(url: str, table: Any, rows: list[dict[str, Any]]) -> None:
    engine = make_engine(url)
    try:
        for i in range(0, len(rows), _BATCH):
            with engine.begin() as c:
                c.execute(insert(table), rows[i : i + _BATCH])
    finally:
        engine.dispose()


def seed(url: str, episodes: int, memories: int) -> None:
    upgrade(url)
    rnd = random.Random(7)
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    snapshot = {"policy": "linear", "parent": None, "model": b"", "learner_args": {}, "metrics": {}}
    snaps = sorted({0, 1000, episodes // 4, episodes // 2, max(episodes - 10, 0)})  # a small run repeats some
    _insert(url, table_of(PolicySnapshotRow), [
        {**snapshot, "version": f"{_ROOT}+{k}", "status": "saved", "created_at": t0 + timedelta(seconds=k)}
        for k in snaps
    ])  # fmt: skip
    rows = []
    for i in range(episodes):
        at = t0 + timedelta(seconds=i)
        query = " ".join(rnd.choice(_WORDS) for _ in range(8)) + f" number {i}" + (" zanzibar" if i == 5 else "")
        rows.append({
            "id": f"{i:032x}", "user_id": f"u{i % 500}", "thread_id": f"t{i % 5000}", "turn": 0, "query": query,
            "answer": "ok", "created_at": at, "feedback_due_at": at + timedelta(minutes=10), "finalized_at": at,
            "policy_version": f"{_ROOT}+{i // 4}", "kinds": "memory", "reward_total": rnd.random(),
            "corrected": False, "used_ids": [], "metadata": {},
        })  # fmt: skip
    _insert(url, table_of(EpisodeRow), rows)
    _insert(url, table_of(RegistryRow), [
        {
            "kind": "memory", "owner": "ann", "id": f"mem:{j:012d}", "name": f"mem:{j:012d}", "text": f"fact {j}",
            "body": None, "tokens": 3, "source": "user", "metadata": {}, "created_at": t0 + timedelta(seconds=j),
            "updated_at": t0 + timedelta(seconds=j), "last_chosen_at": None, "times_chosen": 0, "times_used": 0,
            "deleted_at": None, "retired_at": None, "superseded_by": None,
        }
        for j in range(memories)
    ])  # fmt: skip
    engine = make_engine(url)
    with engine.begin() as c:
        c.execute(text("ANALYZE"))
    engine.dispose()


def measure(url: str, label: str) -> None:
    runner = CliRunner(env={"COLUMNS": "200"})
    for case, args in _CASES.items():
        times = []
        for _ in range(3):
            started = time.perf_counter()
            result = runner.invoke(app, [*args, "--db", url])
            times.append(time.perf_counter() - started)
            if result.exit_code != 0:
                raise SystemExit(f"{case} on {label} exited {result.exit_code}: {result.output}")
        print(f"{label:10s} {case:45s} median {statistics.median(times) * 1000:9.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200_000)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--pg", help="a PostgreSQL URL: a fresh schema is made there and dropped afterwards")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'log.db'}"
        seed(url, args.episodes, args.memories)
        measure(url, "sqlite")
    if args.pg:
        schema = f"listing_{uuid.uuid4().hex[:8]}"
        admin = create_engine(args.pg)
        with admin.begin() as c:
            c.execute(text(f"CREATE SCHEMA {schema}"))
        sep = "&" if "?" in args.pg else "?"
        url = f"{args.pg}{sep}options=-csearch_path%3D{schema}"
        try:
            seed(url, args.episodes, args.memories)
            measure(url, "postgresql")
        finally:
            with admin.begin() as c:
                c.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            admin.dispose()


if __name__ == "__main__":
    main()
