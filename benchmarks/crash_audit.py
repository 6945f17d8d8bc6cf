"""Crash audit: would anything acknowledged be lost if an agent process died at any instant?

``--workers`` agent processes (``create_memabra_agent`` with the offline ``ExtractiveChatModel``,
in-process learning, a snapshot every 3 rewards or 0.3 s, a 4 s feedback window) run turns on one
log: ``invoke``, then feedback on the episode (final, not final, a correction, an idempotency key
posted twice, or none) and now and then on an older episode (late by then). For ``--duration``
seconds one of them is SIGKILLed at seeded random moments (every 0.3-1.7 x ``--every`` s) and
started again; the new process posts again, with their keys, the posts its predecessor made
without writing down their answer. Each worker appends what its calls returned to a side file,
flushed and fsynced per call, so the checker knows what was acknowledged. At the end the workers
stop cleanly, ``memabra rewards finalize`` and ``memabra learner --once`` finish the log, and
:mod:`crash_audit_checks` verifies from the database (one column per run; exit 1 if any fails):

* every episode id an ``invoke`` returned is stored whole (slots, candidates, steps, reward), and
  no stored episode is partial;
* every post answered ``stored`` or ``late`` is stored as such (one row per idempotency key), and
  rewards are what their stored feedback gives (a sample of 500);
* every episode final and every final reward learned exactly once: the checkpoint's count equals
  the final rewards and the replay's, none without ``learned_at``;
* the committed model is byte-identical to a replay of the log;
* a killed holder's learner lease is gone within its documented expiry (10 s on SQLite; on
  PostgreSQL the connection's end, 3 s allowed), and none is held once every process closed;
* no orphan rows, SQLite's integrity and foreign-key checks clean, no error reached a caller.

    python benchmarks/crash_audit.py --db sqlite:////tmp/crash_audit.db --seeds 0 1 2
    python benchmarks/crash_audit.py --db postgresql+psycopg://root@127.0.0.1:5432/crash_audit --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from _scratch import scratch_log
from crash_audit_checks import POLICY, SQLITE_TTL_S, check, ok

HERE = Path(__file__).resolve().parent
MEMABRA = Path(sys.executable).with_name("memabra")
WINDOW_S = 4.0
CITIES = ["Lyon", "Oslo", "Porto", "Riga"]


# ---------------------------------------------------------------------------------- a worker


class Side:
    """The worker's side channel: one JSON line per acknowledged call, on disk before the next."""

    def __init__(self, path: Path) -> None:
        self._f = path.open("a")

    def write(self, **record: Any) -> None:
        self._f.write(json.dumps(record) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())


