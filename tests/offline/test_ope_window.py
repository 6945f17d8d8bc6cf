"""Each stored estimate records the data window it was computed on, so a run restricted with
``until`` does not read like one on the whole log."""

from __future__ import annotations

from datetime import datetime, timedelta

from memabra.evals.offline import evaluate_on_log
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog


def test_stored_results_carry_the_window_they_read(log: EpisodeLog, fill_log, lexical: Similarity) -> None:  # type: ignore[no-untyped-def]
    fill_log(log, n=60)
    times = sorted(d.selection.created_at for d in log.iter_decisions())
    target = RandomRouter(similarity=lexical, seed=5)
    whole = evaluate_on_log(log, target, policy="random", estimators=["sips", "dm"])
    window = dict(whole.results[0].details["window"])  # type: ignore[call-overload]
    as_of = datetime.fromisoformat(str(window.pop("as_of")))
    assert times[-1] < as_of
    assert window == {
        "since": None,
        "until": None,
        "first_decision_at": times[0].isoformat(),
        "last_decision_at": times[-1].isoformat(),
    }
    assert all(r.details["window"] == {**window, "as_of": as_of.isoformat()} for r in whole.results)

    until = times[30]
    since = times[0] - timedelta(hours=1)
    part = evaluate_on_log(log, target, policy="random", estimators=["sips"], since=since, until=until)
    window = part.results[0].details["window"]
    assert window["since"] == since.isoformat() and window["until"] == until.isoformat()
    assert window["last_decision_at"] == times[29].isoformat() and part.n_rounds == 30
    # what the log stores is what the admin reads back
    log.record_ope_results(list(part.results))
    stored = log.list_ope_runs(limit=50)
    assert {datetime.fromisoformat(str(r.details["window"]["until"])) for r in stored} == {until}  # type: ignore[index]
