from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from factories import candidates, episode, uniform_selection
from memabra import (
    Budget,
    CandidateKind,
    Episode,
    Feedback,
    InvalidRecordError,
    PolicySnapshot,
    Step,
    StepKind,
    UnknownEpisodeError,
)
from memabra._records import RegistryItem, utcnow
from memabra.storage import EpisodeFilter, EpisodeLog
from memabra.storage._models import DecisionCandidateRow, DecisionRow, EpisodeRow


def test_episode_round_trips_with_candidates_steps_feedback_and_reward(log: EpisodeLog) -> None:
    from memabra import RewardBreakdown, RewardComponents, RewardWeights

    steps = (
        Step(StepKind.MODEL, "fake", input_tokens=120, output_tokens=9, latency_ms=12.0),
        Step(StepKind.TOOL, "search", arguments={"q": "weather", "n": 3}, result="sunny", latency_ms=40.0),
        Step(StepKind.TOOL, "search", arguments={"q": ""}, status="error", error="empty query", latency_ms=2.0),
    )
    ep = episode(steps=steps, metadata={"latency_ms": 80.0})
    fb = Feedback(ep.id, "explicit", "test", {"correct": True})
    reward = RewardBreakdown(RewardComponents(s=1.0, hm=0.5, e=0.2, x=0.1), RewardWeights())
    ep = Episode(
        **{
            **{f: getattr(ep, f) for f in ep.__dataclass_fields__},
            "feedback": (fb,),
            "reward": reward,
            "used_ids": frozenset({"m0"}),
        }
    )
    log.log_episode(ep)
    back = log.get_episode(ep.id)
    assert back.selections == ep.selections
    assert back.steps == tuple(
        Step(**{**{f: getattr(s, f) for f in s.__dataclass_fields__}, "seq": i}) for i, s in enumerate(steps)
    )
    assert back.feedback == ep.feedback
    assert back.reward == reward
    assert back.used_ids == frozenset({"m0"})
    assert back.created_at == ep.created_at and back.created_at.tzinfo is not None
    sel = back.selections[0]
    assert sel.chosen_ids == ("m0", "m2")
    assert sel.propensity == pytest.approx((1 / 6) * (1 / 5) * (1 / 4))


def test_every_offered_candidate_is_logged_chosen_or_not(log: EpisodeLog) -> None:
    ep = episode(n=6, chosen=("m1",))
    log.log_episode(ep)
    with log.engine.connect() as conn:
        rows = conn.execute(
            select(
                DecisionCandidateRow.candidate_id,
                DecisionCandidateRow.chosen,
                DecisionCandidateRow.slot,
                DecisionCandidateRow.probability,
            )
        ).all()
    assert len(rows) == 6
    chosen = [r for r in rows if r.chosen]
    assert [(r.candidate_id, r.slot) for r in chosen] == [("m1", 0)]
    assert all(r.probability == pytest.approx(1 / 7) for r in rows)


def test_a_failed_episode_write_leaves_nothing_half_written(log: EpisodeLog) -> None:
    good = episode()
    log.log_episode(good)
    # The second batch's duplicate id fails at the episodes insert after nothing else; the third
    # carries an unserialisable step argument and fails after its episode row went in.
    bad_step = Step(StepKind.TOOL, "x", arguments={"blob": object()})
    broken = episode(steps=(bad_step,))
    with pytest.raises(InvalidRecordError):
        log.log_episode(broken)
    with log.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(EpisodeRow)).scalar() == 1
        assert conn.execute(select(func.count()).select_from(DecisionRow)).scalar() == 1
        assert conn.execute(select(func.count()).select_from(DecisionCandidateRow)).scalar() == 5
    with pytest.raises(UnknownEpisodeError):
        log.get_episode(broken.id)


def test_bulk_logging_writes_all_rows(log: EpisodeLog) -> None:
    eps = [episode(user_id=f"u{i % 3}", n=20, chosen=("m1", "m3")) for i in range(200)]
    log.log_episodes(eps)
    with log.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(DecisionCandidateRow)).scalar() == 200 * 20
    assert log.count_episodes() == 200


def test_bulk_logging_uses_a_few_statements_not_one_per_row(log: EpisodeLog) -> None:
    from sqlalchemy import event

    statements: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        statements.append(statement)

    event.listen(log.engine, "before_cursor_execute", count)
    try:
        log.log_episodes([episode(n=20) for _ in range(100)])
    finally:
        event.remove(log.engine, "before_cursor_execute", count)
    writes = [s for s in statements if s.lstrip().upper().startswith(("INSERT", "UPDATE"))]
    assert len(writes) <= 10, writes


