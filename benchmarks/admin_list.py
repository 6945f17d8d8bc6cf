"""Admin view: server time of every page a reviewer opens, at 100,000 logged episodes.

    python benchmarks/admin_list.py [--episodes 100000] [--candidates 20] [--turns 20000]
                                    [--deletions 200] [--repeats 15] [--pg URL] [--pages-only]
                                    [--cases TEXT]

Stores each user's candidates as memories (the registry the memories pages read), logs the
episodes in bulk (``EpisodeLog.log_episodes`` in batches), keeps ``--turns`` unfinished turns (as
after an outage: three in four running and lost, the rest paused) and makes ``--deletions``
audited deletion runs, into a fresh SQLite file and, when a URL is given, a fresh PostgreSQL
schema (created here and dropped afterwards: nothing else is touched). Then it requests the pages
through the ASGI app in-process (Starlette's TestClient, bearer token; no network) and prints the
median and the 90th percentile over repeated requests, after warm-up: ``/episodes`` first page and
a page 90% deep (via its keyset cursor), with and without filters (``--pages-only``: unfiltered
only; ``--cases TEXT``: the unfiltered list and the filters whose name holds TEXT, no other page);
one in 50 episodes is a failed turn (the runtime's failed-turn feedback, its causes mixed as after
a provider outage), for the failed-turn filters; two MemPO scorers' labels (a small model grading
every decision, 1% -1; a large one grading one in ten, one in 2,000 decisions -1), for the MemPO
filter (many matches by any scorer, few by the large one); one episode; ``/turns`` first and 90% deep, all kept and lost only; ``/policies`` (whose
health card is the status page); the users and one user's memories; one memory; ``/deletions``; ``/metrics`` (each scrape its own
status read).
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
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from _scratch import scratch_schema
from sqlalchemy import text
from starlette.testclient import TestClient

from memabra import (
    STOP_ID,
    Budget,
    Candidate,
    CandidateKind,
    Episode,
    Feedback,
    FeedbackKind,
    MemoryQuality,
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
from memabra._admin import _metrics_page, create_app
from memabra._admin._forms import parse_episode_filter, parse_mempo_filter
from memabra._records_listing import RegistryItem
from memabra.storage import FAILED_TURN_SOURCE, EpisodeLog, upgrade
from memabra.storage._admin_mempo import MemPOListing
from memabra.storage._admin_turns import encode_turn_cursor
from memabra.storage._models import SuspendedTurnRow, table_of
from memabra.storage._suspended_turns import SuspendedTurn
from memabra.storage._suspended_turns import _values as turn_values

TOKEN = "benchmark-admin-token"
USERS = 500
VERSIONS = ("vw-a1", "vw-a2", "vw-a3", "vw-a4", "vw-a5")
START = datetime(2025, 1, 1, tzinfo=UTC)
SPAN = timedelta(days=90)
# one in FAILED_EVERY episodes is a failed turn (2%), spread over users and time (a multiplicative
# hash of its number, not its user's turn); most by the model, as in a provider outage
FAILED_EVERY = 50
FAILED_COMMENTS = (
    "model_error (model): RateLimitError: 429 Too Many Requests",
    "model_error (model): APIConnectionError: Connection error.",
    "model_error (model): RateLimitError: 429 Too Many Requests",
    "tool_error (search): TimeoutError: timed out",
    "superseded: a new message on the thread before the turn finished",
    "model_error (model): RateLimitError: 429 Too Many Requests",
    "model_error (model): APIConnectionError: Connection error.",
    "tool_error (search): TimeoutError: timed out",
    "superseded: a new message on the thread before the turn finished",
    "recursion_limit: GraphRecursionError: Recursion limit of 25 reached without hitting a stop condition.",
)
KIND_MIXES = (
    (CandidateKind.MEMORY,),
    (CandidateKind.MEMORY, CandidateKind.TOOL),
    (CandidateKind.MEMORY, CandidateKind.SKILL, CandidateKind.TOOL),
)


# MemPO labels as a nightly small model and a weekly large one leave them: the small one grades
# every decision (1 in SMALL_WORSE_EVERY -1), the large one 1 in LARGE_EVERY (1 in LARGE_WORSE_EVERY
# of all decisions -1): the any-scorer filter matches many, the large scorer's few; 97 is prime,
# so each user (the episode's number modulo USERS) has some -1 labels
SMALL_SCORER, LARGE_SCORER = "mempo:small", "mempo:large"
SMALL_WORSE_EVERY, LARGE_EVERY, LARGE_WORSE_EVERY = 97, 10, 2_000


def decision_id(i: int) -> str:
    return f"d{i:031x}"


def _failed(i: int) -> bool:
    return (i * 2654435761) % (FAILED_EVERY * 1000) < 1000


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
    sel = Selection(
        ctx, scored, tuple(draws), policy="vw", policy_version=version, seed=i, created_at=created, id=decision_id(i)
    )
    corrected = rng.random() < 0.03
    feedback: tuple[Feedback, ...] = (
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
    if _failed(i):
        cause = FAILED_COMMENTS[(i // 7) % len(FAILED_COMMENTS)]
        payload = {"accepted": False, "comment": cause}
        feedback += (
            Feedback(f"{i:032x}", FeedbackKind.PROGRAMMATIC, FAILED_TURN_SOURCE, payload, received_at=created),
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


def fill_labels(log: EpisodeLog, first: int, n: int) -> int:
    """Both scorers' MemPO labels of the decisions of episodes ``first`` to ``n`` (those before
    were deleted); returns how many."""
    at = START + SPAN
    labels = [
        MemoryQuality(decision_id(i), SMALL_SCORER, 0.3, 0.5, -0.2, -1 if i % SMALL_WORSE_EVERY == 0 else 1, 8, at)
        for i in range(first, n)
    ] + [
        MemoryQuality(decision_id(i), LARGE_SCORER, 0.3, 0.5, -0.2, -1 if i % LARGE_WORSE_EVERY == 0 else 1, 8, at)
        for i in range(first + -first % LARGE_EVERY, n, LARGE_EVERY)
    ]
    for first in range(0, len(labels), 2_000):
        log.store_memory_scores(labels[first : first + 2_000])
    return len(labels)


def deep_cursor(log: EpisodeLog, params: dict[str, str], depth: float, step: int = 1000) -> tuple[str | None, int]:
    """The cursor of the page that starts ``depth`` of the way down the filtered list (to within
    ``step`` episodes: a short list is walked again in finer steps)."""
    flt, raw = parse_episode_filter(params)
    mempo = parse_mempo_filter(raw)
    listing = MemPOListing(log)
    matched = 0
    cursor = None
    pages: list[tuple[str | None, int]] = []
    while True:
        page = listing.newest(flt, mempo, cursor, step)
        pages.append((cursor, matched))
        matched += len(page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    if step > 50 and matched < 20 * step:
        return deep_cursor(log, params, depth, step // 10)
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
    ("failed", {"failed": "yes"}),
    ("failed, model_error", {"cause": "model_error"}),
    ("failed, recursion_limit (rarest)", {"cause": "recursion_limit"}),
    ("not failed", {"failed": "no"}),
    (
        "failed, model_error, 1 week",
        {"cause": "model_error", "since": "2025-02-01T00:00:00", "until": "2025-02-08T00:00:00"},
    ),
    ("user + failed", {"user": "user17", "failed": "yes"}),
    ("MemPO -1, any scorer", {"mempo": "worse"}),
    ("MemPO -1, large scorer (rarest)", {"mempo": "worse", "scorer": LARGE_SCORER}),
    ("MemPO -1 + user", {"mempo": "worse", "user": "user17"}),
)


def fill_memories(log: EpisodeLog, n_candidates: int) -> None:
    """Each user's memory candidates as stored memories, so that logging counts their uses."""
    items = [
        RegistryItem(
            CandidateKind.MEMORY, f"c{j}", f"user{u}", f"candidate {j} for user{u}: some remembered fact", 10 + j
        )
        for u in range(USERS)
        for j in range(n_candidates)
    ]
    for first in range(0, len(items), 2_000):
        log.put_items(items[first : first + 2_000])


