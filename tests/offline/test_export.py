"""``memabra episodes export`` / ``export_decisions``: the log as JSON Lines, on every backend."""

from __future__ import annotations

import dataclasses
import io
import json
import math
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memabra import Feedback, InvalidRecordError, RewardBreakdown, RewardComponents, RewardWeights
from memabra._cli import app
from memabra.evals.offline import EXPORT_FORMAT, export_decisions
from memabra.storage import EpisodeLog


def _lines(log: EpisodeLog, **kwargs: object) -> list[dict[str, object]]:
    out = io.StringIO()
    n = export_decisions(log, out, **kwargs)  # type: ignore[arg-type]
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == n
    return lines


def test_every_decision_is_exported_with_what_offline_evaluation_needs(
    log: EpisodeLog, fill_log: Callable[..., None]
) -> None:
    fill_log(log, n=40)
    logged = list(log.iter_decisions())
    lines = _lines(log)
    assert [line["decision_id"] for line in lines] == [d.selection.id for d in logged]  # time order, all
    for line, d in zip(lines, logged, strict=True):
        sel = d.selection
        assert line["format"] == EXPORT_FORMAT
        assert line["episode_id"] and line["episode_id"] == d.episode_id
        assert line["query"] == sel.context.query and line["user_id"] == sel.context.user_id
        assert line["policy_version"] == sel.policy_version and line["seed"] == sel.seed
        # every candidate offered, chosen or not, with the features the router saw
        assert {c["id"] for c in line["candidates"]} == {sc.candidate.id for sc in sel.offered}  # type: ignore[union-attr, index]
        by_id = {sc.candidate.id: sc for sc in sel.offered}
        for c in line["candidates"]:  # type: ignore[union-attr]
            assert c["features"] == dict(by_id[c["id"]].features)  # type: ignore[index]
        # each slot's full distribution, and the propensity is the product along the slots
        product = 1.0
        for slot, draw in zip(line["slots"], sel.slots, strict=True):  # type: ignore[arg-type]
            assert slot["candidate_ids"] == list(draw.candidate_ids)
            assert math.isclose(sum(slot["probabilities"]), 1.0, abs_tol=1e-9)
            assert slot["probabilities"][slot["candidate_ids"].index(slot["chosen_id"])] == slot["chosen_probability"]
            product *= slot["chosen_probability"]
        assert math.isclose(product, line["propensity"], rel_tol=1e-12)  # type: ignore[arg-type]
        if d.reward is None:
            assert line["reward"] is None
        else:
            assert line["reward"]["total"] == pytest.approx(d.reward.total)  # type: ignore[index]
            assert line["reward"]["final"] is d.final  # type: ignore[index]


def test_rewards_outcomes_and_windows(log: EpisodeLog) -> None:
    from factories import episode

    old, new = episode("ann"), episode("ann")
    later = old.created_at + timedelta(hours=1)  # windows are on the decision's time
    new = dataclasses.replace(
        new, created_at=later, selections=(dataclasses.replace(new.selections[0], created_at=later),)
    )
    log.log_episodes([old, new])
    reward = RewardBreakdown(RewardComponents(s=1.0, hm=0.5, x=0.2), RewardWeights(wc=0.8))
    log.put_reward(old.id, reward, final=True)
    log.set_used(old.id, ["m0"])
    log.add_feedback(Feedback(new.id, "explicit", "t", {"rating": 4}))

    lines = _lines(log)
    first = next(line for line in lines if line["episode_id"] == old.id)
    assert first["used_ids"] == ["m0"]
    assert first["reward"] == {
        "total": pytest.approx(reward.total),
        "final": True,
        "version": "v1",
        "components": {"s": 1.0, "hm": 0.5, "hs": None, "ht": None, "e": 0.0, "c": 0.0, "l": 0.0, "x": 0.2, "u": 0.0},
        "weights": {"ws": 1.0, "wr": 0.35, "we": 0.3, "wc": 0.8, "wl": 0.15, "wx": 0.2, "wu": 0.25},
    }
    assert [line["episode_id"] for line in _lines(log, final_only=True)] == [old.id]
    since = old.created_at + timedelta(minutes=30)
    assert [line["episode_id"] for line in _lines(log, since=since)] == [new.id]
    assert [line["episode_id"] for line in _lines(log, until=since)] == [old.id]


def test_one_users_decisions(log: EpisodeLog, migrated_url: str, tmp_path: Path) -> None:
    from factories import episode

    ann, bob, ann_again = episode("ann"), episode("bob"), episode("ann")
    log.log_episodes([ann, bob, ann_again])
    assert {line["episode_id"] for line in _lines(log, user_id="ann")} == {ann.id, ann_again.id}
    assert [line["user_id"] for line in _lines(log, user_id="bob")] == ["bob"]
    assert _lines(log, user_id="carol") == []
    with pytest.raises(InvalidRecordError, match="user_id must not be empty"):
        log.iter_decisions(user_id=" ")

    out = tmp_path / "ann.jsonl"
    result = CliRunner().invoke(app, ["episodes", "export", "--user", "ann", "--out", str(out), "--db", migrated_url])
    assert result.exit_code == 0, result.output
    assert "exported 2 decision(s)" in result.output
    assert {json.loads(line)["user_id"] for line in out.read_text().splitlines()} == {"ann"}
    blank = CliRunner().invoke(app, ["episodes", "export", "--user", " ", "--out", str(out), "--db", migrated_url])
    assert blank.exit_code == 1 and "--user must not be blank" in blank.output


def test_cli_writes_the_file_whole_or_not_at_all(
    migrated_url: str, tmp_path: Path, fill_log: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    with EpisodeLog(migrated_url) as log:
        fill_log(log, n=15)
    runner = CliRunner()
    out = tmp_path / "log.jsonl"
    result = runner.invoke(app, ["episodes", "export", "--out", str(out), "--db", migrated_url])
    assert result.exit_code == 0, result.output
    assert "exported 15 decision(s)" in result.output
    assert len(out.read_text().splitlines()) == 15

    # a failure part way leaves the previous file, and no temporary file beside it
    from memabra.evals.offline import _export

    real = _export.decision_record
    calls = iter(range(100))

    def failing(decision):  # type: ignore[no-untyped-def]
        if next(calls) == 7:
            raise OSError(28, "No space left on device")
        return real(decision)

    monkeypatch.setattr(_export, "decision_record", failing)
    before = out.read_bytes()
    failed = runner.invoke(app, ["episodes", "export", "--out", str(out), "--db", migrated_url])
    assert failed.exit_code == 1 and "No space left on device" in failed.output
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []

    bad = runner.invoke(
        app, ["episodes", "export", "--out", str(tmp_path / "missing" / "x.jsonl"), "--db", migrated_url]
    )
    assert bad.exit_code == 2 and "--out" in bad.output  # refused while parsing: nothing read
    window = runner.invoke(app, ["episodes", "export", "--out", str(out), "--since", "soon", "--db", migrated_url])
    assert window.exit_code == 2 and "ISO 8601" in window.output and "--since" in window.output  # a usage error