def test_listing_is_keyset_paginated_and_filtered(log: EpisodeLog) -> None:
    base = utcnow() - timedelta(hours=1)
    eps = []
    for i in range(25):
        e = episode(user_id="alice" if i % 2 else "bob")
        eps.append(
            Episode(**{**{f: getattr(e, f) for f in e.__dataclass_fields__}, "created_at": base + timedelta(seconds=i)})
        )
    log.log_episodes(eps)
    seen, cursor = [], None
    while True:
        page = log.list_episodes(cursor=cursor, limit=10)
        seen.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert [s.id for s in seen] == [e.id for e in reversed(eps)]
    alice = log.list_episodes(EpisodeFilter(user_id="alice"), limit=100).items
    assert len(alice) == 12 and all(s.user_id == "alice" for s in alice)
    recent = log.list_episodes(EpisodeFilter(since=base + timedelta(seconds=20)), limit=100).items
    assert len(recent) == 5
    assert log.list_episodes(EpisodeFilter(kind=CandidateKind.TOOL)).items == ()
    assert len(log.list_episodes(EpisodeFilter(policy_version="test-1"), limit=100).items) == 25
    with pytest.raises(InvalidRecordError, match="cursor"):
        log.list_episodes(cursor="garbage!")


def test_listing_by_words_in_the_query(log: EpisodeLog) -> None:
    base = utcnow() - timedelta(hours=1)
    queries = ["Where do I LIVE?", "what's the weather", "100% sure_thing", "Where should we eat", "weather in Oslo"]
    eps = [
        dataclasses.replace(episode(user_id="ann" if i < 3 else "bob"), query=q, created_at=base + timedelta(seconds=i))
        for i, q in enumerate(queries)
    ]
    log.log_episodes(eps)

    def found(**kwargs: object) -> list[str]:
        return [s.query for s in log.list_episodes(EpisodeFilter(**kwargs), limit=100).items]  # type: ignore[arg-type]

    assert found(query_contains="where") == ["Where should we eat", "Where do I LIVE?"]  # any case, newest first
    assert found(query_contains="live") == ["Where do I LIVE?"]
    assert found(query_contains="weather", user_id="bob") == ["weather in Oslo"]
    assert found(query_contains="0% s") == ["100% sure_thing"]
    assert found(query_contains="%") == ["100% sure_thing"]  # a wildcard is a plain character
    assert found(query_contains="e_t") == ["100% sure_thing"] and found(query_contains="h_t") == []
    page = log.list_episodes(EpisodeFilter(query_contains="e"), limit=2)
    rest = log.list_episodes(EpisodeFilter(query_contains="e"), cursor=page.next_cursor, limit=10)
    assert [s.query for s in page.items + rest.items] == list(reversed([q for q in queries if "e" in q.lower()]))
    with pytest.raises(InvalidRecordError, match="query_contains must not be blank"):
        log.list_episodes(EpisodeFilter(query_contains="  "))


def test_registry_is_scoped_by_user(log: EpisodeLog) -> None:
    log.put_items(
        [
            RegistryItem(CandidateKind.MEMORY, "m-a", "alice", "Alice is vegetarian", 5),
            RegistryItem(CandidateKind.MEMORY, "m-b", "bob", "Bob lives in Oslo", 5),
            RegistryItem(
                CandidateKind.SKILL,
                "s-1",
                "",
                "summarise a document",
                8,
                name="summarise",
                body="Summarise in 3 bullets.",
            ),
            RegistryItem(CandidateKind.TOOL, "t-bob", "bob", "bob's private tool", 4),
        ]
    )
    alice = {i.id for i in log.items("alice")}
    bob = {i.id for i in log.items("bob")}
    assert alice == {"m-a", "s-1"}
    assert bob == {"m-b", "s-1", "t-bob"}
    assert [c.id for c in (i.as_candidate() for i in log.items("alice", CandidateKind.MEMORY))] == ["m-a"]
    with pytest.raises(InvalidRecordError, match="owner"):
        RegistryItem(CandidateKind.MEMORY, "m-x", "", "ownerless", 1)
    with pytest.raises(InvalidRecordError, match="user_id"):
        log.items("")
    assert log.delete_item(CandidateKind.MEMORY, "alice", "m-a")
    assert {i.id for i in log.items("alice")} == {"s-1"}


