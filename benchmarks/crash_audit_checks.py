"""The checks of ``benchmarks/crash_audit.py``: what its workers acknowledged (their side files)
against what the log holds once every process has stopped and the learner has finished."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import text

POLICY = "linear"
SQLITE_TTL_S = 10.0  # storage.SQLITE_LEASE_TTL: how long a dead holder's SQLite lease outlives it


def acknowledged(work_dir: Path) -> dict[str, Any]:
    """What the workers' calls returned, from their side files (a torn last line is a kill)."""
    acks: dict[str, Any] = {"invoke": [], "routed": [], "feedback": [], "errors": [], "starts": {}, "retried": 0}
    for path in sorted(work_dir.glob("w*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec["op"] == "invoke":
                acks["invoke"].append(rec["eid"])
            elif rec["op"] == "routed":
                acks["routed"].append(rec["eid"])
            elif rec["op"] == "feedback":
                acks["feedback"].append(rec)
            elif rec["op"] == "error":
                acks["errors"].append(rec["error"])
            elif rec["op"] == "retried":
                acks["retried"] += 1
            elif rec["op"] == "start":
                acks["starts"][(rec["wid"], rec["gen"])] = rec
    return acks


_PARTIAL = """
SELECT count(*) FROM episodes e WHERE
 NOT EXISTS (SELECT 1 FROM steps s WHERE s.episode_id = e.id)
 OR NOT EXISTS (SELECT 1 FROM rewards r WHERE r.episode_id = e.id)
 OR EXISTS (SELECT 1 FROM decisions d WHERE d.episode_id = e.id AND (
   NOT EXISTS (SELECT 1 FROM decision_slots ds WHERE ds.decision_id = d.id)
   OR NOT EXISTS (SELECT 1 FROM decision_candidates c WHERE c.decision_id = d.id)
   OR EXISTS (SELECT 1 FROM decision_slots ds WHERE ds.decision_id = d.id AND NOT EXISTS (
     SELECT 1 FROM decision_candidates c WHERE c.decision_id = d.id AND c.candidate_id = ds.chosen_id)
     AND ds.chosen_id <> '__stop__')))
 OR (SELECT count(*) FROM steps s WHERE s.episode_id = e.id) <> (SELECT max(seq) + 1 FROM steps s WHERE s.episode_id = e.id)
"""

_ORPHANS = {
    "decisions": "SELECT count(*) FROM decisions d WHERE NOT EXISTS (SELECT 1 FROM episodes e WHERE e.id = d.episode_id)",
    "slots": "SELECT count(*) FROM decision_slots x WHERE NOT EXISTS (SELECT 1 FROM decisions d WHERE d.id = x.decision_id)",
    "candidates": "SELECT count(*) FROM decision_candidates x "
    "WHERE NOT EXISTS (SELECT 1 FROM decisions d WHERE d.id = x.decision_id)",
    "steps": "SELECT count(*) FROM steps x WHERE NOT EXISTS (SELECT 1 FROM episodes e WHERE e.id = x.episode_id)",
    "feedback": "SELECT count(*) FROM feedback x WHERE NOT EXISTS (SELECT 1 FROM episodes e WHERE e.id = x.episode_id)",
    "rewards": "SELECT count(*) FROM rewards x WHERE NOT EXISTS (SELECT 1 FROM episodes e WHERE e.id = x.episode_id)",
    "final without seq": "SELECT count(*) FROM rewards WHERE final AND commit_seq IS NULL",
    "final flag mismatch": "SELECT count(*) FROM episodes e JOIN rewards r ON r.episode_id = e.id "
    "WHERE (e.finalized_at IS NULL) = r.final",
    "snapshot parents": "SELECT count(*) FROM policy_snapshots p WHERE p.parent IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM policy_snapshots q WHERE q.version = p.parent)",
    "checkpoint snapshot": "SELECT count(*) FROM learner_state l WHERE l.snapshot_version IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM policy_snapshots p WHERE p.version = l.snapshot_version)",
    "active snapshots > 1": "SELECT count(*) FROM (SELECT policy FROM policy_snapshots WHERE status = 'active' "
    "GROUP BY policy HAVING count(*) > 1) x",
}


def check(
    url: str, work_dir: Path, kills: list[dict[str, Any]], timeline: list[tuple[float, str | None]]
) -> dict[str, Any]:
    from memabra._learner import replay
    from memabra.router import learned_model
    from memabra.storage import EpisodeLog, LearnerStore

    acks = acknowledged(work_dir)
    with EpisodeLog(url) as log:
        engine = log.engine
        with engine.connect() as conn:
            q = lambda sql, **kw: conn.execute(text(sql), kw).scalar_one()  # noqa: E731
            stored = {r[0] for r in conn.execute(text("SELECT id FROM episodes"))}
            kept = {r[0] for r in conn.execute(text("SELECT episode_id FROM suspended_turns"))}
            fb = {
                r[0]: (r[1], bool(r[2])) for r in conn.execute(text("SELECT idempotency_key, id, late FROM feedback"))
            }
            partial = q(_PARTIAL)
            orphans = {name: q(sql) for name, sql in _ORPHANS.items()}
            if engine.dialect.name == "sqlite":
                orphans["foreign_key_check"] = len(conn.execute(text("PRAGMA foreign_key_check")).all())
                orphans["integrity_check"] = int(q("PRAGMA integrity_check") != "ok")
            final = q("SELECT count(*) FROM rewards WHERE final")
            episodes = q("SELECT count(*) FROM episodes")
            unlearned = q("SELECT count(*) FROM rewards WHERE final AND learned_at IS NULL")
        state = LearnerStore(engine).checkpoint(POLICY)
        learned = state.learned if state else 0
        router, replayed = replay(log, POLICY)
        committed = learned_model(log.get_snapshot(state.snapshot_version)) if state and state.snapshot_version else b""
        identical = committed == learned_model(router.snapshot())
        holder_at_end = LearnerStore(engine).lease_holder(POLICY)
        unapplied = rewards_off(log)
    lost = [e for e in acks["invoke"] if e not in stored]
    # a decision routed by a process killed before it logged the turn stays in the log as a kept turn
    decisions_lost = [e for e in acks["routed"] if e not in stored and e not in kept]
    # one row per key (the unique index says so); a post answered stored or late is that row
    fb_lost = [
        f
        for f in acks["feedback"]
        if f["key"] not in fb or (f["status"] != "duplicate" and fb[f["key"]] != (f["fid"], f["status"] == "late"))
    ]
    stuck = lease_lapses(kills, timeline, acks["starts"], sqlite=engine.dialect.name == "sqlite")
    return {
        "invokes acknowledged": len(acks["invoke"]),
        "episodes stored": episodes,
        "acknowledged episodes lost": len(lost),
        "partial episodes": partial,
        "decisions routed": len(acks["routed"]),
        "routed decisions lost": len(decisions_lost),
        "turns killed mid-turn, kept": len(kept),
        "feedback acknowledged": dict(Counter(f["status"] for f in acks["feedback"])),
        "acknowledged feedback lost": len(fb_lost),
        "unanswered posts retried after a kill": acks["retried"],
        "rewards not what their feedback gives": unapplied,
        "final rewards": final,
        "open rewards after finalize": episodes - final,
        "learned (checkpoint)": learned,
        "replayed": replayed,
        "learned twice": max(0, learned - final),
        "never learned": max(0, final - learned) + unlearned,
        "model = replay": identical,
        "kills of a serving worker": sum((k["wid"], k["gen"]) in acks["starts"] for k in kills),
        "kills that held the lease": stuck["held"],
        "lease lapse after kill, max s": stuck["max_s"],
        "lease stuck past expiry": stuck["stuck"],
        "lease held after clean close": holder_at_end.describe() if holder_at_end else None,
        "orphan rows": {k: v for k, v in orphans.items() if v},
        "caller errors": dict(Counter(e.split(":")[0] for e in acks["errors"])),
        "first errors": acks["errors"][:3],
    }


def rewards_off(log: Any, sample: int = 500) -> int:
    """Episodes (up to ``sample`` of those with feedback) whose stored reward is not the one their
    stored, not-late feedback gives: feedback stored without the reward it changes, or the reverse."""
    from memabra._reward import CompositeReward

    with log.engine.connect() as conn:
        sql = "SELECT DISTINCT episode_id FROM feedback ORDER BY episode_id"
        ids = [r[0] for r in conn.execute(text(sql))]
    reward = CompositeReward()  # the workers' weights are the defaults too
    off = 0
    for episode_id in random.Random(0).sample(ids, min(sample, len(ids))):
        episode = log.get_episode(episode_id)
        want = reward.score(episode, tuple(f for f in episode.feedback if not f.late))
        off += abs(log.get_reward(episode_id).total - want.total) > 1e-9
    return off


def lease_lapses(
    kills: list[dict[str, Any]], timeline: list[tuple[float, str | None]], starts: dict[Any, Any], *, sqlite: bool
) -> dict[str, Any]:
    """For each kill of the lease's holder: seconds until the lease named someone else or nobody."""
    held, stuck, worst = 0, 0, 0.0
    limit = SQLITE_TTL_S + 1.0 if sqlite else 3.0
    for k in kills:
        start = starts.get((k["wid"], k["gen"]), {})
        mark = f"learner {start.get('holder')}" if sqlite else f"crashw{k['wid']}g{k['gen']} "
        if not k["holder"] or mark not in k["holder"] + " ":
            continue
        held += 1
        after = [(t, h) for t, h in timeline if t >= k["at"]]
        lapse = next((t - k["at"] for t, h in after if h is None or mark not in h + " "), None)
        if lapse is None or lapse > limit:
            stuck += 1
        worst = max(worst, lapse if lapse is not None else float("inf"))
    return {"held": held, "stuck": stuck, "max_s": round(worst, 2)}


def ok(r: dict[str, Any]) -> bool:
    return (
        r["acknowledged episodes lost"] == r["partial episodes"] == r["acknowledged feedback lost"] == 0
        and r["routed decisions lost"] == 0
        and r["turns killed mid-turn, kept"] <= r["kills of a serving worker"]
        and r["rewards not what their feedback gives"] == 0
        and r["learned twice"] == r["never learned"] == r["open rewards after finalize"] == 0
        and r["learned (checkpoint)"] == r["replayed"] == r["final rewards"]
        and r["model = replay"]
        and r["lease stuck past expiry"] == 0
        and r["lease held after clean close"] is None
        and not r["orphan rows"]
        and not r["caller errors"]
        and r["finalize_rc"] == r["learner_rc"] == 0
    )
