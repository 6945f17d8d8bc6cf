"""Feedback forms: an id with URL-reserved characters opens and takes feedback, and a form submitted
twice with different values is a conflict (the first stands), not a silent no-op."""

from __future__ import annotations

import html
import json
import re

import pytest
from starlette.testclient import TestClient

from memabra import Episode, UnknownEpisodeError
from memabra._feedback import RewardService
from memabra.storage import EpisodeLog

from .conftest import ClientFactory, Seeded, csrf_of, feedback_form, pool, slate

ODD_ID = "odd/id?x=1#h"  # the library allows any id up to 32 characters


def _odd_episode(log: EpisodeLog, episode_id: str = ODD_ID) -> Episode:
    from .conftest import NOW

    sel = slate("zed", pool("zed"), ["mem-zed-0"], version="test-v2", query="odd one", created_at=NOW)
    episode = Episode(user_id="zed", query="odd one", selections=(sel,), id=episode_id, created_at=NOW)
    RewardService(log).record(episode)
    return episode


def _hrefs(page: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="(/episodes/[^"]+)"', page)]


def test_an_id_with_reserved_characters_opens_from_the_list_and_takes_feedback(
    make_client: ClientFactory, log: EpisodeLog
) -> None:
    _odd_episode(log)
    _odd_episode(log, "a/feedback")  # an id that ends like the feedback route
    client = make_client()
    links = {h for h in _hrefs(client.get("/episodes").text) if "odd" in h or "feedback" in h}
    assert links == {"/episodes/odd%2Fid%3Fx%3D1%23h", "/episodes/a%2Ffeedback"}
    page = client.get("/episodes/odd%2Fid%3Fx%3D1%23h")
    assert page.status_code == 200 and "odd one" in page.text
    actions = set(re.findall(r'<form method="post" action="([^"]+)"', page.text))
    assert "/episodes/odd%2Fid%3Fx%3D1%23h/feedback" in actions
    fields = feedback_form(client, "odd%2Fid%3Fx%3D1%23h", "rating-form")
    response = client.post("/episodes/odd%2Fid%3Fx%3D1%23h/feedback", data={**fields, "rating": "4"})
    assert response.status_code == 303
    assert response.headers["location"] == "/episodes/odd%2Fid%3Fx%3D1%23h?notice=feedback-stored#feedback"
    assert [dict(f.payload) for f in log.get_episode(ODD_ID).feedback] == [{"rating": 4}]
    assert client.get("/episodes/a%2Ffeedback").status_code == 200
    # a "/" sent unencoded is a path, not an id: no such page (never another episode)
    assert client.get("/episodes/odd/id").status_code == 404


def test_signing_in_returns_to_an_encoded_episode_url(make_client: ClientFactory, log: EpisodeLog) -> None:
    _odd_episode(log)
    client = make_client(signed_in=False)
    response = client.get("/episodes/odd%2Fid%3Fx%3D1%23h")
    assert response.status_code == 303
    assert "next=%2Fepisodes%2Fodd%252Fid%253Fx%253D1%2523h" in response.headers["location"]


