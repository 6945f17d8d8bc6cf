"""``memabra mempo score`` on a real episode log: decisions with a gold answer in, labels stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from memabra.storage import EpisodeLog

from .conftest import capital_items

pytest.importorskip("torch", reason="the MemPO scorer needs the mempo extra (torch)")

import memabra._cli._mempo as cli  # noqa: E402

runner = CliRunner(env={"COLUMNS": "200"})


def _log_decisions(url: str) -> list[str]:
    """One logged episode per capital item, with its memories offered, the distractors chosen and
    the gold answer given in feedback. Returns the decision ids."""
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

    ids = []
    with EpisodeLog(url) as log:
        for _, item in capital_items():
            cands = [Candidate(f"m{i}", CandidateKind.MEMORY, text, 8) for i, text in enumerate(item.candidates)]
            chosen = [c.id for c in cands if c.text in item.selected]
            ctx = RoutingContext(item.question, "u1", kinds=(CandidateKind.MEMORY,))
            remaining, draws = [c.id for c in cands] + [STOP_ID], []
            for slot, cid in enumerate([*chosen, STOP_ID]):
                p = 1 / len(remaining)
                draws.append(
                    SlotDraw(slot, CandidateKind.MEMORY, tuple(remaining), tuple([p] * len(remaining)), cid, p)
                )
                remaining.remove(cid)
            sel = Selection(
                ctx, tuple(ScoredCandidate(c, {}, 0.0, i) for i, c in enumerate(cands)), tuple(draws), "test", "t-1", 0
            )
            ep = Episode("u1", item.question, selections=(sel,))
            log.log_episode(ep)
            log.add_feedback(
                Feedback(ep.id, "programmatic", "checker", {"accepted": False, "gold_answer": item.gold_answer})
            )
            ids.append(sel.id)
    return ids


def test_score_stores_one_label_per_decision_and_reports_throughput(trained_model_dir: Path, migrated_url: str) -> None:
    decision_ids = _log_decisions(migrated_url)
    options = [
        "--db",
        migrated_url,
        "--since",
        "2025-01-02",
        "--batch-size",
        "3",
        "--chunk-size",
        "3",
        "--device",
        "cpu",
    ]
    result = runner.invoke(cli.mempo_app, ["--model", str(trained_model_dir), *options])
    assert result.exit_code == 0, result.output
    with EpisodeLog(migrated_url) as log:
        labels = log.memory_scores(decision_ids)
    assert set(labels) == set(decision_ids)
    assert all(label.reward == -1 and label.p_all > label.p_selected for label in labels.values())
    assert "0 selections as good as all candidates (+1), 4 worse (-1)" in result.output
    assert "tokens/s" in result.output


def test_nothing_to_score_loads_no_model(tmp_path: Path, migrated_url: str) -> None:
    result = runner.invoke(cli.mempo_app, ["--model", str(tmp_path / "absent"), "--db", migrated_url])
    assert result.exit_code == 0 and "no decisions" in result.output


def test_a_missing_model_is_a_one_line_error(tmp_path: Path, migrated_url: str) -> None:
    _log_decisions(migrated_url)
    result = runner.invoke(cli.mempo_app, ["--model", str(tmp_path), "--db", migrated_url])
    assert result.exit_code == 1
    assert "config.json is missing" in result.output


def test_a_bad_since_names_the_option(tmp_path: Path, migrated_url: str) -> None:
    result = runner.invoke(cli.mempo_app, ["--model", str(tmp_path), "--since", "yesterday", "--db", migrated_url])
    assert result.exit_code == 1 and "--since" in result.output
