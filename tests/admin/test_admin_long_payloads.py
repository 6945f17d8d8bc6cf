"""Long payloads on the episode page: a turn logged before the log cut payloads (a 5 MB tool
result and error, 300 kB of arguments, a 100,000-character answer) and a newer one whose payloads
carry the cap's note. The page shows each cut, head and tail, saying how much is not shown, with a
link to the whole value (plain text, behind the sign-in); the cap's note reads as a muted sentence,
never as bracket text; the JSON download keeps each value as the log would keep it now."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta

import pytest
from starlette.testclient import TestClient

from memabra import Episode, Step, StepKind
from memabra._feedback import RewardService
from memabra._log_caps import cut_arguments, cut_text, left_out
from memabra._records import utcnow
from memabra._shown_text import shown_text
from memabra.storage import EpisodeLog

from .conftest import ClientFactory, pool, slate
from .test_admin_a11y_pages import _check

# a log file of 5 MB: its first line and its last (where its error is) must stay readable
RESULT = "first line of the log\n" + ("INFO all is well here and there\n" * 160_000) + "ERROR: disk full at the end"
ARGUMENTS = {"path": "/var/log/app.log", "content": "y" * 300_000}
ANSWER = "The answer starts here. " + "word " * 20_000 + "And it ends here."


def _episode(*, capped: bool, turn: int, thread: str = "t-long") -> Episode:
    created = utcnow() - timedelta(minutes=10 - turn)
    sel = slate("ann", pool("ann"), ["mem-ann-0", "tool-search"], version="v1", query=f"q{turn}", created_at=created)
    keep = cut_text if capped else (lambda text: text)
    steps = (
        Step(
            StepKind.TOOL,
            "read_file",
            seq=0,
            arguments=dict(cut_arguments(ARGUMENTS)) if capped else ARGUMENTS,
            result=keep(RESULT),
            started_at=created,
        ),
        Step(StepKind.TOOL, "tail", seq=1, arguments={"n": 1}, status="error", error=keep(RESULT), started_at=created),
    )
    return Episode(
        user_id="ann",
        query=f"q{turn}",
        selections=(sel,),
        steps=steps,
        answer=keep(ANSWER),
        thread_id=thread,
        turn=turn,
        created_at=created,
    )


@pytest.fixture
def long_log(log: EpisodeLog) -> dict[str, Episode]:
    episodes = {"old": _episode(capped=False, turn=0), "new": _episode(capped=True, turn=1)}
    service = RewardService(log)
    for episode in episodes.values():
        service.record(episode)
    return episodes


def _cell(page: str, seq: int, kind: str) -> str:
    row = page.split(f'data-step="{seq}"', 1)[1].split("</tr>", 1)[0]
    return row.split(f'class="code {kind}', 1)[1].split('">', 1)[1].split("</pre>", 1)[0]


def test_the_cap_note_is_read_where_cut_text_and_cut_arguments_write_it() -> None:
    logged = cut_text(RESULT)
    assert logged is not None
    shown = shown_text(logged)
    assert [p.kind for p in shown.pieces] == ["text", "not_logged", "text"] and not shown.cut
    left, total = left_out(logged) or (0, 0)
    assert shown.pieces[1].text.startswith(f"{left:,} of {total:,} characters not logged")
    assert logged.startswith(shown.pieces[0].text) and logged.endswith(shown.pieces[2].text)
    arguments = json.dumps(dict(cut_arguments(ARGUMENTS)), indent=1)
    assert [p.kind for p in shown_text(arguments).pieces] == ["text", "not_logged", "text"]
    # a value longer than the room: its head and tail, the rest counted, a note inside still read
    short = shown_text(logged, 2_000, more="see it whole")
    kinds = [p.kind for p in short.pieces]
    assert kinds == ["text", "not_shown", "not_logged", "text"] and short.cut
    assert short.pieces[1].text == f"{short.hidden:,} of {len(logged):,} logged characters not shown here: see it whole"
    note = len(logged) - len(shown.pieces[0].text) - len(shown.pieces[2].text)
    assert sum(len(p.text) for p in short.pieces if p.kind == "text") + short.hidden + note == len(logged)


def test_an_uncapped_turn_is_shown_cut_with_a_link_to_each_whole_value(
    make_client: ClientFactory, long_log: dict[str, Episode]
) -> None:
    client = make_client()
    old = long_log["old"]
    response = client.get(f"/episodes/{old.id}")
    assert response.status_code == 200
    page = response.text
    # it was 10.6 MB of HTML (the result and the error whole, the arguments whole, the answer whole)
    assert len(page) < 150_000, len(page)
    _check(f"/episodes/{old.id}", page)
    result = html.unescape(_cell(page, 0, "step-result"))
    assert result.startswith("first line of the log") and result.endswith("ERROR: disk full at the end")
    shown_chars = 10_000 - 200  # head + tail
    assert f"{len(RESULT) - shown_chars:,} of {len(RESULT):,} logged characters not shown here" in result
    error = html.unescape(_cell(page, 1, "error-text"))
    assert "first line of the log" in error and "ERROR: disk full at the end" in error
    links = re.findall(r'href="(/episodes/[^"]+/raw\?[^"]+)"', page)
    assert {html.unescape(u).split("?", 1)[1] for u in links} >= {
        "field=result&step=0",
        "field=error&step=1",
        "field=arguments&step=0",
        "field=answer",
    }
    # the link's accessible name says which value it opens
    assert ", the result of step 0,</span> (5.1 MB)" in page
    whole = client.get(html.unescape(next(u for u in links if "field=result" in u)))
    assert whole.status_code == 200 and whole.text == RESULT
    assert whole.headers["content-type"] == "text/plain; charset=utf-8"
    assert whole.headers["x-content-type-options"] == "nosniff"
    arguments = client.get(f"/episodes/{old.id}/raw?field=arguments&step=0")
    assert json.loads(arguments.text) == ARGUMENTS
    assert client.get(f"/episodes/{old.id}/raw?field=answer").text == ANSWER
    assert client.get(f"/episodes/{old.id}/raw?field=query").text == old.query
    # the JSON download keeps what the log would keep now, each cut named; the raw view has the rest
    document = client.get(f"/episodes/{old.id}?format=json").json()
    error = document["steps"][1]["error"]
    assert error.startswith("first line of the log") and error.endswith("ERROR: disk full at the end")
    assert len(error) <= 10_000 and "characters not in this document" in error
    assert len(document["answer"]) <= 10_000 and document["answer"].endswith("And it ends here.")
    assert {c["path"] for c in document["cut"] if c["by"] == "document"} == {
        "answer",
        "steps[0].arguments",
        "steps[0].result",
        "steps[1].error",
    }


def test_the_plain_view_is_guarded_and_names_what_is_missing(
    make_client: ClientFactory, long_log: dict[str, Episode]
) -> None:
    old = long_log["old"]
    signed_out = make_client(signed_in=False)
    refused = signed_out.get(f"/episodes/{old.id}/raw?field=result&step=0")
    assert refused.status_code == 303 and refused.headers["location"].startswith("/login")
    client = make_client()
    assert client.get(f"/episodes/{old.id}/raw?field=password").status_code == 400
    assert client.get(f"/episodes/{old.id}/raw?field=result").status_code == 400
    missing = client.get(f"/episodes/{old.id}/raw?field=result&step=7")
    assert missing.status_code == 404 and "has no step 7" in missing.text
    none = client.get(f"/episodes/{old.id}/raw?field=result&step=1")  # a failed call: an error, no result
    assert none.status_code == 404 and "has no result logged" in none.text
    assert client.get("/episodes/no-such/raw?field=answer").status_code == 404


def test_a_capped_turn_reads_its_note_as_a_muted_sentence(
    make_client: ClientFactory, long_log: dict[str, Episode]
) -> None:
    page = make_client().get(f"/episodes/{long_log['new'].id}").text
    assert "[memabra:" not in page  # no bracket text in the middle of a result, an error or an answer
    left, total = left_out(cut_text(RESULT)) or (0, 0)
    note = (
        f'<span class="payload-note" role="note">{left:,} of {total:,} characters not logged (the whole value: 5.1 MB'
    )
    result, error = _cell(page, 0, "step-result"), _cell(page, 1, "error-text")
    assert note in result and note in error
    assert "not shown here" not in result  # what the log kept is shown whole
    arguments = _cell(page, 0, "step-arguments")
    assert '<span class="payload-note" role="note">297,' in arguments and '"path": "/var/log/app.log"' in html.unescape(
        arguments
    )
    assert "characters not logged (the whole value: 100.0 kB" in page  # the answer's note


def test_the_thread_s_other_turns_are_cut_shorter(make_client: ClientFactory, long_log: dict[str, Episode]) -> None:
    page = make_client().get(f"/episodes/{long_log['new'].id}").text
    bubbles = re.findall(r'<div class="bubble agent">(.*?)</div>', page, re.S)
    assert len(bubbles) == 2
    older, this = bubbles
    # the older turn (logged whole, 100,000 characters): its first and last 2,000 at most
    assert f"{len(ANSWER) - 1_800:,} of {len(ANSWER):,} logged characters not shown here" in older
    assert "And it ends here." in older and len(html.unescape(re.sub(r"<[^>]+>", "", older))) < 2_400
    assert "not shown here" not in this and "And it ends here." in this


def test_the_episode_page_is_small_for_a_thread_of_long_answers(
    make_client: ClientFactory, log: EpisodeLog, long_log: dict[str, Episode]
) -> None:
    service = RewardService(log)
    later = [_episode(capped=False, turn=t) for t in range(2, 12)]
    for episode in later:
        service.record(episode)
    client: TestClient = make_client()
    page = client.get(f"/episodes/{later[-1].id}").text
    # twelve turns of 120 kB answers and 5 MB steps: was 21 MB of HTML
    assert len(page) < 200_000, len(page)


def test_an_id_that_ends_like_the_plain_view_still_opens_its_page(make_client: ClientFactory, log: EpisodeLog) -> None:
    created = utcnow()
    sel = slate("zed", pool("zed"), ["mem-zed-0"], version="v1", query="odd one", created_at=created)
    episode = Episode(user_id="zed", query="odd one", selections=(sel,), id="a/raw", answer="yes", created_at=created)
    RewardService(log).record(episode)
    client = make_client()
    page = client.get("/episodes/a%2Fraw")
    assert page.status_code == 200 and "odd one" in page.text
    assert client.get("/episodes/a%2Fraw/raw?field=answer").text == "yes"


@pytest.mark.parametrize("step", ["%C2%B2", "%D9%A1", "9" * 5_000, "1" * 40])
def test_a_step_that_is_no_step_number_is_a_bad_request_not_a_server_error(
    make_client: ClientFactory, long_log: dict[str, Episode], step: str
) -> None:
    # "²" and "٥" pass str.isdigit(); a 5,000-digit one passes it too, and int() refused both (a 500)
    response = make_client().get(f"/episodes/{long_log['old'].id}/raw?field=result&step={step}")
    assert response.status_code in (400, 404), response.status_code
    assert "Traceback" not in response.text


@pytest.mark.parametrize(
    "cluster",
    [
        "e\u0301",  # a letter and its combining accent
        "\U0001f468\u200d\U0001f469\u200d\U0001f467",  # a family: emoji joined by ZWJ
        "\U0001f1eb\U0001f1f7",  # a flag: two regional indicators
        "\u2764\ufe0f",  # a heart and its emoji variation selector
        "\U0001f44d\U0001f3fd",  # a thumbs up and its skin tone
    ],
)
@pytest.mark.parametrize("shift", range(5))
def test_the_cut_never_splits_a_character_as_it_is_seen(cluster: str, shift: int) -> None:
    text = "x" * shift + cluster * 5_000
    shown = shown_text(text, 1_000)
    texts = [p.text for p in shown.pieces if p.kind == "text"]
    head, tail = texts[0], texts[-1]
    assert len(head) + len(tail) + shown.hidden == len(text)
    # the head is the text's start up to a whole cluster, the tail whole clusters to its end
    assert (head[shift:].count(cluster) * len(cluster)) == len(head) - shift, repr(head[-4:])
    assert tail.count(cluster) * len(cluster) == len(tail), repr(tail[:4])
