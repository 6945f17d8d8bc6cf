"""Unfinished turns (``GET /turns``): the turns the log keeps until their episode is logged, each
paused (an interrupt waits on a person), running, or lost (its process died mid-turn), and
"Abandon" for the paused and lost ones, which logs the turn as a failed episode with its routing
decision, as ``memabra episodes paused --abandon`` does. Runs on every configured backend."""

from __future__ import annotations

import html
import logging
import re
from datetime import timedelta

import pytest
from starlette.testclient import TestClient

from memabra import Step, StepKind
from memabra._errors import InvalidRecordError
from memabra._feedback import RewardService
from memabra._paused_turns import abandon_paused_turn
from memabra._records import utcnow
from memabra._turn_document import turn_document, turn_from_document
from memabra._turns import Turn
from memabra.storage import RUNNING_TURN_LIMIT, EpisodeLog, SuspendedTurn

from .conftest import TOKEN, ClientFactory, csrf_of, pool, slate


def kept_turn(
    turn_id: str,
    *,
    state: str = "paused",
    user: str = "ann",
    query: str = "book me a flight to Lyon",
    steps: int = 1,
    age: timedelta = timedelta(minutes=5),
) -> SuspendedTurn:
    """A turn as the log keeps it: ``state`` paused, running (kept ``age`` ago) or lost (kept
    longer ago than RUNNING_TURN_LIMIT)."""
    if state == "lost":
        age = RUNNING_TURN_LIMIT + age
    at = utcnow() - age
    selection = slate(
        user, pool(user), [f"mem-{user}-0"], version="test-v2", query=query, created_at=at, thread_id="t-1"
    )
    turn = Turn(
        id=turn_id,
        user_id=user,
        thread_id="t-1",
        turn=0,
        query=query,
        selection=selection,
        system_prompt="",
        tool_names=("search",),
        steps=[
            Step(StepKind.TOOL, "search", seq=i, arguments={"q": query}, result="ok", started_at=at)
            for i in range(steps)
        ],
        pauses=1 if state == "paused" else 0,
        kept_in_log=True,
    )
    document = turn_document(turn, 1200.0)
    return SuspendedTurn(turn_id, turn.episode_id, user, "t-1", at, document, paused=state == "paused")


def _row(page: str, turn_id: str) -> str:
    return page.split(f'data-turn="{turn_id}"', 1)[1].split("</tr>", 1)[0]


def _abandon_form(page: str, turn_id: str) -> dict[str, str]:
    form = _row(page, turn_id).split('<form method="post" action="/turns/abandon"', 1)[1].split("</form>", 1)[0]
    # as the page's script sends it once its question is answered
    return {**dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)), "confirmed": "yes"}


@pytest.fixture
def client(make_client: ClientFactory) -> TestClient:
    return make_client()


def test_the_page_lists_each_unfinished_turn_with_its_state(client: TestClient, log: EpisodeLog) -> None:
    log.suspend_turn(kept_turn("t-lost", state="lost", user="bob", steps=3))
    log.suspend_turn(kept_turn("t-paused", state="paused", query="<b>send</b> the mail", steps=2))
    log.suspend_turn(kept_turn("t-running", state="running", user="carol", age=timedelta(minutes=1)))
    response = client.get("/turns")
    assert response.status_code == 200
    page = response.text
    assert "<title>Unfinished turns · memabra</title>" in page
    lost, paused, running = (_row(page, t) for t in ("t-lost", "t-paused", "t-running"))
    assert 'class="row-error"' in lost and ">lost<" in lost and "died mid-turn" in lost
    assert ">paused<" in paused and ">running<" in running
    assert "bob" in lost and "t-1" in lost and "book me a flight to Lyon" in lost
    assert re.search(r'class="num steps">3<', lost) and re.search(r'class="num steps">2<', paused)
    assert "&lt;b&gt;send&lt;/b&gt; the mail" in paused  # text, never markup
    # the oldest first: lost ones, routed over an hour ago, lead
    assert page.index('data-turn="t-lost"') < page.index('data-turn="t-paused"') < page.index('data-turn="t-running"')
    # Abandon for the paused and the lost one, never for one still running
    assert "/turns/abandon" in lost and "/turns/abandon" in paused and "/turns/abandon" not in running
    summary = html.unescape(page.split('id="turn-summary"', 1)[1].split("</p>", 1)[0])
    assert "1 paused" in summary and "1 lost" in summary


def test_abandon_asks_first_naming_what_it_does(client: TestClient, log: EpisodeLog) -> None:
    log.suspend_turn(kept_turn("t-paused", state="paused", steps=2))
    log.suspend_turn(kept_turn("t-lost", state="lost", user="bob"))
    page = client.get("/turns").text
    paused = html.unescape(re.search(r'data-confirm="([^"]+)"', _row(page, "t-paused")).group(1))
    assert "ann" in paused and "failed episode" in paused and "2 step(s)" in paused
    assert "waits on a person" in paused or "approval" in paused
    lost = html.unescape(re.search(r'data-confirm="([^"]+)"', _row(page, "t-lost")).group(1))
    assert "bob" in lost and "failed episode" in lost and "died" in lost


