"""A reviewer deciding on the policies page whether to promote a candidate reads what its stored
offline evaluation kept: the paired difference from the logging policy and from the active
snapshot scored in the same evaluation, with the verdict ``memabra ope log`` prints; the interval's
method and effective sample size beside each estimate; the seed and the command that made the run;
the runs of one evaluation together; and what ``train --from-log`` trained. Runs stored before any
of this was kept read "not recorded", never as a figure, and never break the page.

The runs are stored as a user stores them: ``memabra ope log`` and ``memabra train --from-log`` on
the command line, :func:`evaluate_on_log` from the library, and old-shape rows as earlier versions
wrote them, on each backend."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from logged_world import log_world
from memabra._admin import create_app
from memabra._admin._ope_record import LOGGING_POLICY, command_line
from memabra._cli import app
from memabra._cli._offline_report import paired_verdict
from memabra._records import OPEResult
from memabra.evals.offline import LOGGING_POLICY as EVALS_LOGGING_POLICY
from memabra.evals.offline import ROUTERS, evaluate_on_log
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog

from .conftest import BACKENDS, NOW, TOKEN, csrf_of, migrated_database, sign_in

runner = CliRunner(env={"COLUMNS": "240"})
ACTIVE, CANDIDATE, OLD = "bm25-a", "bm25-b", "old-c"
# what an earlier memabra stored for a run: verdict, logging value, window, no record
OLD_DETAILS = {"recommended": True, "supported": True, "reason": "", "logging_value": 0.30}


@dataclass(frozen=True)
class Evaluated:
    log: EpisodeLog
    url: str
    trained: str  # the snapshot train --from-log --force saved


@pytest.fixture(scope="module", params=BACKENDS)
def evaluated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Evaluated]:
    """600 decisions a random logger made; a bm25 snapshot active, another one a candidate, and an
    old candidate; one ``ope log`` of the active and the candidate together, a run of the library's,
    a forced ``train --from-log`` and an old-shape run."""
    directory = tmp_path_factory.mktemp("ope-record")
    with migrated_database(request.param, directory) as url, EpisodeLog(url) as log:
        lexical = Similarity(encoder=None)
        log_world(log, RandomRouter(similarity=lexical, seed=1), 600)
        log.save_snapshot(replace(ROUTERS["bm25"]().snapshot(), version=ACTIVE))
        log.promote(ACTIVE)
        log.save_snapshot(replace(ROUTERS["bm25"]().snapshot(), version=CANDIDATE, status="candidate"))
        log.save_snapshot(replace(ROUTERS["bm25"]().snapshot(), version=OLD, status="candidate"))
        log.record_ope_results(
            [OPEResult("snapshot:old-c", "cdr", 0.5, 0.4, 0.6, 300, snapshot_version=OLD, details=OLD_DETAILS)]
        )
        ev = evaluate_on_log(log, RandomRouter(similarity=lexical, seed=2), policy="library-random", estimators=["cdr"])
        log.record_ope_results(list(ev.results))
        args = ["--policy", "active", "--policy", f"snapshot:{CANDIDATE}", "--estimators", "cdr", "--seed", "7"]
        done = runner.invoke(app, ["ope", "log", "--db", url, *args])
        assert done.exit_code == 0, done.output
        out = directory / "train.json"
        done = runner.invoke(app, ["train", "--from-log", "--db", url, "--force", "--json", str(out)])
        assert done.exit_code == 0, done.output
        yield Evaluated(log, url, json.loads(out.read_text())["saved_version"])


@pytest.fixture
def page(evaluated: Evaluated) -> Iterator[TestClient]:
    with TestClient(create_app(evaluated.log, token=TOKEN), follow_redirects=False) as client:
        assert sign_in(client).status_code == 303
        yield client


def _headline(log: EpisodeLog, version: str) -> OPEResult:
    return next(r for r in log.list_ope_runs(version, limit=50) if r.details.get("recommended") is True)


def _section(client: TestClient, section: str) -> str:
    return client.get("/policies").text.split(f'id="{section}"', 1)[1].split("</section>", 1)[0]


def _run(ope: str, policy: str) -> str:
    return next(run for run in ope.split('<tbody class="ope-run')[1:] if f'<td class="target">{policy}<' in run)


def _snapshot_cell(client: TestClient, version: str) -> tuple[str, str]:
    """A snapshot's offline-evaluation cell and its promote confirmation."""
    row = _section(client, "snapshots").split(f'data-version="{version}"', 1)[1].split("</tr>", 1)[0]
    confirm = re.search(r'action="/policies/promote" class="inline" data-confirm="([^"]*)"', row)
    assert confirm, "no promote form"
    return row.split('class="promotion"', 1)[1], html.unescape(confirm.group(1))


