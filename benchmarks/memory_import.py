"""Importing an existing memory store: ``memabra memories import`` of a generated mem0-shaped file.

Generates USERS users with FACTS facts each (JSON lines ``{"user_id", "memory"}``, mostly English,
some Chinese and German, one superseded fact per user: "I live in X" then "I moved to Y"), then:

1. imports it in a fresh process (wall, CPU, peak RSS of that process);
2. imports it again (every fact a restatement: what a re-run after a finished import costs);
3. imports it into a fresh database, kills the process with SIGKILL once about half the users are
   in, re-runs the same command, and checks the store equals the uninterrupted one (per user: the
   texts and statuses, no duplicate);
4. times one user's ``list`` + ``recall`` on the same database while an import runs (serving).

    python benchmarks/memory_import.py --users 5000 --facts 10 [--db URL] [--json out.json]

A big file (memory of the import process, ``--only-import`` skips steps 2-4): ``--facts`` above 10
adds distinct facts without a subject ("I collect stamp-U-K"), ``--check-only`` appends a bad last
line, so the process checks the whole file and writes nothing (the check pass alone):

    python benchmarks/memory_import.py --users 130000 --facts 10 --check-only
    python benchmarks/memory_import.py --users 40 --facts 10000 --only-import

One user's facts on the same subjects (``--same-subject N ...``: N lines alternating "I live in
City-n" / "My favourite colour is C-n", each superseding the one before): per fact time at each N,
less the start-up of the process (a one-fact import), and the ratio of the largest N's to the
smallest's (1 when the cost per fact is flat):

    python benchmarks/memory_import.py --same-subject 1000 5000 --repeat 3

Peak RSS is the import process's own (``getrusage(RUSAGE_SELF)`` as it exits).

``--db`` is a PostgreSQL URL whose schema is used (and emptied: its memories are forgotten first);
without it each step uses a fresh SQLite file. Figures are medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from sqlalchemy import create_engine, text

_CLI = "import sys; from memabra._cli import app; sys.argv[0] = 'memabra'; app()"
# The same, saying its own peak RSS (KiB on Linux) on stderr as it exits.
_CLI_RSS = (
    "import atexit, resource, sys; atexit.register(lambda: print('peak-rss-kib', "
    "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)); " + _CLI.removeprefix("import sys; ")
)
_CITIES = ("Lyon", "Hobart", "Porto", "Kyoto", "Quito", "Tromsø", "Dakar", "Perth")
_EN = (
    "My dog is called {a}",
    "I work as a {b}",
    "I like {c} music",
    "My sister lives in {d}",
    "I'm allergic to {e}",
    "I drink {f} every morning",
    "My favourite book is {g}",
    "I play {h} on Sundays",
)
_ZH = ("我喜欢喝{f}", "我的猫叫{a}")
_DE = ("Ich wohne gern in {d}", "Mein Hund heißt {a}")
_WORDS = ("Rex", "nurse", "jazz", "Oslo", "nuts", "tea", "Dune", "chess", "Luna", "pilot", "folk", "Rome")


def user_facts(u: int, facts: int) -> list[str]:
    """User ``u``'s facts: first a city, later the city they moved to, the rest other subjects."""
    w = {k: f"{_WORDS[(u + i) % len(_WORDS)]}{u % 97}" for i, k in enumerate("abcdefgh")}
    pool = _ZH if u % 10 == 1 else _DE if u % 10 == 2 else ()
    others = [t.format(**w) for t in (*pool, *_EN)][: max(0, facts - 2)]
    city, moved = _CITIES[u % len(_CITIES)], _CITIES[(u + 3) % len(_CITIES)]
    others += [f"I collect stamp-{u}-{k}" for k in range(max(0, facts - 2 - len(others)))]
    half = len(others) // 2
    return [f"I live in {city}", *others[:half], f"I moved to {moved}", *others[half:]]


def same_subject_facts(n: int) -> list[str]:
    """N facts of one user, each a new value of one of two subjects."""
    return [f"I live in City-{i}" if i % 2 == 0 else f"My favourite colour is C-{i}" for i in range(n)]


def generate(path: Path, users: int, facts: int, *, bad_last_line: bool = False) -> int:
    lines = 0
    with path.open("w", encoding="utf-8") as out:
        for u in range(users):
            for fact in user_facts(u, facts):
                out.write(json.dumps({"user_id": f"user-{u:06d}", "memory": fact}, ensure_ascii=False) + "\n")
                lines += 1
        if bad_last_line:
            out.write('{"user_id": "user-000000", "memory": "..."}\n')
    return lines