def test_a_form_resubmitted_with_another_rating_is_a_conflict(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    episode_id = seeded.episodes[11]
    fields = feedback_form(client, episode_id, "rating-form")
    first = client.post(f"/episodes/{episode_id}/feedback", data={**fields, "rating": "5"})
    assert first.headers["location"].endswith("notice=feedback-stored#feedback")
    reward = log.get_reward(episode_id)
    # Back, change the rating, add a comment, submit the same form again
    again = client.post(f"/episodes/{episode_id}/feedback", data={**fields, "rating": "1", "comment": "actually bad"})
    assert again.status_code == 409
    notice = html.unescape(re.search(r'id="feedback-conflict"[^>]*>([^<]+)<', again.text).group(1))  # type: ignore[union-attr]
    assert "already submitted" in notice and '{"rating": 5}' in notice and "stands" in notice
    assert "fresh form below" in notice
    assert [dict(f.payload) for f in log.get_episode(episode_id).feedback] == [{"rating": 5}]
    assert log.get_reward(episode_id) == reward
    # the page it answers with carries a new form, which records
    fresh = dict(
        re.findall(
            r'<input type="hidden" name="([^"]+)" value="([^"]*)"',
            again.text.split('id="rating-form"', 1)[1].split("</form>", 1)[0],
        )
    )
    assert fresh["idempotency_key"] != fields["idempotency_key"]
    second = client.post(f"/episodes/{episode_id}/feedback", data={**fresh, "rating": "1", "comment": "actually bad"})
    assert second.headers["location"].endswith("notice=feedback-stored#feedback")
    assert [dict(f.payload) for f in log.get_episode(episode_id).feedback][-1] == {
        "rating": 1,
        "comment": "actually bad",
    }


def test_the_same_form_with_the_same_values_stays_a_no_op(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    episode_id = seeded.episodes[12]
    fields = feedback_form(client, episode_id, "rating-form")
    for expected in ("stored", "duplicate", "duplicate"):
        response = client.post(f"/episodes/{episode_id}/feedback", data={**fields, "rating": "2", "comment": "meh"})
        assert response.status_code == 303 and response.headers["location"].endswith(
            f"notice=feedback-{expected}#feedback"
        )
    assert len(log.get_episode(episode_id).feedback) == 1
    # a correction form resubmitted with other text conflicts the same way
    correction = feedback_form(client, episode_id, "correction-form")
    client.post(f"/episodes/{episode_id}/feedback", data={**correction, "correction": "I live in Paris"})
    conflict = client.post(f"/episodes/{episode_id}/feedback", data={**correction, "correction": "I live in Rome"})
    assert conflict.status_code == 409 and "earlier correction" in html.unescape(conflict.text)
    assert [dict(f.payload) for f in log.get_episode(episode_id).feedback][-1] == {"correction": "I live in Paris"}


def test_an_episode_downloads_as_the_json_episodes_show_writes(make_client: ClientFactory, log: EpisodeLog) -> None:
    from memabra._episode_document import episode_document

    _odd_episode(log)
    client = make_client()
    page = client.get("/episodes/odd%2Fid%3Fx%3D1%23h").text
    assert 'href="/episodes/odd%2Fid%3Fx%3D1%23h?format=json"' in page
    response = client.get("/episodes/odd%2Fid%3Fx%3D1%23h?format=json")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    # the id's quote-free safe characters only: a "/" or '"' in a header's file name would break it
    assert response.headers["content-disposition"] == 'attachment; filename="episode-odd_id_x_1_h.json"'
    # the document ``episodes show --json`` writes, each decision with its MemPO labels (none here)
    episode = log.get_episode(ODD_ID)
    labels = log.all_memory_scores([sel.id for sel in episode.selections])
    shown = response.json()
    expected = json.loads(json.dumps(episode_document(episode, labels=labels)))
    # the one key that differs: each export says when it was made
    assert shown.pop("exported_at") <= expected.pop("exported_at")
    assert shown == expected
    assert [d.pop("mempo") for d in shown["decisions"]] == [[]]
    unlabelled = json.loads(json.dumps(episode_document(episode)))
    del unlabelled["exported_at"]
    assert shown == unlabelled
    assert response.json()["id"] == ODD_ID and response.json()["decisions"]
    assert make_client(signed_in=False).get("/episodes/odd%2Fid%3Fx%3D1%23h?format=json").status_code == 303
    assert client.get("/episodes/0123456789abcdef0123456789abcdef?format=json").status_code == 404


def test_an_operator_deletes_an_episode_and_the_log_says_who(
    make_client: ClientFactory, log: EpisodeLog, caplog: pytest.LogCaptureFixture
) -> None:
    _odd_episode(log)
    client = make_client()
    page = client.get("/episodes/odd%2Fid%3Fx%3D1%23h").text
    form = page.split('id="delete-episode"', 1)[0].rsplit("<form", 1)[1]
    assert 'action="/episodes/odd%2Fid%3Fx%3D1%23h/delete"' in form
    with caplog.at_level("WARNING", logger="memabra"):
        response = client.post("/episodes/odd%2Fid%3Fx%3D1%23h/delete", data={"csrf_token": csrf_of(page)})
    assert response.status_code == 303 and response.headers["location"] == "/episodes?notice=episode-deleted"
    with pytest.raises(UnknownEpisodeError):
        log.get_episode(ODD_ID)
    (record,) = [r for r in caplog.records if "deleted episode" in r.getMessage()]
    assert f"deleted episode {ODD_ID} of user" in record.getMessage() and "token" in record.getMessage()
    listing = client.get(response.headers["location"]).text
    assert "Episode deleted" in listing and "odd one" not in listing
    again = client.post("/episodes/odd%2Fid%3Fx%3D1%23h/delete", data={"csrf_token": csrf_of(page)})
    assert again.status_code == 404
    (entry,) = log.deletion_history()
    assert (entry.actor, entry.episode_ids, entry.deleted, entry.finished) == (
        "admin (operator token sign-in)",
        (ODD_ID,),
        1,
        True,
    )
    assert entry.client == "testclient" and entry.include_unlearned
    history = client.get("/deletions").text
    assert (
        'href="/deletions"' in listing
        and "admin (operator token sign-in)" in history
        and html.escape(ODD_ID) in history
    )


def test_the_deletion_history_pages_and_filters_by_user(make_client: ClientFactory, log: EpisodeLog) -> None:
    for n in range(3):
        log.delete_episodes(user_id=f"gone-{n}", actor="cli:ops", client="box")
    client = make_client()
    page = client.get("/deletions").text
    assert page.count("cli:ops") == 3 and "user gone-2" in page and 'id="next-page"' not in page
    only = client.get("/deletions?user=gone-1").text
    assert "user gone-1" in only and "gone-2" not in only
    assert client.get("/deletions?after=nope").status_code == 400
    assert make_client(signed_in=False).get("/deletions").status_code == 303
    assert "Stopped part way" not in page


def test_a_deletion_that_stopped_part_way_is_flagged_with_the_command_that_finishes_it(
    make_client: ClientFactory, log: EpisodeLog
) -> None:
    from datetime import timedelta

    from sqlalchemy import update

    from memabra._records import utcnow
    from memabra.storage._deletion_log import start_deletion
    from memabra.storage._models import DeletionRow

    # what a killed run leaves: an entry started, never finished, silent for an hour
    start_deletion(
        log._tx,
        actor="cli:ops",
        client=None,
        episode_ids=None,
        user_id="ann",
        created_before=None,
        include_unlearned=True,
        kept=0,
    )
    with log.engine.begin() as conn:
        conn.execute(update(DeletionRow).values(progressed_at=utcnow() - timedelta(hours=1)))
    client = make_client()
    page = html.unescape(client.get("/deletions").text)
    assert "Stopped part way" in page and "<code>memabra episodes delete --user ann --include-unlearned</code>" in page
    assert "unfinished" in page
    assert "Stopped part way" not in client.get("/policies").text and "deletion of" not in client.get("/policies").text


def test_a_reviewer_erases_a_user_after_typing_their_id(make_client: ClientFactory, log: EpisodeLog) -> None:
    from factories import episode as make_episode
    from memabra import SQLMemory

    log.log_episodes([make_episode("ann") for _ in range(3)] + [make_episode("bob")])
    SQLMemory(log).remember("ann", "I live in Lyon")
    client = make_client()
    page = client.get("/memories?user=ann").text
    assert 'id="erase-user-form"' in page and 'action="/erase"' in page
    csrf = csrf_of(page)
    wrong = client.post("/erase", data={"csrf_token": csrf, "user": "ann", "confirm": "an"})
    assert wrong.status_code == 400 and "type the user id" in html.unescape(wrong.text)
    assert log.count_episodes() == 4
    done = client.post("/erase", data={"csrf_token": csrf, "user": "ann", "confirm": "ann"})
    assert done.status_code == 303 and done.headers["location"] == "/deletions?notice=user-erased&user=ann"
    assert {e.user_id for e in log.list_episodes(limit=9).items} == {"bob"} and SQLMemory(log).list("ann") == []
    history = html.unescape(client.get(done.headers["location"]).text)
    assert "User erased" in history and "user ann: episodes and memories (erasure)" in history
    assert client.post("/erase", data={"user": "bob", "confirm": "bob"}).status_code == 403
    assert log.count_episodes() == 1


def test_an_admin_started_with_the_checkpointer_erases_the_users_threads_too(
    make_client: ClientFactory, log: EpisodeLog
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from factories import episode as make_episode

    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "ann-1", "checkpoint_ns": ""}}
    from langgraph.checkpoint.base import empty_checkpoint

    saver.put(config, empty_checkpoint(), {}, {})  # type: ignore[arg-type]
    log.log_episodes([make_episode("ann", thread_id="ann-1")])
    without = make_client().get("/memories?user=ann").text
    assert "are not touched" in without
    client = make_client(checkpointer=saver)
    page = client.get("/memories?user=ann").text
    assert "go too" in page and "are not touched" not in page
    done = client.post("/erase", data={"csrf_token": csrf_of(page), "user": "ann", "confirm": "ann"})
    assert done.status_code == 303
    assert not list(saver.list(None)) and log.count_episodes() == 0
    (entry,) = log.deletion_history()
    assert entry.threads_deleted == 1
