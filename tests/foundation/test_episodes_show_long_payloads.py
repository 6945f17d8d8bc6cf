"""``memabra episodes show`` on a turn logged before the log cut payloads (a 100,000-character
answer, a tool error of megabytes) and on a newer one whose payloads carry the cap's note: it
prints each cut to its start and end, saying how much is not shown, and the note as a sentence of
its own; ``--full`` prints every value whole and ``--json`` writes the document as the log would
keep the turn now, each cut named."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from factories import episode
from memabra import Step, StepKind
from memabra._cli import app
from memabra._feedback import RewardService
from memabra._log_caps import cut_text, left_out
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "120"})

ANSWER = "The answer starts here. " + "word " * 20_000 + "And it ends here."
TRACE = "Traceback (most recent call last):\n" + '  File "x.py", line 1, in f\n' * 60_000 + "OSError: disk full"
RESULT = "rows: " + "1, " * 200_000 + "the last row"


def _record(url: str, *, capped: bool) -> str:
    keep = cut_text if capped else (lambda text: text)
    steps = (
        Step(StepKind.TOOL, "query_db", seq=0, arguments={"sql": "select *"}, result=keep(RESULT)),
        Step(StepKind.TOOL, "read_file", seq=1, arguments={"path": "/x"}, status="error", error=keep(TRACE)),
    )
    ep = replace(episode(steps=steps), answer=keep(ANSWER))
    with EpisodeLog(url) as log:
        RewardService(log).record(ep)
    return ep.id


def test_a_long_answer_and_error_are_printed_cut(migrated_url: str, tmp_path: Path) -> None:
    episode_id = _record(migrated_url, capped=False)
    shown = runner.invoke(app, ["episodes", "show", episode_id, "--db", migrated_url])
    assert shown.exit_code == 0, shown.output
    # it was 1.9 million characters: the answer and the traceback whole
    assert len(shown.output) < 15_000, len(shown.output)
    out = shown.output
    assert "answer: The answer starts here." in out and "And it ends here." in out
    assert f"{len(ANSWER) - 1_800:,} of {len(ANSWER):,} logged characters not shown here: --full prints it whole" in out
    assert len(out.splitlines()) < 120
    # the steps table: each result and error on a line, its start and end (an error's end says what it was)
    wide = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["episodes", "show", episode_id, "--db", migrated_url]).output
    error_row = next(line for line in wide.splitlines() if "read_file" in line)
    assert "Traceback (most recent call last):" in error_row and "OSError: disk full" in error_row
    result_row = next(line for line in wide.splitlines() if "query_db" in line)
    assert "rows: 1, 1," in result_row and "the last row" in result_row
    assert "--full prints them whole" in out
    full = runner.invoke(app, ["episodes", "show", episode_id, "--full", "--db", migrated_url])
    assert full.exit_code == 0, full.output
    assert ANSWER in full.output and TRACE in full.output and RESULT in full.output
    assert 'step 0 query_db arguments: {\n "sql": "select *"\n}' in full.output
    document = tmp_path / "episode.json"
    written = runner.invoke(app, ["episodes", "show", episode_id, "--json", str(document), "--db", migrated_url])
    assert written.exit_code == 0, written.output
    saved = json.loads(document.read_text())
    # the document keeps what the log would keep now (--full and the admin's raw view have the rest)
    assert saved["answer"].startswith("The answer starts here.") and saved["answer"].endswith("And it ends here.")
    assert saved["steps"][1]["error"].endswith("OSError: disk full") and len(saved["steps"][1]["error"]) <= 10_000
    assert {(c["path"], c["by"]) for c in saved["cut"]} == {
        ("answer", "document"),
        ("steps[0].result", "document"),
        ("steps[1].error", "document"),
    }


def test_the_cap_note_is_printed_as_a_sentence(migrated_url: str) -> None:
    episode_id = _record(migrated_url, capped=True)
    shown = runner.invoke(app, ["episodes", "show", episode_id, "--db", migrated_url])
    assert shown.exit_code == 0, shown.output
    assert "[memabra:" not in shown.output
    left, total = left_out(cut_text(ANSWER)) or (0, 0)
    assert f"… {left:,} of {total:,} characters not logged (the whole value: 100.0 kB" in shown.output
    full = runner.invoke(app, ["episodes", "show", episode_id, "--full", "--db", migrated_url])
    assert "[memabra:" not in full.output and full.output.count("characters not logged") == 3
