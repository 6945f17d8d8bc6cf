"""`memabra status` beside many snapshots: the reward window's fold, old (every snapshot's version
read) against new (only the snapshots the window's versions can fold into), same run.

    python benchmarks/status_snapshots.py [--snapshots 100000] [--episodes 2000] [--repeats 30]
                                          [--pg URL] [--skip-sqlite]

Logs ``--episodes`` episodes over the last two days (one an update of one online lineage, its
final rewards spread so the last hour holds a few dozen, over a few dozen versions) and saves
``--snapshots`` snapshots of that lineage (every tenth update, as a learner committing often
leaves them until `memabra policies prune`), into a fresh SQLite file and, when a URL is given, a
fresh PostgreSQL schema (created here and dropped afterwards). Then it times the window read
(``reward_window``) and ``EpisodeLog.status()`` with the old fold and the new one, alternating,
and prints the medians in milliseconds. PostgreSQL gets an ``ANALYZE`` after the load.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from admin_list import postgres_schema  # a fresh schema, created and dropped
from sqlalchemy import insert, select, text
from sqlalchemy.orm import Session

from memabra import (
    STOP_ID,
    Budget,
    Candidate,
    CandidateKind,
    Episode,
    RewardBreakdown,
    RewardComponents,
    RewardWeights,
    RoutingContext,
    ScoredCandidate,
    Selection,
    SlotDraw,
)
from memabra.storage import EpisodeLog, SnapshotIndex, upgrade
from memabra.storage import _status as status_module
from memabra.storage._models import PolicySnapshotRow
from memabra.storage._status import REWARD_WINDOW, reward_window

ROOT = "vw-71c5"
UPDATES_PER_SNAPSHOT = 10


def make_episode(i: int, n: int, now: datetime) -> Episode:
    # the newest episodes carry the latest updates: 30 updates per hour over two days
    age = timedelta(days=2) * (1 - (i + 1) / n)
    created = now - age - timedelta(minutes=5)
    version = f"{ROOT}+{1_000_000 - int(age / timedelta(minutes=2))}"
    cands = [Candidate(f"c{j}", CandidateKind.MEMORY, f"fact {j}", 10) for j in range(3)]
    ctx = RoutingContext(query=f"question {i}", user_id="ann", kinds=(CandidateKind.MEMORY,), budget=Budget())
    scored = tuple(ScoredCandidate(c, {"lex": 0.1}, 1.0, j) for j, c in enumerate(cands))
    offered = (*(c.id for c in cands), STOP_ID)
    draw = SlotDraw(0, CandidateKind.MEMORY, offered, tuple([0.25] * 4), "c0", 0.25)
    sel = Selection(ctx, scored, (draw,), policy="vw", policy_version=version, seed=i, created_at=created)
    reward = RewardBreakdown(RewardComponents(s=1.0, hm=0.5), RewardWeights())
    return Episode(
        user_id="ann",
        query=ctx.query,
        selections=(sel,),
        id=f"{i:032x}",
        created_at=created,
        reward=reward,
        finalized_at=created + timedelta(minutes=4),
    )


def fill(log: EpisodeLog, episodes: int, snapshots: int, now: datetime) -> None:
    for first in range(0, episodes, 1_000):
        log.log_episodes([make_episode(i, episodes, now) for i in range(first, min(first + 1_000, episodes))])
    at = now - timedelta(days=3)
    top = 1_000_000 - 1_000_000 % UPDATES_PER_SNAPSHOT
    rows = (
        {
            "version": f"{ROOT}+{top - k * UPDATES_PER_SNAPSHOT}",
            "policy": "vw",
            "parent": None,
            "model": b"m",
            "learner_args": {},
            "metrics": {},
            "status": "candidate",
            "created_at": at - timedelta(seconds=k),
            "previous_active": None,
        }
        for k in range(snapshots)
    )
    with Session(log.engine) as s, s.begin():
        for chunk in _chunks(rows, 5_000):
            s.execute(insert(PolicySnapshotRow), chunk)


def _chunks(rows: Iterable[dict[str, object]], size: int) -> Iterator[list[dict[str, object]]]:
    chunk: list[dict[str, object]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _every_snapshot(s: Session, versions: Iterable[str]) -> SnapshotIndex:
    """The fold before: every snapshot's version read, whatever the window holds."""
    return SnapshotIndex(s.scalars(select(PolicySnapshotRow.version)).all())


@contextmanager
def folding(fold: Callable[[Session, Iterable[str]], SnapshotIndex]) -> Iterator[None]:
    kept = status_module.snapshot_index_for
    status_module.snapshot_index_for = fold
    try:
        yield
    finally:
        status_module.snapshot_index_for = kept


def run(url: str, args: argparse.Namespace, label: str) -> None:
    upgrade(url)
    now = datetime.now(UTC)
    with EpisodeLog(url) as log:
        fill(log, args.episodes, args.snapshots, now)
        if log.engine.dialect.name == "postgresql":
            with log.engine.begin() as conn:
                conn.execute(text("ANALYZE"))

        def window() -> object:
            with Session(log.engine) as s, s.begin():
                return reward_window(s, now - REWARD_WINDOW, now)

        new_fold = status_module.snapshot_index_for
        with folding(_every_snapshot):
            old = window()
        assert window() == old, "the folds disagree"
        versions = {row.version for row in old}  # type: ignore[attr-defined]
        rewards = sum(row.rewards for row in old)  # type: ignore[attr-defined]
        times: dict[str, list[float]] = {name: [] for name in ("window old", "window new", "status old", "status new")}
        for _ in range(3):  # warm-up: connections, the collation check
            window()
            log.status()
        for _ in range(args.repeats):
            for name, fold in (("old", _every_snapshot), ("new", new_fold)):
                with folding(fold):
                    started = time.perf_counter()
                    window()
                    times[f"window {name}"].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    log.status()
                    times[f"status {name}"].append(time.perf_counter() - started)
    print(
        f"{label}: {args.snapshots:,} snapshots, {rewards} rewards final in the window over {len(versions)} snapshot(s)"
    )
    for name, figures in times.items():
        print(f"  {name:11} median {statistics.median(figures) * 1000:8.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshots", type=int, default=100_000)
    parser.add_argument("--episodes", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--pg", help="PostgreSQL URL (a fresh schema is created in it and dropped)")
    parser.add_argument("--skip-sqlite", action="store_true")
    args = parser.parse_args()
    print(
        f"{platform.python_implementation()} {platform.python_version()}, {args.repeats} repeats, old/new alternating"
    )
    if not args.skip_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            run(f"sqlite:///{tmp}/status.db", args, "SQLite")
    if args.pg:
        with postgres_schema(args.pg) as url:
            run(url, args, "PostgreSQL")


if __name__ == "__main__":
    main()
