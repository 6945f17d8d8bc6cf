"""The command line as an operator's scripts run it: no terminal, an 80-column ``$COLUMNS``, an
ASCII-only locale, a reader that stops early (``| head -1``). Run as the installed ``memabra``
command in a subprocess, since the streams' encoding and a closed pipe are the process's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memabra import SQLMemory
from memabra.storage import EpisodeLog, upgrade

MEMABRA = str(Path(sys.executable).with_name("memabra"))
TEXTS = ("I live in Oslo \u2014 near the fjord\u2026", "My dog is called Rex \u00d7 2 \u2192 caf\u00e9")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade(url)
    with EpisodeLog(url) as log:
        for text in TEXTS:
            SQLMemory(log).remember("ann", text)
    return url


def _ids(url: str) -> list[str]:
    with EpisodeLog(url) as log:
        return [m.id for m in SQLMemory(log).list("ann")]


def _run(args: list[str], env: dict[str, str], stdout: int = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    """``memabra ARGS`` with no terminal, NO_COLOR and TERM=dumb, and ``env`` on top."""
    environment = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    environment.update({"NO_COLOR": "1", "TERM": "dumb", **env})
    return subprocess.run(
        [MEMABRA, *args], env=environment, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "env", [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}]
)
def test_an_ascii_locale_spells_what_it_cannot_encode_instead_of_crashing(sqlite_url: str, env: dict[str, str]) -> None:
    done = _run(["memories", "list", "--user", "ann", "--db", sqlite_url], {**env, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "UnicodeEncodeError" not in done.stderr
    out = " ".join(done.stdout.split())
    assert "Oslo --" in out and "fjord..." in out and "Rex x 2 -> caf\\xe9" in out, out
    for memory_id in _ids(sqlite_url):
        assert memory_id in done.stdout


def test_ids_are_whole_in_an_80_column_table(sqlite_url: str) -> None:
    # rich cut (or folded) every column to fit 80: a memory id broke over two lines
    done = _run(["memories", "list", "--user", "ann", "--db", sqlite_url], {"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    ids = _ids(sqlite_url)
    assert len(ids) == 2
    for memory_id in ids:
        assert memory_id in done.stdout, done.stdout
    assert "\u2026 \u2502" not in done.stdout.replace("fjord\u2026", "")  # no cell cut with an ellipsis


def test_a_reader_that_stops_early_ends_the_command_quietly_with_141(sqlite_url: str) -> None:
    read, write = os.pipe()
    os.close(read)  # `| head -1` that has already gone: every write meets a closed pipe
    try:
        done = _run(["memories", "list", "--user", "ann", "--db", sqlite_url], {"COLUMNS": "80"}, stdout=write)
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr
    assert done.stderr == ""


def test_an_unreachable_database_is_named_the_same_way_by_db_current() -> None:
    url = "postgresql+psycopg://nobody@127.0.0.1:1/x"
    for args in (["db", "current"], ["policies", "list"]):
        done = _run([*args, "--db", url], {"COLUMNS": "40"})
        assert done.returncode == 1, done.stderr
        # one line (COLUMNS never wraps an error off a terminal), naming the database
        assert done.stderr.startswith(f"error: cannot connect to the database {url}: "), done.stderr
        assert done.stderr.count("\n") == 1, done.stderr


def test_json_lines_to_standard_output_stay_valid_in_an_ascii_locale(sqlite_url: str) -> None:
    # an export's JSON keeps non-ASCII text as UTF-8 (ensure_ascii=False): it crashed, then would
    # have been escaped by the ASCII stream into invalid JSON (caf\xe9)
    from factories import episode
    from memabra._feedback import RewardService

    ep = episode("zo\u00eb \u2192 caf\u00e9")
    with EpisodeLog(sqlite_url) as log:
        RewardService(log).record(ep)
    done = _run(["episodes", "export", "--out", "-", "--db", sqlite_url], {"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert rows and all(row["episode_id"] == ep.id and row["user_id"] == ep.user_id for row in rows)
