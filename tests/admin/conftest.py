"""A small, varied episode log for the admin view, and clients signed in to it.

Episodes span nine days and two policy versions, three users with one thread each, memories and
tools, skewed slot distributions (so some draws explore), tool errors, a correction, final and
open rewards, and three snapshots in a parent chain (v1 retired, v2 active, v3 a candidate). One
episode carries markup in every user-supplied field, to check that it is shown as text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from memabra import (
    STOP_ID,
    Budget,
    Candidate,
    CandidateKind,
    Episode,
    Feedback,
    FeedbackKind,
    PolicySnapshot,
    RoutingContext,
    ScoredCandidate,
    Selection,
    SlotDraw,
    Step,
    StepKind,
)
from memabra._admin import create_app
from memabra._feedback import RewardService
from memabra._records import OPEResult
from memabra._reward import RewardConfig
from memabra.storage import EpisodeLog, upgrade
from pg_schema import pg_schema

TOKEN = "test-admin-token-0123456789"
PASSWORD = "correct horse battery staple"
XSS_MEMORY = "<script>alert(1)</script>"
XSS_QUERY = "what did I say? <img src=x onerror=alert(2)>"
XSS_ANSWER = "<b>not bold</b>"
XSS_TOOL_RESULT = "<script>alert(3)</script>"
NOW = datetime.now(UTC).replace(microsecond=0)
USERS = ("alice", "bob", "carol")


def slate(
    user: str,
    offered: Sequence[Candidate],
    picks: Sequence[str],
    *,
    version: str,
    query: str,
    created_at: datetime,
    thread_id: str | None = None,
    turn: int = 0,
    policy: str = "test",
    seed: int = 11,
) -> Selection:
    """A selection whose slots draw from geometric weights (1, 1/2, 1/4, ...) over the remaining
    candidates of the kind in rank order, with the stop option at weight 0.1: picking anything but
    the best remaining candidate explores."""
    kinds = tuple(dict.fromkeys(c.kind for c in offered))
    ctx = RoutingContext(query=query, user_id=user, thread_id=thread_id, turn=turn, kinds=kinds, budget=Budget())
    scored = []
    for kind in kinds:
        members = [c for c in offered if c.kind is kind]
        for rank, cand in enumerate(members):
            value = round(2.0 - 0.4 * rank, 3)
            scored.append(ScoredCandidate(cand, {"hyb_z": value, "lex": value / 2, "tokens_log": 2.4}, value, rank))
    draws: list[SlotDraw] = []
    for kind in kinds:
        remaining = [c.id for c in offered if c.kind is kind]
        kind_picks = [p for p in picks if p in remaining] + [STOP_ID]
        for pick in kind_picks:
            options = remaining + [STOP_ID]
            weights = [0.5**i for i in range(len(remaining))] + [0.1]
            total = sum(weights)
            probs = [w / total for w in weights]
            probs[-1] = 1.0 - sum(probs[:-1])
            index = options.index(pick)
            draws.append(SlotDraw(len(draws), kind, tuple(options), tuple(probs), pick, probs[index]))
            if pick != STOP_ID:
                remaining.remove(pick)
    return Selection(
        ctx, tuple(scored), tuple(draws), policy=policy, policy_version=version, seed=seed, created_at=created_at
    )


def pool(user: str, memory_texts: Sequence[str] | None = None, *, tools: bool = True) -> list[Candidate]:
    texts = memory_texts or [
        f"{user} likes green tea",
        f"{user} lives in Lyon",
        f"{user} plays chess",
        f"{user} has a cat",
    ]
    memories = [
        Candidate(f"mem-{user}-{i}", CandidateKind.MEMORY, t, 8 + i, {"owner": user}) for i, t in enumerate(texts)
    ]
    if not tools:
        return memories
    return memories + [
        Candidate("tool-search", CandidateKind.TOOL, "search the web", 30),
        Candidate("tool-calendar", CandidateKind.TOOL, "read the calendar", 25),
    ]


@dataclass
class Seeded:
    """Ids of the seeded log, for assertions."""

    episodes: list[str] = field(default_factory=list)
    by_user: dict[str, list[str]] = field(default_factory=dict)
    by_version: dict[str, list[str]] = field(default_factory=dict)
    explored_draws: dict[str, int] = field(default_factory=dict)
    draws: dict[str, int] = field(default_factory=dict)
    corrected: str = ""
    xss: str = ""
    tool_error: str = ""


def seed_log(log: EpisodeLog) -> Seeded:
    # The episodes are backdated up to ten days; a window longer than that keeps the ones the tests
    # post feedback to open (feedback after an episode's deadline is late).
    service = RewardService(log, RewardConfig(feedback_window=timedelta(days=30)))
    seeded = Seeded()
    episodes: list[Episode] = []
    for i in range(24):
        user = USERS[i % 3]
        version = "test-v1" if i < 12 else "test-v2"
        created = NOW - timedelta(hours=9 * (24 - i))
        best_memory = f"mem-{user}-0"
        picks = [f"mem-{user}-1" if i % 4 == 0 else best_memory]
        if i % 2 == 0:
            picks.append("tool-search")
        query = f"question {i} from {user}"
        sel = slate(
            user,
            pool(user, tools=i % 2 == 0),
            picks,
            version=version,
            query=query,
            created_at=created,
            thread_id=f"thread-{user}",
            turn=i // 3,
        )
        steps = [
            Step(
                StepKind.MODEL,
                "fake-model",
                seq=0,
                input_tokens=120,
                output_tokens=30,
                latency_ms=800.0,
                started_at=created,
            )
        ]
        if "tool-search" in picks:
            failed = i % 6 == 0
            steps.append(
                Step(
                    StepKind.TOOL,
                    "search",
                    seq=1,
                    arguments={"q": query},
                    result=None if failed else f"results for {query}",
                    status="error" if failed else "ok",
                    error="search failed: upstream timeout" if failed else None,
                    latency_ms=350.0,
                    started_at=created,
                )
            )
        episode = Episode(
            user_id=user,
            query=query,
            selections=(sel,),
            steps=tuple(steps),
            answer=f"answer {i} to {user}",
            thread_id=f"thread-{user}",
            turn=i // 3,
            created_at=created,
            used_ids=frozenset(picks[:1]),
        )
        episodes.append(episode)
        seeded.by_user.setdefault(user, []).append(episode.id)
        seeded.by_version.setdefault(version, []).append(episode.id)
        seeded.draws[version] = seeded.draws.get(version, 0) + len(sel.slots)
        explored = sum(1 for d in sel.slots if d.chosen_probability < max(d.probabilities) - 1e-9)
        seeded.explored_draws[version] = seeded.explored_draws.get(version, 0) + explored
        if i % 6 == 0 and "tool-search" in picks:
            seeded.tool_error = episode.id
    xss_user = "mallory"
    xss_created = NOW - timedelta(minutes=30)
    xss_pool = pool(xss_user, [XSS_MEMORY, "mallory likes <i>italics</i>", "plain memory", "another memory"])
    xss_sel = slate(
        xss_user, xss_pool, ["mem-mallory-0", "tool-search"], version="test-v2", query=XSS_QUERY, created_at=xss_created
    )
    xss = Episode(
        user_id=xss_user,
        query=XSS_QUERY,
        selections=(xss_sel,),
        steps=(
            Step(
                StepKind.TOOL,
                "search",
                seq=0,
                arguments={"q": "<svg onload=alert(4)>"},
                result=XSS_TOOL_RESULT,
                started_at=xss_created,
            ),
        ),
        answer=XSS_ANSWER,
        created_at=xss_created,
    )
    episodes.append(xss)
    seeded.draws["test-v2"] += len(xss_sel.slots)
    seeded.explored_draws["test-v2"] += sum(
        1 for d in xss_sel.slots if d.chosen_probability < max(d.probabilities) - 1e-9
    )
    seeded.xss = xss.id
    seeded.by_version["test-v2"].append(xss.id)
    for episode in episodes:
        service.record(episode)
    seeded.episodes = [e.id for e in episodes]
    for episode_id in seeded.episodes[:6]:
        service.finalize(episode_id)
    seeded.corrected = seeded.episodes[7]
    service.post_feedback(
        Feedback(
            seeded.corrected, FeedbackKind.EXPLICIT, "test", {"correction": "I live in Paris"}, idempotency_key="seed-c"
        )
    )
    log.save_snapshot(
        PolicySnapshot("test", "test-v1", b"\x01" * 2048, {"seed": 1}, created_at=NOW - timedelta(days=11))
    )
    log.save_snapshot(
        PolicySnapshot(
            "test",
            "test-v2",
            b"\x02" * 4096,
            {"seed": 1},
            parent="test-v1",
            status="active",
            created_at=NOW - timedelta(days=6),
        )
    )
    log.save_snapshot(
        PolicySnapshot(
            "test", "test-v3", b"\x03" * 1024, {"seed": 1}, parent="test-v2", created_at=NOW - timedelta(days=1)
        )
    )
    log.set_snapshot_status("test-v1", "retired")
    return seeded


def record_ope(log: EpisodeLog) -> list[OPEResult]:
    """Two offline-evaluation runs: the active snapshot and the candidate, by two estimators each."""
    results = [
        OPEResult(
            "test", "snipw", 0.41, 0.35, 0.47, 500, snapshot_version="test-v2", created_at=NOW - timedelta(hours=5)
        ),
        OPEResult("test", "dr", 0.43, 0.39, 0.47, 500, snapshot_version="test-v2", created_at=NOW - timedelta(hours=5)),
        OPEResult(
            "test", "snipw", 0.52, 0.44, 0.60, 500, snapshot_version="test-v3", created_at=NOW - timedelta(hours=3)
        ),
        OPEResult("test", "dr", 0.50, 0.45, 0.55, 500, snapshot_version="test-v3", created_at=NOW - timedelta(hours=3)),
        OPEResult("bm25 baseline", "ipw", 0.30, 0.21, 0.39, 500, alpha=0.1, created_at=NOW - timedelta(hours=2)),
    ]
    log.record_ope_results(results)
    return results


@pytest.fixture
def seeded(log: EpisodeLog) -> Seeded:
    return seed_log(log)


PG_ENV = "MEMABRA_TEST_DATABASE_URL"
BACKENDS = ["sqlite", "postgres"] if os.environ.get(PG_ENV) else ["sqlite"]


@contextmanager
def migrated_database(backend: str, directory: Path) -> Iterator[str]:
    """A migrated, empty database on ``backend`` (a PostgreSQL schema of its own), dropped after."""
    if backend == "sqlite":
        url = f"sqlite:///{directory / 'admin.db'}"
        upgrade(url)
        yield url
        return
    with pg_schema(os.environ[PG_ENV]) as url:
        upgrade(url)
        yield url


@pytest.fixture(scope="module", params=BACKENDS)
def shared_log(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EpisodeLog, Seeded]]:
    """One seeded log per backend for a whole module of tests that only read."""
    with migrated_database(request.param, tmp_path_factory.mktemp("admin")) as url, EpisodeLog(url) as log:
        yield log, seed_log(log)


@pytest.fixture
def sqlite_log(tmp_path: Path) -> Iterator[EpisodeLog]:
    """A fresh SQLite log, for write checks that do not depend on the backend."""
    with migrated_database("sqlite", tmp_path) as url, EpisodeLog(url) as log:
        yield log


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "page has no CSRF token"
    return match.group(1)


def sign_in(client: TestClient, secret: str = TOKEN, next_url: str = "/episodes") -> Any:
    page = client.get("/login")
    return client.post(
        "/login", data={"secret": secret, "csrf_token": csrf_of(page.text), "next": next_url}, follow_redirects=False
    )


def feedback_form(client: TestClient, episode_id: str, form_id: str) -> dict[str, str]:
    page = client.get(f"/episodes/{episode_id}").text
    form = page.split(f'id="{form_id}"', 1)[1].split("</form>", 1)[0]
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form))


ClientFactory = Callable[..., TestClient]


@pytest.fixture
def make_client(log: EpisodeLog) -> Iterator[ClientFactory]:
    """Build a TestClient over the seeded log; ``signed_in=True`` signs in with the token."""
    clients: list[TestClient] = []

    def build(*, signed_in: bool = True, **kwargs: Any) -> TestClient:
        kwargs.setdefault("token", TOKEN)
        client = TestClient(create_app(log, **kwargs), follow_redirects=False)
        client.__enter__()
        clients.append(client)
        if signed_in:
            response = sign_in(client)
            assert response.status_code == 303, response.text
        return client

    yield build
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: ClientFactory, seeded: Seeded) -> TestClient:
    return make_client()


def explained_episode() -> Episode:
    """One decision that shows every reason a high-scoring candidate is left out: a memory over the
    token budget, one lost to an explored draw, one to the stop option, and a tool whose only slot
    went to an option the learner rates higher (a router that logs its own score: prior + learner)."""
    memories = [
        ("m-history", "Ann's complete travel history since 2009, every city and date", 500, 2.1, 0.0),
        ("m-lyon", "Ann lives in Lyon", 12, 1.8, 0.0),
        ("m-tea", "Ann likes green tea", 10, 1.4, 0.0),
        ("m-chess", "Ann plays chess on Sundays", 9, 0.9, 0.0),
    ]
    tools = [
        ("t-search", "search the web for current information", 30, 1.9, -0.6),
        ("t-weather", "the weather forecast for a city", 20, 1.0, 0.5),
    ]
    offered = []
    for kind, rows in ((CandidateKind.MEMORY, memories), (CandidateKind.TOOL, tools)):
        for rank, (cid, words, tokens, prior, learned) in enumerate(sorted(rows, key=lambda r: -(r[3] + r[4]))):
            cand = Candidate(cid, kind, words, tokens)
            offered.append(ScoredCandidate(cand, {"hyb_z": prior, "lex": prior / 2}, prior + learned, rank))
    draws = (
        SlotDraw(
            0, CandidateKind.MEMORY, ("m-lyon", "m-tea", "m-chess", STOP_ID), (0.7, 0.15, 0.1, 0.05), "m-tea", 0.15
        ),
        SlotDraw(1, CandidateKind.MEMORY, ("m-lyon", "m-chess", STOP_ID), (0.2, 0.1, 0.7), STOP_ID, 0.7),
        SlotDraw(2, CandidateKind.TOOL, ("t-search", "t-weather", STOP_ID), (0.3, 0.6, 0.1), "t-weather", 0.6),
    )
    budget = Budget(max_tokens=120, slots={CandidateKind.MEMORY: 3, CandidateKind.TOOL: 1})
    query = "what should I pack for the weekend?"
    context = RoutingContext(
        query=query, user_id="ann", kinds=(CandidateKind.MEMORY, CandidateKind.TOOL), budget=budget
    )
    selection = Selection(context, tuple(offered), draws, policy="vw", policy_version="vw-7+12", seed=3)
    return Episode(user_id="ann", query=query, selections=(selection,), answer="A light jacket: Lyon will be mild.")


def learned_episode() -> Episode:
    """One decision of a numpy learner taught that a weakly similar memory helps and the most
    similar one does not: its logged scores are its own (prior + a non-zero learner part)."""
    from memabra.router import LinearRouter

    router = LinearRouter(exploration="greedy")
    candidates = pool("ann")
    budget = Budget(slots={CandidateKind.MEMORY: 1, CandidateKind.TOOL: 1})
    query = "what does ann drink?"
    context = RoutingContext(query=query, user_id="ann", kinds=(CandidateKind.MEMORY,), budget=budget)
    for _ in range(5):
        selection = router.choose(context, candidates)
        chosen = selection.chosen_ids
        router.learn(selection, 1.0, {cid: 1.0 if cid == "mem-ann-0" else 0.0 for cid in chosen})
    selection = router.choose(context, candidates)
    return Episode(user_id="ann", query=query, selections=(selection,), answer="Green tea.")
