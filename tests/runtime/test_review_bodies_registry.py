"""Review of the kept skill bodies: erasing a user forgets the bodies of their own skills, never
one that another user's logged decision still names (its review would lose what it injected)."""

from __future__ import annotations

from sqlalchemy import select

from factories import uniform_selection
from memabra import CandidateKind, Episode, Skill
from memabra._catalog import skill_items
from memabra._episode_document import episode_document
from memabra._feedback import RewardService
from memabra.storage import EpisodeLog
from memabra.storage._injected_bodies import InjectedBodyRow, body_digest

TEMPLATE = Skill("letters", "How to write letters.", "Open with Dear, close with Kind regards.")
EDITED = Skill("letters", "How to write letters.", "Open with Hi, close with Cheers.")


def _stored_bodies(log: EpisodeLog) -> dict[str, str]:
    with log.transactions.read() as s:
        return {r.digest: r.body for r in s.scalars(select(InjectedBodyRow))}


def _decision_with(log: EpisodeLog, user: str, skill: Skill) -> str:
    """An episode of ``user`` whose decision chose their own ``skill`` as registered now."""
    (item,) = (i for i in log.items(user, CandidateKind.SKILL) if i.owner == user)
    assert item.body == skill.body
    selection = uniform_selection(user, [item.as_candidate()], [item.id])
    episode = Episode(user_id=user, query=selection.context.query, selections=(selection,), answer="ok")
    RewardService(log).record(episode)
    return episode.id


def test_erasing_a_user_keeps_a_body_another_users_logged_decision_names(log: EpisodeLog) -> None:
    # two users given the same template skill as their own; bob's decision injected it, then he
    # edited his copy, so no registry row names the template's body any more but ann's
    log.put_items(skill_items([TEMPLATE], owner="ann"))
    log.put_items(skill_items([TEMPLATE], owner="bob"))
    bobs = _decision_with(log, "bob", TEMPLATE)
    log.put_items(skill_items([EDITED], owner="bob"))

    log.erase_user("ann", lambda: 0)

    assert body_digest(TEMPLATE.body) in _stored_bodies(log)
    episode = log.get_episode(bobs)
    (entry,) = episode_document(episode, log.injected_bodies(episode))["decisions"][0]["injected"]
    assert entry["body_status"] == "kept" and entry["body"] == TEMPLATE.body


def test_erasing_a_user_still_forgets_a_body_only_their_own_decisions_named(log: EpisodeLog) -> None:
    log.put_items(skill_items([TEMPLATE], owner="ann"))
    _decision_with(log, "ann", TEMPLATE)
    log.put_items(skill_items([EDITED], owner="bob"))

    log.erase_user("ann", lambda: 0)

    assert set(_stored_bodies(log).values()) == {EDITED.body}


def test_erasing_a_user_forgets_the_bodies_of_earlier_versions_of_their_skills(log: EpisodeLog) -> None:
    # ann's own skill in her words, offered in a turn of hers, then edited: no registry row names
    # the first version's body any more, but her decision did, as her own skill
    diary = Skill("diary", "Ann's diary habits.", "Ann writes about her divorce every Sunday.")
    log.put_items(skill_items([diary], owner="ann"))
    _decision_with(log, "ann", diary)
    log.put_items(skill_items([Skill("diary", "Ann's diary habits.", "Keep it short.")], owner="ann"))
    # a shared skill's old release that only ann's turns offered is release content: not hers to erase
    log.put_items(skill_items([TEMPLATE]))
    (shared,) = (i for i in log.items("ann", CandidateKind.SKILL) if i.owner == "")
    selection = uniform_selection("ann", [shared.as_candidate()], [shared.id])
    RewardService(log).record(Episode(user_id="ann", query="q", selections=(selection,), answer="ok"))
    log.put_items(skill_items([EDITED]))

    log.erase_user("ann", lambda: 0)

    assert set(_stored_bodies(log).values()) == {TEMPLATE.body, EDITED.body}
