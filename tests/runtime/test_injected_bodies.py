"""A decision reviewed weeks later, after releases edited its skills and tools, shows the skill body
and the tool spec that decision could inject, as the log kept them then: ``get_episode``, the
episode document (``episodes show --json``, the admin's download), ``episodes export`` and the
admin's decision page. Decisions logged before the log kept bodies say so instead of showing
today's registry copy."""

from __future__ import annotations

import hashlib
import io
import json
import re
import threading
from dataclasses import replace

import pytest
from runtime.test_release_registry_changes import RELEASE_1, RELEASE_2, TONE_V1, TONE_V2, _session, _turn
from sqlalchemy import func, select
from starlette.testclient import TestClient

from factories import uniform_selection
from memabra import Candidate, CandidateKind, Episode, RegistryItem, Skill
from memabra._admin import create_app
from memabra._catalog import skill_items, tool_items
from memabra._episode_document import episode_document
from memabra._errors import InvalidRecordError
from memabra._feedback import RewardService
from memabra.evals.offline import export_decisions
from memabra.router import Similarity, featurize
from memabra.storage import EpisodeLog
from memabra.storage import _injected_bodies as injected
from memabra.storage._injected_bodies import BODY_DIGEST_KEY, InjectedBodyRow, body_digest

TOKEN = "test-admin-token-0123456789"


def _before_and_after(log: EpisodeLog, lexical: Similarity) -> tuple[str, str]:
    """One decision of release 1, then one of release 2 (which edits the skill's body and
    lookup_order's parameters)."""
    with _session(log, lexical, RELEASE_1) as old:
        before = _turn(old)
    with _session(log, lexical, RELEASE_2) as new:
        after = _turn(new)
    return before, after


def _chosen_bodies(log: EpisodeLog, episode_id: str) -> dict[str, str | None]:
    """Each chosen candidate's kept body, by the digest it logged."""
    episode = log.get_episode(episode_id)
    bodies = log.injected_bodies(episode)
    return {c.id: bodies.get(str(c.metadata.get(BODY_DIGEST_KEY))) for c in episode.selections[0].chosen}


def _injected_of(document: dict, candidate_id: str) -> dict:  # type: ignore[type-arg]
    (decision,) = document["decisions"]
    return next(i for i in decision["injected"] if i["id"] == candidate_id)


def _stored_bodies(log: EpisodeLog) -> dict[str, str]:
    with log.transactions.read() as s:
        return {r.digest: r.body for r in s.scalars(select(InjectedBodyRow))}


# ------------------------------------------------------------------ what a decision names


def test_each_skill_and_tool_candidate_logs_the_digest_of_the_body_it_could_inject(
    log: EpisodeLog, lexical: Similarity
) -> None:
    before, _ = _before_and_after(log, lexical)
    (selection,) = log.get_episode(before).selections
    stored = _stored_bodies(log)
    for sc in selection.offered:
        digest = sc.candidate.metadata[BODY_DIGEST_KEY]
        assert re.fullmatch(r"[0-9a-f]{16}", str(digest))
        # anyone can check a stored body against its digest with sha256sum
        assert hashlib.sha256(stored[str(digest)].encode()).hexdigest()[:16] == digest
    offered = {sc.candidate.id: sc.candidate.metadata[BODY_DIGEST_KEY] for sc in selection.offered}
    assert stored[str(offered["skill:tone"])] == TONE_V1.body


def test_a_past_decision_shows_the_body_it_injected_not_the_registrys_current_one(
    log: EpisodeLog, lexical: Similarity
) -> None:
    before, after = _before_and_after(log, lexical)
    assert {i.id: i for i in log.items("ann")}["skill:tone"].body == TONE_V2.body  # the registry moved on
    then, now = _chosen_bodies(log, before), _chosen_bodies(log, after)
    assert then["skill:tone"] == TONE_V1.body and now["skill:tone"] == TONE_V2.body
    # a tool's body is the function spec bound to the model: release 2 added include_items
    spec_then = json.loads(str(then["tool:lookup_order"]))
    assert spec_then["function"]["name"] == "lookup_order"
    assert spec_then["function"]["parameters"]["required"] == ["order_id"]
    assert "include_items" not in spec_then["function"]["parameters"]["properties"]
    assert "include_items" in json.loads(str(now["tool:lookup_order"]))["function"]["parameters"]["properties"]


def test_the_episode_document_of_an_old_decision_holds_what_its_chosen_skills_and_tools_injected(
    log: EpisodeLog, lexical: Similarity
) -> None:
    before, _ = _before_and_after(log, lexical)
    episode = log.get_episode(before)
    document = episode_document(episode, log.injected_bodies(episode))
    skill = _injected_of(document, "skill:tone")
    assert skill == {
        "id": "skill:tone",
        "kind": "skill",
        "body_digest": body_digest(TONE_V1.body),
        "body": TONE_V1.body,
        "body_status": "kept",
    }
    assert "include_items" not in _injected_of(document, "tool:lookup_order")["body"]
    json.dumps(document)  # stays plain JSON


