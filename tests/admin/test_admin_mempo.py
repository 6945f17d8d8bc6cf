"""MemPO labels in the admin view: each decision's labels on the episode page, the episode list
filtered to the episodes MemPO graded -1 (by any scorer or one), and the labels in the JSON download."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session
from starlette.testclient import TestClient

from memabra import MemoryQuality
from memabra._episode_document import episode_document
from memabra.storage import EpisodeLog, _admin_mempo
from memabra.storage._admin_mempo import MemPOFilter, mempo_condition
from memabra.storage._models import EpisodeRow, MemoryScoreRow

from .conftest import NOW, Seeded

SMALL, LARGE = "mempo:small", "mempo:<b>large</b>"


def _ids(page: str) -> list[str]:
    return re.findall(r'<td class="nowrap"><a href="/episodes/([0-9a-f]{32})(?:\?list=[^"]*)?">', page)


def _decision(log: EpisodeLog, episode_id: str) -> str:
    return log.get_episode(episode_id).selections[0].id


def _label(decision_id: str, scorer: str, reward: int, *, p_selected: float = 0.4, p_all: float = 0.6) -> MemoryQuality:
    return MemoryQuality(
        decision_id, scorer, p_selected, p_all, p_selected - p_all, reward, 4, scored_at=NOW - timedelta(hours=1)
    )


@pytest.fixture(params=["labels first", "episodes first"])
def shape(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both shapes of the filter (SQLite picks one by how many -1 labels the log holds against
    its episodes; PostgreSQL's planner picks its own plan for either)."""
    if request.param == "episodes first":
        monkeypatch.setattr(_admin_mempo, "_FEW_LABELS", 0)
        monkeypatch.setattr(_admin_mempo, "COUNT_CAP", 0)
    return str(request.param)


@pytest.fixture
def graded(log: EpisodeLog, seeded: Seeded) -> dict[str, list[str]]:
    """Labels of five seeded episodes: -1 by the small scorer, -1 by the large one, -1 by both,
    +1 by both, and -1 small / +1 large."""
    e = seeded.episodes
    cases = {
        e[1]: {SMALL: -1},
        e[4]: {LARGE: -1},
        e[9]: {SMALL: -1, LARGE: -1},
        e[13]: {SMALL: 1, LARGE: 1},
        e[20]: {SMALL: -1, LARGE: 1},
    }
    log.store_memory_scores(
        [_label(_decision(log, eid), scorer, r) for eid, by in cases.items() for scorer, r in by.items()]
    )
    newest_first = [eid for eid in reversed(e) if eid in cases]
    return {
        "any": [eid for eid in newest_first if -1 in cases[eid].values()],
        SMALL: [eid for eid in newest_first if cases[eid].get(SMALL) == -1],
        LARGE: [eid for eid in newest_first if cases[eid].get(LARGE) == -1],
        "plus": [e[13]],
    }