def _paired_text(difference: float, low: float, high: float, verdict: str) -> str:
    return f"{difference:+.4f} [{low:+.4f}, {high:+.4f}]: {verdict}"


def test_the_logging_policy_name_is_the_offline_evaluations() -> None:
    assert LOGGING_POLICY == EVALS_LOGGING_POLICY


def test_promote_shows_the_paired_differences_ope_log_stored(page: TestClient, evaluated: Evaluated) -> None:
    stored = _headline(evaluated.log, CANDIDATE)
    versus = stored.details["versus"]
    # the real run: bm25 beats the random logger on these decisions, and the active bm25 is its twin
    logging, active = versus[LOGGING_POLICY], versus["active"]
    assert logging["ci_low"] > 0 and active["ci_low"] <= 0 <= active["ci_high"]
    against_logging = _paired_text(
        logging["difference"],
        logging["ci_low"],
        logging["ci_high"],
        paired_verdict(CANDIDATE, LOGGING_POLICY, logging["ci_low"], logging["ci_high"]),
    )
    against_active = _paired_text(
        active["difference"], active["ci_low"], active["ci_high"], "not distinguishable on this log"
    )
    assert against_logging.endswith(f"{CANDIDATE} better")
    cell, confirm = _snapshot_cell(page, CANDIDATE)
    assert f"minus the logging policy, paired: {against_logging}" in html.unescape(cell)
    assert f'minus the active <span class="mono">{ACTIVE}</span>, paired: {html.escape(against_active)}' in cell
    ess = stored.details["diagnostics"]["joint"]["effective_sample_size"]
    assert f"95% normal (delta-method) · ESS {ess:.0f} (joint weight)" in cell
    assert f"Paired on the same decisions, minus the logging policy: {against_logging}." in confirm
    assert f"Paired on the same decisions, minus the active {ACTIVE}: {against_active}." in confirm
    # the page a browser without the script gets asks the same
    csrf = csrf_of(page.get("/policies").text)
    asked = page.post(
        "/policies/promote", data={"csrf_token": csrf, "version": CANDIDATE, "replaces": ACTIVE, "confirmed": ""}
    )
    assert asked.status_code == 200
    question = html.unescape(asked.text.split('id="confirm-question">', 1)[1].split("</p>", 1)[0])
    assert f"minus the logging policy: {against_logging}." in question and f"minus the active {ACTIVE}" in question
    assert evaluated.log.get_snapshot(CANDIDATE).status == "candidate"


def test_a_run_shows_its_method_ess_seed_command_and_the_runs_evaluated_with_it(
    page: TestClient, evaluated: Evaluated
) -> None:
    ope = _section(page, "ope")
    candidate, active = _run(ope, f"snapshot:{CANDIDATE}"), _run(ope, "active")
    stored = _headline(evaluated.log, CANDIDATE)
    # one evaluation's runs side by side, each naming the other
    order = re.findall(r'<td class="target">([^<]+)<', ope)
    assert abs(order.index("active") - order.index(f"snapshot:{CANDIDATE}")) == 1
    evaluation = stored.details["provenance"]["evaluation_id"]
    assert f"evaluated together with active (evaluation {evaluation[:8]})" in candidate
    assert f"evaluated together with snapshot:{CANDIDATE}" in active
    line = candidate.split("</tr>", 1)[0]
    assert "95% normal (delta-method)" in line and "seed 7" in line
    ess = stored.details["diagnostics"]["joint"]["effective_sample_size"]
    assert f"ESS {ess:.0f} (joint weight)" in line
    low, high = stored.details["logging_ci_low"], stored.details["logging_ci_high"]
    assert f"[{low:.4f}, {high:.4f}]" in line  # the logging policy's interval on the same decisions
    assert (
        f"paired: {_paired_text(*(stored.details['versus'][LOGGING_POLICY][k] for k in ('difference', 'ci_low', 'ci_high')), f'{CANDIDATE} better')}"
        in line
    )
    command = "memabra ope log --alpha 0.05 --estimators cdr --policy active --policy snapshot:bm25-b --seed 7"
    assert f'<code class="command" title="{command}">{command}</code>' in candidate
    # its paired differences, with each other target and the logging policy, as ope log printed them
    table = candidate.split('<table class="table compact paired-differences">', 1)[1].split("</table>", 1)[0]
    assert "<caption>Paired differences of bm25-b on the same decisions (95% normal (delta-method) intervals)" in table
    assert re.findall(r'<tr data-other="([^"]+)"><th scope="row">', table) == ["active", LOGGING_POLICY]
    assert f"{CANDIDATE} better" in table
    # every estimate's own effective sample size, folded under the run with the others
    assert '<th scope="col" class="num">Effective sample size</th>' in active