def test_usage_counters_follow_decisions_and_outcomes(log: EpisodeLog) -> None:
    log.put_items([RegistryItem(CandidateKind.MEMORY, f"m{i}", "u1", f"memory {i}", 10) for i in range(5)])
    ep = episode(chosen=("m0", "m2"))
    log.log_episode(ep)
    log.set_used(ep.id, ["m2"])
    by_id = {i.id: i for i in log.items("u1")}
    assert (by_id["m0"].times_chosen, by_id["m0"].times_used) == (1, 0)
    assert (by_id["m2"].times_chosen, by_id["m2"].times_used) == (1, 1)
    assert by_id["m2"].last_chosen_at is not None
    stats = log.candidate_stats("u1", ["m0", "m2", "m4"])
    assert (stats["m2"].times_offered, stats["m2"].times_chosen, stats["m2"].times_used) == (1, 1, 1)
    assert stats["m4"].times_chosen == 0
    assert log.candidate_stats("someone-else", ["m2"]) == {}


def test_uses_known_when_the_episode_is_logged_are_counted_once(log: EpisodeLog) -> None:
    log.put_items([RegistryItem(CandidateKind.MEMORY, f"m{i}", "u1", f"memory {i}", 10) for i in range(5)])
    ep = episode(chosen=("m0", "m2"), used_ids=frozenset({"m2"}))  # the runtime's path: uses arrive with it
    log.log_episode(ep)
    log.set_used(ep.id, ["m2", "m0"])  # a later report: only m0 is new
    by_id = {i.id: i for i in log.items("u1")}
    assert (by_id["m2"].times_chosen, by_id["m2"].times_used) == (1, 1)
    assert (by_id["m0"].times_chosen, by_id["m0"].times_used) == (1, 1)
    assert by_id["m2"].as_candidate().usage.times_helped == 1


def test_policy_snapshots_round_trip_and_promotion(log: EpisodeLog) -> None:
    a = PolicySnapshot("vw", "vw-1", b"\x00model-a", {"args": "--cb_explore_adf"}, status="active")
    b = PolicySnapshot("vw", "vw-2", b"\x00model-b", parent="vw-1", metrics={"ips": 0.4})
    log.save_snapshot(a)
    log.save_snapshot(b)
    assert log.get_snapshot("vw-2") == b
    assert log.latest_snapshot("vw", status="active") == a
    log.set_snapshot_status("vw-2", "active")
    assert log.latest_snapshot("vw", status="active").version == "vw-2"  # type: ignore[union-attr]
    assert log.get_snapshot("vw-1").status == "retired"
    with pytest.raises(InvalidRecordError, match="parent"):
        log.save_snapshot(PolicySnapshot("vw", "vw-3", b"", parent="nope"))
    with pytest.raises(InvalidRecordError, match="already exists"):
        log.save_snapshot(a)


def test_iter_selections_streams_in_time_order(log: EpisodeLog) -> None:
    eps = [episode() for _ in range(7)]
    log.log_episodes(eps)
    got = [sel.id for sel, _ in log.iter_selections(chunk_size=3)]
    want = [e.selections[0].id for e in sorted(eps, key=lambda e: (e.selections[0].created_at, e.selections[0].id))]
    assert got == want


def test_iter_decisions_carries_each_episodes_reward_and_used_candidates(log: EpisodeLog) -> None:
    used, unknown = episode(used_ids=frozenset({"m2"})), episode()
    log.log_episodes([used, unknown])
    got = {d.selection.id: d for d in log.iter_decisions(chunk_size=1)}
    assert got[used.selections[0].id].used_ids == frozenset({"m2"})
    assert got[unknown.selections[0].id].used_ids is None
    assert all(d.reward is None for d in got.values())
    assert [sel.id for sel, _ in log.iter_selections()] == [d.selection.id for d in log.iter_decisions()]


def test_a_naive_or_empty_read_window_is_refused_before_any_read(log: EpisodeLog) -> None:
    naive = utcnow().replace(tzinfo=None)
    with pytest.raises(InvalidRecordError, match="since must be timezone-aware"):
        log.iter_decisions(since=naive)
    with pytest.raises(InvalidRecordError, match="until must be timezone-aware"):
        log.iter_selections(until=naive)
    with pytest.raises(InvalidRecordError, match="since must be timezone-aware"):
        log.mempo_items(since=naive)
    with pytest.raises(InvalidRecordError, match="chunk_size must be at least 1"):
        log.iter_decisions(chunk_size=0)


