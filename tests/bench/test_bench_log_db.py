"""``memabra bench --log-db``: a log that `ope log` can check against one run's report, and no
other: a second run writing to it meanwhile is stopped, and a run stopped midway says its log is
partial."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import typer
from bench.bench_rounds import bench_round
from sqlalchemy import text
from typer.testing import CliRunner

from memabra import ConfigError, RewardBreakdown, Selection
from memabra._cli._app import app
from memabra._cli._bench import bench
from memabra.evals.bench import BenchRun, DecisionLogWriter, bench_run_of, load_rounds, router_factories, run_bench
from memabra.evals.offline import ROUTERS, Target, evaluate_policies
from memabra.router import Similarity
from memabra.storage import EpisodeLog, make_engine

MEMABRA = Path(sys.executable).with_name("memabra")
runner = CliRunner(env={"COLUMNS": "200"})


def _rounds_file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "rounds.jsonl"
    path.write_text("".join(json.dumps(bench_round(i)) + "\n" for i in range(n)))
    return path


def _logged(url: str) -> int:
    with EpisodeLog(url) as log:
        return sum(1 for _ in log.iter_selections())


def test_two_runs_racing_to_their_first_write_on_the_same_new_log_store_one_runs_decisions(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both runs find the new log empty and both count it empty before either writes (the barrier
    forces that interleaving): one run's decisions are stored, the other run is refused whole."""
    import memabra.evals.bench._log_db as log_db

    rounds = load_rounds(_rounds_file(tmp_path, 6))
    factories = router_factories(["hybrid"], Similarity(encoder=None))
    counted = threading.Barrier(2, timeout=2)
    opened = threading.Barrier(2, timeout=10)
    writing = threading.local()  # set in a run's thread once its log is open: its counts are pre-write
    real_count, real_claim = log_db._episodes_held, getattr(log_db, "claim_log", None)

    def count_then_wait(url: str) -> int:
        held = real_count(url)
        if getattr(writing, "run", False):
            # each run's pre-write count done before either run writes (broken: the other was refused)
            with contextlib.suppress(threading.BrokenBarrierError):
                counted.wait()
        return held

    def claim_together(*args: object) -> object:
        opened.wait()  # both runs past the emptiness check before either claims the log
        return real_claim(*args)  # type: ignore[misc]

    monkeypatch.setattr(log_db, "_episodes_held", count_then_wait)
    monkeypatch.setattr(log_db, "claim_log", claim_together, raising=False)  # absent before the run row
    refused: list[ConfigError] = []

    def run(seed: int) -> None:
        try:
            with DecisionLogWriter(db_url, logger="hybrid", expected=6) as writer:
                writing.run = True
                run_bench(rounds, factories, 1, seed, on_decision=writer)
        except ConfigError as exc:
            refused.append(exc)

    threads = [threading.Thread(target=run, args=(seed,)) for seed in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(refused) == 1 and "already written by the bench run" in str(refused[0])
    assert _logged(db_url) == 6  # one run's decisions, never the two interleaved
    run_row = bench_run_of_url(db_url)
    assert run_row is not None and run_row.status == "finished" and run_row.written == 6


def bench_run_of_url(url: str) -> BenchRun | None:
    engine = make_engine(url)
    try:
        return bench_run_of(engine)
    finally:
        engine.dispose()


def test_a_run_stopped_midway_says_its_log_is_partial(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import memabra.evals.bench as bench_module

    real = bench_module.run_bench

    def interrupted(*args: object, on_decision: DecisionLogWriter, **kwargs: object) -> object:
        calls = 0

        def hook(*decision: object) -> None:
            nonlocal calls
            calls += 1
            if calls > 5:
                raise KeyboardInterrupt  # Ctrl-C during the logger's first pass
            on_decision(*decision)  # type: ignore[arg-type]

        return real(*args, on_decision=hook, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bench_module, "run_bench", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bench(_rounds_file(tmp_path, 8), routers="hybrid,random", passes=2, lexical=True, log_db=db_url)
    err = capsys.readouterr().err
    assert "stopped before it finished" in err and "holds 5 of the 16 decisions hybrid" in err
    assert _logged(db_url) == 5  # what was decided before the stop, each decision whole
    stopped = bench_run_of_url(db_url)
    assert stopped is not None and (stopped.status, stopped.written, stopped.expected) == ("stopped", 5, 16)
    with EpisodeLog(db_url) as log, pytest.raises(ConfigError, match="stopped at .* after logging 5 of the 16"):
        evaluate_policies(log, [Target("random", ROUTERS["random"](seed=0))])


def test_a_stop_between_a_writes_commit_and_its_count_leaves_the_log_stopped_with_that_write(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal lands after the transaction committed, before the writer counted it (a CI run's
    SIGTERM did): closing counts that write as this run's, where it used to refuse the run's own
    decisions as another process's and leave its row running."""
    import memabra.evals.bench._log_db as log_db

    monkeypatch.setattr(log_db, "_FLUSH_EVERY", 4)
    real = EpisodeLog.log_episodes

    def commit_then_stop(self: EpisodeLog, episodes: list[object]) -> None:
        real(self, episodes)  # type: ignore[arg-type]
        raise KeyboardInterrupt

    monkeypatch.setattr(EpisodeLog, "log_episodes", commit_then_stop)
    rounds = load_rounds(_rounds_file(tmp_path, 6))
    with pytest.raises(KeyboardInterrupt), DecisionLogWriter(db_url, logger="hybrid", expected=6) as writer:
        run_bench(rounds, router_factories(["hybrid"], Similarity(encoder=None)), 1, 0, on_decision=writer)
    assert writer.written == 4 and _logged(db_url) == 4
    stopped = bench_run_of_url(db_url)
    assert stopped is not None and (stopped.status, stopped.written) == ("stopped", 4)


def _episodes(url: str) -> int:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT COUNT(*) FROM episodes")).scalar_one())
    except Exception:  # noqa: BLE001 - the run has not created the log yet
        return 0
    finally:
        engine.dispose()


def _bench_logging(tmp_path: Path, db_url: str) -> subprocess.Popen[bytes]:
    """A bench run logging to ``db_url`` in its own process, once its first batch of decisions
    is committed (12,000 decisions in all: it is far from done)."""
    rounds = _rounds_file(tmp_path, 300)
    command = [str(MEMABRA), "bench", str(rounds), "--routers", "hybrid", "--passes", "40", "--lexical"]
    proc = subprocess.Popen(
        [*command, "--log-db", db_url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )
    deadline = time.monotonic() + 60
    while _episodes(db_url) < 500:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"the bench run wrote no decision within a minute: {err.decode()}")
        time.sleep(0.05)
    return proc


def test_a_run_killed_outright_leaves_a_log_that_ope_log_refuses_as_unfinished(tmp_path: Path, db_url: str) -> None:
    """SIGKILL (kill -9, the out-of-memory killer) gives the run no chance to say anything: the
    log's run row, taken before the first decision, still says running, and `ope log` refuses it."""
    proc = _bench_logging(tmp_path, db_url)
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    killed = bench_run_of_url(db_url)
    assert killed is not None and killed.status == "running" and killed.expected == 12000
    result = runner.invoke(app, ["ope", "log", "--db", db_url, "--policy", "random", "--no-store"])
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "unfinished bench run" in said and "killed (SIGKILL, out of memory)" in said, said
    assert "run the bench again with a new --log-db" in said


def test_a_run_stopped_by_sigterm_marks_its_log_stopped_and_exits_143(tmp_path: Path, db_url: str) -> None:
    """A scheduler's SIGTERM (Slurm's time limit, docker stop) stops the run as Ctrl-C does: its
    row says stopped (not running, as after a SIGKILL), it says its log is partial, exit 143."""
    proc = _bench_logging(tmp_path, db_url)
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = " ".join(err.decode().split())
    assert proc.returncode == 143, said
    assert "stopped by SIGTERM" in said and "run the bench again with a new --log-db" in said, said
    stopped = bench_run_of_url(db_url)
    assert stopped is not None and stopped.status == "stopped" and 0 < stopped.written < 12000
    result = runner.invoke(app, ["ope", "log", "--db", db_url, "--policy", "random", "--no-store"])
    assert result.exit_code == 1 and "unfinished bench run" in " ".join(result.output.split())


def test_a_log_that_cannot_take_the_runs_last_decisions_is_one_line_and_left_stopped(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The last decisions are written when the log closes, after the run: another process found in
    the log there (an agent given this URL by mistake) used to end the command in a traceback that
    hid what the log holds; it is now the writer's one-line refusal and the partial-log note."""
    from dataclasses import replace

    import memabra.evals.bench as bench_module
    from memabra._records import Episode, new_id

    real = bench_module.run_bench

    def intruded(*args: object, on_decision: DecisionLogWriter, **kwargs: object) -> object:
        calls = 0

        def hook(selection: Selection, reward: RewardBreakdown, round_: object) -> None:
            nonlocal calls
            calls += 1
            on_decision(selection, reward, round_)  # type: ignore[arg-type]
            if calls == 3:  # another writer's turn lands in the log meanwhile
                with EpisodeLog(db_url) as other:
                    foreign = replace(selection, id=new_id())
                    other.log_episodes([Episode(selection.context.user_id, "theirs", selections=(foreign,))])

        return real(*args, on_decision=hook, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bench_module, "run_bench", intruded)
    with pytest.raises(typer.Exit) as exited:
        bench(_rounds_file(tmp_path, 8), routers="hybrid", passes=1, lexical=True, log_db=db_url)
    assert exited.value.exit_code == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"could not finish writing the log {db_url}" in err and "another process wrote to it" in err, err
    assert "the log could not be finished" in err and "holds 0 of the 8 decisions hybrid" in err, err
    stopped = bench_run_of_url(db_url)
    assert stopped is not None and (stopped.status, stopped.written) == ("stopped", 0)


@pytest.mark.skipif(not os.environ.get("MEMABRA_TEST_DATABASE_URL"), reason="a password needs PostgreSQL")
def test_what_the_bench_says_of_its_log_never_shows_the_password(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # a nightly cron job mails its output: the --log-db URL in it used to carry the password
    from sqlalchemy import make_url

    base = make_url(request.getfixturevalue("pg_schema_url"))
    url = base.set(password="hunter2").render_as_string(hide_password=False)  # the test server trusts root
    rounds = _rounds_file(tmp_path, 4)
    for expected in (0, 1):  # the run, then the refused second run on the same log
        result = runner.invoke(app, ["bench", str(rounds), "--routers", "hybrid", "--passes", "1", "--log-db", url])
        assert result.exit_code == expected, result.output
        said = " ".join(result.output.split())
        assert "hunter2" not in said and "root:***@" in said, said