def test_the_episode_page_shows_each_scorers_label(client: TestClient, log: EpisodeLog, seeded: Seeded) -> None:
    episode_id = seeded.episodes[20]
    decision = _decision(log, episode_id)
    log.store_memory_scores(
        [_label(decision, SMALL, -1, p_selected=0.0004, p_all=0.52), _label(decision, LARGE, 1, p_selected=0.7)]
    )
    page = client.get(f"/episodes/{episode_id}").text
    block = page.split(f'id="mempo-{decision}"', 1)[1].split("</table>", 1)[0]
    rows = {
        html.unescape(scorer): [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in cells]
        for scorer, cells in (
            (m.group(1), re.findall(r"<td[^>]*>(.*?)</td>", m.group(2), re.S))
            for m in re.finditer(r'<tr data-scorer="([^"]*)">(.*?)</tr>', block, re.S)
        )
    }
    scored = (NOW - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert rows == {
        LARGE: [LARGE, "0.700", "0.600", "+0.100", "+1 as good as all", "4", scored],
        SMALL: [SMALL, "4.00e-04", "0.520", "-0.520", "−1 worse than all", "4", scored],
    }
    # the scorer's name is text, and the -1 verdict links to that scorer's -1 episodes
    assert "<b>large</b>" not in page and "mempo:&lt;b&gt;large&lt;/b&gt;" in page
    assert 'href="/episodes?mempo=worse&amp;scorer=mempo%3Asmall"' in block
    assert "MemPO -1</span>" in page and "MemPO +1</span>" in page
    # a decision that offered memories and has no label says so, in one muted line
    other = seeded.episodes[3]
    assert "No MemPO label" in client.get(f"/episodes/{other}").text
    assert "No MemPO label" not in page


def test_the_list_keeps_the_episodes_mempo_graded_worse(
    client: TestClient, graded: dict[str, list[str]], shape: str
) -> None:
    assert _ids(client.get("/episodes?mempo=worse").text) == graded["any"]
    assert _ids(client.get("/episodes?mempo=worse&scorer=mempo%3Asmall").text) == graded[SMALL]
    assert _ids(client.get("/episodes?mempo=worse&scorer=" + LARGE).text) == graded[LARGE]
    assert _ids(client.get("/episodes?mempo=worse&scorer=mempo%3Anobody").text) == []
    # with the other filters: alice's episodes are every third
    alice = client.get("/episodes?mempo=worse&user=alice").text
    assert set(_ids(alice)) == {e for e in graded["any"] if e in _ids(client.get("/episodes?user=alice").text)}
    page = client.get("/episodes?mempo=worse&scorer=mempo%3Asmall").text
    count = html.unescape(re.sub(r"<[^>]+>", "", page.split('id="episode-count">', 1)[1].split("</p>", 1)[0]))
    assert count == f"{len(graded[SMALL])} episodes match these filters · MemPO −1 by {SMALL} · showing 3"
    assert 'value="worse" selected' in page and f'name="scorer" value="{SMALL}"' in page


def test_the_filtered_list_pages_on_its_keyset_and_by_lowest_reward(
    client: TestClient, graded: dict[str, list[str]], shape: str
) -> None:
    seen: list[str] = []
    url = "/episodes?mempo=worse&limit=1"
    while url:
        page = client.get(url).text
        seen += _ids(page)
        found = re.search(r'id="next-page" href="([^"]+)"', page)
        url = html.unescape(found.group(1)) if found else ""
        assert "mempo=worse" in (url or "mempo=worse")
    assert seen == graded["any"]
    lowest = _ids(client.get("/episodes?mempo=worse&sort=reward").text)
    assert sorted(lowest) == sorted(e for e in graded["any"])


def test_list_rows_mark_the_episodes_graded_worse(client: TestClient, graded: dict[str, list[str]]) -> None:
    page = client.get("/episodes").text
    marked = set(
        re.findall(r'<a href="/episodes/([0-9a-f]{32})[^"]*">[^<]*</a></td>(?:(?!</tr>).)*MemPO −1', page, re.S)
    )
    assert marked == set(graded["any"])
    row = page.split(f'<a href="/episodes/{graded[LARGE][0]}', 1)[1].split("</tr>", 1)[0]
    assert "MemPO −1 by mempo:&lt;b&gt;large&lt;/b&gt;" in row


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("mempo=better", "mempo must be worse"),
        ("scorer=mempo%3Asmall", "scorer names whose MemPO -1 labels to keep"),
        ("mempo=worse&scorer=" + "x" * 201, "scorer is longer than 200 characters"),
    ],
)
def test_a_bad_mempo_filter_is_refused_naming_it(client: TestClient, query: str, named: str) -> None:
    response = client.get(f"/episodes?{query}")
    assert response.status_code == 400 and named in html.unescape(response.text)


def test_the_json_download_carries_the_labels(client: TestClient, log: EpisodeLog, seeded: Seeded) -> None:
    episode_id = seeded.episodes[9]
    decision = _decision(log, episode_id)
    log.store_memory_scores([_label(decision, SMALL, -1), _label(decision, LARGE, 1)])
    document = client.get(f"/episodes/{episode_id}?format=json").json()
    assert [(q["scorer"], q["reward"]) for q in document["decisions"][0]["mempo"]] == [(LARGE, 1), (SMALL, -1)]
    assert document["decisions"][0]["mempo"][1]["p_all"] == pytest.approx(0.6)
    assert client.get(f"/episodes/{seeded.episodes[3]}?format=json").json()["decisions"][0]["mempo"] == []
    # a caller that reads no labels (``episodes show --json``) gets the document it always did
    assert "mempo" not in json.dumps(episode_document(log.get_episode(episode_id)))


