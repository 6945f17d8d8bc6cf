"""Writes on every backend: feedback through the reward service, promote and roll back."""

from __future__ import annotations

from sqlalchemy import text
from starlette.testclient import TestClient

from memabra.storage import EpisodeFilter, EpisodeLog

from .conftest import TOKEN, ClientFactory, Seeded, csrf_of, feedback_form


def test_record_a_correction(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    episode_id = seeded.episodes[9]
    before = log.get_reward(episode_id)
    assert before is not None and before.components.c == 0.0
    fields = feedback_form(client, episode_id, "correction-form")
    response = client.post(f"/episodes/{episode_id}/feedback", data={**fields, "correction": "I live in Paris"})
    assert response.status_code == 303
    assert response.headers["location"] == f"/episodes/{episode_id}?notice=feedback-stored#feedback"
    after = log.get_reward(episode_id)
    assert after is not None and after.components.c == 1.0 and after.total < before.total
    stored = log.get_episode(episode_id).feedback[-1]
    assert stored.source == "admin" and dict(stored.payload) == {"correction": "I live in Paris"}
    page = client.get(response.headers["location"]).text
    assert 'id="corrected-badge"' in page and "Feedback recorded" in page and "I live in Paris" in page
    corrected = {e.id for e in log.list_episodes(EpisodeFilter(corrected=True)).items}
    assert episode_id in corrected
    # Posting the same form again is a no-op.
    again = client.post(f"/episodes/{episode_id}/feedback", data={**fields, "correction": "I live in Paris"})
    assert again.headers["location"].endswith("notice=feedback-duplicate#feedback")
    assert len(log.get_episode(episode_id).feedback) == 1


def test_rate_an_answer(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    episode_id = seeded.episodes[10]
    fields = feedback_form(client, episode_id, "rating-form")
    response = client.post(f"/episodes/{episode_id}/feedback", data={**fields, "rating": "5", "comment": "spot on"})
    assert response.status_code == 303
    reward = log.get_reward(episode_id)
    assert reward is not None and reward.components.s == 1.0
    assert dict(log.get_episode(episode_id).feedback[-1].payload) == {"rating": 5, "comment": "spot on"}


def test_feedback_on_a_final_reward_is_stored_late(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    episode_id = seeded.episodes[0]
    before = log.get_reward(episode_id)
    fields = feedback_form(client, episode_id, "rating-form")
    response = client.post(f"/episodes/{episode_id}/feedback", data={**fields, "rating": "1"})
    assert response.headers["location"].endswith("notice=feedback-late#feedback")
    assert log.get_reward(episode_id) == before
    assert log.get_episode(episode_id).feedback[-1].late


def test_promote_and_roll_back(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    token = csrf_of(client.get("/policies").text)
    response = client.post("/policies/promote", data={"csrf_token": token, "version": "test-v3"})
    assert response.status_code == 303 and response.headers["location"] == "/policies?notice=promoted"
    assert [log.get_snapshot(v).status for v in ("test-v1", "test-v2", "test-v3")] == ["retired", "retired", "active"]
    assert "Snapshot promoted" in client.get(response.headers["location"]).text
    response = client.post("/policies/rollback", data={"csrf_token": token, "version": "test-v3"})
    assert response.status_code == 303
    assert [log.get_snapshot(v).status for v in ("test-v1", "test-v2", "test-v3")] == ["retired", "active", "retired"]


def test_bearer_token_writes_without_a_csrf_token(make_client: ClientFactory, seeded: Seeded, log: EpisodeLog) -> None:
    # A header is never sent by a browser on its own, so it needs no CSRF token.
    client = make_client(signed_in=False)
    response = client.post(
        "/policies/promote", data={"version": "test-v3"}, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert response.status_code == 303
    assert log.get_snapshot("test-v3").status == "active"
    wrong = client.post(
        "/policies/rollback", data={"version": "test-v3"}, headers={"Authorization": "Bearer wrong-token-value"}
    )
    assert wrong.status_code == 401
    assert log.get_snapshot("test-v3").status == "active"


def test_roll_back_needs_an_active_snapshot_with_a_parent(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    token = csrf_of(client.get("/policies").text)
    response = client.post("/policies/rollback", data={"csrf_token": token, "version": "test-v3"})
    assert response.status_code == 409 and "not active" in response.text
    client.post("/policies/promote", data={"csrf_token": token, "version": "test-v1"})
    page = client.get("/policies").text  # the button's confirmation names where the rollback goes
    assert 'data-confirm="Roll back test-v1? test-v2 becomes active again."' in page
    # a rollback returns to what the promote replaced (schema revision 0011), not only to a parent
    response = client.post("/policies/rollback", data={"csrf_token": token, "version": "test-v1"})
    assert response.status_code == 303 and log.get_snapshot("test-v2").status == "active"
    client.post("/policies/promote", data={"csrf_token": token, "version": "test-v1"})
    with log.engine.begin() as conn:  # as if promoted before revision 0011: the parent is all there is
        conn.execute(text("UPDATE policy_snapshots SET previous_active = NULL WHERE version = 'test-v1'"))
    assert "Roll back test-v1?" not in client.get("/policies").text  # no parent, nothing replaced: no button
    response = client.post("/policies/rollback", data={"csrf_token": token, "version": "test-v1"})
    assert response.status_code == 409 and "no parent" in response.text
    assert client.post("/policies/promote", data={"csrf_token": token, "version": "nope"}).status_code == 404
    assert client.post("/policies/promote", data={"csrf_token": token}).status_code == 400
    assert log.get_snapshot("test-v1").status == "active"
