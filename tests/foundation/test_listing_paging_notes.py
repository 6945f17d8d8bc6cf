"""What a user paging through a listing is told: ``memories list --cursor C --json FILE`` shows an
older page in its table while the file holds every memory from the newest (a script paging with
both would read every memory on each page), so the page's line says so, as the first page's does;
and ``benchmarks/listing_scale.py`` runs on a log small enough to try it first."""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine, insert
from typer.testing import CliRunner

from memabra._cli import app
from memabra.storage import make_engine
from memabra.storage._models import RegistryRow, table_of

runner = CliRunner(env={"COLUMNS": "200"})
ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _seed_memories(engine: Engine, n: int) -> None:
    rows = [
        dict(kind="memory", owner="ann", id=f"mem:{j:08d}", name=f"mem:{j:08d}", text=f"fact {j}", body=None,
             tokens=2, source="user", metadata={}, created_at=T0 + timedelta(seconds=j),
             updated_at=T0 + timedelta(seconds=j), last_chosen_at=None, times_chosen=0, times_used=0,
             deleted_at=None, retired_at=None, superseded_by=None)
        for j in range(n)
    ]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(insert(table_of(RegistryRow)), rows)


def test_an_older_page_with_json_says_the_file_holds_every_memory(migrated_url: str, tmp_path: Path) -> None:
    engine = make_engine(migrated_url)
    _seed_memories(engine, 7)
    engine.dispose()
    args = ["memories", "list", "--user", "ann", "--db", migrated_url, "--limit", "3"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    cursor = first.output.split("next page: --cursor ")[1].split()[0]
    out = tmp_path / "m.json"
    older = runner.invoke(app, [*args, "--cursor", cursor, "--json", str(out)])
    assert older.exit_code == 0, older.output
    assert len(json.loads(out.read_text())) == 7
    assert "3 of 7 memories shown (an older page) (--json holds them all, from the newest)" in older.output
    # without --json the line is as before
    plain = runner.invoke(app, [*args, "--cursor", cursor])
    assert "(an older page)\n" in plain.output and "--json holds" not in plain.output


def test_the_listing_benchmark_seeds_a_small_log(tmp_path: Path) -> None:
    # --episodes 2000 made two snapshots named +1000 (its fixed one and episodes // 2): a UNIQUE failure
    spec = importlib.util.spec_from_file_location("listing_scale", ROOT / "benchmarks" / "listing_scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for episodes in (2000, 4):
        url = f"sqlite:///{tmp_path / f'log{episodes}.db'}"
        module.seed(url, episodes, 5)
        module.measure(url, "sqlite")