@pytest.fixture
def explain(log: EpisodeLog) -> Iterator[Session]:
    with Session(log.engine) as s:
        if log.engine.dialect.name == "postgresql":
            # a handful of rows: without this a sequential scan is cheapest; with it, one is
            # chosen only where no index serves the query
            s.execute(text("SET enable_seqscan = off"))
        yield s


@pytest.mark.parametrize("scorer", [None, SMALL])
def test_each_shape_of_the_filter_reads_through_indexes(
    log: EpisodeLog, graded: dict[str, list[str]], explain: Session, shape: str, scorer: str | None
) -> None:
    e = EpisodeRow
    cond = mempo_condition(explain, MemPOFilter(scorer))
    stmt = select(e.id).where(cond).order_by(e.created_at.desc(), e.id.desc()).limit(51)
    sql = str(stmt.compile(log.engine, compile_kwargs={"literal_binds": True}))
    if log.engine.dialect.name == "postgresql":
        plan = "\n".join(r[0] for r in explain.execute(text("EXPLAIN " + sql)))
        assert "Seq Scan" not in plan, plan
        return
    plan = "\n".join(r[-1] for r in explain.execute(text("EXPLAIN QUERY PLAN " + sql)))
    assert "SCAN decisions" not in plan and "SCAN episodes\n" not in plan + "\n", plan
    if shape == "episodes first":
        # newest first down the keyset's index, each episode probed by index: no sort, no scan of the labels
        assert "ix_episodes_created_at_id" in plan and "TEMP B-TREE" not in plan, plan
        assert "SEARCH memory_scores USING INDEX" in plan and "SCAN memory_scores" not in plan, plan
    else:
        # the -1 labels read once, each episode found by its primary key
        assert "SEARCH episodes USING INDEX sqlite_autoindex_episodes_1 (id=?)" in plan, plan
        assert "SEARCH decisions USING INDEX sqlite_autoindex_decisions_1 (id=?)" in plan, plan
        # the -1 labels from their own index (revision 0019), not a scan of every label
        assert "ix_memory_scores_reward" in plan and "SCAN memory_scores" not in plan, plan


def test_the_scorer_field_suggests_the_scorers_that_graded_worse(
    client: TestClient, log: EpisodeLog, graded: dict[str, list[str]], seeded: Seeded
) -> None:
    # a scorer whose labels are all +1 finds nothing with the filter: not suggested
    log.store_memory_scores([_label(_decision(log, seeded.episodes[2]), "mempo:kind", 1)])
    page = client.get("/episodes").text
    suggested = re.findall(
        r'<option value="([^"]*)"></option>', page.split('<datalist id="scorers">', 1)[1].split("</datalist>", 1)[0]
    )
    assert [html.unescape(name) for name in suggested] == sorted([SMALL, LARGE])
    assert 'list="scorers"' in page and "<b>large</b>" not in page
    # the page that refuses a bad filter keeps its suggestions
    refused = client.get("/episodes?scorer=mempo%3Asmall").text
    assert f'<option value="{html.escape(SMALL)}">' in refused


def test_no_labels_no_suggestions(client: TestClient, seeded: Seeded) -> None:
    assert '<datalist id="scorers"></datalist>' in client.get("/episodes").text


def test_the_suggestions_seek_the_index_once_per_scorer(
    log: EpisodeLog, graded: dict[str, list[str]], explain: Session
) -> None:
    assert _admin_mempo.worse_scorers(explain) == sorted([SMALL, LARGE])
    assert _admin_mempo.worse_scorers(explain, limit=1) == [min(SMALL, LARGE)]
    m = MemoryScoreRow
    stmt = select(func.min(m.scorer)).where(m.reward == _admin_mempo.WORSE, m.scorer > SMALL)
    sql = str(stmt.compile(log.engine, compile_kwargs={"literal_binds": True}))
    if log.engine.dialect.name == "postgresql":
        plan = "\n".join(r[0] for r in explain.execute(text("EXPLAIN " + sql)))
        assert "Index Only Scan" in plan and "ix_memory_scores_reward" in plan, plan
        return
    plan = "\n".join(r[-1] for r in explain.execute(text("EXPLAIN QUERY PLAN " + sql)))
    assert "SEARCH memory_scores USING COVERING INDEX ix_memory_scores_reward (reward=? AND scorer>?)" in plan, plan
