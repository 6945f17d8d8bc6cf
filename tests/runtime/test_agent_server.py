"""A memabra agent deployed as LangGraph recommends: ``langgraph.json`` naming a module-level
graph, served by the Agent Server (``langgraph dev``, in-memory runtime) and driven through the
``langgraph_sdk`` client. The graph it serves is ``agent.server_graph``, which ends each run as
``MemabraAgent`` does in process: each turn is logged once with its decision and propensities; a
turn whose run waits on a person reads paused, never lost; one that ran out of steps is logged as
failed; one cancelled (by the client, or by a second run's ``multitask_strategy``) and followed by
a new message is logged as failed, superseded. ``plain`` (``agent.graph``, served the same way) shows what the server did before."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph_api", reason="needs LangGraph's Agent Server: pip install 'langgraph-cli[inmem]'")
pytest.importorskip(
    "langgraph_runtime_inmem", reason="needs the Agent Server's in-memory runtime (langgraph-cli[inmem])"
)

from langgraph_sdk import get_sync_client  # noqa: E402
from langgraph_sdk.client import SyncLangGraphClient  # noqa: E402
from runtime.agent_server import AgentServer, serve  # noqa: E402

from memabra._rolled_back import ROLLED_BACK_REASON  # noqa: E402
from memabra._superseded import SUPERSEDED_REASON  # noqa: E402
from memabra.storage import EpisodeFilter, EpisodeLog  # noqa: E402

USER = {"user_id": "ann"}
RUN_STARTED_S = 30.0  # the in-memory queue polls each second: a run starts within a few
WHOLE_EMAIL_TURN = [("model", "ok", None), ("tool", "ok", "sent to bob"), ("model", "ok", None)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    yield from serve(tmp_path_factory.mktemp("agent_server"))


@pytest.fixture(scope="module")
def client(server: AgentServer) -> Iterator[SyncLangGraphClient]:
    with get_sync_client(url=server.url) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def log(server: AgentServer) -> Iterator[EpisodeLog]:
    with EpisodeLog(server.db_url) as episode_log:
        yield episode_log


def _message(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def _thread(client: SyncLangGraphClient) -> str:
    return str(client.threads.create()["thread_id"])


def _values(client: SyncLangGraphClient, thread: str) -> dict[str, Any]:
    values: dict[str, Any] = client.threads.get_state(thread)["values"]
    return values


def _episodes(log: EpisodeLog, thread: str) -> list[Any]:
    return [log.get_episode(s.id) for s in log.list_episodes(EpisodeFilter(thread_id=thread)).items]


def _steps(episode: Any) -> list[tuple[Any, ...]]:
    return [(s.kind.value, s.status, s.result) for s in episode.steps]


def _logged_once(log: EpisodeLog, thread: str, episode_id: str) -> Any:
    (episode,) = _episodes(log, thread)
    assert episode.id == episode_id
    assert episode.selections and all(s.propensity > 0 for s in episode.selections)
    assert not [k for k in log.suspended_turns(limit=1000) if k.thread_id == thread]
    return episode


def _running(client: SyncLangGraphClient, thread: str, run_id: str) -> None:
    """Wait until the run is inside its slow tool call (routed, its model called)."""
    deadline = time.monotonic() + RUN_STARTED_S
    while time.monotonic() < deadline:
        if client.runs.get(thread, run_id)["status"] == "running" and _values(client, thread).get("memabra_turn"):
            time.sleep(1.0)  # into the tool, past the checkpoint that names the turn
            return
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not start in {RUN_STARTED_S}s")


def test_a_plain_run_is_logged_once_with_its_decision(client: SyncLangGraphClient, log: EpisodeLog) -> None:
    thread = _thread(client)
    out = client.runs.wait(thread, "served", input=_message("Hello there"), context=USER)
    assert isinstance(out, dict) and out["messages"][-1]["content"] == "ok"
    episode = _logged_once(log, thread, out["memabra_episode_id"])
    assert episode.user_id == "ann" and _steps(episode) == [("model", "ok", None)]


def test_a_client_streaming_events_sees_the_routing_decision(client: SyncLangGraphClient, log: EpisodeLog) -> None:
    """The route step's ``memabra_route`` retriever run reaches an SDK client streaming events:
    what a chat UI shows as "answered with these memories and tools"."""
    thread = _thread(client)
    parts = list(
        client.runs.stream(thread, "served", input=_message("Hello there"), context=USER, stream_mode="events")
    )
    routed = [p.data for p in parts if p.event == "events" and p.data.get("name") == "memabra_route"]
    assert [e["event"] for e in routed] == ["on_retriever_start", "on_retriever_end"]
    episode_id = routed[1]["metadata"]["memabra_episode_id"]
    episode = _logged_once(log, thread, episode_id)
    documents = routed[1]["data"]["output"]
    assert documents and [d["metadata"]["id"] for d in documents] == list(episode.selections[0].chosen_ids)


def test_a_run_stopped_before_its_tools_reads_paused_and_resumes_whole(
    client: SyncLangGraphClient, log: EpisodeLog
) -> None:
    thread = _thread(client)
    client.runs.wait(thread, "served", input=_message("Email bob please"), context=USER, interrupt_before=["tools"])
    turn = _values(client, thread)["memabra_turn"]
    kept = log.suspended_turn(turn)
    assert kept is not None and kept.paused  # a person is asked: never lost
    out = client.runs.wait(thread, "served", input=None, context=USER)
    episode = _logged_once(log, thread, out["memabra_episode_id"])
    assert episode.id == kept.episode_id and _steps(episode) == WHOLE_EMAIL_TURN
    assert episode.metadata["pauses"] == 1


def test_a_tool_that_asks_for_approval_reads_paused_and_resumes_whole(
    client: SyncLangGraphClient, log: EpisodeLog
) -> None:
    thread = _thread(client)
    client.runs.wait(thread, "served", input=_message("Pay the invoice"), context=USER)
    kept = log.suspended_turn(_values(client, thread)["memabra_turn"])
    assert kept is not None and kept.paused
    out = client.runs.wait(thread, "served", command={"resume": "yes"}, context=USER)
    episode = _logged_once(log, thread, out["memabra_episode_id"])
    assert _steps(episode) == [("model", "ok", None), ("tool", "ok", "paid INV-7"), ("model", "ok", None)]


def test_an_approval_asked_by_human_in_the_loop_middleware_reads_paused_and_resumes_whole(
    client: SyncLangGraphClient, log: EpisodeLog
) -> None:
    thread = _thread(client)
    client.runs.wait(thread, "approvals", input=_message("Email bob please"), context=USER)
    kept = log.suspended_turn(_values(client, thread)["memabra_turn"])
    assert kept is not None and kept.paused
    approve = {"resume": {"decisions": [{"type": "approve"}]}}
    out = client.runs.wait(thread, "approvals", command=approve, context=USER)  # type: ignore[arg-type]
    episode = _logged_once(log, thread, out["memabra_episode_id"])
    assert [(kind, status) for kind, status, _ in _steps(episode)] == [("model", "ok"), ("tool", "ok"), ("model", "ok")]


def test_a_run_the_client_cancelled_is_kept_running_and_a_retry_goes_on_with_it(
    client: SyncLangGraphClient, log: EpisodeLog
) -> None:
    thread = _thread(client)
    run = client.runs.create(thread, "served", input=_message("Search the archive"), context=USER)
    _running(client, thread, run["run_id"])
    client.runs.cancel(thread, run["run_id"], wait=True)
    turn = _values(client, thread)["memabra_turn"]
    kept = log.suspended_turn(turn)
    # nobody waits on a cancelled run: running (lost in an hour unless retried), not paused
    assert kept is not None and not kept.paused and not _episodes(log, thread)
    out = client.runs.wait(thread, "served", input=None, context=USER)
    episode = _logged_once(log, thread, out["memabra_episode_id"])
    assert episode.id == kept.episode_id and [s.name for s in episode.steps if s.kind.value == "tool"][-1] == (
        "slow_lookup"
    )


def test_a_cancelled_run_is_logged_failed_when_the_user_sends_a_new_message(
    client: SyncLangGraphClient, log: EpisodeLog
) -> None:
    # a chat UI's "stop generating", then a new question: the server runs it from START, so the
    # cancelled turn can never go on; it is logged as failed with its decision, never read lost
    thread = _thread(client)
    run = client.runs.create(thread, "served", input=_message("Search the archive"), context=USER)
    _running(client, thread, run["run_id"])
    client.runs.cancel(thread, run["run_id"], wait=True)
    kept = log.suspended_turn(_values(client, thread)["memabra_turn"])
    assert kept is not None and not kept.paused
    out = client.runs.wait(thread, "served", input=_message("Hello there"), context=USER)
    _superseded_and_new(log, thread, kept, out["memabra_episode_id"])


def test_a_second_run_interrupting_a_busy_thread_logs_its_own_turn_and_the_first_as_superseded(
    client: SyncLangGraphClient, log: EpisodeLog
) -> None:
    thread = _thread(client)
    first = client.runs.create(thread, "served", input=_message("Search the archive"), context=USER)
    _running(client, thread, first["run_id"])
    kept = log.suspended_turn(_values(client, thread)["memabra_turn"])
    assert kept is not None
    second = client.runs.create(
        thread, "served", input=_message("Hello there"), context=USER, multitask_strategy="interrupt"
    )
    out = client.runs.join(thread, second["run_id"])
    _superseded_and_new(log, thread, kept, out["memabra_episode_id"])


def test_a_second_run_rolling_back_a_busy_thread_logs_the_first_turn_as_rolled_back(
    client: SyncLangGraphClient, log: EpisodeLog
) -> None:
    """The server deletes the first run and its checkpoints: no run can go on with its turn, which
    was kept running, read lost in an hour and got its reward only when an operator abandoned it."""
    thread = _thread(client)
    first = client.runs.create(thread, "served", input=_message("Search the archive"), context=USER)
    _running(client, thread, first["run_id"])
    kept = log.suspended_turn(_values(client, thread)["memabra_turn"])
    assert kept is not None
    second = client.runs.create(
        thread, "served", input=_message("Hello there"), context=USER, multitask_strategy="rollback"
    )
    out = client.runs.join(thread, second["run_id"])
    episodes = {e.id: e for e in _episodes(log, thread)}
    assert set(episodes) == {kept.episode_id, out["memabra_episode_id"]}
    assert _steps(episodes[out["memabra_episode_id"]]) == [("model", "ok", None)]
    earlier = episodes[kept.episode_id]
    (failed,) = [f for f in earlier.feedback if f.payload.get("accepted") is False]
    assert failed.payload["comment"] == ROLLED_BACK_REASON
    assert earlier.selections and all(s.propensity > 0 for s in earlier.selections)
    assert not [k for k in log.suspended_turns(limit=1000) if k.thread_id == thread]  # nothing reads lost


def _superseded_and_new(log: EpisodeLog, thread: str, kept: Any, new_id: str) -> None:
    """The earlier turn logged once as failed, superseded, with its decision; the new one as usual."""
    episodes = {e.id: e for e in _episodes(log, thread)}
    assert set(episodes) == {kept.episode_id, new_id}
    earlier, new = episodes[kept.episode_id], episodes[new_id]
    assert _steps(new) == [("model", "ok", None)]
    (failed,) = [f for f in earlier.feedback if f.payload.get("accepted") is False]
    assert failed.payload["comment"] == SUPERSEDED_REASON
    assert earlier.selections and all(s.propensity > 0 for s in earlier.selections)
    assert not [k for k in log.suspended_turns(limit=1000) if k.thread_id == thread]  # nothing reads lost


def test_a_run_out_of_steps_is_logged_as_a_failed_turn(client: SyncLangGraphClient, log: EpisodeLog) -> None:
    thread = _thread(client)
    out = client.runs.wait(
        thread, "served", input=_message("Hello there"), context=USER, config={"recursion_limit": 2}, raise_error=False
    )
    assert "GraphRecursionError" in str(out)
    (episode,) = _episodes(log, thread)
    assert not [k for k in log.suspended_turns(limit=1000) if k.thread_id == thread]
    (failed,) = [f for f in episode.feedback if f.payload.get("accepted") is False]
    assert str(failed.payload["comment"]).startswith("recursion_limit: GraphRecursionError")
