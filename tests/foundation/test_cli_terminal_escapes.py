"""Text a command prints from the log is anyone's: a user's message, a memory, a tool's output. An
ESC sequence in it, printed as it is, would clear the operator's screen, rewrite the lines above
(hiding what the turn held) or set the terminal's clipboard (OSC 52). Every control character but
newline and tab is printed as a visible escape; rich's own styles still reach a terminal."""

from __future__ import annotations

import io
from dataclasses import replace

from typer.testing import CliRunner

from factories import episode
from memabra import SQLMemory
from memabra._cli import app
from memabra._cli._common import _Console
from memabra._feedback import RewardService
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "160"})

CLEAR_SCREEN = "\x1b[2J\x1b[H"
SET_CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"
HOSTILE = f"book a table{CLEAR_SCREEN} for two{SET_CLIPBOARD} at eight\x08\x08\x08nine"


def test_episodes_show_prints_logged_escape_sequences_visibly(migrated_url: str) -> None:
    ep = replace(episode(), query=HOSTILE, answer=f"Booked.{CLEAR_SCREEN}")
    with EpisodeLog(migrated_url) as log:
        RewardService(log).record(ep)
    result = runner.invoke(app, ["episodes", "show", ep.id, "--db", migrated_url])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output and "\x08" not in result.output
    query_line = next(line for line in result.output.splitlines() if line.startswith("query:"))
    assert "book a table\\x1b[2J\\x1b[H for two\\x1b]52;c;" in query_line, query_line


def test_memories_list_prints_a_memorys_escape_sequences_visibly(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        SQLMemory(log).remember("ann", f"I live in Lyon{SET_CLIPBOARD}")
    result = runner.invoke(app, ["memories", "list", "--user", "ann", "--db", migrated_url])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\\x1b]52" in result.output


def test_a_terminal_still_gets_richs_own_styles() -> None:
    out = io.StringIO()
    console = _Console(file=out, force_terminal=True, color_system="standard", width=120)
    console.print(f"[bold]kept[/bold] {HOSTILE}")
    printed = out.getvalue()
    assert "\x1b[1m" in printed  # bold, rich's own
    assert CLEAR_SCREEN not in printed and SET_CLIPBOARD not in printed
    assert "book a table\\x1b" in printed  # shown, not run (rich's highlighting styles the rest)
