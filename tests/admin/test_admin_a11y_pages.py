"""Every page of the admin view, as a screen reader and a keyboard meet it (WCAG 2.2 AA): a title
and one h1 naming the page, the landmarks, a programmatic label on every control, tables with a
caption and column headers with their scope, an error tied to the field it is about and focused,
and a write that cannot be undone never made by one click of a page whose script did not run."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from starlette.testclient import TestClient

from memabra import SQLMemory
from memabra.storage import EpisodeLog

from .conftest import ClientFactory, Seeded, csrf_of, record_ope, sign_in
from .test_admin_turns import kept_turn

_CONTROLS = {"input", "select", "textarea"}


class _Page(HTMLParser):
    """What the checks read: titles, headings, landmarks, controls with their labels, tables."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.title = ""
        self.h1: list[str] = []
        self.landmarks: list[tuple[str, dict[str, str]]] = []
        self.label_for: set[str] = set()
        self.controls: list[tuple[dict[str, str], bool]] = []  # attributes, inside a <label>
        self.tables: list[dict[str, object]] = []
        self._text: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag in {"header", "main", "nav", "footer"}:
            self.landmarks.append((tag, values))
        if tag == "label" and "for" in values:
            self.label_for.add(values["for"])
        if tag in _CONTROLS and values.get("type") != "hidden":
            self.controls.append((values, any(t == "label" for t, _ in self.stack)))
        if tag == "table":
            self.tables.append({"attrs": values, "caption": False, "unscoped": []})
        if tag == "caption" and self.tables:
            self.tables[-1]["caption"] = True
        if tag == "th" and self.tables and "scope" not in values:
            unscoped = self.tables[-1]["unscoped"]
            assert isinstance(unscoped, list)
            unscoped.append(self.getpos())
        if tag in {"title", "h1"}:
            self._text = []
        if tag not in {"input", "meta", "link", "br", "img", "hr", "col", "source"}:
            self.stack.append((tag, values))

    def handle_endtag(self, tag: str) -> None:
        if tag in {"title", "h1"} and self._text is not None:
            text = " ".join("".join(self._text).split())
            if tag == "title":
                self.title = text
            else:
                self.h1.append(text)
            self._text = None
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)


def _read(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


def _check(url: str, html: str) -> _Page:
    page = _read(html)
    assert page.title and page.title.endswith("· memabra"), (url, page.title)
    assert len(page.h1) == 1 and page.h1[0], (url, page.h1)
    # the page's own name leads its title (a tab list, a screen reader's window list)
    assert page.title.split(" · ")[0].split()[0].lower() in page.h1[0].lower(), (url, page.title, page.h1)
    tags = [t for t, _ in page.landmarks]
    assert tags.count("main") == 1 and "header" in tags and "footer" in tags, (url, tags)
    navs = [a for t, a in page.landmarks if t == "nav"]
    assert all(a.get("aria-label") for a in navs), (url, navs)  # several navs: each says which
    for attrs, wrapped in page.controls:
        labelled = wrapped or attrs.get("aria-label") or attrs.get("id", "\0") in page.label_for
        assert labelled, (url, attrs)
    for table in page.tables:
        assert table["caption"], (url, table["attrs"])
        assert not table["unscoped"], (url, table["attrs"], table["unscoped"])
    return page


def _pages(client: TestClient, log: EpisodeLog, seeded: Seeded) -> list[str]:
    memory = SQLMemory(log).remember("ann", "I drink green tea")
    log.suspend_turn(kept_turn("t-lost", state="lost", user="bob"))
    record_ope(log)
    return [
        "/episodes",
        "/episodes?sort=reward",
        f"/episodes/{seeded.episodes[1]}",
        f"/episodes/{seeded.tool_error}",
        "/memories",
        "/memories?user=ann",
        f"/memories/item?user=ann&id={memory.id}",
        "/policies?window=all",
        "/deletions",
        "/turns",
        "/episodes/no-such-episode",
    ]


def test_every_page_has_a_title_one_h1_landmarks_labels_and_table_headers(
    make_client: ClientFactory, log: EpisodeLog, seeded: Seeded
) -> None:
    client = make_client()
    for url in _pages(client, log, seeded):
        _check(url, client.get(url).text)
    signed_out = make_client(signed_in=False)
    _check("/login", signed_out.get("/login").text)


def test_a_wrong_secret_is_read_with_the_field(make_client: ClientFactory, seeded: Seeded) -> None:
    client = make_client(signed_in=False)
    response = sign_in(client, secret="wrong")
    html = response.text
    _check("/login (wrong secret)", html)
    field = re.search(r"<input id=\"secret\"[^>]*>", html)
    assert field and 'aria-invalid="true"' in field.group(0) and 'aria-describedby="login-error"' in field.group(0)
    assert 'id="login-error"' in html


def test_a_bad_filter_marks_its_field_describes_it_and_focuses_it(make_client: ClientFactory, seeded: Seeded) -> None:
    client = make_client()
    response = client.get("/episodes?since=yesterday")
    assert response.status_code == 400
    _check("/episodes?since=yesterday", response.text)
    field = re.search(r'<input type="datetime-local" name="since"[^>]*>', response.text)
    assert field, response.text
    assert 'aria-invalid="true"' in field.group(0) and 'aria-describedby="form-error"' in field.group(0)
    assert "autofocus" in field.group(0)
    assert response.text.count("autofocus") == 1 and response.text.count('aria-invalid="true"') == 1
    assert 'id="form-error"' in response.text and "since must be" in response.text
    # a value no field of the form holds (a link's limit): the message itself takes the focus
    other = client.get("/episodes?limit=0").text
    assert re.search(r'id="form-error" tabindex="-1" autofocus>limit must', other), other
    # the memories page too
    memories = client.get("/memories?user=ann&status=gone")
    _check("/memories?status=gone", memories.text)
    select = re.search(r'<select name="status"[^>]*>', memories.text)
    assert select and 'aria-invalid="true"' in select.group(0) and "autofocus" in select.group(0)


def _form(html: str, form_id: str) -> dict[str, str]:
    form = html.split(f'id="{form_id}"', 1)[1].split("</form>", 1)[0]
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form))