def test_decisions_with_a_gold_answer_are_counted_as_they_are_streamed(log: EpisodeLog) -> None:
    from memabra import Feedback, MemoryQuality

    with_memories = [episode("ann", chosen=("m1",)) for _ in range(3)]
    tools_only = Episode(
        user_id="ann",
        query="q",
        selections=(uniform_selection("ann", candidates("t", kind=CandidateKind.TOOL), ["t0"]),),
    )
    no_gold = episode("ann")
    log.log_episodes([*with_memories, tools_only, no_gold])
    for ep in [*with_memories, tools_only]:
        log.add_feedback(Feedback(ep.id, "programmatic", "checker", {"gold_answer": "Ann"}))
    log.add_feedback(Feedback(no_gold.id, "explicit", "user", {"rating": 4}))

    items = list(log.mempo_items())
    assert sorted(i.id for i in items) == sorted(ep.selections[0].id for ep in with_memories)
    assert all(i.gold_answer == "Ann" and i.selected == ("memory text m1",) for i in items)
    assert log.count_mempo_items() == 3  # the tools-only decision offered no memory to grade
    first = with_memories[0].selections[0].id
    log.store_memory_scores([MemoryQuality(first, "mempo:a", 0.5, 0.5, 0.0, 1, 3)])
    assert log.count_mempo_items(unscored_by="mempo:a") == 2
    assert first not in {i.id for i in log.mempo_items(unscored_by="mempo:a")}
    assert log.count_mempo_items(unscored_by="mempo:b") == 3
    # a gold answer sent again, corrected, after the label: the label graded the old one
    log.add_feedback(Feedback(with_memories[0].id, "programmatic", "checker", {"gold_answer": "Annie"}))
    reopened = [i for i in log.mempo_items(unscored_by="mempo:a") if i.id == first]
    assert [i.gold_answer for i in reopened] == ["Annie"] and log.count_mempo_items(unscored_by="mempo:a") == 3
    log.store_memory_scores([MemoryQuality(first, "mempo:a", 0.5, 0.5, 0.0, 1, 5)])
    assert log.count_mempo_items(unscored_by="mempo:a") == 2  # labelled against the new answer


def test_user_scoping_of_decisions() -> None:
    cands = candidates()
    sel = uniform_selection("alice", cands, ["m0"])
    with pytest.raises(InvalidRecordError, match="belongs to user"):
        Episode(user_id="bob", query="q", selections=(sel,))


def test_empty_budget_selection_is_valid_and_logged(log: EpisodeLog) -> None:
    cands = candidates(tokens=500)
    sel = uniform_selection("u1", cands, [], budget=Budget(max_tokens=10))
    ep = Episode(user_id="u1", query="q", selections=(sel,))
    log.log_episode(ep)
    assert log.get_episode(ep.id).selections[0].chosen_ids == ()


def test_timestamps_are_timezone_aware_utc(log: EpisodeLog) -> None:
    ep = episode()
    log.log_episode(ep)
    time.sleep(0.01)
    back = log.get_episode(ep.id)
    assert back.created_at.utcoffset() == timedelta(0)
    assert back.selections[0].created_at == ep.selections[0].created_at


def test_an_episode_s_kinds_are_the_kinds_it_chose_and_a_page_can_count_and_go_back(log: EpisodeLog) -> None:
    """A kind in the listing (filter and summary) is one a slot drew, not one offered; ``count``
    gives how many match; each page after the first knows where the one before it starts."""
    base = utcnow() - timedelta(hours=1)
    chose_memories = [dataclasses.replace(episode("ann"), created_at=base + timedelta(seconds=i)) for i in range(5)]
    chose_nothing = dataclasses.replace(episode("ann", chosen=()), created_at=base + timedelta(seconds=10))
    chose_a_tool = Episode(
        user_id="ann",
        query="q",
        selections=(uniform_selection("ann", candidates("t", kind=CandidateKind.TOOL), ["t0"]),),
        created_at=base + timedelta(seconds=11),
    )
    log.log_episodes([*chose_memories, chose_nothing, chose_a_tool])
    by_id = {s.id: s.kinds for s in log.list_episodes(limit=100).items}
    assert by_id[chose_a_tool.id] == ("tool",) and by_id[chose_nothing.id] == ()
    assert all(by_id[e.id] == ("memory",) for e in chose_memories)
    tools = log.list_episodes(EpisodeFilter(kind=CandidateKind.TOOL), count=True)
    assert [s.id for s in tools.items] == [chose_a_tool.id] and tools.total == 1
    memories = log.list_episodes(EpisodeFilter(kind=CandidateKind.MEMORY), count=True)
    assert memories.total == 5 and not memories.total_capped
    assert log.list_episodes().total is None  # not asked to count

    first = log.list_episodes(limit=3)
    second = log.list_episodes(cursor=first.next_cursor, limit=3)
    third = log.list_episodes(cursor=second.next_cursor, limit=3)
    assert not first.has_previous and second.has_previous and second.previous_cursor is None
    back = log.list_episodes(cursor=third.previous_cursor, limit=3)
    assert [s.id for s in back.items] == [s.id for s in second.items]
