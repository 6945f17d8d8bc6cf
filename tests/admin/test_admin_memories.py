"""The memories pages: each user's memories with usage counts and markers, search, pagination, a
memory's history and the decisions that chose it, and edit / retire / restore through the same
backend as ``memabra memories`` (CSRF-checked, refused when read-only)."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

import pytest
from starlette.testclient import TestClient

from memabra import Episode, Feedback, FeedbackKind, MemoryStatus, SQLMemory
from memabra._feedback import RewardService
from memabra._memory import MemoryAction
from memabra.storage import AdminMemories, EpisodeLog, MemorySort, MemoryUsage

from .conftest import NOW, ClientFactory, csrf_of, slate


@dataclass
class Memories:
    helpful: str  # chosen twice, used twice
    unused: str  # chosen in a corrected episode, never used
    never: str  # never chosen
    retired: str  # superseded by a newer fact


def seed_memories(log: EpisodeLog) -> Memories:
    memory = SQLMemory(log)
    helpful = memory.remember("ann", "I drink green tea").id
    unused = memory.remember("ann", "I play chess on Sundays").id
    never = memory.remember("ann", "My cat is called Tom").id
    retired = memory.remember("ann", "I live in Lyon").id
    memory.remember("ann", "I live in Paris")  # retires Lyon
    memory.remember("bob", "I like jazz")
    candidates = memory.candidates("ann")
    service = RewardService(log)
    for i, (picks, used) in enumerate((([helpful, unused], [helpful]), ([helpful], [helpful]))):
        sel = slate("ann", candidates, picks, version="test-v1", query=f"q{i}", created_at=NOW, policy="test")
        episode = Episode(
            user_id="ann", query=f"q{i}", selections=(sel,), used_ids=frozenset(used), created_at=NOW, id=f"ep-{i}"
        )
        service.record(episode)
    service.post_feedback(Feedback("ep-0", FeedbackKind.EXPLICIT, "test", {"correction": True}, idempotency_key="c0"))
    return Memories(helpful, unused, never, retired)


@pytest.fixture
def memories(log: EpisodeLog) -> Memories:
    return seed_memories(log)


def _rows(page: str) -> dict[str, str]:
    return dict(re.findall(r'<tr class="[^"]*" data-memory="([^"]+)">(.*?)</tr>', page, re.S))


def test_users_and_their_memories_with_usage(make_client: ClientFactory, memories: Memories) -> None:
    client = make_client()
    users = client.get("/memories").text
    assert re.search(r'href="/memories\?user=ann">ann</a></td><td class="num">5</td><td class="num">1</td>', users)
    assert "bob" in users
    rows = _rows(client.get("/memories?user=ann").text)
    assert len(rows) == 5
    assert "never used" in rows[memories.never] and "chosen, never used" not in rows[memories.never]
    assert "chosen, never used" in rows[memories.unused] and "1 corrected" in rows[memories.unused]
    helpful = html.unescape(rows[memories.helpful])
    assert "never used" not in helpful
    assert re.findall(r'<td class="num">([^<]*)</td>', helpful)[:3] == ["2", "2", "1"]
    assert "retired" in rows[memories.retired] and "by <span" in rows[memories.retired]


def test_search_filters_and_pagination(make_client: ClientFactory, memories: Memories) -> None:
    client = make_client()
    assert list(_rows(client.get("/memories?user=ann&q=CHESS").text)) == [memories.unused]
    assert set(_rows(client.get("/memories?user=ann&usage=never-used").text)) == {
        memories.never,
        memories.retired,
        *[m for m in _rows(client.get("/memories?user=ann&q=paris").text)],
    }
    assert list(_rows(client.get("/memories?user=ann&usage=chosen-unused").text)) == [memories.unused]
    assert list(_rows(client.get("/memories?user=ann&status=retired").text)) == [memories.retired]
    first = client.get("/memories?user=ann&limit=2&sort=most-chosen").text
    assert list(_rows(first)) == [memories.helpful, memories.unused]
    next_url = html.unescape(re.search(r'id="next-page" href="([^"]+)"', first).group(1))  # type: ignore[union-attr]
    assert "offset=2" in next_url and "sort=most-chosen" in next_url and "limit=2" in next_url
    seen = list(_rows(first)) + list(_rows(client.get(next_url).text))
    third = client.get("/memories?user=ann&limit=2&sort=most-chosen&offset=4").text
    seen += list(_rows(third))
    assert len(seen) == len(set(seen)) == 5 and 'id="next-page"' not in third


@pytest.mark.parametrize(
    ("query", "field"),
    [("usage=sometimes", "usage"), ("status=gone", "status"), ("sort=random", "sort"), ("offset=-1", "offset")],
)
def test_bad_memory_queries_name_the_field(
    make_client: ClientFactory, memories: Memories, query: str, field: str
) -> None:
    response = make_client().get(f"/memories?user=ann&{query}")
    assert response.status_code == 400
    assert field in html.unescape(re.search(r'role="alert"[^>]*>([^<]+)<', response.text).group(1))  # type: ignore[union-attr]


def test_a_memory_page_shows_history_and_the_decisions_that_chose_it(
    make_client: ClientFactory, memories: Memories
) -> None:
    client = make_client()
    page = html.unescape(client.get(f"/memories/item?user=ann&id={memories.unused}").text)
    assert "I play chess on Sundays" in page and "chosen, never used" in page
    uses = page.split('id="memory-uses"', 1)[1]
    assert "/episodes/ep-0" in uses and "corrected" in uses
    assert client.get("/memories/item?user=bob&id=" + memories.unused).status_code == 404


def _form(client: TestClient, memories: Memories, memory_id: str, form_id: str) -> dict[str, str]:
    page = client.get(f"/memories/item?user=ann&id={memory_id}").text
    form = page.split(f'id="{form_id}"', 1)[1].split("</form>", 1)[0]
    return {k: html.unescape(v) for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)}


def test_edit_retire_and_restore(make_client: ClientFactory, memories: Memories, log: EpisodeLog) -> None:
    client = make_client()
    memory = SQLMemory(log)
    fields = _form(client, memories, memories.never, "memory-edit-form")
    response = client.post("/memories/update", data={**fields, "text": "My cat is called Felix"})
    assert response.status_code == 303 and "notice=memory-updated" in response.headers["location"]
    assert memory.get("ann", memories.never).text == "My cat is called Felix"
    page = html.unescape(client.get(response.headers["location"]).text)
    history = page.split('id="memory-history"', 1)[1]
    assert "Memory updated" in page and "My cat is called Tom" in history
    assert "edited in the admin (" in history  # who changed it, as retire and restore say

    fields = _form(client, memories, memories.never, "memory-retire-form")
    assert client.post("/memories/retire", data=fields).status_code == 303
    assert memory.get("ann", memories.never).status is MemoryStatus.RETIRED
    assert memories.never not in {i.id for i in memory.items("ann")}
    # a retired memory is restored before it is edited, never restored by an edit
    edit = {**fields, "text": "My cat is called Max"}
    refused = client.post("/memories/update", data=edit)
    assert refused.status_code == 400 and "restore it first" in html.unescape(refused.text)
    assert memory.get("ann", memories.never).status is MemoryStatus.RETIRED
    again = client.post("/memories/retire", data=fields)
    assert again.status_code == 400 and "already retired" in html.unescape(again.text)

    fields = _form(client, memories, memories.never, "memory-restore-form")
    assert client.post("/memories/restore", data=fields).status_code == 303
    assert memory.get("ann", memories.never).status is MemoryStatus.ACTIVE
    actions = [c.action for c in memory.history("ann", memories.never)]
    assert actions == [MemoryAction.CREATED, MemoryAction.UPDATED, MemoryAction.RETIRED, MemoryAction.RESTORED]
    assert "token sign-in" in memory.history("ann", memories.never)[2].reason


def test_memory_writes_need_csrf_and_are_refused_read_only(
    make_client: ClientFactory, memories: Memories, log: EpisodeLog
) -> None:
    client = make_client()
    fields = _form(client, memories, memories.helpful, "memory-retire-form")
    no_csrf = {k: v for k, v in fields.items() if k != "csrf_token"}
    assert client.post("/memories/retire", data=no_csrf).status_code == 403
    read_only = make_client(read_only=True)
    page = read_only.get(f"/memories/item?user=ann&id={memories.helpful}").text
    assert 'id="memory-retire-form"' not in page and "Read-only" in page
    token = csrf_of(read_only.get("/memories?user=ann").text)
    response = read_only.post("/memories/retire", data={**fields, "csrf_token": token})
    assert response.status_code == 403
    assert SQLMemory(log).get("ann", memories.helpful).status is MemoryStatus.ACTIVE
    assert client.post("/memories/update", data={**fields, "text": "  "}).status_code == 400
    assert SQLMemory(log).get("ann", memories.helpful).text == "I drink green tea"


def test_memory_queries_directly(log: EpisodeLog, memories: Memories) -> None:
    queries = AdminMemories(log)
    page = queries.memories("ann", usage=MemoryUsage.USED, sort=MemorySort.MOST_USED)
    assert [m.id for m in page.items] == [memories.helpful] and page.total == 1
    outcome = page.outcomes[memories.helpful]
    assert (outcome.chosen, outcome.corrected, outcome.rewarded) == (2, 1, 2)
    assert [(u.episode_id, u.used, u.corrected) for u in queries.uses("ann", memories.unused)] == [
        ("ep-0", False, True)
    ]
    assert [u.user_id for u in queries.users()] == ["ann", "bob"]


def _restore_form(
    make_client: ClientFactory, memories: Memories, log: EpisodeLog
) -> tuple[TestClient, SQLMemory, str, dict[str, str]]:
    """A client on the retired Lyon memory's restore form, and the id of Paris, which replaced it."""
    client = make_client()
    memory = SQLMemory(log)
    paris = next(r.id for r in memory.list("ann") if r.text == "I live in Paris")
    return client, memory, paris, _form(client, memories, memories.retired, "memory-restore-form")