def work(url: str, wid: int, gen: int, side_path: Path, stop: Path) -> None:
    from datetime import timedelta

    from langchain_core.messages import HumanMessage

    from memabra import ExtractiveChatModel, RewardConfig, SessionSettings, create_memabra_agent
    from memabra.router import LinearRouter, Similarity

    side = Side(side_path)
    rng = random.Random(f"{wid}-{gen}")
    settings = SessionSettings(
        snapshot_every=3,
        commit_interval_s=0.3,
        reload_interval_s=0.5,
        reward=RewardConfig(feedback_window=timedelta(seconds=WINDOW_S)),
    )
    router = LinearRouter(seed=0, similarity=Similarity(encoder=None))
    agent = create_memabra_agent(ExtractiveChatModel(), db=url, router=router, settings=settings)
    learner = agent.session.runtime.learner
    begin = agent.session.begin

    def routed(**kwargs: Any) -> Any:  # a decision made: the log must keep it, whatever happens next
        turn = begin(**kwargs)
        if turn.selection is not None:
            side.write(op="routed", eid=turn.episode_id)
        return turn

    agent.session.begin = routed  # type: ignore[method-assign]
    # the lease's holder id (SQLite) lets the checker tell this process's lease from another's
    side.write(op="start", wid=wid, gen=gen, pid=os.getpid(), holder=learner._lease.holder if learner else None)
    try:
        retry_unanswered(agent, side, side_path.with_name(f"w{wid}g{gen - 1}.jsonl"))
    except Exception as exc:  # noqa: BLE001 - counted as a caller error
        side.write(op="error", error=f"{type(exc).__name__} (retry): {exc}"[:300])
    done: list[str] = []
    turn = 0
    while not stop.exists():
        user = f"u{rng.randrange(3)}"
        city = rng.choice(CITIES)
        msg = rng.choice(
            [f"I live in {city}; what should I cook tonight?", f"what is the weather like where I live, {city}?"]
        )
        call = "invoke"
        try:
            out = agent.invoke(
                {"messages": [HumanMessage(msg)]},
                {"configurable": {"thread_id": f"w{wid}g{gen}t{turn % 3}"}},
                context={"user_id": user},
            )
            eid = out["memabra_episode_id"]
            side.write(op="invoke", eid=eid)
            done.append(eid)
            turn += 1
            call = "feedback"
            roll = rng.random()
            if roll < 0.35:
                feedback(agent, side, eid, rating=rng.randint(1, 5), final=True)
            elif roll < 0.6:
                feedback(agent, side, eid, rating=rng.randint(1, 5))
            elif roll < 0.7:
                feedback(agent, side, eid, correct=False, correction=f"I live in {rng.choice(CITIES)}")
            elif roll < 0.8:
                key = f"k-{eid}"
                feedback(agent, side, eid, key, success=1.0, final=rng.random() < 0.5)
                feedback(agent, side, eid, key, success=1.0)
            if len(done) > 6 and rng.random() < 0.15:  # an older episode: often past its window
                feedback(agent, side, done[-6], rating=rng.randint(1, 5), final=rng.random() < 0.5)
        except Exception as exc:  # noqa: BLE001 - counted: the audit's point is that there are none
            side.write(op="error", error=f"{type(exc).__name__} ({call}): {exc}"[:300])
            traceback.print_exc()
    agent.close()
    side.write(op="closed")


def feedback(agent: Any, side: Side, eid: str, key: str | None = None, **payload: Any) -> None:
    """Post feedback with an idempotency key, saying first what is about to be posted: a post
    whose answer never reached the side file is posted again, as a client would retry, after a restart."""
    key = key or uuid.uuid4().hex
    side.write(op="intend", eid=eid, key=key, payload=payload)
    receipt = agent.feedback(eid, idempotency_key=key, **payload)
    side.write(op="feedback", eid=eid, key=key, fid=receipt.feedback_id, status=receipt.status)


def retry_unanswered(agent: Any, side: Side, previous: Path) -> None:
    """The posts a killed predecessor made without writing their answer, again with their keys."""
    if not previous.exists():
        return
    intents: dict[str, dict[str, Any]] = {}
    for line in previous.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # the line the kill tore
            continue
        if rec["op"] == "intend":
            intents[rec["key"]] = rec
        elif rec["op"] == "feedback":
            intents.pop(rec["key"], None)
    for rec in intents.values():
        feedback(agent, side, rec["eid"], rec["key"], **rec["payload"])
        side.write(op="retried", key=rec["key"])


# ---------------------------------------------------------------------------------- a run


