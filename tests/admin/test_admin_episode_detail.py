"""One episode's page: small probabilities stay readable, and the feedback forms neither pick a
rating for the reviewer nor let feedback on a final reward look as if it counted."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta

import pytest
from starlette.testclient import TestClient

from memabra import STOP_ID, CandidateKind, Episode, RewardConfig, SlotDraw
from memabra._admin._views import decision_views, format_probability
from memabra._feedback import RewardService
from memabra._records import utcnow
from memabra.storage import EpisodeLog

from .conftest import ClientFactory, Seeded, explained_episode


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "–"),
        (0.0, "0"),
        (1.0, "1.00"),
        (0.993, "0.993"),
        (0.15, "0.150"),
        (0.0011, "0.00110"),
        (0.000997, "9.97e-04"),
        (1.13e-06, "1.13e-06"),
    ],
)
def test_a_probability_keeps_three_significant_digits(value: float | None, shown: str) -> None:
    assert format_probability(value) == shown


def _long_tail_episode() -> Episode:
    """The explained decision whose tool slot stopped, where a tool had a one-in-100,000 chance."""
    episode = explained_episode()
    sel = episode.selections[0]
    tools = SlotDraw(2, CandidateKind.TOOL, ("t-search", "t-weather", STOP_ID), (0.00001, 0.00999, 0.99), STOP_ID, 0.99)
    return replace(episode, selections=(replace(sel, slots=(*sel.slots[:2], tools)),))


def test_small_probabilities_do_not_read_as_zero(make_client: ClientFactory, log: EpisodeLog) -> None:
    episode = _long_tail_episode()
    RewardService(log).record(episode)
    page = make_client().get(f"/episodes/{episode.id}").text
    search = page.split('data-candidate="t-search"', 1)[1].split("</tr>", 1)[0]
    assert ">1.00e-05</td>" in search and "0.0000" not in search
    assert "(p(stop) 0.990, its p 1.00e-05)" in search  # the reason says it the same way
    (view,) = decision_views(episode, None)
    assert next(c for c in view.candidates if c.id == "t-search").probability == 0.00001


def _rating_form(page: str) -> str:
    return page.split('id="rating-form"', 1)[1].split("</form>", 1)[0]


def test_no_rating_is_chosen_for_the_reviewer(client: TestClient, seeded: Seeded) -> None:
    form = _rating_form(client.get(f"/episodes/{seeded.episodes[10]}").text)
    radios = re.findall(r'<input type="radio" name="rating"[^>]*>', form)
    assert len(radios) == 5
    assert not any("checked" in r for r in radios) and all("required" in r for r in radios)


def test_feedback_on_a_final_reward_says_it_will_be_late_before_it_is_sent(client: TestClient, seeded: Seeded) -> None:
    final = client.get(f"/episodes/{seeded.episodes[0]}").text  # finalised by the seed
    warning = final.split('id="feedback-late-warning"', 1)[1].split("</div>", 1)[0]
    assert "late" in warning and "not applied" in warning
    assert "Record late rating" in final and "Record late correction" in final
    open_ = client.get(f"/episodes/{seeded.episodes[10]}").text
    assert 'id="feedback-late-warning"' not in open_ and "Record rating" in open_


def test_feedback_after_the_window_closed_is_announced_as_late_before_the_reward_is_final(
    make_client: ClientFactory, log: EpisodeLog
) -> None:
    # The window closed an hour ago, but no learner step has finalised the reward yet: the log
    # already scores feedback as late, so the page must say so before the reviewer sends it.
    episode = replace(explained_episode(), created_at=utcnow() - timedelta(hours=2))
    RewardService(log, RewardConfig(feedback_window=timedelta(hours=1))).record(episode)
    client = make_client()
    page = client.get(f"/episodes/{episode.id}").text
    warning = page.split('id="feedback-late-warning"', 1)[1].split("</div>", 1)[0]
    assert "window closed" in warning and "not applied" in warning
    assert "Record late rating" in page and "Record late correction" in page
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert csrf is not None
    sent = client.post(
        f"/episodes/{episode.id}/feedback",
        data={"csrf_token": csrf.group(1), "idempotency_key": "k-late", "action": "rating", "rating": "5"},
    )
    assert sent.status_code == 303 and "notice=feedback-late" in sent.headers["location"]


def test_an_open_episode_says_until_when_feedback_counts(make_client: ClientFactory, log: EpisodeLog) -> None:
    episode = explained_episode()
    RewardService(log, RewardConfig(feedback_window=timedelta(hours=1))).record(episode)
    page = make_client().get(f"/episodes/{episode.id}").text
    assert 'id="feedback-late-warning"' not in page
    assert 'id="feedback-window"' in page and "changes this episode's reward" in page


def _long_thread(log: EpisodeLog, turns: int) -> list[Episode]:
    """``turns`` episodes of one thread of dana's, a minute apart, oldest first."""
    start = utcnow() - timedelta(days=1)
    episodes = [
        Episode(
            user_id="dana",
            query=f"dana asks {turn}",
            answer=f"answer {turn}",
            thread_id="thread-dana",
            turn=turn,
            created_at=start + timedelta(minutes=turn),
        )
        for turn in range(turns)
    ]
    for episode in episodes:
        log.log_episode(episode)
    return episodes


def test_an_old_turn_of_a_long_thread_shows_itself_and_links_its_earlier_turns(
    client: TestClient, log: EpisodeLog
) -> None:
    episodes = _long_thread(log, 60)
    page = client.get(f"/episodes/{episodes[3].id}").text
    conversation = page.split('id="conversation"', 1)[1].split("</section>", 1)[0]
    # the thread's latest turns are about something else: this turn is shown, not 50 later ones
    assert "dana asks 3" in conversation and "answer 3" in conversation
    assert "dana asks 59" not in conversation
    earlier = re.search(r'<a id="earlier-turns" href="([^"]+)"', conversation)
    assert earlier is not None
    listing = client.get(earlier.group(1).replace("&amp;", "&")).text
    assert "dana asks 3" in listing and "dana asks 0" in listing and "dana asks 4" not in listing


def test_the_latest_turn_of_a_long_thread_says_its_earlier_turns_are_not_shown(
    client: TestClient, log: EpisodeLog
) -> None:
    episodes = _long_thread(log, 60)
    page = client.get(f"/episodes/{episodes[-1].id}").text
    conversation = page.split('id="conversation"', 1)[1].split("</section>", 1)[0]
    assert conversation.count('class="bubble user"') == 50 and "this episode" in conversation
    assert "dana asks 10" in conversation and "dana asks 9<" not in conversation
    assert 'id="earlier-turns"' in conversation


def test_a_short_thread_shows_every_turn_and_no_link(client: TestClient, log: EpisodeLog) -> None:
    episodes = _long_thread(log, 5)
    conversation = client.get(f"/episodes/{episodes[2].id}").text.split('id="conversation"', 1)[1]
    conversation = conversation.split("</section>", 1)[0]
    assert conversation.count('class="bubble user"') == 5 and 'id="earlier-turns"' not in conversation
