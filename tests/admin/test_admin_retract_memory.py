"""The admin's correction form can name a memory the episode used that was wrong: it is retired by
the rule the agent's own feedback follows (:mod:`memabra._retraction`). Before, the form posted
straight to the reward service: a ``retract_memory`` only counted in the reward and the memory
stayed current, offered again on the next turn."""

from __future__ import annotations

from memabra import Candidate, CandidateKind, Episode, MemoryStatus, SQLMemory
from memabra._feedback import RewardService
from memabra.storage import EpisodeLog

from .conftest import NOW, ClientFactory, feedback_form, slate


def _episode_offering(log: EpisodeLog, memory: SQLMemory) -> tuple[str, str]:
    wrong = memory.remember("ann", "I live in Hobart")
    cand = Candidate(wrong.id, CandidateKind.MEMORY, wrong.text, 8, {"owner": "ann"})
    sel = slate("ann", [cand], [wrong.id], version="test-v2", query="where do I live?", created_at=NOW)
    episode = Episode(user_id="ann", query="where do I live?", selections=(sel,), created_at=NOW)
    RewardService(log).record(episode)
    return episode.id, wrong.id


def test_the_correction_form_retires_the_memory_it_names(make_client: ClientFactory, log: EpisodeLog) -> None:
    memory = SQLMemory(log)
    episode_id, memory_id = _episode_offering(log, memory)
    client = make_client()
    page = client.get(f"/episodes/{episode_id}").text
    form = page.split('id="correction-form"', 1)[1].split("</form>", 1)[0]
    assert f'<option value="{memory_id}">I live in Hobart</option>' in form  # offered as a choice

    fields = feedback_form(client, episode_id, "correction-form")
    sent = {**fields, "correction": "I never lived there", "retract_memory": memory_id}
    response = client.post(f"/episodes/{episode_id}/feedback", data=sent)
    assert response.status_code == 303 and "notice=feedback-stored" in response.headers["location"]
    assert memory.get("ann", memory_id).status is MemoryStatus.RETIRED
    last = memory.history("ann", memory_id)[-1]
    assert (last.episode_id, last.reason) == (episode_id, f"retracted by the user on episode {episode_id}")
    assert client.post(f"/episodes/{episode_id}/feedback", data=sent).status_code == 303  # resubmitted
    assert len([c for c in memory.history("ann", memory_id) if c.action.value == "retired"]) == 1
    payloads = [dict(f.payload) for f in log.get_episode(episode_id).feedback if f.source == "admin"]
    assert payloads == [{"correction": "I never lived there", "retract_memory": memory_id}]


def test_another_users_memory_named_by_the_form_is_not_retired(make_client: ClientFactory, log: EpisodeLog) -> None:
    memory = SQLMemory(log)
    episode_id, _ = _episode_offering(log, memory)
    bobs = memory.remember("bob", "I live in Oslo")
    client = make_client()
    fields = feedback_form(client, episode_id, "correction-form")
    response = client.post(f"/episodes/{episode_id}/feedback", data={**fields, "retract_memory": bobs.id})
    assert response.status_code == 303 and "notice=feedback-stored" in response.headers["location"]
    assert memory.get("bob", bobs.id).status is MemoryStatus.ACTIVE
    assert [dict(f.payload) for f in log.get_episode(episode_id).feedback if f.source == "admin"] == [
        {"correction": True, "retract_memory": bobs.id}
    ]