class LeaseWatch(threading.Thread):
    """Polls who holds the policy's lease, so each kill can be matched against when it lapsed."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.timeline: list[tuple[float, str | None]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        from memabra.storage import EpisodeLog, LearnerStore

        with EpisodeLog(self.url) as log:
            store = LearnerStore(log.engine)
            while not self.halt.is_set():
                holder = store.lease_holder(POLICY)
                self.timeline.append((time.time(), holder.describe() if holder else None))
                time.sleep(0.2)


def spawn(url: str, wid: int, gen: int, work_dir: Path, stop: Path) -> subprocess.Popen[bytes]:
    if url.startswith("postgresql"):  # names the worker's connections, so its lease can be told apart
        url = f"{url}&application_name=crashw{wid}g{gen}"
    side = work_dir / f"w{wid}g{gen}.jsonl"
    err = (work_dir / f"w{wid}g{gen}.err").open("wb")
    args = [sys.executable, __file__, "--work", url, str(wid), str(gen), str(side), str(stop)]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)


def run(base_url: str, seed: int, duration: float, workers: int, every: float) -> dict[str, Any]:
    with scratch_log(base_url, "crash") as url:
        return _run_on(url, seed, duration, workers, every)


def _run_on(url: str, seed: int, duration: float, workers: int, every: float) -> dict[str, Any]:
    from memabra.storage import upgrade

    if not url.startswith("postgresql"):
        path = Path(url.removeprefix("sqlite:///"))
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    upgrade(url)
    work_dir = Path(tempfile.mkdtemp(prefix="memabra-crash-"))
    stop = work_dir / "stop"
    rng = random.Random(seed)
    gens = [0] * workers
    procs = [spawn(url, w, 0, work_dir, stop) for w in range(workers)]
    watch = LeaseWatch(url)
    watch.start()
    kills: list[dict[str, Any]] = []
    started = time.time()
    time.sleep(8)  # the workers import and build their agents
    while time.time() - started < duration:
        time.sleep(rng.uniform(0.3 * every, 1.7 * every))
        w = rng.randrange(workers)
        kills.append({"wid": w, "gen": gens[w], "at": time.time(), "holder": _last(watch)})
        procs[w].send_signal(signal.SIGKILL)
        procs[w].wait()
        gens[w] += 1
        procs[w] = spawn(url, w, gens[w], work_dir, stop)
    time.sleep(SQLITE_TTL_S + 2)  # the last kill's lease lapses while the others still run
    stop.touch()
    codes = [p.wait(timeout=120) for p in procs]
    watch.halt.set()
    watch.join()
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    time.sleep(WINDOW_S + 0.5)  # every feedback window has passed: finalize closes them all
    fin = subprocess.run([str(MEMABRA), "rewards", "finalize", "--db", url], env=env, capture_output=True, text=True)
    once = [str(MEMABRA), "learner", "--once", "--wait", "30", "--db", url]
    learn = subprocess.run(once, env=env, capture_output=True, text=True)
    report = check(url, work_dir, kills, watch.timeline)
    report.update(
        backend="postgresql" if url.startswith("postgresql") else "sqlite",
        seed=seed,
        kills=len(kills),
        clean_exits=f"{sum(c == 0 for c in codes)}/{len(codes)}",
        finalize_rc=fin.returncode,
        learner_rc=learn.returncode,
        wall_s=round(time.time() - started, 1),
        work_dir=str(work_dir),
    )
    (work_dir / "kills.json").write_text(json.dumps({"kills": kills, "timeline": watch.timeline}, default=str))
    return report


def _last(watch: LeaseWatch) -> str | None:
    return watch.timeline[-1][1] if watch.timeline else None


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--work":
        work(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]), Path(sys.argv[6]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--db",
        default="sqlite:////tmp/memabra-crash-audit.db",
        help="SQLite file (recreated) or a PostgreSQL URL (a scratch schema is made in it)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of kills per run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--every", type=float, default=6.0, help="mean seconds between kills")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    reports = [run(args.db, seed, args.duration, args.workers, args.every) for seed in args.seeds]
    keys = [k for k in reports[0] if k not in ("work_dir", "first errors")]
    width = max(len(k) for k in keys)
    print(f"{'invariant / figure':<{width}}  " + "  ".join(f"{r['backend']} seed {r['seed']}" for r in reports))
    for key in keys:
        print(f"{key:<{width}}  " + "  ".join(str(r[key]) for r in reports))
    print(f"{'ALL HELD':<{width}}  " + "  ".join(str(ok(r)) for r in reports))
    for r in reports:
        if r["first errors"]:
            print(f"seed {r['seed']} first errors: {r['first errors']} ({r['work_dir']})")
    if args.json is not None:
        args.json.write_text(json.dumps(reports, indent=2, default=str) + "\n")
    sys.exit(0 if all(ok(r) for r in reports) else 1)


if __name__ == "__main__":
    main()
