"""Admin view: server time of the episode-list page at 100,000 logged episodes.

    python benchmarks/admin_list.py [--episodes 100000] [--candidates 20] [--repeats 15] [--pg URL]

Logs the episodes in bulk (``EpisodeLog.log_episodes`` in batches) into a fresh SQLite file and,
when a URL is given, a fresh PostgreSQL schema; then requests ``/episodes`` through the ASGI app
in-process (Starlette's TestClient, bearer token; no network) and prints the median and the 90th
percentile over repeated requests, after warm-up, for the first page and a page 90% deep (via its
keyset cursor), with and without filters. The episode and policies pages are timed too.
PostgreSQL gets an ``ANALYZE`` after the load (autovacuum's job on a live database); SQLite is
left as loaded.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlencode

from sqlalchemy import create_engine, text
from starlette.testclient import TestClient

from memabra import (
    STOP_ID,
    Budget,
    Candidate,
    CandidateKind,
    Episode,
    Feedback,
    FeedbackKind,
    RewardBreakdown,
    RewardComponents,
    RewardWeights,
    RoutingContext,
    ScoredCandidate,
    Selection,
    SlotDraw,
    Step,
    StepKind,
)
from memabra._admin import create_app
from memabra.storage import EpisodeFilter, EpisodeLog, resolve_url, upgrade

TOKEN = "benchmark-admin-token"
USERS = 500
VERSIONS = ("vw-a1", "vw-a2", "vw-a3", "vw-a4", "vw-a5")
START = datetime(2025, 1, 1, tzinfo=UTC)
SPAN = timedelta(days=90)
KIND_MIXES = (
    (CandidateKind.MEMORY,),
    (CandidateKind.MEMORY, CandidateKind.TOOL),
    (CandidateKind.MEMORY, CandidateKind.SKILL, CandidateKind.TOOL),
)


def make_episode(i: int, n: int, n_candidates: int, rng: random.Random) -> Episode:
    user = f"user{i % USERS}"
    created = START + SPAN * (i / n)
    kinds = KIND_MIXES[i % len(KIND_MIXES)]
    cands = [
        Candidate(f"c{j}", kinds[j % len(kinds)], f"candidate {j} for {user}: some remembered fact", 10 + j)
        for j in range(n_candidates)
    ]
    ctx = RoutingContext(query=f"question {i} from {user}", user_id=user, kinds=kinds, budget=Budget(max_tokens=400))
    scored = tuple(
        ScoredCandidate(c, {"lex": 0.1 * j, "sem": 0.05 * j}, 1.0 - 0.01 * j, j) for j, c in enumerate(cands)
    )
    draws = []
    for kind in kinds:
        remaining = [c.id for c in cands if c.kind is kind] + [STOP_ID]
        for pick in (remaining[0], STOP_ID):
            p = 1.0 / len(remaining)
            draws.append(SlotDraw(len(draws), kind, tuple(remaining), tuple([p] * len(remaining)), pick, p))
            remaining.remove(pick)
    version = VERSIONS[min(int(len(VERSIONS) * i / n), len(VERSIONS) - 1)]
    sel = Selection(ctx, scored, tuple(draws), policy="vw", policy_version=version, seed=i, created_at=created)
    corrected = rng.random() < 0.03
    feedback = (
        (Feedback(f"{i:032x}", FeedbackKind.EXPLICIT, "user", {"correction": True}, received_at=created),)
        if corrected
        else ()
    )
    reward = RewardBreakdown(
        RewardComponents(
            s=rng.choice((0.0, 0.5, 1.0)), hm=rng.uniform(-1, 1), c=1.0 if corrected else 0.0, x=rng.random() * 0.3
        ),
        RewardWeights(),
    )
    steps = (Step(StepKind.MODEL, "model", input_tokens=300, output_tokens=40, latency_ms=20.0, started_at=created),)
    return Episode(
        user_id=user,
        query=ctx.query,
        selections=(sel,),
        steps=steps,
        answer="ok",
        id=f"{i:032x}",
        created_at=created,
        reward=reward,
        finalized_at=created + timedelta(minutes=10),
        feedback=feedback,
    )


def fill(log: EpisodeLog, n: int, n_candidates: int, batch: int) -> float:
    rng = random.Random(7)
    started = time.perf_counter()
    for first in range(0, n, batch):
        log.log_episodes([make_episode(i, n, n_candidates, rng) for i in range(first, min(first + batch, n))])
    return time.perf_counter() - started


def deep_cursor(log: EpisodeLog, flt: EpisodeFilter, depth: float) -> tuple[str | None, int]:
    """The cursor of the page that starts ``depth`` of the way down the filtered list."""
    matched = 0
    cursor = None
    pages: list[tuple[str | None, int]] = []
    while True:
        page = log.list_episodes(flt, cursor=cursor, limit=1000)
        pages.append((cursor, matched))
        matched += len(page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    target = depth * matched
    chosen = max((p for p in pages if p[1] <= target), key=lambda p: p[1])
    return chosen[0], matched


def timed(client: TestClient, url: str, repeats: int) -> tuple[float, float]:
    for _ in range(2):
        assert client.get(url).status_code == 200, url
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        response = client.get(url)
        samples.append((time.perf_counter() - t0) * 1000.0)
        assert response.status_code == 200, url
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


CASES: tuple[tuple[str, dict[str, str]], ...] = (
    ("no filter", {}),
    ("user", {"user": "user17"}),
    ("policy version", {"policy_version": "vw-a3"}),
    ("kind = skill", {"kind": "skill"}),
    ("reward 0.5..0.9", {"reward_min": "0.5", "reward_max": "0.9"}),
    ("corrected", {"corrected": "yes"}),
    ("time range (1 week)", {"since": "2025-02-01T00:00:00", "until": "2025-02-08T00:00:00"}),
    ("user + corrected", {"user": "user17", "corrected": "yes"}),
    ("query contains (many match)", {"q": "FROM USER17"}),
    ("query contains (none match)", {"q": "no such words"}),
)


def run(url: str, args: argparse.Namespace, label: str) -> None:
    upgrade(url)
    with EpisodeLog(url) as log:
        seconds = fill(log, args.episodes, args.candidates, args.batch)
        print(f"\n{label}: logged {args.episodes:,} episodes x {args.candidates} candidates in {seconds:.0f} s")
        if log.engine.dialect.name == "postgresql":
            # Planner statistics, as autovacuum would gather them after a bulk load this size.
            with log.engine.begin() as conn:
                conn.execute(text("ANALYZE"))
        with TestClient(create_app(log, token=TOKEN), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            print(f"{'page':40} {'matches':>8} {'median ms':>10} {'p90 ms':>8}")
            for name, params in CASES:
                query = urlencode(params)
                flt = _filter(params)
                cursor, matched = deep_cursor(log, flt, 0.9)
                first = timed(client, f"/episodes?{query}", args.repeats)
                print(f"{'episodes, ' + name + ', first page':40} {matched:>8,} {first[0]:>10.1f} {first[1]:>8.1f}")
                if cursor is not None:
                    deep = timed(client, f"/episodes?{urlencode({**params, 'cursor': cursor})}", args.repeats)
                    print(f"{'episodes, ' + name + ', 90% deep':40} {matched:>8,} {deep[0]:>10.1f} {deep[1]:>8.1f}")
            episode = timed(client, f"/episodes/{args.episodes // 2:032x}", args.repeats)
            print(f"{'one episode (20 candidates)':40} {'':>8} {episode[0]:>10.1f} {episode[1]:>8.1f}")
            status_ms = []
            for _ in range(max(3, args.repeats // 5)):
                t0 = time.perf_counter()
                log.status()  # the policies page's "Learning" card and `memabra status`
                status_ms.append((time.perf_counter() - t0) * 1000.0)
            print(
                f"{'learning status (EpisodeLog.status)':40} {'':>8} {statistics.median(status_ms):>10.1f} {max(status_ms):>8.1f}"
            )
            for window in ("30", "all"):
                policies = timed(client, f"/policies?window={window}", max(3, args.repeats // 5))
                print(f"{'policies, window ' + window:40} {'':>8} {policies[0]:>10.1f} {policies[1]:>8.1f}")


def _filter(params: dict[str, str]) -> EpisodeFilter:
    from memabra._admin._forms import parse_episode_filter

    return parse_episode_filter(params)[0]


@contextmanager
def postgres_schema(url: str) -> Iterator[str]:
    base = resolve_url(url)
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    engine = create_engine(base)
    with engine.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        sep = "&" if "?" in base else "?"
        yield f"{base}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--pg", default=None, help="PostgreSQL URL (optional), e.g. postgresql+psycopg://root@127.0.0.1:5432/test"
    )
    parser.add_argument("--skip-sqlite", action="store_true")
    args = parser.parse_args()
    print(f"machine: {platform.machine()} {os.cpu_count()} cpu(s), Python {platform.python_version()}")
    if not args.skip_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            run(f"sqlite:///{tmp}/admin-bench.db", args, "SQLite")
    if args.pg:
        with postgres_schema(args.pg) as url:
            run(url, args, "PostgreSQL")


if __name__ == "__main__":
    main()