def test_restoring_a_superseded_memory_never_leaves_two_current_values(
    make_client: ClientFactory, memories: Memories, log: EpisodeLog
) -> None:
    client, memory, paris, fields = _restore_form(make_client, memories, log)
    refused = client.post("/memories/restore", data=fields)
    assert refused.status_code == 400 and "contradicts the current" in html.unescape(refused.text)
    assert memory.get("ann", memories.retired).status is MemoryStatus.RETIRED
    assert memory.get("ann", paris).status is MemoryStatus.ACTIVE

    assert client.post("/memories/restore", data={**fields, "replace": "on"}).status_code == 303
    assert memory.get("ann", memories.retired).status is MemoryStatus.ACTIVE
    assert memory.get("ann", paris).status is MemoryStatus.RETIRED
    assert f"superseded by {memories.retired}" in (memory.history("ann", paris)[-1].reason or "")


def test_a_wrong_supersession_is_undone_in_the_admin_keeping_both(
    make_client: ClientFactory, memories: Memories, log: EpisodeLog
) -> None:
    client, memory, paris, fields = _restore_form(make_client, memories, log)
    both = client.post("/memories/restore", data={**fields, "replace": "on", "keep_both": "on"})
    assert both.status_code == 400 and "exclude each other" in html.unescape(both.text)
    assert client.post("/memories/restore", data={**fields, "keep_both": "on"}).status_code == 303
    assert memory.get("ann", memories.retired).status is MemoryStatus.ACTIVE
    assert memory.get("ann", paris).status is MemoryStatus.ACTIVE