def fill_turns(log: EpisodeLog, n: int, now: datetime) -> list[tuple[datetime, str, bool]]:
    """``n`` kept turns over the two days before ``now``: three in four running (lost), the rest
    paused. Inserted in bulk (``EpisodeLog.suspend_turn`` writes one per transaction); returns
    (suspended_at, turn_id, paused) of each."""
    document = {"messages": [{"role": "user", "content": "x" * 400}], "state": {"step": 3, "notes": "y" * 400}}
    rows = []
    for i in range(n):
        at = now - timedelta(days=2) + timedelta(days=2) * (i / n) - timedelta(hours=2)
        paused = i % 4 == 0
        turn = SuspendedTurn(f"turn-{i:08d}", f"unlogged-{i:08d}", f"user{i % USERS}", f"t{i}", at, document, paused)
        rows.append(turn_values(turn))
    with log.engine.begin() as conn:
        for first in range(0, n, 2_000):
            conn.execute(table_of(SuspendedTurnRow).insert(), rows[first : first + 2_000])
    return sorted((r["suspended_at"], r["turn_id"], r["paused"]) for r in rows)


def turn_cursor(turns: list[tuple[datetime, str, bool]], lost: bool, depth: float) -> str:
    listed = [t for t in turns if not (lost and t[2])]
    at, turn_id, _ = listed[int(depth * len(listed))]
    return encode_turn_cursor(at, turn_id)


