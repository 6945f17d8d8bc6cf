"""The decision view's model: texts, the score's parts, and why each left-out candidate was left out."""

from __future__ import annotations

import html

from starlette.testclient import TestClient

from memabra._admin._views import decision_views
from memabra._feedback import RewardService
from memabra.storage import EpisodeLog

from .conftest import ClientFactory, explained_episode


def test_every_left_out_candidate_says_why() -> None:
    (view,) = decision_views(explained_episode(), None)
    by_id = {c.id: c for c in view.candidates}
    assert by_id["m-tea"].chosen and by_id["m-tea"].slot == 0 and by_id["m-tea"].reason == ""
    assert by_id["m-history"].reason.startswith("over the token budget: 500 tokens")
    assert by_id["m-history"].probability is None
    assert by_id["m-lyon"].reason.startswith(
        "exploration: slot 0 drew “Ann likes green tea” (p 0.150) over it (p 0.700)"
    )
    assert by_id["m-chess"].reason.startswith("stop: the router stopped at slot 1 (p(stop) 0.700")
    assert by_id["t-search"].reason.startswith("slots full: all 1 tool slots")
    # The score's parts: the logged prior (hyb_z) and what the router added to it.
    assert by_id["t-search"].prior == 1.9 and abs(by_id["t-search"].score - 1.3) < 1e-9
    assert abs(by_id["t-search"].learner + 0.6) < 1e-9  # type: ignore[operator]
    assert abs(by_id["t-weather"].learner - 0.5) < 1e-9  # type: ignore[operator]
    # High-scoring but not chosen: those that outrank a chosen one of their kind, best first.
    assert [c.id for c in view.missed] == ["m-history", "m-lyon"]
    assert view.slots[0].chosen_text == "Ann likes green tea" and view.slots[1].chosen_text == "stop"


def test_an_explored_stop_is_named_as_both() -> None:
    from dataclasses import replace

    from memabra import STOP_ID

    episode = explained_episode()
    sel = episode.selections[0]
    explored_stop = replace(sel.slots[1], probabilities=(0.6, 0.3, 0.1), chosen_probability=0.1, chosen_id=STOP_ID)
    sel = replace(sel, slots=(sel.slots[0], explored_stop, sel.slots[2]))
    (view,) = decision_views(replace(episode, selections=(sel,)), None)
    chess = next(c for c in view.candidates if c.id == "m-chess")
    assert chess.reason.startswith("stop, by exploration: slot 1 drew the stop option (p 0.100) over it (p 0.300)")


def test_the_episode_page_shows_the_decision_open_with_texts_and_reasons(
    make_client: ClientFactory, log: EpisodeLog
) -> None:
    episode = explained_episode()
    RewardService(log).record(episode)
    client: TestClient = make_client()
    page = html.unescape(client.get(f"/episodes/{episode.id}").text)
    assert '<details class="decision"' not in page and '<article class="decision"' in page
    for needle in (
        "Why not chosen",
        "Ann lives in Lyon",
        "over the token budget",
        "exploration: slot 0 drew “Ann likes green tea”",
        "stop: the router stopped at slot 1",
        "slots full",
        "chosen · slot 0",
        "+0.500",
        "-0.600",
    ):
        assert needle in page, needle