def test_a_library_run_and_a_training_run_say_how_they_were_made(page: TestClient, evaluated: Evaluated) -> None:
    ope = _section(page, "ope")
    library = _run(ope, "library-random")
    assert "Made through the library" in library and "seed 0" in library
    trained = _run(ope, "linear (trained from log)")
    assert "Trained by <code>train --from-log</code>: learner linear" in trained
    assert "the latest 20% held out for this evaluation" in trained and "480 decisions trained on" in trained
    assert "memabra train --alpha 0.05 --force --from-log --holdout 0.2 --learner linear" in html.unescape(trained)
    # forced although unsupported: compared with nothing, and said so where the promote is
    assert "an unsupported target is compared with nothing" in trained
    cell, confirm = _snapshot_cell(page, evaluated.trained)
    assert "not paired: its estimate is unsupported" in cell and "Paired on the same decisions" not in confirm


def test_a_run_stored_before_runs_kept_their_record_reads_not_recorded(page: TestClient) -> None:
    old = _run(_section(page, "ope"), f"snapshot:{OLD}")
    line = old.split("</tr>", 1)[0]
    assert "95% · method not recorded" in line and "ESS not recorded" in line and "seed not recorded" in line
    assert "paired difference not recorded" in line and "interval not recorded" in line
    assert 'Paired differences: <span class="muted">not recorded' in old
    assert 'How it was made (seed, interval method, command): <span class="muted">not recorded' in old
    cell, confirm = _snapshot_cell(page, OLD)
    assert 'minus the logging policy, paired: <span class="muted">paired difference not recorded' in cell
    assert "interval method not recorded · ESS not recorded" in cell
    assert "Paired on the same decisions" not in confirm and "cdr estimate 0.500 [0.400, 0.600]" in confirm


def test_the_command_line_is_rebuilt_from_the_recorded_options() -> None:
    invocation = {
        "command": "memabra ope log",
        "arguments": {
            "alpha": 0.05,
            "include_provisional": True,
            "logged_by": None,
            "policy": ["active", 'random:{"seed": 3}'],
            "store_all": False,
            "weights": "wc=0.8",
        },
    }
    expected = "memabra ope log --alpha 0.05 --include-provisional --policy active --policy 'random:{\"seed\": 3}' --weights wc=0.8"
    assert command_line(invocation) == expected
    assert command_line(None) is None and command_line({"arguments": {}}) is None


def test_a_long_command_is_cut_and_markup_in_it_shown_as_text(tmp_path: Path) -> None:
    made = {
        "evaluation_id": "e" * 32,
        "seed": 3,
        "ci_method": "normal",
        "ci_description": "95% normal (delta-method)",
        "invocation": {"command": "memabra ope log", "arguments": {"policy": ["<script>x</script>", "p" * 400]}},
    }
    with migrated_database("sqlite", tmp_path) as url, EpisodeLog(url) as log:
        log.record_ope_results(
            [OPEResult("long", "cdr", 0.5, 0.4, 0.6, 100, details={**OLD_DETAILS, "provenance": made, "versus": {}})]
        )
        with TestClient(create_app(log, token=TOKEN), follow_redirects=False) as client:
            sign_in(client)
            run = _run(_section(client, "ope"), "long")
    code = re.search(r'<code class="command" title="([^"]*)">([^<]*)</code>', run)
    assert code is not None
    assert "<script>" not in run and "&lt;script&gt;x&lt;/script&gt;" in code.group(2)
    assert len(html.unescape(code.group(2))) == 240 and code.group(2).endswith("…")
    assert html.unescape(code.group(1)).endswith("p" * 400)  # whole on hover