def test_the_export_of_an_old_decision_holds_what_its_chosen_skills_and_tools_injected(
    log: EpisodeLog, lexical: Similarity
) -> None:
    before, after = _before_and_after(log, lexical)
    out = io.StringIO()
    assert export_decisions(log, out) == 2
    records = {r["episode_id"]: r for r in map(json.loads, out.getvalue().splitlines())}
    assert _injected_of({"decisions": [records[before]]}, "skill:tone")["body"] == TONE_V1.body
    assert _injected_of({"decisions": [records[after]]}, "skill:tone")["body"] == TONE_V2.body
    tools = [i for i in records[before]["injected"] if i["kind"] == "tool"]
    assert tools and all(i["body_status"] == "kept" and '"function"' in i["body"] for i in tools)


def test_the_admin_decision_page_shows_the_body_the_decision_injected(log: EpisodeLog, lexical: Similarity) -> None:
    markup = Skill("markup", "How to format replies.", "<script>alert(1)</script> Use short lists.")
    with _session(log, lexical, {"skills": [TONE_V1, markup], "tools": RELEASE_1["tools"]}) as old:
        before = _turn(old)
    with _session(log, lexical, RELEASE_2) as new:
        _turn(new)
    with TestClient(create_app(log, token=TOKEN), follow_redirects=False) as client:
        login = client.get("/login").text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', login)
        assert csrf is not None
        client.post("/login", data={"secret": TOKEN, "csrf_token": csrf.group(1), "next": "/episodes"})
        page = client.get(f"/episodes/{before}").text
    block = page.split('class="injected"', 1)[1].split("</div>", 1)[0]
    assert TONE_V1.body in block and TONE_V2.body not in block
    assert body_digest(TONE_V1.body) in block
    assert "&lt;script&gt;alert(1)&lt;/script&gt; Use short lists." in block  # shown as text
    assert "<script>alert(1)" not in page


# ------------------------------------------------------------------ decisions logged before


def _legacy_episode(user: str = "ann") -> Episode:
    """A decision as code before revision 0017 logged it: a skill and a tool with no digest."""
    offered = [
        Candidate("skill:tone", CandidateKind.SKILL, "tone: How to answer.", 3, {"source": "skill", "name": "tone"}),
        Candidate("tool:lookup_order", CandidateKind.TOOL, "lookup_order: Look up.", 9, {"source": "tool"}),
    ]
    selection = uniform_selection(user, offered[:1], ["skill:tone"])
    return Episode(user_id=user, query=selection.context.query, selections=(selection,), answer="ok")


def test_a_decision_logged_before_bodies_were_kept_says_so_instead_of_showing_todays_body(
    log: EpisodeLog, lexical: Similarity
) -> None:
    episode = _legacy_episode()
    RewardService(log).record(episode)
    with _session(log, lexical, RELEASE_2):  # today's release registers its bodies
        pass
    document = episode_document(log.get_episode(episode.id))
    entry = _injected_of(document, "skill:tone")
    assert entry["body"] is None and entry["body_status"] == "not_logged" and entry["body_digest"] is None
    assert "revision 0017" in entry["note"]
    assert TONE_V2.body not in json.dumps(document)
    out = io.StringIO()
    export_decisions(log, out)
    (record,) = map(json.loads, out.getvalue().splitlines())
    assert record["injected"][0]["body_status"] == "not_logged"
    with TestClient(create_app(log, token=TOKEN), follow_redirects=False) as client:
        login = client.get("/login").text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', login)
        assert csrf is not None
        client.post("/login", data={"secret": TOKEN, "csrf_token": csrf.group(1), "next": "/episodes"})
        page = client.get(f"/episodes/{episode.id}").text
    assert "not kept: logged before bodies were" in page and TONE_V2.body not in page


# ------------------------------------------------------------------ the table itself


def test_each_body_is_kept_once_however_often_it_is_registered(log: EpisodeLog, lexical: Similarity) -> None:
    for _ in range(3):
        with _session(log, lexical, RELEASE_1):
            pass
    first = _stored_bodies(log)
    assert len(first) == 4  # one skill, three tools
    with _session(log, lexical, RELEASE_2):
        pass
    second = _stored_bodies(log)
    # release 2: an edited skill and lookup_order, two new tools; release 1's bodies stay
    assert set(first) < set(second) and len(second) == 8
    assert all(second[d] == first[d] for d in first)


