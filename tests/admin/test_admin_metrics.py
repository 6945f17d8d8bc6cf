"""``GET /metrics``: the status as Prometheus text for a scrape, behind a credential of either
role (never anonymous, never a sign-in redirect), one status read shared by concurrent scrapes,
and ``memabra_status_up 0`` when the database cannot be read."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from foundation.test_metrics import parse_exposition, value
from sqlalchemy.exc import OperationalError

from factories import readable_final_rewards
from memabra import PolicySnapshot
from memabra._admin import ActiveSnapshotPolicy, _metrics_page, create_app
from memabra._errors import ConfigError
from memabra.storage import EpisodeLog, LearnerStore
from memabra.storage._learner import START

from .conftest import PASSWORD, TOKEN, ClientFactory, Seeded, sign_in

REVIEWER_TOKEN = "reviewer-token-9876543210"


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_metrics_need_a_credential(make_client: ClientFactory, seeded: Seeded) -> None:
    client = make_client(signed_in=False, reviewer_token=REVIEWER_TOKEN)
    anonymous = client.get("/metrics")
    assert anonymous.status_code == 401  # not a redirect to the sign-in page a scraper would follow
    assert anonymous.headers["content-type"].startswith("text/plain")
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    assert "memabra_" not in anonymous.text
    wrong = client.get("/metrics", headers=_bearer("not-the-token-at-all"))
    assert wrong.status_code == 401 and "memabra_" not in wrong.text


@pytest.mark.parametrize("token", [TOKEN, REVIEWER_TOKEN], ids=["operator", "reviewer"])
def test_a_bearer_token_of_either_role_reads_the_metrics(
    make_client: ClientFactory, seeded: Seeded, token: str
) -> None:
    client = make_client(signed_in=False, reviewer_token=REVIEWER_TOKEN)
    response = client.get("/metrics", headers=_bearer(token))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert response.headers["cache-control"] == "no-store"
    families = parse_exposition(response.text)
    assert value(families, "memabra_status_up") == 1
    assert value(families, "memabra_episodes") == len(seeded.episodes)
    assert value(families, "memabra_health_problem", check="deletions") == 0


def test_a_signed_in_session_reads_the_metrics(make_client: ClientFactory, seeded: Seeded) -> None:
    client = make_client(signed_in=False, password=PASSWORD)
    assert sign_in(client, PASSWORD).status_code == 303
    response = client.get("/metrics")
    assert response.status_code == 200 and value(parse_exposition(response.text), "memabra_status_up") == 1


def test_a_database_that_cannot_be_read_answers_up_0(
    make_client: ClientFactory, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client(signed_in=False)

    def down(self: EpisodeLog) -> Any:
        raise OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))

    monkeypatch.setattr(EpisodeLog, "status", down)
    response = client.get("/metrics", headers=_bearer(TOKEN))
    assert response.status_code == 200
    families = parse_exposition(response.text)
    assert value(families, "memabra_status_up") == 0 and "memabra_health_problem" not in families


def test_scrapes_together_share_one_status_read(
    make_client: ClientFactory, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client(signed_in=False)
    reads: list[int] = []
    real = EpisodeLog.status

    def counted(self: EpisodeLog, *args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(EpisodeLog, "status", counted)
    monkeypatch.setattr(_metrics_page, "SHARED_READ_S", 60.0)
    first = client.get("/metrics", headers=_bearer(TOKEN)).text
    assert client.get("/metrics", headers=_bearer(TOKEN)).text == first
    assert len(reads) == 1
    monkeypatch.setattr(_metrics_page, "SHARED_READ_S", 0.0)
    client.get("/metrics", headers=_bearer(TOKEN))
    assert len(reads) == 2


def test_the_learner_check_covers_the_policy_in_service_only(
    log: EpisodeLog, make_client: ClientFactory, seeded: Seeded
) -> None:
    """As the policies page checks it: a policy the log served once keeps its checkpoint, and its
    learner stays behind for good; its figures are still there, its check is not."""
    store = LearnerStore(log.engine)
    store.commit(
        PolicySnapshot("gone", "gone-1", b"model"),
        previous=START,
        position=readable_final_rewards(store)[0].position,
        learned=1,
    )
    client = make_client(signed_in=False, current_policy=ActiveSnapshotPolicy(log, "test"))
    families = parse_exposition(client.get("/metrics", headers=_bearer(TOKEN)).text)
    checked = {dict(labels).get("policy") for labels in families["memabra_health_problem"].samples}
    assert checked == {None, "test"}
    assert {dict(labels)["policy"] for labels in families["memabra_learner_backlog"].samples} == {"gone", "test"}


def test_the_admin_reports_health_against_its_own_max_lag(make_client: ClientFactory, seeded: Seeded) -> None:
    """`memabra admin --max-lag` is the bound the page and the scrape check against, as `memabra
    status --max-lag` is the probe's: the seeded log's unlearned rewards, final moments ago, are
    fine under a long bound and a problem on both under one shorter than their wait."""
    for lag, problem in ((timedelta(days=3650), 0), (timedelta(microseconds=1), 1)):
        client = make_client(max_lag=lag)
        families = parse_exposition(client.get("/metrics").text)
        assert value(families, "memabra_status_max_lag_seconds") == lag.total_seconds()
        problems = families["memabra_health_problem"].samples
        assert sum(v for labels, v in problems.items() if dict(labels)["check"] == "learner") == problem, problems
        page = client.get("/policies").text
        assert ("no reward has waited longer than" in page) is not bool(problem)


def test_a_max_lag_that_is_not_positive_is_refused(log: EpisodeLog) -> None:
    with pytest.raises(ConfigError, match="max_lag must be a positive duration"):
        create_app(log, token=TOKEN, max_lag=timedelta(0))
