"""The policies page shows which learner checkpoints hold episodes back from retention: a policy the
log no longer serves keeps its checkpoint, and retention waits for its learner for good."""

from __future__ import annotations

from factories import readable_final_rewards
from memabra import PolicySnapshot
from memabra._admin import ActiveSnapshotPolicy
from memabra.storage import EpisodeLog, LearnerStore
from memabra.storage._learner import START

from .conftest import ClientFactory, Seeded


def _learning(make_client: ClientFactory, log: EpisodeLog, policy: str | None) -> str:
    client = make_client(current_policy=None if policy is None else ActiveSnapshotPolicy(log, policy))
    return client.get("/policies").text.split('id="learning"', 1)[1].split("</section>", 1)[0]


def _row(card: str, policy: str) -> str:
    return card.split(f'data-policy="{policy}"', 1)[1].split("</tr>", 1)[0]


def test_a_learner_of_a_policy_no_longer_served_is_shown_holding_retention_back(
    make_client: ClientFactory, seeded: Seeded, log: EpisodeLog
) -> None:
    finals = readable_final_rewards(LearnerStore(log.engine), at_least=2)
    # policy "gone" learned from the log once and read its first final reward; "test" serves now
    LearnerStore(log.engine).commit(
        PolicySnapshot("gone", "gone-1", b"model"), previous=START, position=finals[0].position, learned=1
    )
    behind = {h.policy: h.behind for h in log.retention_holds()}["gone"]
    assert behind == len(finals) - 1

    serving_test = _learning(make_client, log, "test")
    gone = _row(serving_test, "gone")
    assert f"{behind} kept from retention" in gone
    assert "memabra policies forget-learner --policy gone" in serving_test
    assert "not served" in gone
    # without --policy the view cannot tell which policy serves: every holding checkpoint is named
    unchecked = _learning(make_client, log, None)
    assert f"{behind} kept from retention" in _row(unchecked, "gone")
    assert "memabra policies forget-learner --policy gone" in unchecked

    log.forget_learner("gone")
    after = _learning(make_client, log, "test")
    assert "kept from retention" not in after and "forget-learner" not in after


def test_a_policy_without_a_learner_checkpoint_holds_nothing_back(
    make_client: ClientFactory, seeded: Seeded, log: EpisodeLog
) -> None:
    card = _learning(make_client, log, "test")  # the seeded log has final rewards but no checkpoint
    assert "kept from retention" not in card and "forget-learner" not in card
