"""A stored run's reward weights read the same way everywhere, and never two weights alike:
``weights_label`` wrote them with ``:g`` (six digits: wc=0.4 and wc=0.40000001 read alike) while
``ope online``'s notes kept every digit that tells them apart; and the admin's stored runs said
"as logged" without the reward scale the run recorded reading, which ``memabra ope runs`` shows
(after a ``memabra rewards recompute``, "as logged" alone reads as today's weights)."""

from __future__ import annotations

from starlette.testclient import TestClient

from memabra._records import OPEResult
from memabra.storage import EpisodeLog

from .conftest import Seeded
from .test_admin_ope import _line, _ope_section, _run

_TARGET = {"supported": True, "reason": "", "logging_value": 0.40, "recommended": True}


def test_weights_that_differ_never_read_alike() -> None:
    near = OPEResult("p", "cdr", 0.5, 0.4, 0.6, 10, details={"weights": {"ws": 1.0, "wc": 0.40000001}})
    assert near.weights_label == "ws=1 wc=0.40000001"
    assert OPEResult("p", "cdr", 0.5, 0.4, 0.6, 10, details={"weights": {"wc": 0.4}}).weights_label == "wc=0.4"
    from memabra._records_offline import weight_number  # here: the old code had none, and the rest must run

    assert [weight_number(v) for v in (1.0, 0.35, 1e-07, 2)] == ["1", "0.35", "1e-07", "2"]


def test_an_as_logged_run_shows_the_scale_it_recorded(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    scales = [{"version": "v1", "weights": {"ws": 1.0, "wc": 0.40000001}}]
    log.record_ope_results(
        [
            OPEResult(
                "logged", "cdr", 0.5, 0.4, 0.6, 300, details={**_TARGET, "weights": None, "reward_scales": scales}
            ),
            OPEResult("plain", "cdr", 0.5, 0.4, 0.6, 300, details={**_TARGET, "weights": None}, run_id="p"),
        ]
    )
    run = OPEResult("x", "cdr", 0.5, 0.4, 0.6, 1, details={"weights": None, "reward_scales": scales})
    assert run.weights_lines == ("as logged", "v1: ws=1 wc=0.40000001")
    section = _ope_section(client)
    line = _line(_run(section, "logged"))
    assert "weights: as logged" in line and "v1: ws=1 wc=0.40000001" in line
    assert "v1:" not in _line(_run(section, "plain"))