def fill_deletions(log: EpisodeLog, n_episodes: int, runs: int) -> None:
    """``runs`` audited deletion runs of one episode each (the oldest), for the deletions page."""
    for i in range(runs):
        log.delete_episodes([f"{i:032x}"], include_unlearned=True, actor="benchmark")
    assert runs < n_episodes


def row(name: str, figures: tuple[float, float], matches: str = "") -> None:
    print(f"{name:44} {matches:>8} {figures[0]:>10.1f} {figures[1]:>8.1f}")


def run(url: str, args: argparse.Namespace, label: str) -> None:
    upgrade(url)
    with EpisodeLog(url) as log:
        fill_memories(log, args.candidates)
        seconds = fill(log, args.episodes, args.candidates, args.batch)
        print(f"\n{label}: logged {args.episodes:,} episodes x {args.candidates} candidates in {seconds:.0f} s")
        turns = fill_turns(log, args.turns, datetime.now(UTC))
        fill_deletions(log, args.episodes, args.deletions)
        labels = fill_labels(log, args.deletions, args.episodes)
        print(f"{label}: {args.turns:,} kept turns, {args.deletions} deletion runs, {labels:,} MemPO labels")
        if log.engine.dialect.name == "postgresql":
            # Planner statistics, as autovacuum would gather them after a bulk load this size.
            with log.engine.begin() as conn:
                conn.execute(text("ANALYZE"))
        with TestClient(create_app(log, token=TOKEN), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            print(f"{'page':44} {'matches':>8} {'median ms':>10} {'p90 ms':>8}")
            cases = [c for c in CASES if c is CASES[0] or args.cases in c[0]] if args.cases else CASES
            for name, params in CASES[:1] if args.pages_only else cases:
                query = urlencode(params)
                cursor, matched = deep_cursor(log, params, 0.9)
                row(f"episodes, {name}, first page", timed(client, f"/episodes?{query}", args.repeats), f"{matched:,}")
                if cursor is not None:
                    deep = timed(client, f"/episodes?{urlencode({**params, 'cursor': cursor})}", args.repeats)
                    row(f"episodes, {name}, 90% deep", deep, f"{matched:,}")
            if args.cases:
                return
            row("one episode (20 candidates)", timed(client, f"/episodes/{args.episodes // 2:032x}", args.repeats))
            if turns:
                lost = sum(not t[2] for t in turns)
                row("turns, first page", timed(client, "/turns", args.repeats), f"{len(turns):,}")
                deep_turns = f"/turns?cursor={turn_cursor(turns, False, 0.9)}"
                row("turns, 90% deep", timed(client, deep_turns, args.repeats), f"{len(turns):,}")
                row("turns, lost only, first page", timed(client, "/turns?lost=1", args.repeats), f"{lost:,}")
                deep_lost = f"/turns?lost=1&cursor={turn_cursor(turns, True, 0.9)}"
                row("turns, lost only, 90% deep", timed(client, deep_lost, args.repeats), f"{lost:,}")
            status_ms = []
            for _ in range(max(3, args.repeats // 5)):
                t0 = time.perf_counter()
                log.status()  # the policies page's "Learning" card and `memabra status`
                status_ms.append((time.perf_counter() - t0) * 1000.0)
            status_ms.sort()
            row("learning status (EpisodeLog.status)", (statistics.median(status_ms), status_ms[-1]))
            for window in ("30", "all"):
                row(
                    f"policies, window {window}", timed(client, f"/policies?window={window}", max(3, args.repeats // 5))
                )
            # every scrape its own read: the endpoint shares one read among scrapes within a second
            _metrics_page.SHARED_READ_S = 0.0
            row("GET /metrics (Prometheus scrape)", timed(client, "/metrics", args.repeats))
            row("memories: users", timed(client, "/memories", args.repeats), f"{USERS:,}")
            row("memories: one user's", timed(client, "/memories?user=user17", args.repeats))
            row("memories: one user's, most used", timed(client, "/memories?user=user17&sort=most-used", args.repeats))
            row("one memory", timed(client, "/memories/item?user=user17&id=c0", args.repeats))
            row("deletions", timed(client, "/deletions", args.repeats), f"{args.deletions:,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--turns", type=int, default=20_000, help="unfinished turns kept (as after an outage)")
    parser.add_argument("--deletions", type=int, default=200, help="audited deletion runs")
    parser.add_argument("--pages-only", action="store_true", help="the unfiltered episode list only")
    parser.add_argument("--cases", default="", help="only the episode-list filters whose name holds this text")
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
        with scratch_schema(args.pg) as url:
            run(url, args, "PostgreSQL")


if __name__ == "__main__":
    main()
