"""The admin view's "Download JSON" of an episode: the document ``memabra episodes show ID --json``
writes, from one builder, so the file a support engineer attaches to a ticket is the same whichever
way it was taken: with the steps' arguments and results the page shows, valid JSON, UTF-8."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from memabra._cli import app
from memabra.storage import EpisodeLog

from .conftest import ClientFactory, Seeded


def test_the_download_is_the_cli_document(
    make_client: ClientFactory, seeded: Seeded, log: EpisodeLog, migrated_url: str, tmp_path: Path
) -> None:
    client = make_client()
    for episode_id in [*seeded.episodes[:3], seeded.corrected, seeded.tool_error, seeded.xss]:
        response = client.get(f"/episodes/{episode_id}?format=json")
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        downloaded = json.loads(response.text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        out = tmp_path / "show.json"
        shown = CliRunner().invoke(app, ["episodes", "show", episode_id, "--json", str(out), "--db", migrated_url])
        assert shown.exit_code == 0, shown.output
        written = json.loads(out.read_text())
        assert downloaded.pop("exported_at") and written.pop("exported_at")
        assert downloaded == written
        assert downloaded["format"] == "memabra.episode/1"
        episode = log.get_episode(episode_id)
        # what the page shows of each step, the download holds too
        assert [(s["arguments"], s["result"], s["error"]) for s in downloaded["steps"]] == [
            (dict(s.arguments), s.result, s.error) for s in episode.steps
        ]


def test_a_failed_tool_call_is_in_the_download_with_its_arguments(make_client: ClientFactory, seeded: Seeded) -> None:
    document = make_client().get(f"/episodes/{seeded.tool_error}?format=json").json()
    failed = [s for s in document["steps"] if s["status"] == "error"]
    assert failed and all(s["error"] and "arguments" in s and s["started_at"].endswith("+00:00") for s in failed)
