"""The schema's compatibility marker: a process whose code is one release behind the database (a pod
rescheduled mid-roll) keeps running on a schema a newer memabra only added to, and is refused one
that a newer migration declared breaking.

"A newer memabra" is this memabra's migrations plus the scripts a test writes into ``tmp_path``
(Alembic's ``version_locations``), run through the shipped ``env.py``: the database is migrated
the way a newer release would migrate it, and ``check_schema`` runs as this (older) code.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text

from memabra import SchemaError
from memabra.storage import EpisodeLog, check_schema, current_revision, downgrade, head_revision, upgrade
from memabra.storage._migrate import _MIGRATIONS, alembic_config
from memabra.storage._schema_compat import DECLARATION, breaks_older_code, read_marker

HEAD = head_revision()

# the newest revision this memabra ships that declares it breaks older code
NEWEST_BREAKING = "0012"

_ADDITIVE = f'''"""A newer release's additive migration: a new table and a nullable column."""

import sqlalchemy as sa
from alembic import op

revision = "9001"
down_revision = "{HEAD}"
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = False


def upgrade() -> None:
    op.create_table("newer_notes", sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False))
    op.add_column("episodes", sa.Column("newer_note", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("episodes", "newer_note")
    op.drop_table("newer_notes")
'''

_BREAKING = '''"""A newer release's breaking migration (what it does is beside the point: it says so)."""

import sqlalchemy as sa
from alembic import op

revision = "9002"
down_revision = "9001"
branch_labels = None
depends_on = None

BREAKS_OLDER_CODE = True


def upgrade() -> None:
    op.create_table("newer_rules", sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False))


def downgrade() -> None:
    op.drop_table("newer_rules")
'''


def _newer_memabra(tmp_path: Path, *scripts: str) -> Config:
    """Alembic's configuration of a memabra that ships ``scripts`` after this one's head."""
    newer = tmp_path / "newer_versions"
    newer.mkdir()
    for number, script in enumerate(scripts, start=1):
        (newer / f"900{number}_newer.py").write_text(script)
    config = alembic_config("sqlite://")  # the URL is unused: the connection is handed over
    config.set_main_option("path_separator", "os")
    config.set_main_option("version_locations", os.pathsep.join([str(_MIGRATIONS / "versions"), str(newer)]))
    return config


def _migrate_as_newer(config: Config, engine: Engine, action: str, revision: str) -> None:
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        getattr(command, action)(config, revision)


def _marker(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return read_marker(connection)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "memabra" and r.levelno == logging.WARNING]


def test_every_migration_declares_whether_it_breaks_older_code() -> None:
    """What keeps a future migration's author honest: a script without the declaration fails here
    (and its first upgrade); the template a new script starts from asks for it."""
    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    declared = {script.revision: breaks_older_code(script) for script in scripts.walk_revisions()}
    assert len(declared) == len(list((_MIGRATIONS / "versions").glob("[0-9]*.py")))
    assert [revision for revision, breaks in sorted(declared.items()) if breaks][-1] == NEWEST_BREAKING
    assert f"{DECLARATION} = ..." in (_MIGRATIONS / "script.py.mako").read_text()


def test_the_marker_follows_upgrades_and_downgrades(engine: Engine) -> None:
    assert upgrade(engine) == HEAD
    assert _marker(engine) == NEWEST_BREAKING
    downgrade(engine, "0013")  # before the marker existed: a database as older memabras left it
    assert "schema_compatibility" not in inspect(engine).get_table_names()
    assert _marker(engine) is None
    upgrade(engine)
    assert _marker(engine) == NEWEST_BREAKING
    check_schema(engine)


def test_older_code_runs_on_a_schema_a_newer_memabra_only_added_to(
    engine: Engine, db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    upgrade(engine)
    newer = _newer_memabra(tmp_path, _ADDITIVE, _BREAKING)
    _migrate_as_newer(newer, engine, "upgrade", "9001")
    assert current_revision(engine) == "9001" and _marker(engine) == NEWEST_BREAKING
    with caplog.at_level(logging.WARNING, logger="memabra"):
        check_schema(engine)
        with EpisodeLog(db_url) as log:
            assert log.engine is not None
        assert upgrade(engine) == "9001"  # an old image's deploy job: nothing to apply, nothing refused
    warnings = _warnings(caplog)
    assert len(warnings) == 3 and all("9001" in w and f"newer than this memabra ({HEAD})" in w for w in warnings)
    assert current_revision(engine) == "9001"


def test_older_code_is_refused_a_schema_a_newer_migration_broke_and_back_after_its_downgrade(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    upgrade(engine)
    newer = _newer_memabra(tmp_path, _ADDITIVE, _BREAKING)
    _migrate_as_newer(newer, engine, "upgrade", "9002")
    assert _marker(engine) == "9002"
    refused = f"at schema revision 9002, newer than this memabra \\({HEAD}\\), and its revision 9002 changed"
    with pytest.raises(SchemaError, match=refused):
        check_schema(engine)
    with pytest.raises(SchemaError, match=refused):
        EpisodeLog(db_url)
    with pytest.raises(SchemaError, match=refused):
        upgrade(engine)
    _migrate_as_newer(newer, engine, "downgrade", "9001")
    assert _marker(engine) == NEWEST_BREAKING
    check_schema(engine)


def test_a_newer_database_without_the_marker_is_refused_as_before(engine: Engine, tmp_path: Path) -> None:
    upgrade(engine)
    _migrate_as_newer(_newer_memabra(tmp_path, _ADDITIVE), engine, "upgrade", "9001")
    with engine.begin() as connection:  # what a memabra from before the marker would have left
        connection.execute(text("DELETE FROM schema_compatibility"))
    with pytest.raises(SchemaError, match=f"at schema revision 9001, newer than this memabra \\({HEAD}\\); upgrade"):
        check_schema(engine)


def test_a_migration_that_declares_nothing_fails_its_upgrade_and_changes_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    upgrade(engine)
    undeclared = _ADDITIVE.replace("BREAKS_OLDER_CODE = False\n", "")
    with pytest.raises(SchemaError, match=f"migration 9001 \\(.*9001_newer.py\\) must declare {DECLARATION}"):
        _migrate_as_newer(_newer_memabra(tmp_path, undeclared), engine, "upgrade", "9001")
    assert current_revision(engine) == HEAD and _marker(engine) == NEWEST_BREAKING
    assert "newer_notes" not in inspect(engine).get_table_names()


def test_db_current_names_the_oldest_schema_that_runs_on_the_database(engine: Engine, db_url: str) -> None:
    from typer.testing import CliRunner

    from memabra._cli._app import app
    from memabra.storage import compatible_from

    upgrade(engine)
    assert compatible_from(engine) == NEWEST_BREAKING
    shown = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["db", "current", "--db", db_url])
    assert shown.exit_code == 0, shown.output
    expected = f"database: {HEAD} (memabra at schema {NEWEST_BREAKING} or later runs on it); this memabra needs: {HEAD}"
    assert expected in " ".join(shown.output.split())
    downgrade(engine, "0013")  # a database as a memabra from before the record left it
    assert compatible_from(engine) is None
    shown = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["db", "current", "--db", db_url])
    assert "database: 0013; this memabra needs" in " ".join(shown.output.split())
