"""An agent displayed in a notebook (a cell's last line) shows what it serves and whether it learns.

``MemabraAgent`` forwards the names it lacks to the compiled graph, IPython's display hooks
included: Jupyter called the graph's ``_repr_mimebundle_``, which draws the graph through
mermaid.ink (a web request at each display, a traceback offline) and labels the agent with the
graph's repr, which says nothing of the policy serving, the log or the learner.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from fakes import ScriptedChatModel
from memabra import create_memabra_agent
from memabra.router import LinearRouter, Similarity
from memabra.storage import EpisodeLog, LearnerLease, make_engine, upgrade
from pg_schema import pg_schema


def _agent(url: str):  # type: ignore[no-untyped-def]
    model = ScriptedChatModel(replies=[AIMessage("Hello, Ann.")] * 4)
    return create_memabra_agent(model, db=url, router=LinearRouter(similarity=Similarity(encoder=None)))


def test_jupyter_display_hooks_are_not_forwarded_to_the_graph(tmp_path: Path) -> None:
    with _agent(f"sqlite:///{tmp_path / 'nb.db'}") as agent:
        assert hasattr(agent.graph, "_repr_mimebundle_")  # what LangGraph shows a graph with
        for hook in ("_repr_mimebundle_", "_repr_html_", "_ipython_display_"):
            with pytest.raises(AttributeError):
                getattr(agent, hook)
        assert callable(agent.get_graph)  # the rest of the graph's API still is


def test_an_agents_repr_names_its_policy_log_and_learning(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nb.db'}"
    first = _agent(url)
    first.session.memory.remember("ann", "My name is Ann")
    out = first.invoke(
        {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t"}}, context={"user_id": "ann"}
    )
    first.feedback(out["memabra_episode_id"], success=1.0, final=True)
    shown = repr(first)
    assert shown.startswith("<MemabraAgent ") and "CompiledStateGraph" not in shown
    assert f"policy_version={first.router.policy_version!r}" in shown and "nb.db" in shown
    assert "learning=learner, 1 not saved yet" in shown
    second = _agent(url)  # the same cell run again: the first still holds the lease
    assert "learning=standby" in repr(second)
    second.close()
    first.close()
    assert "learning=closed" in repr(first)


def _turn(agent, user: str = "ann") -> None:  # type: ignore[no-untyped-def]
    out = agent.invoke(
        {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": f"t-{id(agent)}"}}, context={"user_id": user}
    )
    agent.feedback(out["memabra_episode_id"], success=1.0, final=True)


def test_an_agent_kept_from_learning_by_an_earlier_one_of_this_process_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memabra import _serving

    monkeypatch.setattr(_serving, "LEASE_RETRY_S", 0.0)  # a standby tries again at its next turn
    url = f"sqlite:///{tmp_path / 'nb.db'}"
    first = _agent(url)
    _turn(first)
    assert first.session.runtime.learner is not None and first.session.runtime.learner.holds_lease
    second = _agent(url)  # the cell run again, the first agent still alive (Out[1] holds it)
    with caplog.at_level("WARNING", logger="memabra"):
        _turn(second)
        _turn(second)
    said = [r.getMessage() for r in caplog.records if "another agent of this process" in r.getMessage()]
    assert len(said) == 1, said
    assert "not closed" in said[0] and "agent.close()" in said[0]
    first.close()
    _turn(second)  # the lease is free: the newer agent learns now
    learner = second.session.runtime.learner
    assert learner is not None and learner.holds_lease
    second.close()


def test_a_lease_held_by_another_process_is_not_blamed_on_this_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from memabra.storage import EpisodeLog, LearnerLease

    url = f"sqlite:///{tmp_path / 'nb.db'}"
    agent = _agent(url)
    with EpisodeLog(url) as other_process:
        lease = LearnerLease(other_process.engine, agent.session.runtime.learner.policy)  # type: ignore[union-attr]
        assert lease.acquire()
        with caplog.at_level("WARNING", logger="memabra"):
            _turn(agent)
        lease.release()
    assert not [r for r in caplog.records if "another agent of this process" in r.getMessage()]
    agent.close()


@pytest.mark.postgres
@pytest.mark.skipif(not os.environ.get("MEMABRA_TEST_DATABASE_URL"), reason="PostgreSQL only: schemas")
def test_an_agent_of_this_process_on_another_schema_is_not_blamed(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two logs on one URL whose engines set different search_paths (make_engine(url,
    # connect_args={"options": ...}), EpisodeLog(engine=...)): the leases are two (keyed by
    # schema); the one this agent waits for is another process's, not the earlier agent's
    from memabra import _serving

    monkeypatch.setattr(_serving, "LEASE_RETRY_S", 0.0)
    server = os.environ["MEMABRA_TEST_DATABASE_URL"]
    with pg_schema(server) as url_a, pg_schema(server) as url_b:
        engines = []
        for url in (url_a, url_b):
            upgrade(url)
            options = parse_qs(urlsplit(url).query)["options"][0]
            engines.append(make_engine(url.split("?")[0], connect_args={"options": options}))
        log_a, log_b = EpisodeLog(engine=engines[0]), EpisodeLog(engine=engines[1])
        assert log_a.url == log_b.url
        first = _agent(log_a)
        _turn(first)
        assert first.session.runtime.learner is not None and first.session.runtime.learner.holds_lease
        with EpisodeLog(url_b) as other_process:
            lease = LearnerLease(other_process.engine, first.session.runtime.learner.policy)
            assert lease.acquire()
            second = _agent(log_b)
            with caplog.at_level("WARNING", logger="memabra"):
                _turn(second)
                _turn(second)
            lease.release()
        second.close()
        first.close()
        for log in (log_a, log_b):
            log.close()
        for engine in engines:
            engine.dispose()
    assert not [r for r in caplog.records if "another agent of this process" in r.getMessage()]
