"""``pause_running_copy`` reads a turn's copy and, where it reads running, writes it back paused.
Another worker process may write a newer copy of the same turn between that read and that write
(it went on with the run: recorded steps, paused it again, or runs it again): the write must leave
that newer copy as it is, not put the older steps back over it. The interleaving is forced: the
read is wrapped so that the newer copy is written right after it returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import pytest

from memabra._errors import InvalidRecordError
from memabra._paused_turns import pause_running_copy
from memabra._records import Episode, utcnow
from memabra._turn_document import turn_document
from memabra._turns import Turn
from memabra.storage import EpisodeLog, SuspendedTurn


def _running(turn_id: str) -> SuspendedTurn:
    t = Turn(turn_id, "ann", "mail", 0, "Email bob please", None, "", ())
    return SuspendedTurn(
        t.id,
        t.episode_id,
        t.user_id,
        t.thread_id,
        utcnow() - timedelta(minutes=5),
        turn_document(t, 1.0),
        paused=False,
    )


def _newer(kept: SuspendedTurn, *, paused: bool) -> SuspendedTurn:
    """The copy another process writes once it went on with the turn: more steps, written now."""
    document = {**kept.document, "pauses": 2, "elapsed_ms": 99.0, "written_by": "worker-b"}
    return replace(kept, suspended_at=utcnow(), document=document, paused=paused)


def _read_then(log: EpisodeLog, monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], None]) -> None:
    """Make ``log.suspended_turn`` run ``meanwhile`` right after its read, as another process would."""
    read = log.suspended_turn

    def racing(turn_id: str) -> SuspendedTurn | None:
        kept = read(turn_id)
        meanwhile()
        return kept

    monkeypatch.setattr(log, "suspended_turn", racing)


def test_a_running_copy_is_paused(log: EpisodeLog) -> None:
    kept = _running("t-plain")
    log.suspend_turn(kept)
    assert pause_running_copy(log, kept.turn_id) is True
    now = log.suspended_turn(kept.turn_id)
    assert now is not None and now.paused
    assert now.document == kept.document
    assert now.suspended_at > kept.suspended_at
    assert pause_running_copy(log, kept.turn_id) is False  # paused already: nothing to write


@pytest.mark.parametrize("paused", [False, True], ids=["running-again", "paused-again"])
def test_a_copy_written_after_the_read_survives(log: EpisodeLog, monkeypatch: pytest.MonkeyPatch, paused: bool) -> None:
    kept = _running("t-race")
    log.suspend_turn(kept)
    newer = _newer(kept, paused=paused)
    _read_then(log, monkeypatch, lambda: log.suspend_turn(newer))
    assert pause_running_copy(log, kept.turn_id) is False
    monkeypatch.undo()
    stored = log.suspended_turn(kept.turn_id)
    assert stored is not None
    assert stored.document == newer.document  # the newer steps, not the ones read before
    assert (stored.paused, stored.suspended_at) == (newer.paused, newer.suspended_at)


def test_a_copy_logged_after_the_read_is_not_written_again(log: EpisodeLog, monkeypatch: pytest.MonkeyPatch) -> None:
    kept = _running("t-logged")
    log.suspend_turn(kept)
    episode = Episode(user_id="ann", query="Email bob please", id=kept.episode_id, metadata={"pauses": 0})
    _read_then(log, monkeypatch, lambda: log.log_episode(episode))
    assert pause_running_copy(log, kept.turn_id) is False
    monkeypatch.undo()
    assert log.suspended_turn(kept.turn_id) is None


def test_the_guarded_write_replaces_only_the_copy_read(log: EpisodeLog) -> None:
    kept = _running("t-cas")
    assert log.suspend_turn(kept) is True
    paused = replace(kept, suspended_at=utcnow(), paused=True)
    assert log.suspend_turn(paused, replacing=kept) is True
    # a second writer holding the same read finds the copy it read gone: its write is refused
    late = replace(kept, suspended_at=utcnow(), document={**kept.document, "written_by": "late"}, paused=True)
    assert log.suspend_turn(late, replacing=kept) is False
    assert log.suspended_turn(kept.turn_id) == paused
    # a turn the log no longer keeps is not written back by a guarded write
    assert log.suspend_turn(replace(kept, turn_id="t-gone"), replacing=replace(kept, turn_id="t-gone")) is False
    assert log.suspended_turn("t-gone") is None


def test_the_guarded_write_names_a_copy_of_another_turn(log: EpisodeLog) -> None:
    kept = _running("t-one")
    with pytest.raises(InvalidRecordError, match="t-two"):
        log.suspend_turn(kept, replacing=replace(kept, turn_id="t-two"))
    naive = replace(kept, suspended_at=kept.suspended_at.replace(tzinfo=None))
    with pytest.raises(InvalidRecordError, match="timezone-aware"):
        log.suspend_turn(kept, replacing=naive)