def test_pods_registering_one_new_release_at_once_keep_each_body_once(migrated_url: str) -> None:
    pods = 6
    ready = threading.Barrier(pods)
    failures: list[BaseException] = []

    def start() -> None:
        with EpisodeLog(migrated_url) as log:
            items = tool_items(RELEASE_2["tools"]) + skill_items([TONE_V2])
            ready.wait()
            try:
                log.put_items(items)
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

    threads = [threading.Thread(target=start) for _ in range(pods)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    with EpisodeLog(migrated_url) as log, log.transactions.read() as s:
        assert s.scalar(select(func.count()).select_from(InjectedBodyRow)) == 4


def test_an_item_naming_another_bodys_digest_is_refused_and_nothing_is_registered(log: EpisodeLog) -> None:
    (item,) = skill_items([TONE_V1])
    forged = replace(item, metadata={BODY_DIGEST_KEY: body_digest(TONE_V2.body)})
    with pytest.raises(InvalidRecordError, match=r"'skill:tone'.*body_digest"):
        log.put_items([*tool_items(RELEASE_1["tools"]), forged])
    assert log.items("ann") == [] and _stored_bodies(log) == {}


def test_two_bodies_under_one_digest_are_refused_and_the_registry_is_left_as_it_was(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(injected, "body_digest", lambda body: "0" * 16)  # every body collides

    def unnamed(skill: Skill) -> list[RegistryItem]:  # items that leave the digest to the log
        return [replace(i, metadata={}) for i in skill_items([skill])]

    log.put_items(unnamed(TONE_V1))
    with pytest.raises(InvalidRecordError, match="share the digest '0000000000000000'"):
        log.put_items(unnamed(TONE_V2))
    assert {i.id: i.body for i in log.items("ann")} == {"skill:tone": TONE_V1.body}
    assert _stored_bodies(log) == {"0" * 16: TONE_V1.body}


def test_deleting_and_erasing_episodes_keep_the_bodies_other_decisions_name(
    log: EpisodeLog, lexical: Similarity
) -> None:
    before, after = _before_and_after(log, lexical)
    kept = _stored_bodies(log)
    log.delete_episodes([before], include_unlearned=True)
    log.erase_user("ann", lambda: 0)
    assert _stored_bodies(log) == kept  # release content, not the user's data


# ------------------------------------------------------------------ the router reads none of it


def test_the_digest_changes_no_feature_the_router_sees(log: EpisodeLog, lexical: Similarity) -> None:
    _, after = _before_and_after(log, lexical)
    (selection,) = log.get_episode(after).selections
    with_digest = [sc.candidate for sc in selection.offered]
    without = [replace(c, metadata={k: v for k, v in c.metadata.items() if k != BODY_DIGEST_KEY}) for c in with_digest]
    a = featurize(selection.context, with_digest, similarity=lexical)
    b = featurize(selection.context, without, similarity=lexical)
    assert a.rows == b.rows and (a.matrix == b.matrix).all()


def test_a_record_built_without_the_bodies_says_they_were_not_read(log: EpisodeLog, lexical: Similarity) -> None:
    from memabra.evals.offline import decision_record

    before, _ = _before_and_after(log, lexical)
    (decision,) = [d for d in log.iter_decisions() if d.episode_id == before]
    entries = decision_record(decision)["injected"]
    assert entries and {e["body_status"] for e in entries} == {"not_read"}
    assert all(e["body"] is None and e["body_digest"] for e in entries)


def test_an_episode_read_back_is_what_was_logged(log: EpisodeLog, lexical: Similarity) -> None:
    """The bodies are read beside an episode, never into it: code that compares a decision read
    back with the one it logged (a resumed turn, a retry) sees them equal."""
    with _session(log, lexical, RELEASE_1) as session:
        before = _turn(session)
    read = log.get_episode(before)
    assert all("injected_body" not in c.metadata for c in read.selections[0].chosen)
    assert log.get_episode(before) == read and log.injected_bodies(read)


def test_episodes_show_prints_what_the_chosen_skills_and_tools_injected_then(
    log: EpisodeLog, migrated_url: str, lexical: Similarity
) -> None:
    from typer.testing import CliRunner

    from memabra._cli import app

    before, _ = _before_and_after(log, lexical)
    shown = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["episodes", "show", before, "--db", migrated_url])
    assert shown.exit_code == 0, shown.output
    lines = [line for line in shown.output.splitlines() if line.startswith("injected skill skill:tone")]
    assert len(lines) == 1 and " ".join(TONE_V1.body.split())[:60] in lines[0]
    assert " ".join(TONE_V2.body.split())[:60] not in shown.output


def test_erasing_a_user_forgets_the_bodies_of_their_own_skills_but_not_shared_ones(log: EpisodeLog) -> None:
    shared = Skill("tone", "How to answer.", "Be brief.")
    own = Skill("letters", "How to write to my family.", "Sign letters to my wife Jane as Teddy.")
    same_as_shared = Skill("brief", "Short answers.", "Be brief.")  # one body, also a shared one's
    log.put_items(skill_items([shared]))
    log.put_items(skill_items([own, same_as_shared], owner="ann"))
    assert set(_stored_bodies(log).values()) == {"Be brief.", own.body}
    log.erase_user("ann", lambda: 0)
    assert set(_stored_bodies(log).values()) == {"Be brief."}  # the shared skill still names it
