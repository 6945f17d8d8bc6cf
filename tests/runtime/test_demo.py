"""The demo's loop on a few episodes: the world, the stand-in model, corrections and the table."""

from __future__ import annotations

from typer.testing import CliRunner

from memabra import CandidateKind
from memabra._cli import app
from memabra._demo import run_demo, summarize
from memabra._demo_world import TASKS, World, judge
from memabra._standin import ExtractiveChatModel
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog


def test_the_world_is_seeded_and_drifts() -> None:
    a, b = World(seed=3, episodes=40), World(seed=3, episodes=40)
    assert [u.facts for u in a.users] == [u.facts for u in b.users]
    assert [a.next_task(i)[1].name for i in range(20)] == [b.next_task(i)[1].name for i in range(20)]
    user = a.users[0]
    old = user.facts["city"].value
    said = a.drift(user)
    assert user.facts["city"].value != old and user.stale["city"].value == old
    assert any(user.facts["city"].value in line for line in said)


def test_judge_rewards_what_the_task_needs_and_punishes_stale_facts() -> None:
    world = World(seed=0, episodes=10)
    user = world.users[0]
    weather = next(t for t in TASKS if t.name == "weather")
    city = user.facts["city"].value
    assert judge(user, weather, f"Forecast for {city}: 18C") == (1.0, [])
    score, missed = judge(user, weather, "I don't know")
    assert score == 0.0 and missed[0].category == "city"
    world.drift(user)
    assert judge(user, weather, f"Forecast for {user.facts['city'].value} or {city}")[0] == -0.5


def test_the_stand_in_uses_related_memories_and_ignores_the_rest() -> None:
    from langchain_core.messages import HumanMessage, SystemMessage

    model = ExtractiveChatModel(associations=[frozenset({"dinner", "diet", "vegetarian"})])
    system = SystemMessage(
        "What you know about the user:\n- I follow a vegetarian diet\n- I lost my umbrella on the bus"
    )
    reply = model.invoke([system, HumanMessage("What should I cook for dinner?")])
    assert "vegetarian" in reply.content and "umbrella" not in reply.content


def test_the_stand_in_calls_a_tool_of_yours_with_its_own_parameter() -> None:
    """The README's ``get_weather(city)`` with the stand-in: the question goes in the tool's first
    required parameter (the demo's tools name it ``request``), so the call validates and runs."""
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str, days: int = 1) -> str:
        """Weather forecast for a city."""
        return f"rain in {city}"

    @tool
    def ping() -> str:
        """Weather station ping."""
        return "pong"

    reply = ExtractiveChatModel().bind_tools([get_weather]).invoke([HumanMessage("weather in Paris?")])
    (call,) = reply.tool_calls
    assert call["name"] == "get_weather" and call["args"] == {"city": "weather in Paris?"}
    assert get_weather.invoke(call["args"]) == "rain in weather in Paris?"
    bare = ExtractiveChatModel().bind_tools([ping]).invoke([HumanMessage("weather station?")])
    assert bare.tool_calls[0]["args"] == {}


def test_a_short_demo_run_logs_every_episode(log: EpisodeLog) -> None:
    rows = run_demo(router=HybridRouter(similarity=Similarity(encoder=None)), log=log, episodes=24, users=3)
    assert len(rows) == 24
    summary = summarize("hybrid", rows, window=10)
    assert summary.first.episodes == 10 and 0.0 <= summary.overall.hit_rate <= 1.0
    first = log.get_episode(rows[0].episode_id)
    assert first.reward is not None and first.finalized_at is not None
    assert {sc.candidate.kind for sc in first.selections[0].offered} == {
        CandidateKind.MEMORY,
        CandidateKind.SKILL,
        CandidateKind.TOOL,
    }
    assert log.list_snapshots()  # the demo leaves a snapshot for the admin view
    # every simulated user has said all they will (the drift's statements too): no reward is left
    # waiting for a window to end after the run, which `memabra status` would report
    assert log.status().open_windows == 0


def test_a_seeded_demo_learns_the_same_way_every_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Memory times and ids come from the run (they feed the learner's features), so two runs of
    one seed store the same memories and make the same choices; a second run on the same log draws
    new ids instead of the first run's."""
    from memabra.router import LinearRouter
    from memabra.storage import upgrade

    def run(url: str) -> list[tuple[float, float, int, list[object]]]:
        upgrade(url)
        with EpisodeLog(url) as log:
            rows = run_demo(router=LinearRouter(seed=0, similarity=Similarity(encoder=None)), log=log, episodes=40)
            # the logged feature rows are what offline evaluation reads: no wall-clock time may leak in
            # (tools and skills are dated by the memories' clock, or every age would shift with it)
            features = [
                [sorted(sc.features.items()) for s in log.get_episode(r.episode_id).selections for sc in s.offered]
                for r in rows
            ]
        return [(r.reward, r.hit_rate, r.tokens, f) for r, f in zip(rows, features, strict=True)]

    first, second = run(f"sqlite:///{tmp_path / 'a.db'}"), run(f"sqlite:///{tmp_path / 'b.db'}")
    assert first == second
    assert len(run(f"sqlite:///{tmp_path / 'a.db'}")) == 40  # again on a's log: no id drawn twice


def test_demo_command_prints_the_table_and_next_steps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["demo", "--db", url, "--episodes", "20", "--users", "2"])
    assert result.exit_code == 0, result.output
    for needle in (
        "stand-in",
        "learned (linear)",
        "similarity top-k",
        "corrections /100",
        "memabra admin --db",
        "memabra ope log --db",
        "top-k offline",
        "its 20 task turns",
        "on its own task turns",
        "UNSUPPORTED\n  why: ",  # 20 episodes cannot support top-k: the reason on a line of its own
        "the offline bounds",
    ):
        assert needle in result.output


def test_a_demo_run_again_on_the_same_log_says_it_continues_that_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Run a second time in the same folder, the demo goes on from the first run's log (its learned
    snapshot, its users' memories), so its table is not the first one again: it says so up front."""
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    args = ["demo", "--db", url, "--episodes", "20", "--users", "2", "--no-baseline"]
    runner = CliRunner(env={"COLUMNS": "200"})
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "already holds" not in first.output
    with EpisodeLog(url) as log:
        held = log.count_episodes()
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    said = " ".join(again.output.split())
    assert f"{url} already holds {held} episodes: this run goes on from them" in said, said
    assert "give --db a new file" in said
