"""Naming an episode by the start of its id, as `episodes list` prints it, on every backend."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from factories import episode
from memabra import UnknownEpisodeError
from memabra._cli import app
from memabra.storage import EpisodeLog

runner = CliRunner()


def _log_ids(log: EpisodeLog, *ids: str) -> None:
    log.log_episodes([episode("ann", id=i) for i in ids])


def test_a_whole_id_or_a_unique_start_names_the_episode(log: EpisodeLog) -> None:
    _log_ids(log, "abcd", "abcdef01", "f00d1234")
    assert log.resolve_episode_id("abcd") == "abcd"  # a whole id wins over the longer ids it starts
    assert log.resolve_episode_id("abcde") == "abcdef01"
    assert log.resolve_episode_id("f00d") == "f00d1234"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("abc", "from 4 characters on"),
        ("ABCD", "no episode with id 'ABCD' or an id starting with it"),  # case counts, SQLite too
        ("beef", "no episode with id 'beef' or an id starting with it"),
        ("a%cd", "no episode with id 'a%cd'"),  # a LIKE wildcard is a plain character
        ("ab_d", "no episode with id 'ab_d'"),
    ],
)
def test_a_start_that_names_no_episode_is_refused_by_name(log: EpisodeLog, ref: str, message: str) -> None:
    _log_ids(log, "abcd1", "abcd2")
    with pytest.raises(UnknownEpisodeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        log.resolve_episode_id(ref)


def test_a_start_that_fits_several_episodes_names_them(log: EpisodeLog) -> None:
    _log_ids(log, *(f"0617{i:04d}" for i in range(8)))
    with pytest.raises(UnknownEpisodeError) as info:
        log.resolve_episode_id("0617")
    text = str(info.value)
    assert "'0617' is the start of several episode ids" in text
    assert "06170000, 06170001, 06170002, 06170003, 06170004 and more" in text
    assert "give more of it" in text


def test_the_cli_takes_the_start_of_an_id(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        _log_ids(log, "20125e50db7844c7", "20125f00aa")
    shown = runner.invoke(app, ["episodes", "show", "20125e", "--db", migrated_url])
    assert shown.exit_code == 0, shown.output
    assert "episode 20125e50db7844c7" in shown.output
    ambiguous = runner.invoke(app, ["episodes", "show", "2012", "--db", migrated_url])
    assert ambiguous.exit_code == 1 and "start of several episode ids" in ambiguous.output

    fb = runner.invoke(app, ["feedback", "20125f", json.dumps({"correct": True}), "--db", migrated_url])
    assert fb.exit_code == 0, fb.output
    with EpisodeLog(migrated_url) as log:
        assert [f.episode_id for f in log.get_episode("20125f00aa").feedback] == ["20125f00aa"]


def test_deleting_takes_whole_ids_and_points_at_the_one_a_start_names(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        _log_ids(log, "20125e50db7844c7")
    out = runner.invoke(app, ["episodes", "delete", "20125e", "--db", migrated_url])
    assert out.exit_code == 1
    assert "nothing was deleted" in out.output
    assert "'20125e' is the start of '20125e50db7844c7'; deleting takes whole ids" in out.output
    with EpisodeLog(migrated_url) as log:
        assert log.count_episodes() == 1


def test_the_cli_lists_by_words_in_the_query(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        log.log_episodes([dataclasses.replace(episode("ann"), query="Where do I live?"), episode("ann")])
    found = runner.invoke(app, ["episodes", "list", "--search", "WHERE", "--db", migrated_url, "--json", "-"])
    assert found.exit_code == 0, found.output
    assert [row["query"] for row in json.loads(found.stdout)["episodes"]] == ["Where do I live?"]
    blank = runner.invoke(app, ["episodes", "list", "--search", " ", "--db", migrated_url])
    assert blank.exit_code == 1 and "--search must not be blank" in blank.output
