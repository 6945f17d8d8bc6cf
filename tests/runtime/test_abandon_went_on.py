"""Abandoning a turn is conditional on its copy being still the one read. The cron that runs
``memabra episodes paused --lost --abandon`` lists a copy as lost; a retry of the run in another
worker may pick the turn up and write a newer copy before the abandon's write. The abandon must
then log nothing (the turn is running, not failed: a failed episode would be a wrong reward the
learner trains on) and leave the newer copy in the log. The interleaving is forced: the newer copy
is written between the read and the abandon."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from memabra._errors import InvalidRecordError
from memabra._feedback import RewardService
from memabra._paused_turns import ABANDONED_SOURCE, abandon_paused_turn
from memabra._records import utcnow
from memabra._turn_document import turn_document
from memabra._turns import Turn
from memabra.storage import EpisodeLog, SuspendedTurn, TurnWentOnError, make_engine


def _lost(log: EpisodeLog, turn_id: str) -> SuspendedTurn:
    """A copy written running two hours ago, as the cron lists it: lost."""
    t = Turn(turn_id, "ann", "mail", 0, "Email bob please", None, "", ())
    log.suspend_turn(
        SuspendedTurn(
            t.id,
            t.episode_id,
            t.user_id,
            t.thread_id,
            utcnow() - timedelta(hours=2),
            turn_document(t, 1.0),
            paused=False,
        )
    )
    (kept,) = [k for k in log.suspended_turns(lost_at=utcnow()) if k.turn_id == turn_id]
    return kept


def _went_on(log: EpisodeLog, kept: SuspendedTurn, *, paused: bool) -> SuspendedTurn:
    """What a retry that picked the turn up writes: running (or paused again) since now, more steps."""
    newer = replace(
        kept,
        suspended_at=utcnow(),
        paused=paused,
        document={**kept.document, "elapsed_ms": 99.0, "written_by": "worker-b"},
    )
    assert log.suspend_turn(newer)
    return newer


@pytest.mark.parametrize("paused", [False, True], ids=["running-again", "paused-again"])
def test_a_turn_that_went_on_since_it_was_read_is_not_abandoned(log: EpisodeLog, paused: bool) -> None:
    kept = _lost(log, "t-race")
    newer = _went_on(log, kept, paused=paused)
    with pytest.raises(TurnWentOnError) as refused:
        abandon_paused_turn(RewardService(log), kept, actor="cli:oncall")
    assert isinstance(refused.value, InvalidRecordError)  # old callers' except still catches it
    assert refused.value.turn_id == "t-race" and refused.value.now is not None
    assert refused.value.now.suspended_at == newer.suspended_at
    message = str(refused.value)
    assert "t-race went on since it was read" in message
    assert f"now {'paused' if paused else 'running'} since {newer.suspended_at.isoformat()}" in message
    # nothing logged: the run going on now is not a failure
    assert not log.list_episodes().items
    now = log.suspended_turn("t-race")
    assert now is not None and now.document["written_by"] == "worker-b" and now.paused is paused
    assert now.suspended_at == newer.suspended_at


def test_a_turn_still_as_read_is_abandoned(log: EpisodeLog) -> None:
    kept = _lost(log, "t-plain")
    episode_id = abandon_paused_turn(RewardService(log), kept, actor="cli:oncall")
    assert episode_id == kept.episode_id and log.suspended_turn("t-plain") is None
    episode = log.get_episode(episode_id)
    assert [f.source for f in episode.feedback] == [ABANDONED_SOURCE]
    assert episode.metadata["abandoned_by"] == "cli:oncall"


def test_a_copy_erased_since_it_was_read_is_not_logged_back(log: EpisodeLog, migrated_url: str) -> None:
    kept = _lost(log, "t-erased")
    engine = make_engine(migrated_url)
    with engine.begin() as conn:  # as erasing the user does: the copy goes, no episode is logged
        conn.execute(text("DELETE FROM suspended_turns WHERE turn_id = 't-erased'"))
    engine.dispose()
    with pytest.raises(TurnWentOnError, match="no longer kept in the log") as refused:
        abandon_paused_turn(RewardService(log), kept)
    assert refused.value.now is None
    assert not log.list_episodes().items


def test_a_logged_turn_is_still_refused_as_logged(log: EpisodeLog) -> None:
    """Logged since the read (another cron host): the log refuses the id, as before, not as went on."""
    kept = _lost(log, "t-twice")
    abandon_paused_turn(RewardService(log), kept, actor="cli:other-host")
    with pytest.raises(InvalidRecordError, match="already in the log") as refused:
        abandon_paused_turn(RewardService(log), kept)
    assert not isinstance(refused.value, TurnWentOnError)


def test_the_replaced_copy_must_be_of_the_episode_logged(log: EpisodeLog) -> None:
    kept = _lost(log, "t-own")
    other = _lost(log, "t-other")
    episode = log.get_episode(abandon_paused_turn(RewardService(log), kept))
    with pytest.raises(InvalidRecordError, match="not in this batch"):
        log.log_episode(replace(episode, id="e-new"), replacing=other)
    with pytest.raises(InvalidRecordError, match="timezone-aware"):
        log.log_episode(
            replace(episode, id=other.episode_id),
            replacing=replace(other, suspended_at=other.suspended_at.replace(tzinfo=None)),
        )
    assert log.suspended_turn("t-other") is not None
    assert [e.id for e in log.list_episodes().items] == [kept.episode_id]


def test_the_cron_skips_a_turn_that_went_on_and_abandons_the_others(
    log: EpisodeLog, migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memabra._cli import _paused, app

    raced = _lost(log, "t-raced")
    plain = _lost(log, "t-plain")
    real = _paused.abandon_paused_turn
    newer: list[SuspendedTurn] = []

    def retried_meanwhile(rewards: Any, kept: SuspendedTurn, **who: Any) -> str:
        if kept.turn_id == raced.turn_id:  # a retry in another worker picked it up after the listing
            newer.append(_went_on(log, kept, paused=False))
        return real(rewards, kept, **who)

    monkeypatch.setattr(_paused, "abandon_paused_turn", retried_meanwhile)
    out = tmp_path / "lost.json"
    done = CliRunner().invoke(
        app, ["episodes", "paused", "--db", migrated_url, "--lost", "--abandon", "--json", str(out)], terminal_width=200
    )
    assert done.exit_code == 0, done.output  # a skipped turn is no error of the batch
    assert "went on since listed, skipped" in done.output
    assert "skipped, not abandoned: turn t-raced went on since it was read" in done.output
    listed = {t["turn_id"]: (t["logged_as"], t["skipped"]) for t in json.loads(out.read_text())["paused"]}
    assert listed == {"t-raced": (None, "went on since listed"), "t-plain": (plain.episode_id, None)}
    assert [e.id for e in log.list_episodes().items] == [plain.episode_id]
    now = log.suspended_turn("t-raced")
    assert now is not None and now.suspended_at == newer[0].suspended_at and not now.paused


def test_an_abandon_meeting_a_copy_being_written_waits_for_it_and_logs_nothing(
    log: EpisodeLog, migrated_url: str
) -> None:
    """The guard is read after the episode's lock, inside the logging transaction: a retry's copy
    whose write is in flight as the abandon starts is seen once it commits (on PostgreSQL the
    abandon waits on the per-episode advisory lock the copy's write holds; SQLite runs one writer
    at a time), never deleted under it."""
    import threading

    from memabra.storage._suspended_turns import lock_episodes

    kept = _lost(log, "t-inflight")
    engine = make_engine(migrated_url)
    outcome: list[BaseException | str] = []

    def abandon() -> None:
        try:
            outcome.append(abandon_paused_turn(RewardService(log), kept))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    written_at = utcnow()
    try:
        with engine.connect() as conn:
            writing = conn.begin()
            lock_episodes(conn, [kept.episode_id])  # as the retry's copy write does, first
            conn.execute(
                text("UPDATE suspended_turns SET suspended_at = :at WHERE turn_id = 't-inflight'"), {"at": written_at}
            )
            worker = threading.Thread(target=abandon)
            worker.start()
            worker.join(0.5)
            if engine.dialect.name == "postgresql":
                assert worker.is_alive()  # waiting on the copy's lock, not deciding on what it read before
            writing.commit()
        worker.join(30)
    finally:
        engine.dispose()
    assert not worker.is_alive()
    (refused,) = outcome
    assert isinstance(refused, TurnWentOnError), refused
    assert not log.list_episodes().items
    now = log.suspended_turn("t-inflight")
    assert now is not None and now.suspended_at == written_at