def test_an_edit_made_since_the_form_was_opened_is_not_overwritten(
    make_client: ClientFactory, memories: Memories, log: EpisodeLog
) -> None:
    """Two reviewers open the same memory; the second to save is told, and nothing of the first is lost."""
    first, second = make_client(), make_client()
    mine = _form(first, memories, memories.helpful, "memory-edit-form")
    theirs = _form(second, memories, memories.helpful, "memory-edit-form")
    assert mine["base_text"] == "I drink green tea"
    assert second.post("/memories/update", data={**theirs, "text": "I drink oolong tea"}).status_code == 303

    stale = first.post("/memories/update", data={**mine, "text": "I drink black tea"})
    assert stale.status_code == 409
    page = html.unescape(stale.text)
    assert "changed after you opened it" in page and "I drink oolong tea" in page
    # the draft comes back in the box, and the form now starts from the current text
    assert re.search(r'<textarea id="memory-new-text"[^>]*>I drink black tea</textarea>', page)
    assert 'name="base_text" value="I drink oolong tea"' in page
    memory = SQLMemory(log)
    assert memory.get("ann", memories.helpful).text == "I drink oolong tea"

    again = {**_form(first, memories, memories.helpful, "memory-edit-form"), "text": "I drink black tea"}
    assert first.post("/memories/update", data=again).status_code == 303
    assert memory.get("ann", memories.helpful).text == "I drink black tea"
    olds = [c.old_text for c in memory.history("ann", memories.helpful) if c.action is MemoryAction.UPDATED]
    assert olds == ["I drink green tea", "I drink oolong tea"]


def test_an_edit_form_sent_with_browser_line_breaks_is_not_a_conflict(
    make_client: ClientFactory, log: EpisodeLog
) -> None:
    memory = SQLMemory(log)
    record = memory.remember("ann", "Shopping list:\nmilk\nbread")
    client = make_client()
    page = client.get(f"/memories/item?user=ann&id={record.id}").text
    form = page.split('id="memory-edit-form"', 1)[1].split("</form>", 1)[0]
    fields = {k: html.unescape(v) for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)}
    # a browser sends every line break of a form as CRLF
    fields = {k: v.replace("\n", "\r\n") for k, v in fields.items()}
    response = client.post("/memories/update", data={**fields, "text": "Shopping list:\r\nmilk\r\neggs"})
    assert response.status_code == 303
    assert memory.get("ann", record.id).text == "Shopping list:\nmilk\neggs"


def test_a_users_list_cut_short_says_so(
    make_client: ClientFactory, memories: Memories, log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memabra._admin import _memory_pages

    monkeypatch.setattr(_memory_pages, "USERS_SHOWN", 1)
    page = make_client().get("/memories").text
    # ann has the most memories; bob is not listed, and the page says there are more
    assert 'href="/memories?user=ann"' in page and 'href="/memories?user=bob"' not in page
    assert 'id="more-users"' in page
    found = make_client().get("/memories?q=bo").text
    assert 'href="/memories?user=bob"' in found and 'id="more-users"' not in found