def _stored(policy: str, run_id: str, evaluation: str | None, hours_ago: float) -> OPEResult:
    made = None if evaluation is None else {"evaluation_id": evaluation, "seed": 1, "targets": ["x", "y"]}
    details = {**OLD_DETAILS, **({"provenance": made} if made else {})}
    created = NOW - timedelta(hours=hours_ago)
    return OPEResult(policy, "cdr", 0.5, 0.4, 0.6, 100, run_id=run_id, created_at=created, details=details)


def test_the_runs_of_one_evaluation_are_listed_together() -> None:
    from memabra._admin._ope_views import evaluations, ope_rows, ope_runs

    # a run stored between two runs of one evaluation (a slow store, or a clock step) stays apart
    runs = ope_runs(
        ope_rows(
            [
                _stored("x", "x-run", "e1", 1),
                _stored("other", "o-run", None, 2),
                _stored("y", "y-run", "e1", 3),
                _stored("z", "z-run", "e2", 4),
            ]
        )
    )
    assert [run.run_id for run in runs] == ["x-run", "y-run", "o-run", "z-run"]
    assert {key: [run.run_id for run in group] for key, group in evaluations(runs).items()} == {
        "e1": ["x-run", "y-run"]
    }


def test_a_cut_evaluation_is_left_out_whole_when_the_read_stops_at_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from memabra._admin import _policy_pages

    monkeypatch.setattr(_policy_pages, "OPE_ROWS", 4)
    rows = [
        _stored("new", "n-run", None, 1),
        _stored("x", "x-run", "e1", 2),
        _stored("y", "y-run", "e1", 2),
        _stored("x", "x-run", "e1", 2),  # the read stopped here: x's other estimates, and y's, may be cut
    ]
    assert [run.run_id for run in _policy_pages._whole_runs(rows)] == ["n-run"]


def test_the_confirmation_quotes_the_paired_difference_train_kept_in_its_metrics() -> None:
    from memabra._admin._promotion import promotion_check

    metrics = {
        "verdict": "beats logging policy",
        "estimator": "cdr",
        "supported": True,
        "estimate": 0.61,
        "ci_low": 0.55,
        "ci_high": 0.67,
        "logging_value": 0.40,
        "improvement": 0.21,
        "improvement_ci_low": 0.12,
        "improvement_ci_high": 0.30,
    }
    confirm = promotion_check("lin-2", metrics, [], "lin-1").confirmation("lin-1")
    assert (
        "Paired on the same decisions, minus the logging policy: +0.2100 [+0.1200, +0.3000]: lin-2 better." in confirm
    )
    older = promotion_check("lin-2", {k: v for k, v in metrics.items() if not k.startswith("improvement")}, [])
    assert older.paired_logging is None and "not recorded" in older.logging_note
    assert "Paired" not in older.confirmation()


def test_a_run_with_out_of_range_stored_numbers_and_times_reads_not_recorded() -> None:
    """JSON holds integers no float can (a corrupted or hand-edited row) and times a zone pushes
    past year 1: each reads as not recorded rather than a 500."""
    from memabra._admin._ope_views import ope_rows

    huge = 10**400
    details = {
        **OLD_DETAILS,
        "logging_value": huge,
        "logging_ci_low": huge,
        "logging_ci_high": -huge,
        "weight": "w",
        "diagnostics": {"w": {"effective_sample_size": huge}},
        "window": {"since": "0001-01-01T00:00:00+01:00", "first_decision_at": "9999-12-31T23:59:59-01:00"},
        "versus": {LOGGING_POLICY: {"difference": huge, "ci_low": 0.1, "ci_high": 0.2}},
        "training": {"learner": "bm25", "holdout": huge, "split_at": "0001-01-01T00:30:00+01:00"},
    }
    (row,) = ope_rows([OPEResult("p", "cdr", 0.5, 0.4, 0.6, 100, run_id="r", created_at=NOW, details=details)])
    assert row.logging_value is None and not row.record.logging_interval_recorded
    assert row.record.effective_sample_size is None and row.record.ess_text == "ESS of the w weight not recorded"
    assert row.window is not None and row.window.since is None and row.window.first is None
    assert row.record.versus_logging is not None and row.record.versus_logging.difference is None
    assert row.record.training is not None and row.record.training.holdout is None
    assert row.record.training.split_at is None
