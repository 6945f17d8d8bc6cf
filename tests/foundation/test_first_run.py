"""What someone new meets first: `memabra --help` and every command's help, the answer `feedback`
gives on an episode of the demo (all final), and `memabra status` on a log with many snapshots."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import typer
from typer.testing import CliRunner

from factories import candidates, episode, uniform_selection
from memabra import Episode
from memabra._cli import app
from memabra._feedback import RewardService
from memabra._records import PolicySnapshot, RewardBreakdown, RewardComponents, RewardWeights, utcnow
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "220"})


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
    if hasattr(command, "commands"):
        return [found for name, sub in command.commands.items() for found in _commands(sub, (*path, name))]
    return [(" ".join(path), command)]


def test_every_option_of_every_command_says_what_it_does() -> None:
    """`memabra X --help` lists no option with a blank description."""
    blank = [
        f"memabra {name} {param.opts[0]}"
        for name, command in _commands(typer.main.get_command(app))
        for param in command.params
        if param.param_type_name == "option" and not (getattr(param, "help", None) or "").strip()
    ]
    assert not blank, blank


def test_the_root_help_starts_a_newcomer_with_the_demo() -> None:
    shown = runner.invoke(app, ["--help"])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "New here? memabra demo runs the whole loop offline" in text.replace("`", "")
    root = typer.main.get_command(app)
    assert list(root.commands)[:2] == ["demo", "status"]  # type: ignore[attr-defined]


def test_feedback_on_a_final_episode_says_why_it_is_late(migrated_url: str) -> None:
    """Every reward of the demo is final, so feedback sent to one of its episodes is late: the
    command says what that means instead of the bare word."""
    ep = episode()
    with EpisodeLog(migrated_url) as log:
        RewardService(log).record(ep)
    first = runner.invoke(app, ["feedback", ep.id, json.dumps({"success": 1.0, "final": True}), "--db", migrated_url])
    assert first.exit_code == 0 and "feedback " in first.output and ": stored" in first.output, first.output
    late = runner.invoke(app, ["feedback", ep.id, json.dumps({"correct": False}), "--db", migrated_url])
    line = " ".join(late.output.split())
    assert late.exit_code == 0, late.output
    assert ": late (the episode's reward was already final or its feedback window had closed" in line
    assert "never applied" in line


def _served(log: EpisodeLog, version: str) -> None:
    """One turn routed by ``version`` of policy ``lin``, its reward final a few minutes ago."""
    selection = replace(uniform_selection("ann", candidates(), ("m0",)), policy="lin", policy_version=version)
    reward = RewardBreakdown(RewardComponents(s=1.0, hm=1.0), RewardWeights())
    log.log_episode(
        Episode(
            user_id="ann",
            query="q",
            selections=(selection,),
            reward=reward,
            finalized_at=utcnow() - timedelta(minutes=5),
        )
    )


def test_status_lists_equally_busy_snapshots_newest_first(migrated_url: str) -> None:
    """The demo saves a snapshot every 100 updates and each serves 100 turns: the table reads
    +1000 after +1100, not between +100 and +200 as the versions sort as text."""
    versions = ["lin-r", "lin-r+100", "lin-r+200", "lin-r+1000", "lin-r+1100", "lin-r+1200"]
    with EpisodeLog(migrated_url) as log:
        for version in versions:
            log.save_snapshot(PolicySnapshot(policy="lin", version=version, model=b"model"))
            log.promote(version)
        for version in versions[:4]:  # the active one and the previous one served nothing
            _served(log, version)
    out = runner.invoke(app, ["status", "--db", migrated_url, "--max-lag", "1d"])
    assert out.exit_code == 0, out.output
    window = out.output[out.output.index("per snapshot served") :]
    rows = [line.split("│")[2].strip() for line in window.splitlines() if line.startswith("│ lin ")]
    assert rows == ["lin-r+1000", "lin-r+200", "lin-r+100", "lin-r"]