def test_abandon_logs_a_paused_turn_as_a_failed_episode(
    client: TestClient, log: EpisodeLog, caplog: pytest.LogCaptureFixture
) -> None:
    kept = kept_turn("t-paused", state="paused", steps=2)
    log.suspend_turn(kept)
    fields = _abandon_form(client.get("/turns").text, "t-paused")
    caplog.set_level(logging.WARNING, "memabra")
    response = client.post("/turns/abandon", data=fields)
    assert response.status_code == 303, response.text
    assert response.headers["location"].startswith("/turns?notice=turn-abandoned")
    episode = log.get_episode(kept.episode_id)
    assert episode.selections and len(episode.steps) == 2
    assert episode.reward is not None and episode.reward.components.s == 0.0  # accepted: false
    assert log.suspended_turn("t-paused") is None
    after = client.get(response.headers["location"]).text
    assert "Turn abandoned" in after
    assert f'href="/episodes/{kept.episode_id}"' in after
    assert 'data-turn="t-paused"' not in after
    # audited as the app's other destructive writes are: who, from where, which turn
    assert "token sign-in" in caplog.text and "t-paused" in caplog.text and kept.episode_id in caplog.text
    # and in the episode itself: a failed episode the learner trains on, told from a user's verdict
    assert episode.metadata["abandoned_by"] == "operator token sign-in" and episode.metadata["abandoned_from"]
    abandoned = html.unescape(client.get(f"/episodes/{kept.episode_id}").text.split('id="abandoned"', 1)[1])
    assert "by operator token sign-in" in abandoned.split("</div>", 1)[0] and "not the user's verdict" in abandoned


def test_abandon_logs_a_lost_turn(client: TestClient, log: EpisodeLog) -> None:
    kept = kept_turn("t-lost", state="lost")
    log.suspend_turn(kept)
    response = client.post("/turns/abandon", data=_abandon_form(client.get("/turns").text, "t-lost"))
    assert response.status_code == 303
    assert log.get_episode(kept.episode_id).selections
    assert log.status().lost_turns == 0


def test_a_running_turn_is_not_abandoned(client: TestClient, log: EpisodeLog) -> None:
    kept = kept_turn("t-running", state="running")
    log.suspend_turn(kept)
    token = csrf_of(client.get("/turns").text)
    response = client.post(
        "/turns/abandon", data={"csrf_token": token, "turn_id": "t-running", "episode_id": kept.episode_id}
    )
    assert response.status_code == 409
    assert "running" in response.text and "nothing was abandoned" in html.unescape(response.text)
    assert log.suspended_turn("t-running") is not None
    assert not log.list_episodes().items


@pytest.mark.parametrize("how", ["abandoned", "finished"])
def test_a_turn_logged_meanwhile_gets_a_clear_message(client: TestClient, log: EpisodeLog, how: str) -> None:
    kept = kept_turn("t-paused", state="paused")
    log.suspend_turn(kept)
    fields = _abandon_form(client.get("/turns").text, "t-paused")
    if how == "abandoned":  # another reviewer, or `memabra episodes paused --abandon`
        abandon_paused_turn(RewardService(log), kept, actor="cli:oncall")
    else:  # the person approved it and the run went on to log its episode
        RewardService(log).record(turn_from_document(kept.document, 0.0).episode("done", {}))
    response = client.post("/turns/abandon", data=fields)
    assert response.status_code == 409, response.text
    message = html.unescape(response.text)
    assert "already logged" in message and kept.episode_id in message and "nothing changed" in message
    assert ("abandoned" if how == "abandoned" else "finished") in message
    assert ("by cli:oncall" in message) == (how == "abandoned")
    assert f'href="/episodes/{kept.episode_id}"' in response.text
    assert len(log.list_episodes().items) == 1


def test_a_turn_no_longer_kept_and_never_logged_is_not_found(client: TestClient, log: EpisodeLog) -> None:
    token = csrf_of(client.get("/turns").text)
    response = client.post("/turns/abandon", data={"csrf_token": token, "turn_id": "gone", "episode_id": "e-gone"})
    assert response.status_code == 404 and "no longer kept" in html.unescape(response.text)
    assert client.post("/turns/abandon", data={"csrf_token": token}).status_code == 400


def test_abandon_follows_the_write_guards(make_client: ClientFactory, log: EpisodeLog) -> None:
    kept = kept_turn("t-paused", state="paused")
    log.suspend_turn(kept)
    client = make_client()
    fields = _abandon_form(client.get("/turns").text, "t-paused")
    assert client.post("/turns/abandon", data={**fields, "csrf_token": "forged"}).status_code == 403
    assert client.post("/turns/abandon", data=fields, headers={"Origin": "https://evil.example"}).status_code == 403
    assert make_client(signed_in=False).post("/turns/abandon", data=fields).status_code == 401
    read_only = make_client(read_only=True)
    page = read_only.get("/turns").text
    assert 'data-turn="t-paused"' in page and "/turns/abandon" not in page
    refused = read_only.post("/turns/abandon", data=fields, headers={"Authorization": f"Bearer {TOKEN}"})
    assert refused.status_code == 403 and "read-only" in refused.text
    assert log.suspended_turn("t-paused") is not None
    # a script with the admin token may abandon, as it may make every other write
    bearer = client.post("/turns/abandon", data=fields, headers={"Authorization": f"Bearer {TOKEN}"})
    assert bearer.status_code == 303 and log.suspended_turn("t-paused") is None