def run_import(path: Path, url: str, *, refused: bool = False) -> tuple[float, float, float, str]:
    """One ``memabra memories import`` process: wall s, its CPU s, its peak RSS (MiB), its output
    (its last line; ``refused``: the process must fail, as on a file with a bad line)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _CLI_RSS, "memories", "import", str(path), "--db", url],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "400"},
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if (done.returncode != 0) != refused:
        raise SystemExit(
            f"import {'succeeded' if refused else 'failed'} ({done.returncode}): {done.stdout}{done.stderr}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = done.stderr.strip().splitlines()
    rss = next(int(line.split()[1]) for line in reversed(lines) if line.startswith("peak-rss-kib"))
    said = [line for line in (done.stdout + done.stderr).strip().splitlines() if not line.startswith("peak-rss")]
    return wall, cpu, rss / 1024, said[-1] if said else ""


def same_subject(folder: Path, base: str | None, sizes: list[int], repeat: int) -> dict[str, object]:
    """Import N same-subject facts of one user (a fresh store each run): median ms per fact."""
    per_fact: dict[int, float] = {}
    one = folder / "same-1.jsonl"  # the process's start-up and one fact: taken off each run's wall time
    one.write_text(json.dumps({"user_id": "ann", "memory": "I live in Lyon"}) + "\n")
    start = statistics.median(run_import(one, fresh_url(base, folder, f"same-1-{i}"))[0] for i in range(repeat))
    print(f"start-up (a one-fact import): {start:.2f} s (median of {repeat}), taken off the times below")
    for n in sizes:
        path = folder / f"same-{n}.jsonl"
        path.write_text("".join(json.dumps({"user_id": "ann", "memory": f}) + "\n" for f in same_subject_facts(n)))
        runs = [run_import(path, fresh_url(base, folder, f"same-{n}-{i}")) for i in range(repeat)]
        per_fact[n] = (statistics.median(r[0] for r in runs) - start) / n * 1e3
        rss = max(r[2] for r in runs)
        print(
            f"{n} same-subject facts of one user: {per_fact[n]:.2f} ms per fact (median of {repeat}), peak RSS {rss:.0f} MiB"
        )
        print(f"  {runs[0][3]}")
    ratio = per_fact[max(sizes)] / per_fact[min(sizes)]
    print(f"per fact time, {max(sizes)} facts against {min(sizes)}: x{ratio:.2f}")
    return {
        "start_up_s": round(start, 2),
        "ms_per_fact": {str(n): round(v, 2) for n, v in per_fact.items()},
        "ratio": round(ratio, 2),
    }


def state(url: str) -> dict[str, list[tuple[str, bool]]]:
    """Per user, sorted (text, retired) of every memory."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT owner, text, retired_at IS NOT NULL FROM registry WHERE kind = 'memory'")
            ).all()
    finally:
        engine.dispose()
    out: dict[str, list[tuple[str, bool]]] = {}
    for owner, t, retired in rows:
        out.setdefault(str(owner), []).append((str(t), bool(retired)))
    return {k: sorted(v) for k, v in out.items()}


def count_users(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(text("SELECT count(DISTINCT owner) FROM registry WHERE kind = 'memory'")).scalar() or 0
            )
    finally:
        engine.dispose()


