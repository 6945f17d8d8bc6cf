"""``memabra learner``, ``memabra policies`` and ``memabra route`` on both backends."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from runtime.learning_log import log_final
from typer.testing import CliRunner

from memabra._cli._app import app
from memabra._cli._production import LEASE_HELD_EXIT
from memabra._learner import DEFAULT_POLICY
from memabra._records import Budget, CandidateKind, RegistryItem, RoutingContext
from memabra._replay import fresh_router
from memabra.router import most_probable_slate
from memabra.storage import EpisodeLog, LearnerLease, LearnerStore
from memabra.storage._engine import is_postgres

MEMABRA = Path(sys.executable).with_name("memabra")

runner = CliRunner(env={"COLUMNS": "200"})


def test_learner_once_then_replay_and_export_are_identical(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 25)
    learned = runner.invoke(app, ["learner", "--once", "--db", migrated_url, "--commit-every", "10"])
    assert learned.exit_code == 0, learned.output
    assert "learned 25 rewards in this run" in learned.output
    replay, export = tmp_path / "replay.bin", tmp_path / "active.bin"
    assert runner.invoke(app, ["learner", "--replay", "--db", migrated_url, "--out", str(replay)]).exit_code == 0
    assert runner.invoke(app, ["policies", "export", "--db", migrated_url, "--out", str(export)]).exit_code == 0
    assert replay.read_bytes() == export.read_bytes()
    # a second --once finds nothing new and leaves the model as it was
    again = runner.invoke(app, ["learner", "--once", "--db", migrated_url])
    assert again.exit_code == 0 and "learned 0 rewards" in again.output


def test_policies_list_shows_versions_status_and_decisions_served(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 12)
    assert runner.invoke(app, ["learner", "--once", "--db", migrated_url, "--commit-every", "5"]).exit_code == 0
    out = tmp_path / "policies.json"
    listed = runner.invoke(app, ["policies", "list", "--db", migrated_url, "--json", str(out)])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(out.read_text())
    assert [r["status"] for r in rows].count("active") == 1
    assert rows[-1]["version"].endswith("+12") and rows[-1]["parent"] == rows[-2]["version"]
    assert all(r["decisions"] == 0 for r in rows)  # the random logging policy made the decisions


def test_route_prints_one_decision_with_its_distributions(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        log.put_items(
            [
                RegistryItem(CandidateKind.MEMORY, "m1", "ann", "I live in Lyon [/] downtown", tokens=6),
                RegistryItem(CandidateKind.MEMORY, "m2", "ann", "my dog is called Rex", tokens=5),
            ]
        )
        before = log.count_episodes()
    out = tmp_path / "route.json"
    args = ["route", "--db", migrated_url, "--user", "ann", "--seed", "7", "--json", str(out), "where do I live?"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "[/]" in first.output  # user text is shown, not parsed as markup
    decision = json.loads(out.read_text())
    assert decision["seed"] == 7 and decision["slots"]
    assert {o["id"] for o in decision["offered"]} == {"m1", "m2"}  # every candidate, with the prior's z and the score
    assert all(isinstance(o["similarity"], float) and isinstance(o["score"], float) for o in decision["offered"])
    assert all(abs(sum(s["distribution"].values()) - 1.0) < 1e-9 for s in decision["slots"])
    assert runner.invoke(app, args).exit_code == 0 and json.loads(out.read_text()) == decision  # same seed, same draw
    with EpisodeLog(migrated_url) as log:
        assert log.count_episodes() == before  # nothing logged


def test_output_paths_are_checked_before_any_work(migrated_url: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "out.bin"
    for args in (
        ["learner", "--replay", "--db", migrated_url, "--out", str(missing)],
        ["policies", "export", "--db", migrated_url, "--out", str(missing)],
        ["policies", "list", "--db", migrated_url, "--json", str(missing)],
        ["policies", "export", "--db", migrated_url, "--out", str(tmp_path)],
        ["policies", "prune", "--keep", "1", "--db", migrated_url, "--json", str(tmp_path)],
        ["route", "hi", "--user", "ann", "--db", migrated_url, "--json", str(tmp_path)],
    ):
        result = runner.invoke(app, args)
        message = " ".join(result.output.split())
        assert result.exit_code == 2, (args, result.output)
        assert "does not exist; create it first" in message or "is a folder" in message, (args, result.output)
    assert "needs --out" in runner.invoke(app, ["learner", "--replay", "--db", migrated_url]).output
    assert "only for --replay" in runner.invoke(app, ["learner", "--once", "--db", migrated_url, "--out", "x"]).output
    assert (
        "no active snapshot"
        in runner.invoke(app, ["policies", "export", "--db", migrated_url, "--out", str(tmp_path / "x")]).output
    )
    assert not (tmp_path / "x").exists()


def test_learner_reports_the_rewards_of_this_run_and_the_lineage_total(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 25)
    first = runner.invoke(app, ["learner", "--once", "--db", migrated_url])
    assert "learned 25 rewards in this run (25 in this lineage" in first.output, first.output
    with EpisodeLog(migrated_url) as log:
        log_final(log, 10, start=25)
    second = runner.invoke(app, ["learner", "--once", "--db", migrated_url])
    assert "learned 10 rewards in this run (35 in this lineage" in second.output, second.output


def test_learner_once_gives_up_when_another_learner_holds_the_lease(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 5)
        lease = LearnerLease(log.engine, DEFAULT_POLICY)
        assert lease.acquire()
        try:
            started = time.monotonic()
            busy = runner.invoke(app, ["learner", "--once", "--db", migrated_url])
            assert busy.exit_code == LEASE_HELD_EXIT, busy.output
            assert time.monotonic() - started < 10  # it did not wait for the lease
            message = " ".join(busy.output.split())
            assert "lease of policy 'linear' is held by" in message and "nothing was learned" in message
            if not is_postgres(log.engine):
                assert lease.holder in message  # SQLite names the holder and when its lease lapses
            waited = runner.invoke(app, ["learner", "--once", "--wait", "0.3", "--poll", "0.1", "--db", migrated_url])
            assert waited.exit_code == LEASE_HELD_EXIT and "waiting up to 0.3 s" in waited.output
            assert "after waiting 0.3 s" in " ".join(waited.output.split())
            assert LearnerStore(log.engine).checkpoint(DEFAULT_POLICY) is None  # nothing learned
        finally:
            lease.release()
        assert LearnerStore(log.engine).lease_holder(DEFAULT_POLICY) is None
    done = runner.invoke(app, ["learner", "--once", "--db", migrated_url])
    assert done.exit_code == 0 and "learned 5 rewards in this run" in done.output


def test_a_learner_stopped_by_a_signal_reports_what_this_run_learned(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 20)
    assert runner.invoke(app, ["learner", "--once", "--db", migrated_url]).exit_code == 0
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with EpisodeLog(migrated_url) as log:
        store = LearnerStore(log.engine)
        log_final(log, 7, start=20)
        lease = LearnerLease(log.engine, DEFAULT_POLICY)
        assert lease.acquire()  # another learner holds the lease: the new one stands by, and says so
        learner = [str(MEMABRA), "learner", "--db", migrated_url, "--poll", "0.05", "--commit-every", "1"]
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = subprocess.Popen(learner, stdout=stdout, stderr=stderr)
        try:
            deadline = time.monotonic() + 120
            while "standing by" not in out.read_text():
                assert time.monotonic() < deadline and proc.poll() is None, err.read_text()
                time.sleep(0.05)
            assert store.checkpoint(DEFAULT_POLICY).learned == 20  # type: ignore[union-attr]
            lease.release()
            while (state := store.checkpoint(DEFAULT_POLICY)) is not None and state.learned < 27:
                assert time.monotonic() < deadline and proc.poll() is None, err.read_text()
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        finally:
            lease.release()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err.read_text()
    text = " ".join(out.read_text().split())
    assert text.count("standing by: the learner lease of policy linear is held by") == 1, text
    assert "took over the learner lease of policy linear" in text
    assert "learned 7 rewards in this run (27 in this lineage" in text, text
    assert "learning policy linear: this learner holds its lease" not in text  # it took over instead


def _two_snapshots(url: str) -> tuple[str, str]:
    with EpisodeLog(url) as log:
        log_final(log, 12)
    assert runner.invoke(app, ["learner", "--once", "--db", url, "--commit-every", "6"]).exit_code == 0
    with EpisodeLog(url) as log:
        versions = [s.version for s in log.list_snapshots()]
    return versions[-2], versions[-1]


def test_promote_and_rollback_from_the_command_line(migrated_url: str) -> None:
    older, newest = _two_snapshots(migrated_url)
    back = runner.invoke(app, ["policies", "rollback", "--db", migrated_url])
    assert back.exit_code == 0, back.output
    assert f"{older} is active again, {newest} retired" in back.output
    promoted = runner.invoke(app, ["policies", "promote", newest, "--db", migrated_url])
    assert promoted.exit_code == 0, promoted.output
    assert f"promoted {newest}" in promoted.output and f"(retired {older})" in promoted.output
    with EpisodeLog(migrated_url) as log:
        assert LearnerStore(log.engine).active_version(DEFAULT_POLICY) == newest
        trail = log.get_snapshot(newest).metrics["admin_history"]
    assert [e["action"] for e in trail] == ["rolled back", "promoted"]  # the admin's audit trail
    assert all(e["by"].startswith("cli") for e in trail)

    again = runner.invoke(app, ["policies", "promote", newest, "--db", migrated_url])
    assert again.exit_code == 0 and "already the active snapshot" in again.output  # a retry is not a failure
    with EpisodeLog(migrated_url) as log:
        assert log.get_snapshot(newest).metrics["admin_history"] == trail  # and writes no audit entry
    unknown = runner.invoke(app, ["policies", "promote", "nope", "--db", migrated_url])
    assert unknown.exit_code == 1 and "no policy snapshot with version 'nope'" in unknown.output
    none = runner.invoke(app, ["policies", "rollback", "--policy", "vw", "--db", migrated_url])
    assert none.exit_code == 1 and "policy 'vw' has no active snapshot; nothing to roll back" in none.output
    for _ in range(10):  # walk back to the first snapshot, which has no parent
        step = runner.invoke(app, ["policies", "rollback", "--db", migrated_url])
        if step.exit_code != 0:
            break
    assert step.exit_code == 1 and "has no parent to roll back to" in step.output
    assert "Traceback" not in step.output


def test_route_uses_the_default_budget_and_json_to_stdout(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        log.put_items([RegistryItem(CandidateKind.MEMORY, "m1", "ann", "I live in Lyon", tokens=6)])
    result = runner.invoke(app, ["route", "--db", migrated_url, "--user", "ann", "--seed", "1", "--json", "-", "x"])
    assert result.exit_code == 0, result.output
    decision = json.loads(result.stdout)  # the JSON alone on stdout
    default = Budget()
    assert decision["budget"]["max_tokens"] == default.max_tokens
    assert decision["budget"]["slots"] == {k.value: n for k, n in default.slots.items()}
    assert f"budget: {default.max_tokens} tokens" in result.stderr
    narrow = runner.invoke(app, ["route", "--db", migrated_url, "--user", "ann", "--max-tokens", "50", "x"])
    assert narrow.exit_code == 0 and "budget: 50 tokens" in narrow.output


def test_route_json_to_a_closed_pipe_says_so(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        log.put_items([RegistryItem(CandidateKind.MEMORY, "m1", "ann", "I live in Lyon", tokens=6)])
    # `true` exits at once, long before the command has routed: its JSON meets a closed pipe
    script = f"'{MEMABRA}' route x --user ann --db '{migrated_url}' --json - | true"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 141, (done.returncode, done.stderr)
    err = " ".join(done.stderr.split())
    assert "closed before all of the output was written (broken pipe)" in err, err
    assert "Traceback" not in err and "Exception" not in err


def test_route_shows_what_the_policy_injects_without_exploring(migrated_url: str, tmp_path: Path) -> None:
    texts = ("I live in Lyon", "my dog is called Rex", "I am vegetarian", "I work as a nurse", "I like jazz")
    items = [RegistryItem(CandidateKind.MEMORY, f"m{i}", "ann", text, tokens=6) for i, text in enumerate(texts)]
    with EpisodeLog(migrated_url) as log:
        log.put_items(items)
    query = "where do I live?"
    # the draws `route` makes with a fresh router, found cheaply in-process: one explored, one not
    context = RoutingContext(query=query, user_id="ann", kinds=(CandidateKind.MEMORY,), budget=Budget())
    candidates = [item.as_candidate() for item in items]
    router = fresh_router(DEFAULT_POLICY)
    mode = most_probable_slate(router, router.choose(context, candidates, seed=0))
    drawn = {s: router.choose(context, candidates, seed=s).chosen_ids for s in range(2000)}
    plain = next(s for s, chosen in drawn.items() if chosen == mode)
    explored = next(s for s, chosen in drawn.items() if chosen != mode)
    out = tmp_path / "route.json"
    for seed in (plain, explored):
        args = ["route", "--db", migrated_url, "--user", "ann", "--seed", str(seed), "--json", str(out), query]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        decision = json.loads(out.read_text())
        said = " ".join(result.output.split())
        assert decision["most_probable"] == list(mode) and mode[0] == "m0"  # as the similarity prior ranks
        if seed == plain:
            assert [c["id"] for c in decision["injected"]] == list(mode)
            assert "this draw is the policy's most probable selection" in said
        else:
            assert [c["id"] for c in decision["injected"]] != list(mode)
            assert f"this draw explored (probability {decision['propensity']:.3g})" in said
            assert "without exploring, the policy injects: memory m0: I live in Lyon" in said


def test_learner_and_route_run_a_router_of_your_own_by_import_path(migrated_url: str, tmp_path: Path) -> None:
    own = "router.custom_routers:PopularityRouter"
    with EpisodeLog(migrated_url) as log:
        log_final(log, 12)
        log.put_items([RegistryItem(CandidateKind.MEMORY, "m1", "ann", "I live in Lyon", tokens=4)])
    learned = runner.invoke(app, ["learner", "--once", "--db", migrated_url, "--policy", own])
    assert learned.exit_code == 0, learned.output
    assert "learned 12 rewards in this run" in learned.output
    with EpisodeLog(migrated_url) as log:
        assert (LearnerStore(log.engine).active_version("popularity") or "").startswith("popularity-")
    replay, export = tmp_path / "replay.bin", tmp_path / "active.bin"
    assert (
        runner.invoke(
            app, ["learner", "--replay", "--policy", own, "--db", migrated_url, "--out", str(replay)]
        ).exit_code
        == 0
    )
    assert (
        runner.invoke(
            app, ["policies", "export", "--policy", "popularity", "--db", migrated_url, "--out", str(export)]
        ).exit_code
        == 0
    )
    assert replay.read_bytes() == export.read_bytes()
    out = tmp_path / "route.json"
    routed = runner.invoke(
        app, ["route", "--db", migrated_url, "--user", "ann", "--policy", own, "--json", str(out), "home?"]
    )
    assert routed.exit_code == 0, routed.output
    assert json.loads(out.read_text())["policy_version"].startswith("popularity-")
    # a factory builds a router but cannot restore one from a snapshot
    factory = runner.invoke(
        app, ["learner", "--once", "--db", migrated_url, "--policy", "runtime.learning_log:log_final"]
    )
    assert factory.exit_code == 1 and "not a factory function" in factory.output


def test_route_for_a_user_with_no_memories_says_so(migrated_url: str) -> None:
    """A mistyped ``--user`` routes over the shared skills and tools alone; the output says the user
    has no memories rather than leaving the reader to wonder why none was injected."""
    with EpisodeLog(migrated_url) as log:
        log.put_items(
            [
                RegistryItem(CandidateKind.MEMORY, "m1", "ann", "I live in Lyon", tokens=6),
                RegistryItem(CandidateKind.TOOL, "tool:weather", "", "weather: forecast for a city", tokens=6),
            ]
        )
    typo = runner.invoke(app, ["route", "--db", migrated_url, "--user", "anne", "--seed", "1", "where do I live?"])
    assert typo.exit_code == 0, typo.output
    said = " ".join(typo.output.split())
    assert "user 'anne' has no memories in this log: only shared skills and tools were offered" in said
    assert "memabra memories list --user anne" in said
    known = runner.invoke(app, ["route", "--db", migrated_url, "--user", "ann", "--seed", "1", "where do I live?"])
    assert known.exit_code == 0 and "has no memories" not in known.output


def test_a_learner_says_when_it_starts_learning_and_where_an_empty_log_leaves_it(
    migrated_url: str, tmp_path: Path
) -> None:
    """A supervisor's log shows the learner at work from its start, not only an exit line; a
    learner that learned nothing names the log's start, not an empty position."""
    empty = runner.invoke(app, ["learner", "--once", "--db", migrated_url])
    assert empty.exit_code == 0, empty.output
    assert "position: the start of the log (no final reward learned in this lineage yet)" in empty.output
    assert "position -1/" not in empty.output and "learning policy" not in empty.output  # --once: one line
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    learner = [str(MEMABRA), "learner", "--db", migrated_url, "--poll", "0.05"]
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(learner, stdout=stdout, stderr=stderr)
    try:
        deadline = time.monotonic() + 60
        while "holds its lease" not in out.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, err.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.read_text()
    assert "learning policy linear: this learner holds its lease" in " ".join(out.read_text().split())