def test_the_page_needs_a_sign_in(make_client: ClientFactory) -> None:
    response = make_client(signed_in=False).get("/turns")
    assert response.status_code == 303 and response.headers["location"].startswith("/login?next=%2Fturns")


def test_the_turns_are_paged_as_the_other_lists(client: TestClient, log: EpisodeLog) -> None:
    for n in range(53):
        log.suspend_turn(kept_turn(f"t-{n:02d}", state="paused", age=timedelta(minutes=100 - n)))
    first = client.get("/turns").text
    assert len(re.findall(r'data-turn="t-\d\d"', first)) == 50
    assert "« First page" not in first
    following = re.search(r'id="next-page" href="([^"]+)"', first).group(1)
    second = client.get(html.unescape(following)).text
    assert re.findall(r'data-turn="(t-\d\d)"', second) == ["t-50", "t-51", "t-52"]
    assert 'id="next-page"' not in second and 'href="/turns"' in second.split('class="pager"', 1)[1]
    assert client.get("/turns?offset=-1").status_code == 400
    assert client.get("/turns?offset=abc").status_code == 400
    # the count covers every kept turn, not the page
    assert "53 paused" in html.unescape(first.split('id="turn-summary"', 1)[1].split("</p>", 1)[0])


def test_an_empty_log_says_so(client: TestClient) -> None:
    page = client.get("/turns").text
    assert "No unfinished turns" in page


def test_the_learning_card_links_the_unfinished_turns(client: TestClient, log: EpisodeLog) -> None:
    learning = client.get("/policies").text.split('id="learning"', 1)[1].split("</section>", 1)[0]
    assert 'href="/turns"' in learning  # always: running turns are kept too
    log.suspend_turn(kept_turn("t-lost", state="lost"))
    learning = client.get("/policies").text.split('id="learning"', 1)[1].split("</section>", 1)[0]
    alert = learning.split("<strong>turns</strong>", 1)[1].split("</div>", 1)[0]
    assert 'href="/turns?lost=1"' in alert  # the health problem leads to the turns that raise it
    assert 'id="lost-turns"' in learning and "1 turn(s) lost" in html.unescape(learning)


def test_abandon_needs_someone_to_name(log: EpisodeLog) -> None:
    kept = kept_turn("t-paused", state="paused")
    log.suspend_turn(kept)
    with pytest.raises(InvalidRecordError, match="actor must name who abandons"):
        abandon_paused_turn(RewardService(log), kept, actor=" \x00 ")
    assert log.suspended_turn("t-paused") is not None and not log.list_episodes().items  # nothing written
    abandon_paused_turn(RewardService(log), kept)
    assert log.get_episode(kept.episode_id).metadata["abandoned_by"] == "library"


def test_lost_only_lists_the_turns_on_call_acts_on(client: TestClient, log: EpisodeLog) -> None:
    # days of turns waiting on people would push a lost turn pages back in the whole list
    for n in range(55):
        log.suspend_turn(kept_turn(f"t-p{n:02d}", state="paused", age=timedelta(days=3, minutes=-n)))
    log.suspend_turn(kept_turn("t-lost", state="lost", user="bob"))
    log.suspend_turn(kept_turn("t-running", state="running"))
    assert 'data-turn="t-lost"' not in client.get("/turns").text
    page = client.get("/turns?lost=1").text
    assert re.findall(r'data-turn="([^"]+)"', page) == ["t-lost"]
    assert 'aria-current="page">Lost only' in page and 'id="next-page"' not in page
    assert "Lost only (1)" in client.get("/turns").text
    # Abandon from the lost view goes back to it
    response = client.post("/turns/abandon", data=_abandon_form(page, "t-lost"))
    assert response.status_code == 303
    assert (
        response.headers["location"].startswith("/turns?notice=turn-abandoned")
        and "lost=1" in response.headers["location"]
    )
    assert "No lost turns." in client.get(response.headers["location"]).text
    assert client.get("/turns?lost=yes").status_code == 400
    assert "lost must be 1" in html.unescape(client.get("/turns?lost=yes").text)


def test_lost_only_pages_keep_the_filter(client: TestClient, log: EpisodeLog) -> None:
    for n in range(52):
        log.suspend_turn(kept_turn(f"t-{n:02d}", state="lost", age=timedelta(minutes=100 - n)))
    first = client.get("/turns?lost=1").text
    following = html.unescape(re.search(r'id="next-page" href="([^"]+)"', first).group(1))
    assert "lost=1" in following
    second = client.get(following).text
    assert re.findall(r'data-turn="(t-\d\d)"', second) == ["t-50", "t-51"]
    assert 'href="/turns?lost=1"' in second.split('class="pager"', 1)[1]