def kill_midway(path: Path, url: str, users: int) -> int:
    """Start the import, SIGKILL it once about half the users are in; how many users were in."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLI, "memories", "import", str(path), "--db", url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while proc.poll() is None and count_users(url) < users // 2:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    return count_users(url)


def serving_during_import(path: Path, url: str, user: str) -> tuple[list[float], list[float]]:
    """Per request ms of ``list`` + ``recall`` for ``user``: idle, then while an import runs."""
    from memabra import SQLMemory
    from memabra.storage import EpisodeLog

    log = EpisodeLog(url)
    memory = SQLMemory(log)

    def timed(n: int) -> list[float]:
        out = []
        for _ in range(n):
            start = time.perf_counter()
            memory.list(user)
            memory.recall(user, "where do I live")
            out.append((time.perf_counter() - start) * 1e3)
            time.sleep(0.005)
        return out

    try:
        idle = timed(200)
        busy: list[float] = []
        worker = threading.Thread(target=lambda: run_import(path, url))
        worker.start()
        while worker.is_alive():
            busy += timed(20)
        worker.join()
        return idle, busy
    finally:
        log.close()


def fresh_url(base: str | None, folder: Path, name: str) -> str:
    from memabra.storage import upgrade

    if base is None:
        url = f"sqlite:///{folder / name}.db"
    else:
        url = base
        upgrade(url)
        engine = create_engine(url)
        with engine.begin() as conn:  # an emptied schema: the figures are for a fresh store
            for table in ("memory_history", "memory_pools"):
                conn.execute(text(f"DELETE FROM {table}"))
            conn.execute(text("DELETE FROM registry WHERE kind = 'memory'"))
        engine.dispose()
    upgrade(url)
    return url


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--facts", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--db", default=None, help="a PostgreSQL URL (emptied of memories); default: SQLite files")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--only-import", action="store_true", help="only the import (and its re-run): steps 2-4 skipped"
    )
    parser.add_argument("--check-only", action="store_true", help="a bad last line: the check of the whole file alone")
    parser.add_argument("--same-subject", type=int, nargs="+", metavar="N", help="one user's N same-subject facts")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="memimport-"))
    if args.same_subject:
        print(f"same-subject facts on {args.db or 'SQLite'}, load {os.getloadavg()}")
        found = same_subject(folder, args.db, sorted(set(args.same_subject)), args.repeat)
        print(f"load {os.getloadavg()}")
        if args.json is not None:
            args.json.write_text(json.dumps({"same_subject": found}, indent=2))
        return
    path = folder / "export.jsonl"
    lines = generate(path, args.users, args.facts, bad_last_line=args.check_only)
    size_mb = path.stat().st_size / 1e6
    print(f"{lines} memories of {args.users} users ({size_mb:.1f} MB) on {args.db or 'SQLite'}, load {os.getloadavg()}")
    figures: dict[str, object] = {"memories": lines, "users": args.users, "file_mb": round(size_mb, 1)}

    first, again = [], []
    for i in range(args.repeat):
        url = fresh_url(args.db, folder, f"run{i}")
        first.append(run_import(path, url, refused=args.check_only))
        if not args.check_only:
            again.append(run_import(path, url))
    for name, runs in (
        ("check (refused: a bad last line)" if args.check_only else "import", first),
        ("re-run on the finished store", again),
    ):
        if not runs:
            continue
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        rss = max(r[2] for r in runs)
        print(f"{name}: wall {wall:.1f} s, CPU {cpu:.1f} s, peak RSS {rss:.0f} MiB, {lines / wall:.0f} memories/s")
        print(f"  {runs[0][3]}")
        figures[name] = {
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "peak_rss_mib": round(rss),
            "said": runs[0][3],
        }
    print(f"load {os.getloadavg()}")
    if args.only_import or args.check_only:
        if args.json is not None:
            args.json.write_text(json.dumps(figures, indent=2))
        return
    whole = state(url)

    url = fresh_url(args.db, folder, "killed")
    users_in = kill_midway(path, url, args.users)
    rerun = run_import(path, url)
    same = state(url) == whole
    duplicates = sum(len(v) - len(set(v)) for v in state(url).values())
    print(f"killed with {users_in} of {args.users} users in; re-run {rerun[0]:.1f} s: {rerun[3]}")
    print(f"  store equal to the uninterrupted import: {same}; duplicate memories: {duplicates}")
    figures["killed"] = {
        "users_in": users_in,
        "rerun_wall_s": round(rerun[0], 2),
        "equal": same,
        "duplicates": duplicates,
    }

    url = fresh_url(args.db, folder, "serving")
    run_import(path, url)
    busy_path = folder / "more.jsonl"
    busy_path.write_text(path.read_text(encoding="utf-8").replace('"user-', '"other-'), encoding="utf-8")
    idle, busy = serving_during_import(busy_path, url, "user-000001")
    print(
        f"one user's list + recall: idle p50/p99 {pct(idle, 0.5):.1f}/{pct(idle, 0.99):.1f} ms, during an import "
        f"{pct(busy, 0.5):.1f}/{pct(busy, 0.99):.1f} ms ({len(busy)} requests), max {max(busy):.0f} ms"
    )
    figures["serving_ms"] = {
        "idle_p50": round(pct(idle, 0.5), 1),
        "idle_p99": round(pct(idle, 0.99), 1),
        "busy_p50": round(pct(busy, 0.5), 1),
        "busy_p99": round(pct(busy, 0.99), 1),
        "busy_max": round(max(busy), 1),
    }
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))
    if not same or duplicates:
        raise SystemExit("the re-run after the kill did not give the uninterrupted store")


if __name__ == "__main__":
    main()
