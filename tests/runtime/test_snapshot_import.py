"""A snapshot moved between logs: ``memabra policies export --whole`` and ``memabra policies import``.

Before, a snapshot could leave its log only as its model's bytes (for ``cmp`` with a replay): to
run production's policy against an evaluation set in staging or CI, a team had to point the
evaluation at production's log, whose learner then learned from the evaluation's episodes."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from runtime.learning_log import log_final
from runtime.test_learner import drain, vw
from typer.testing import CliRunner

from memabra._cli._app import app
from memabra._learner import Learner
from memabra.router import learned_model
from memabra.storage import EpisodeLog, LearnerStore, upgrade

runner = CliRunner(env={"COLUMNS": "200"})


def _learned_log(log: EpisodeLog) -> str:
    """Two committed snapshots of the vw policy; returns the active (the second) one's version."""
    log_final(log, 12)
    learner = Learner(log, vw, commit_every=6)
    drain(learner, 12)
    learner.close()
    version = LearnerStore(log.engine).active_version("vw")
    assert version is not None
    return version


def _target(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'staging.db'}"
    upgrade(url)
    return url


def _cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, " ".join(result.output.split())


def test_a_snapshot_exported_whole_is_imported_as_a_candidate_and_serves_once_promoted(
    log: EpisodeLog, migrated_url: str, tmp_path: Path
) -> None:
    version = _learned_log(log)
    doc = tmp_path / "active.json"
    code, said = _cli("policies", "export", "--whole", "--db", migrated_url, "--policy", "vw", "--out", str(doc))
    assert code == 0, said
    staging = _target(tmp_path)
    code, said = _cli("policies", "import", str(doc), "--db", staging)
    assert code == 0 and "as a candidate" in said and "its parent is not in this log" in said, said
    with EpisodeLog(staging) as target:
        imported = target.get_snapshot(version)
        assert imported.status == "candidate" and imported.parent is None  # never serving before a promote
        assert LearnerStore(target.engine).active_version("vw") is None
        assert imported.metrics["imported"]["parent"] == log.get_snapshot(version).parent  # type: ignore[index]
    code, said = _cli("policies", "promote", version, "--db", staging, "--reason", "evaluate production's policy")
    assert code == 0, said
    with EpisodeLog(staging) as target:
        assert LearnerStore(target.engine).active_version("vw") == version
        assert learned_model(target.get_snapshot(version)) == learned_model(log.get_snapshot(version))
    # a retried import is done, not an error
    code, said = _cli("policies", "import", str(doc), "--db", staging)
    assert code == 0 and "already in this log: nothing imported" in said, said


def test_the_parent_is_kept_where_the_target_log_holds_it(log: EpisodeLog, migrated_url: str, tmp_path: Path) -> None:
    version = _learned_log(log)
    parent = log.get_snapshot(version).parent
    assert parent is not None
    staging = _target(tmp_path)
    for v in (parent, version):
        doc = tmp_path / f"{v}.json"
        assert _cli("policies", "export", "--whole", "--db", migrated_url, "--version", v, "--out", str(doc))[0] == 0
        assert _cli("policies", "import", str(doc), "--db", staging)[0] == 0
    with EpisodeLog(staging) as target:
        assert target.get_snapshot(version).parent == parent


def _edited(doc: Path, out: Path, **changes: object) -> Path:
    data = json.loads(doc.read_text())
    data.update(changes)
    out.write_text(json.dumps(data))
    return out


def test_a_bad_document_is_refused_by_name_and_nothing_is_stored(
    log: EpisodeLog, migrated_url: str, tmp_path: Path
) -> None:
    version = _learned_log(log)
    doc = tmp_path / "active.json"
    assert _cli("policies", "export", "--whole", "--db", migrated_url, "--policy", "vw", "--out", str(doc))[0] == 0
    text = doc.read_text()
    model = base64.b64decode(json.loads(text)["model"])
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    bad = {
        "not JSON": (cut, "not JSON"),
        "model bytes": (
            _edited(doc, tmp_path / "m.json", model=base64.b64encode(model[:-1] + b"\0").decode()),
            "checksum does not match",
        ),
        "format": (_edited(doc, tmp_path / "f.json", format="memabra.decision/1"), "format 'memabra.decision/1'"),
        "policy": (_edited(doc, tmp_path / "p.json", policy="popularity"), "unknown policy 'popularity'"),
        "learner_args": (_edited(doc, tmp_path / "a.json", learner_args=[1]), "learner_args must be a JSON object"),
        "time": (_edited(doc, tmp_path / "t.json", created_at="yesterday"), "created_at 'yesterday'"),
    }
    staging = _target(tmp_path)
    for what, (path, expected) in bad.items():
        code, said = _cli("policies", "import", str(path), "--db", staging)
        assert code == 1 and expected in said, (what, said)
    code, said = _cli("policies", "import", str(tmp_path / "missing.json"), "--db", staging)
    assert code == 1 and "cannot read" in said, said
    with EpisodeLog(staging) as target:
        assert target.list_snapshots(None) == []
    # another model under a version this log holds: refused, the held one untouched
    assert _cli("policies", "import", str(doc), "--db", staging)[0] == 0
    parent = log.get_snapshot(version).parent
    assert parent is not None
    parent_doc = tmp_path / "parent.json"
    assert (
        _cli("policies", "export", "--whole", "--db", migrated_url, "--version", parent, "--out", str(parent_doc))[0]
        == 0
    )
    other = _edited(parent_doc, tmp_path / "o.json", version=version)  # another model, the same name
    code, said = _cli("policies", "import", str(other), "--db", staging)
    assert code == 1 and f"another snapshot under version {version!r}" in said, said
    with EpisodeLog(staging) as target:
        assert target.get_snapshot(version).model == model


@pytest.mark.parametrize("whole", [False, True])
def test_export_without_whole_still_writes_the_learned_model(
    log: EpisodeLog, migrated_url: str, tmp_path: Path, whole: bool
) -> None:
    version = _learned_log(log)
    out = tmp_path / "out.bin"
    args = ["policies", "export", "--db", migrated_url, "--policy", "vw", "--out", str(out)]
    assert _cli(*args, *(["--whole"] if whole else []))[0] == 0
    if whole:
        assert json.loads(out.read_text())["version"] == version
    else:
        assert out.read_bytes() == learned_model(log.get_snapshot(version))
