"""``memabra mempo score`` on a real episode log: decisions with a gold answer in, labels stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    result = runner.invoke(cli.mempo_app, ["score", "--model", str(trained_model_dir), *options])
    assert result.exit_code == 0, result.output
    with EpisodeLog(migrated_url) as log:
        labels = log.memory_scores(decision_ids)
    assert set(labels) == set(decision_ids)
    assert all(label.reward == -1 and label.p_all > label.p_selected for label in labels.values())
    assert "0 selections as good as all candidates (+1), 4 worse (-1)" in result.output
    assert "tokens/s" in result.output


def test_nothing_to_score_loads_no_model(tmp_path: Path, migrated_url: str) -> None:
    (tmp_path / "config.json").write_text("{}")  # what a model directory holds, but nothing loadable
    (tmp_path / "model.safetensors").write_bytes(b"")
    result = runner.invoke(cli.mempo_app, ["score", "--model", str(tmp_path), "--db", migrated_url])
    assert result.exit_code == 0 and "no decisions" in result.output
    # a log without gold answers (the demo's) says where one comes from, not only that there is none
    assert "a gold answer arrives as feedback on its episode" in result.output
    assert """memabra feedback EPISODE_ID '{"gold_answer": "..."}'""" in result.output


def test_gold_answers_without_memory_decisions_are_told_apart_from_no_gold_answers(
    tmp_path: Path, migrated_url: str
) -> None:
    from memabra import Episode, Feedback

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with EpisodeLog(migrated_url) as log:  # a turn of an agent with no memory slot: nothing MemPO grades
        ep = Episode("u1", "capital of France?")
        log.log_episode(ep)
        log.add_feedback(Feedback(ep.id, "programmatic", "checker", {"gold_answer": "Paris"}))
        assert log.count_gold_episodes() == 1 and log.count_mempo_items() == 0
    result = runner.invoke(cli.mempo_app, ["score", "--model", str(tmp_path), "--db", migrated_url])
    output = " ".join(result.output.split())
    assert (
        result.exit_code == 0
        and "1 episode(s) have a gold answer, but none of their decisions offered memories" in output
    )
    assert "a gold answer arrives as feedback" not in output


def test_a_model_folder_that_does_not_exist_is_refused_before_the_log_is_read(
    tmp_path: Path, migrated_url: str
) -> None:
    result = runner.invoke(cli.mempo_app, ["score", "--model", str(tmp_path / "absent"), "--db", migrated_url])
    assert result.exit_code == 1 and "is not a directory" in " ".join(result.output.split())


def test_a_missing_model_is_a_one_line_error(tmp_path: Path, migrated_url: str) -> None:
    _log_decisions(migrated_url)
    result = runner.invoke(cli.mempo_app, ["score", "--model", str(tmp_path), "--db", migrated_url])
    assert result.exit_code == 1
    assert "config.json is missing" in result.output


def test_a_bad_since_names_the_option(tmp_path: Path, migrated_url: str) -> None:
    result = runner.invoke(
        cli.mempo_app, ["score", "--model", str(tmp_path), "--since", "yesterday", "--db", migrated_url]
    )
    assert result.exit_code == 2 and "--since" in result.output  # a usage error, as every bad time is


def test_a_second_run_scores_only_what_the_first_left(trained_model_dir: Path, migrated_url: str) -> None:
    """An interrupted run (here: labels stored for two decisions only) resumes; a finished one is
    not repeated unless asked."""
    from memabra._records import MemoryQuality

    decision_ids = _log_decisions(migrated_url)
    scorer = f"mempo:{trained_model_dir.name}"
    with EpisodeLog(migrated_url) as log:
        log.store_memory_scores([MemoryQuality(d, scorer, 0.5, 0.5, 0.0, 1, 3) for d in decision_ids[:2]])
        log.store_memory_scores([MemoryQuality(decision_ids[2], "mempo:another-model", 0.5, 0.5, 0.0, 1, 3)])
    options = ["--model", str(trained_model_dir), "--db", migrated_url, "--device", "cpu", "--chunk-size", "2"]

    resumed = runner.invoke(cli.mempo_app, ["score", *options])
    assert resumed.exit_code == 0, resumed.output
    assert "scoring 2 decisions" in resumed.output  # the other model's label is not this model's
    with EpisodeLog(migrated_url) as log:
        labels = log.memory_scores(decision_ids, scorer=scorer)
        # the other model keeps its label of the decision this one scored too
        assert log.memory_scores(decision_ids, scorer="mempo:another-model").keys() == {decision_ids[2]}
    assert [labels[d].reward for d in decision_ids] == [1, 1, -1, -1]  # the first two kept, as stored
    assert {labels[d].scorer for d in decision_ids} == {scorer}

    again = runner.invoke(cli.mempo_app, ["score", *options])
    assert again.exit_code == 0 and "nothing left to score" in again.output and "--rescore" in again.output

    rescored = runner.invoke(cli.mempo_app, ["score", *options, "--rescore"])
    assert rescored.exit_code == 0 and "scoring 4 decisions" in rescored.output
    with EpisodeLog(migrated_url) as log:
        assert all(label.reward == -1 for label in log.memory_scores(decision_ids, scorer=scorer).values())
        assert log.memory_label_scorers() == {"mempo:another-model": 1, scorer: 4}  # --rescore replaced its own


def test_two_models_scoring_the_same_log_keep_their_own_labels(trained_model_dir: Path, migrated_url: str) -> None:
    """A small model nightly and a large one weekly on the same log: each run replaced the other's
    labels, so the other's next run scored every decision again, and `labels --scorer` saw only
    what the other had not redone."""
    import json

    decision_ids = _log_decisions(migrated_url)
    options = ["score", "--model", str(trained_model_dir), "--db", migrated_url, "--device", "cpu"]
    for name in ("mempo:small", "mempo:large"):
        first = runner.invoke(cli.mempo_app, [*options, "--name", name])
        assert first.exit_code == 0 and "scoring 4 decisions" in first.output, first.output
    for name in ("mempo:small", "mempo:large"):  # the next night's and week's runs: nothing new
        again = runner.invoke(cli.mempo_app, [*options, "--name", name])
        assert again.exit_code == 0 and f"nothing left to score: {name}" in again.output, again.output
    with EpisodeLog(migrated_url) as log:
        assert log.memory_label_scorers() == {"mempo:large": 4, "mempo:small": 4}
    for name in ("mempo:small", "mempo:large"):
        shown = runner.invoke(cli.mempo_app, ["labels", "--db", migrated_url, "--scorer", name, "--json", "-"])
        assert shown.exit_code == 0, shown.output
        data = json.loads(shown.stdout)
        assert data["labelled"] == 4 and [s["labels"] for s in data["scorers"]] == [4]
    both = json.loads(runner.invoke(cli.mempo_app, ["labels", "--db", migrated_url, "--json", "-"]).stdout)
    assert (data["decisions"], both["labelled"]) == (4, 4)  # decisions, not labels
    assert [(s["scorer"], s["labels"]) for s in both["scorers"]] == [("mempo:large", 4), ("mempo:small", 4)]
    assert {(d["decision_id"], d["scorer"]) for d in both["worst"]} == {  # every selection lost: distractors
        (d, name) for d in decision_ids for name in ("mempo:large", "mempo:small")
    }


def test_a_folder_that_is_not_a_model_is_refused_even_with_nothing_to_score(tmp_path: Path, migrated_url: str) -> None:
    """A nightly job pointed at the wrong folder fails on its first night, not on the first night
    a gold answer arrives."""
    result = runner.invoke(cli.mempo_app, ["score", "--model", str(tmp_path), "--db", migrated_url])
    assert result.exit_code == 1 and "config.json is missing" in result.output
    (tmp_path / "config.json").write_text("{}")
    result = runner.invoke(cli.mempo_app, ["score", "--model", str(tmp_path), "--db", migrated_url])
    assert result.exit_code == 1 and "holds no weights" in result.output


def test_dtype_and_name_reach_the_scorer_and_the_labels(trained_model_dir: Path, migrated_url: str) -> None:
    decision_ids = _log_decisions(migrated_url)
    options = ["--model", str(trained_model_dir), "--db", migrated_url, "--device", "cpu"]
    result = runner.invoke(cli.mempo_app, ["score", *options, "--dtype", "bf16", "--name", "mempo:capitals-v2"])
    assert result.exit_code == 0, result.output
    assert "(bfloat16), labels stored as mempo:capitals-v2" in result.output
    with EpisodeLog(migrated_url) as log:
        assert {label.scorer for label in log.memory_scores(decision_ids).values()} == {"mempo:capitals-v2"}
    # another model in a folder of the same name is not taken for this one when it is named
    again = runner.invoke(cli.mempo_app, ["score", *options, "--name", "mempo:capitals-v3"])
    assert again.exit_code == 0 and "scoring 4 decisions" in again.output
    bad = runner.invoke(cli.mempo_app, ["score", *options, "--dtype", "int8"])
    assert bad.exit_code == 1 and "dtype must be one of" in bad.output
    long_name = runner.invoke(cli.mempo_app, ["score", *options, "--name", "x" * 201])
    assert long_name.exit_code == 1 and "shorter --name" in long_name.output


def test_an_interrupted_run_says_what_it_stored(
    trained_model_dir: Path, migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memabra.evals.mempo import MemPOScorer

    decision_ids = _log_decisions(migrated_url)
    real = MemPOScorer.score_routing_decisions

    def interrupted_after_one_chunk(self: MemPOScorer, *args: object, **kwargs: object) -> object:
        chunks = real(self, *args, **kwargs)  # type: ignore[arg-type]
        yield next(chunks)
        raise KeyboardInterrupt

    monkeypatch.setattr(MemPOScorer, "score_routing_decisions", interrupted_after_one_chunk)
    options = ["--model", str(trained_model_dir), "--db", migrated_url, "--device", "cpu", "--chunk-size", "3"]
    result = runner.invoke(cli.mempo_app, ["score", *options])
    assert result.exit_code == 130
    assert "interrupted: 3 of 4 decisions scored and stored; the same command scores the rest" in result.output
    with EpisodeLog(migrated_url) as log:
        assert len(log.memory_scores(decision_ids)) == 3


def test_a_decision_the_model_cannot_score_is_a_one_line_error(trained_model_dir: Path, migrated_url: str) -> None:
    from memabra import Feedback

    _log_decisions(migrated_url)
    with EpisodeLog(migrated_url) as log:
        episode = log.list_episodes(limit=1).items[0]
        log.add_feedback(Feedback(episode.id, "programmatic", "checker", {"gold_answer": "paris " * 300}))
    result = runner.invoke(
        cli.mempo_app, ["score", "--model", str(trained_model_dir), "--db", migrated_url, "--device", "cpu"]
    )
    assert result.exit_code == 1 and result.exception is not None and isinstance(result.exception, SystemExit)
    assert "more than the model's 256 positions" in result.output and "decision '" in result.output


def test_labels_summarise_what_score_stored(migrated_url: str, tmp_path: Path) -> None:
    import json

    from memabra._records import MemoryQuality

    decision_ids = _log_decisions(migrated_url)
    empty = runner.invoke(cli.mempo_app, ["labels", "--db", migrated_url])
    assert empty.exit_code == 0 and "4 decisions with a known gold answer, 0 labelled" in empty.output
    assert "memabra mempo score --model PATH" in empty.output
    with EpisodeLog(migrated_url) as log:
        log.store_memory_scores(
            [
                MemoryQuality(decision_ids[0], "mempo:a", 0.2, 0.9, -0.7, -1, 1),
                MemoryQuality(decision_ids[1], "mempo:a", 0.8, 0.6, 0.2, 1, 1),
                MemoryQuality(decision_ids[2], "mempo:b", 0.5, 0.6, -0.1, -1, 1),
            ]
        )
    out = tmp_path / "labels.json"
    result = runner.invoke(cli.mempo_app, ["labels", "--db", migrated_url, "--worst", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "4 decisions with a known gold answer, 3 labelled" in result.output
    assert "what is the capital of france ?" in result.output  # the worst decision's question
    data = json.loads(out.read_text())
    assert (data["decisions"], data["labelled"]) == (4, 3)
    assert [(s["scorer"], s["labels"], s["as_good"], s["worse"]) for s in data["scorers"]] == [
        ("mempo:a", 2, 1, 1),
        ("mempo:b", 1, 0, 1),
    ]
    assert data["scorers"][0]["mean_difference"] == pytest.approx(-0.25)
    assert [(d["decision_id"], d["difference"]) for d in data["worst"]] == [(decision_ids[0], -0.7)]
    only_b = runner.invoke(cli.mempo_app, ["labels", "--db", migrated_url, "--scorer", "mempo:b", "--json", "-"])
    assert only_b.exit_code == 0
    data = json.loads(only_b.stdout)
    assert data["labelled"] == 1 and [d["decision_id"] for d in data["worst"]] == [decision_ids[2]]


def test_an_interrupt_while_the_model_loads_says_nothing_was_stored(
    random_model_dir: Path, migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading a large model takes minutes: Ctrl-C then is a message and exit 130, not silence."""
    from memabra.evals.mempo import MemPOScorer

    decision_ids = _log_decisions(migrated_url)

    def interrupted(self: MemPOScorer, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(MemPOScorer, "__init__", interrupted)
    result = runner.invoke(cli.mempo_app, ["score", "--model", str(random_model_dir), "--db", migrated_url])
    assert result.exit_code == 130
    assert "interrupted while loading the model: none of 4 decisions scored" in " ".join(result.output.split())
    with EpisodeLog(migrated_url) as log:
        assert log.memory_scores(decision_ids) == {}


def test_a_decision_the_model_cannot_score_does_not_stop_the_others_run_after_run(
    trained_model_dir: Path, migrated_url: str
) -> None:
    """A gold answer longer than the model failed its whole chunk, every night: nothing behind it
    was ever labelled. It is left out and named; the rest are stored."""
    from memabra import Feedback

    decision_ids = _log_decisions(migrated_url)
    with EpisodeLog(migrated_url) as log:
        episode = log.list_episodes(limit=1).items[0]
        log.add_feedback(Feedback(episode.id, "programmatic", "checker", {"gold_answer": "paris " * 300}))
    options = ["score", "--model", str(trained_model_dir), "--db", migrated_url, "--device", "cpu"]
    for night, expected in ((1, "scoring 4 decisions"), (2, "scoring 1 decisions")):
        result = runner.invoke(cli.mempo_app, options)
        output = " ".join(result.output.split())
        assert result.exit_code == 1, (night, output)
        assert expected in output and "more than the model's 256 positions" in output
        assert "1 of " in output and "could not be scored and were left unlabelled" in output
        with EpisodeLog(migrated_url) as log:
            assert len(log.memory_scores(decision_ids)) == 3
    with EpisodeLog(migrated_url) as log:  # corrected, it is scored
        log.add_feedback(Feedback(episode.id, "programmatic", "checker", {"gold_answer": "paris"}))
    result = runner.invoke(cli.mempo_app, options)
    assert result.exit_code == 0 and "scoring 1 decisions" in result.output, result.output
    with EpisodeLog(migrated_url) as log:
        assert len(log.memory_scores(decision_ids)) == 4


def test_a_gold_answer_corrected_while_the_run_scores_reopens_its_decision(
    trained_model_dir: Path, migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A label was stamped when stored: a correction that arrived after its gold answer was read
    but before the label was stored counted as graded, and the stale label was kept for good."""
    from memabra import Feedback
    from memabra.evals.mempo import MemPOScorer

    decision_ids = _log_decisions(migrated_url)
    with EpisodeLog(migrated_url) as log:
        episode = log.list_episodes(limit=1).items[0]
    real = MemPOScorer.score_routing_decisions

    def corrected_meanwhile(self: MemPOScorer, items: object, **kwargs: object) -> object:
        read = list(items)  # type: ignore[call-overload]  # every gold answer read, as a chunk is
        with EpisodeLog(migrated_url) as log:
            log.add_feedback(Feedback(episode.id, "programmatic", "checker", {"gold_answer": "tokyo"}))
        return real(self, read, **kwargs)  # type: ignore[arg-type]

    options = ["score", "--model", str(trained_model_dir), "--db", migrated_url, "--device", "cpu"]
    with monkeypatch.context() as patched:
        patched.setattr(MemPOScorer, "score_routing_decisions", corrected_meanwhile)
        first = runner.invoke(cli.mempo_app, options)
    assert first.exit_code == 0, first.output
    with EpisodeLog(migrated_url) as log:
        assert len(log.memory_scores(decision_ids)) == 4
        assert log.count_mempo_items(unscored_by=f"mempo:{trained_model_dir.name}") == 1
    again = runner.invoke(cli.mempo_app, options)
    assert again.exit_code == 0 and "scoring 1 decisions" in again.output, again.output


def test_a_gold_answer_corrected_after_its_page_was_read_is_scored_once_per_chunk(
    trained_model_dir: Path, migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log is read a page of feedback at a time: a correction that arrives after the page of
    the first answer was read yields the decision again from a later page. Both in one chunk, the
    store refused the chunk for naming the decision twice and the run stored nothing."""
    from memabra import Feedback
    from memabra.evals.mempo import MemPOScorer
    from memabra.storage import _mempo_log

    monkeypatch.setattr(_mempo_log, "_CHUNK", 1)  # a page per feedback row
    decision_ids = _log_decisions(migrated_url)
    with EpisodeLog(migrated_url) as log:
        first = log.get_episode(log.list_episodes(limit=len(decision_ids)).items[-1].id)
    assert first.selections[0].id == decision_ids[0]
    real = MemPOScorer.score_routing_decisions

    def corrected_after_the_first_page(items: Iterator[Any]) -> Iterator[Any]:
        yield next(items)
        with EpisodeLog(migrated_url) as log:
            log.add_feedback(Feedback(first.id, "programmatic", "checker", {"gold_answer": "tokyo"}))
        yield from items

    def scored(self: MemPOScorer, items: Any, **kwargs: Any) -> Any:
        return real(self, corrected_after_the_first_page(iter(items)), **kwargs)

    monkeypatch.setattr(MemPOScorer, "score_routing_decisions", scored)
    options = ["score", "--model", str(trained_model_dir), "--db", migrated_url, "--device", "cpu"]
    result = runner.invoke(cli.mempo_app, options)
    assert result.exit_code == 0, result.output
    with EpisodeLog(migrated_url) as log:
        labels = log.memory_scores(decision_ids)
        assert len(labels) == len(decision_ids)
        # graded against the correction, which arrived after the run started: the next run scores it again
        assert log.count_mempo_items(unscored_by=f"mempo:{trained_model_dir.name}") == 1