def test_a_delete_sent_without_its_script_asks_on_a_page_first(
    make_client: ClientFactory, log: EpisodeLog, seeded: Seeded
) -> None:
    """With JavaScript blocked the form posts what the page holds (``confirmed`` empty): nothing is
    deleted, a page asks the question with a button that goes ahead and a link that does not."""
    client = make_client()
    target = seeded.episodes[2]
    page = client.get(f"/episodes/{target}").text
    fields = _form(page, "delete-episode")
    assert fields.get("confirmed") == ""
    asked = client.post(f"/episodes/{target}/delete", data=fields)
    assert asked.status_code == 200, asked.text
    assert log.get_episode(target).id == target  # nothing deleted
    checked = _check("confirm page", asked.text)
    assert checked.h1 == ["Delete episode?"]
    assert "cannot be undone" in asked.text and f'href="/episodes/{target}"' in asked.text
    again = _form(asked.text, "confirm")
    assert again["confirmed"] == "yes" and again["csrf_token"] == csrf_of(page)
    done = client.post(f"/episodes/{target}/delete", data=again)
    assert done.status_code == 303 and "notice=episode-deleted" in done.headers["location"]
    assert target not in [e.id for e in log.list_episodes().items]


def test_abandon_and_forget_learner_sent_without_script_ask_first(
    make_client: ClientFactory, log: EpisodeLog, seeded: Seeded
) -> None:
    client = make_client()
    log.suspend_turn(kept_turn("t-lost", state="lost", user="bob"))
    page = client.get("/turns").text
    form = page.split('action="/turns/abandon"', 1)[1].split("</form>", 1)[0]
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form))
    assert fields.get("confirmed") == ""
    asked = client.post("/turns/abandon", data=fields)
    assert asked.status_code == 200 and "Abandon turn t-lost?" in asked.text
    assert log.suspended_turn("t-lost") is not None  # still kept, not logged
    # a caller that sends no confirmed field (a script with the token) is not asked
    csrf = csrf_of(page)
    forgot = client.post("/policies/forget-learner", data={"csrf_token": csrf, "policy": "nobody", "confirmed": ""})
    assert forgot.status_code == 200 and "Forget nobody&#39;s learner?" in forgot.text
    direct = client.post("/policies/forget-learner", data={"csrf_token": csrf, "policy": "nobody"})
    assert direct.status_code == 303
