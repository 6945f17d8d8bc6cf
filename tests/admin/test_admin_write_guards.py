"""Write guards that do not depend on the backend (run on SQLite): input, CSRF, origin, read-only."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from memabra.storage import EpisodeLog

from .conftest import TOKEN, ClientFactory, Seeded, csrf_of, feedback_form


@pytest.fixture
def log(sqlite_log: EpisodeLog) -> EpisodeLog:
    return sqlite_log


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"rating": "9"}, "rating"),
        ({"rating": ""}, "rating"),
        ({"action": "delete"}, "action"),
        ({"idempotency_key": ""}, "idempotency_key"),
    ],
)
def test_bad_feedback_is_refused(
    client: TestClient, seeded: Seeded, log: EpisodeLog, changes: dict[str, str], field: str
) -> None:
    episode_id = seeded.episodes[10]
    fields = {**feedback_form(client, episode_id, "rating-form"), "rating": "4", **changes}
    response = client.post(f"/episodes/{episode_id}/feedback", data=fields)
    assert response.status_code == 400
    assert field in response.text
    assert log.get_episode(episode_id).feedback == ()


def test_feedback_on_an_unknown_episode_or_decision(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    fields = feedback_form(client, seeded.episodes[10], "correction-form")
    assert client.post("/episodes/" + "f" * 32 + "/feedback", data=fields).status_code == 404
    response = client.post(f"/episodes/{seeded.episodes[10]}/feedback", data={**fields, "decision_id": "nope"})
    assert response.status_code == 400 and "not part of episode" in response.text
    assert log.get_episode(seeded.episodes[10]).feedback == ()


@pytest.mark.parametrize("csrf", [None, "", "forged-token"])
def test_writes_need_the_csrf_token(client: TestClient, seeded: Seeded, log: EpisodeLog, csrf: str | None) -> None:
    episode_id = seeded.episodes[10]
    fields = feedback_form(client, episode_id, "correction-form")
    if csrf is None:
        del fields["csrf_token"]
    else:
        fields["csrf_token"] = csrf
    response = client.post(f"/episodes/{episode_id}/feedback", data=fields)
    assert response.status_code == 403 and "CSRF" in response.text
    assert (
        client.post(
            "/policies/promote", data={"version": "test-v3", **({"csrf_token": csrf} if csrf is not None else {})}
        ).status_code
        == 403
    )
    assert log.get_episode(episode_id).feedback == ()
    assert log.get_snapshot("test-v3").status == "candidate"
    delete = client.post(
        f"/episodes/{episode_id}/delete", data={"csrf_token": csrf} if csrf is not None else {}
    ).status_code
    assert delete == 403 and log.get_episode(episode_id).id == episode_id


def test_writes_from_another_origin_are_refused(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    token = csrf_of(client.get("/policies").text)
    response = client.post(
        "/policies/promote",
        data={"csrf_token": token, "version": "test-v3"},
        headers={"Origin": "https://evil.example"},
    )
    assert response.status_code == 403
    assert log.get_snapshot("test-v3").status == "candidate"


def test_read_only_refuses_every_write(make_client: ClientFactory, seeded: Seeded, log: EpisodeLog) -> None:
    client = make_client(read_only=True)
    page = client.get(f"/episodes/{seeded.episodes[10]}").text
    assert "read-only" in page and 'id="correction-form"' not in page and 'id="delete-episode"' not in page
    assert ">Promote<" not in client.get("/policies").text
    token = csrf_of(page)
    writes = [
        (f"/episodes/{seeded.episodes[10]}/feedback", {"action": "correction", "idempotency_key": "ro-1"}),
        (f"/episodes/{seeded.episodes[10]}/feedback", {"action": "rating", "rating": "4", "idempotency_key": "ro-2"}),
        ("/policies/promote", {"version": "test-v3"}),
        ("/policies/rollback", {"version": "test-v2"}),
        (f"/episodes/{seeded.episodes[10]}/delete", {}),
    ]
    for path, data in writes:
        assert client.post(path, data={"csrf_token": token, **data}).status_code == 403
        bearer = client.post(path, data=data, headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 403 and "read-only" in bearer.text
    assert log.get_episode(seeded.episodes[10]).feedback == ()
    assert [log.get_snapshot(v).status for v in ("test-v2", "test-v3")] == ["active", "candidate"]
