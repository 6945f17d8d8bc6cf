"""What ``mempo score`` reads from the log: gold answers a page at a time, and a ``--since``
that lies ahead refused rather than read as "no gold answers"."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from typer.testing import CliRunner

from memabra import (
    STOP_ID,
    Candidate,
    CandidateKind,
    Episode,
    Feedback,
    RoutingContext,
    ScoredCandidate,
    Selection,
    SlotDraw,
)
from memabra.storage import EpisodeLog, _mempo_log

runner = CliRunner(env={"COLUMNS": "200"})
_T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _episode(question: str) -> Episode:
    """An episode whose one decision offered two memories and chose the first."""
    cands = [Candidate(f"m{i}", CandidateKind.MEMORY, f"{question} memory {i}", 8) for i in range(2)]
    draws = (
        SlotDraw(0, CandidateKind.MEMORY, ("m0", "m1", STOP_ID), (1 / 3,) * 3, "m0", 1 / 3),
        SlotDraw(1, CandidateKind.MEMORY, ("m1", STOP_ID), (0.5, 0.5), STOP_ID, 0.5),
    )
    ctx = RoutingContext(question, "u1", kinds=(CandidateKind.MEMORY,))
    sel = Selection(ctx, tuple(ScoredCandidate(c, {}, 0.0, i) for i, c in enumerate(cands)), draws, "test", "t-1", 0)
    return Episode("u1", question, selections=(sel,))


def _gold(log: EpisodeLog, episode: Episode, answer: str, minutes: int) -> None:
    log.add_feedback(
        Feedback(episode.id, "explicit", "user", {"gold_answer": answer}, received_at=_T0 + timedelta(minutes=minutes))
    )


@pytest.fixture
def feedback_selects() -> Iterator[list[str]]:
    """Every statement that reads the feedback table, as sent to the database."""
    seen: list[str] = []

    def spy(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM feedback" in statement:
            seen.append(statement)

    event.listen(Engine, "before_cursor_execute", spy)
    yield seen
    event.remove(Engine, "before_cursor_execute", spy)


def test_gold_answers_are_read_a_page_at_a_time_and_a_corrected_one_is_yielded_once(
    migrated_url: str, monkeypatch: pytest.MonkeyPatch, feedback_selects: list[str]
) -> None:
    monkeypatch.setattr(_mempo_log, "_CHUNK", 2)
    episodes = [_episode(f"question {k}") for k in range(5)]
    with EpisodeLog(migrated_url) as log:
        for k, ep in enumerate(episodes):
            log.log_episode(ep)
            _gold(log, ep, f"answer {k}", minutes=k)
        _gold(log, episodes[0], "corrected", minutes=10)  # a later page than the first answer's
        log.add_feedback(Feedback(episodes[1].id, "explicit", "user", {"rating": 1}, received_at=_T0))
        feedback_selects.clear()
        items = list(log.mempo_items())
        assert log.count_mempo_items() == 5
        assert log.count_gold_episodes() == 5
        since = list(log.mempo_items(since=_T0 + timedelta(minutes=3)))
    answers = {item.question: item.gold_answer for item in items}
    assert len(items) == 5
    assert answers == {"question 0": "corrected", **{f"question {k}": f"answer {k}" for k in range(1, 5)}}
    assert all(item.selected == (f"{item.question} memory 0",) and len(item.candidates) == 2 for item in items)
    assert sorted(item.gold_answer for item in since) == ["answer 3", "answer 4", "corrected"]
    # no read of the whole feedback table: a page (LIMIT) or one page's episodes
    assert feedback_selects
    unbounded = [s for s in feedback_selects if "LIMIT" not in s.upper() and "episode_id IN" not in s]
    assert not unbounded, unbounded


@pytest.mark.parametrize("command", ["score", "labels"])
def test_a_since_in_the_future_is_refused_and_nothing_is_written(
    migrated_url: str, tmp_path: Path, command: str
) -> None:
    import memabra._cli._mempo as cli

    with EpisodeLog(migrated_url) as log:
        ep = _episode("question")
        log.log_episode(ep)
        _gold(log, ep, "answer", minutes=0)
    args = [command, "--db", migrated_url, "--since", "2999-01-01"]
    if command == "score":
        args += ["--model", str(tmp_path)]
    result = runner.invoke(cli.mempo_app, args)
    assert result.exit_code == 1
    assert "--since 2999-01-01 is in the future" in result.output
    assert len(result.output.strip().splitlines()) == 1
    with EpisodeLog(migrated_url) as log:
        assert log.memory_scores([ep.selections[0].id]) == {}
