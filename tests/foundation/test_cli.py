from __future__ import annotations

import inspect
import json
import subprocess
import sys
import time
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from click.testing import Result
from sqlalchemy import text
from typer.models import OptionInfo, ParameterInfo
from typer.testing import CliRunner

from factories import candidates, episode, uniform_selection
from memabra import Candidate, CandidateKind, Episode, Step, StepKind
from memabra._cli import app, main
from memabra._feedback import RewardService
from memabra.storage import EpisodeLog, current_revision, head_revision, known_revisions, make_engine

runner = CliRunner(env={"COLUMNS": "200"})


def test_db_upgrade_then_episode_commands(db_url: str) -> None:
    result = runner.invoke(app, ["db", "upgrade", "--db", db_url])
    assert result.exit_code == 0, result.output
    assert head_revision() in result.output
    with EpisodeLog(db_url) as log:
        ep = episode()
        RewardService(log).record(ep)
    listed = runner.invoke(app, ["episodes", "list", "--db", db_url])
    assert listed.exit_code == 0 and ep.id in listed.output
    shown = runner.invoke(app, ["episodes", "show", ep.id, "--db", db_url])
    assert shown.exit_code == 0, shown.output
    for needle in ("m0", "propensity", "reward", "H by kind"):
        assert needle in shown.output
    fb = runner.invoke(
        app, ["feedback", ep.id, json.dumps({"correction": True}), "--db", db_url, "--idempotency-key", "k1"]
    )
    assert fb.exit_code == 0 and "stored" in fb.output
    again = runner.invoke(
        app, ["feedback", ep.id, json.dumps({"correction": True}), "--db", db_url, "--idempotency-key", "k1"]
    )
    assert again.exit_code == 0 and "duplicate" in again.output  # a retry: the same payload
    other = runner.invoke(
        app, ["feedback", ep.id, json.dumps({"rating": 5}), "--db", db_url, "--idempotency-key", "k1"]
    )
    message = " ".join(other.output.split())
    assert other.exit_code == 1 and "idempotency key 'k1' already recorded other feedback" in message
    assert '"correction": true' in message and "nothing was written" in message
    with EpisodeLog(db_url) as log:
        assert [f.payload for f in log.feedback_for(ep.id)] == [{"correction": True}]
    rec = runner.invoke(app, ["rewards", "recompute", "--weights", "wc=1.0", "--db", db_url])
    assert rec.exit_code == 0 and "recomputed 1" in rec.output


def test_cli_errors_are_one_line_and_name_the_problem(db_url: str) -> None:
    unmigrated = runner.invoke(app, ["episodes", "list", "--db", db_url])
    assert unmigrated.exit_code in (1, 2)  # 2: a SQLite file that is not there yet is a bad --db
    assert "memabra db upgrade" in unmigrated.output
    runner.invoke(app, ["db", "upgrade", "--db", db_url])
    missing = runner.invoke(app, ["episodes", "show", "nope", "--db", db_url])
    assert missing.exit_code == 1 and "no episode with id 'nope'" in missing.output
    bad = runner.invoke(app, ["rewards", "recompute", "--weights", "wc=nan", "--db", db_url])
    assert bad.exit_code == 1 and "finite" in bad.output
    badjson = runner.invoke(app, ["feedback", "x", "{not json", "--db", db_url])
    assert badjson.exit_code == 1 and "not JSON" in badjson.output


def test_an_unreachable_database_is_one_line_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    closed_port = "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2"
    monkeypatch.setattr(sys, "argv", ["memabra", "episodes", "list", "--db", closed_port])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "cannot connect to the database postgresql+psycopg://nobody@127.0.0.1:1/none" in err
    assert "Connection refused" in err
    assert "Traceback" not in err


def _no_traceback(result: Result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output


def test_a_missing_sqlite_file_is_refused_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    url = f"sqlite:///{missing}"
    for args in (
        ["episodes", "list"],
        ["episodes", "show", "x"],
        ["db", "current"],
        ["rewards", "finalize"],
        ["admin"],
    ):
        result = runner.invoke(app, [*args, "--db", url])
        assert result.exit_code == 2, (args, result.output)
        assert f"no database at {missing}" in " ".join(result.output.split()), result.output
        assert "memabra db upgrade" in result.output
        _no_traceback(result)
        assert not missing.exists(), args
    elsewhere = runner.invoke(app, ["episodes", "list", "--db", f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}"])
    assert elsewhere.exit_code == 2 and "no database at" in elsewhere.output
    # The default database is refused the same way when it is not there.
    default = CliRunner(env={"COLUMNS": "200", "MEMABRA_DATABASE_URL": url}).invoke(app, ["episodes", "list"])
    assert default.exit_code == 2 and "no database at" in default.output
    # db upgrade creates it.
    created = runner.invoke(app, ["db", "upgrade", "--db", url])
    assert created.exit_code == 0 and missing.exists()
    assert runner.invoke(app, ["episodes", "list", "--db", url]).exit_code == 0


def test_demo_and_db_upgrade_may_create_the_database() -> None:
    import inspect

    from memabra._cli._database import CreateDbOption, DbOption
    from memabra._cli._db import db_upgrade
    from memabra._cli._demo import demo

    for command in (demo, db_upgrade):
        assert inspect.signature(command).parameters["db"].annotation in (CreateDbOption, "CreateDbOption")
    assert DbOption != CreateDbOption


MARKUP_USER = "ann[/]x"
MARKUP_QUERY = "what is [bold]this[/] [/] and [red]that?"
MARKUP_TEXT = "[link=file:///etc/passwd]memory[/link] with [/] inside"


def _markup_episode() -> Episode:
    offered = [Candidate("m[/]0", CandidateKind.MEMORY, MARKUP_TEXT, 10), *candidates(n=3)]
    sel = uniform_selection(MARKUP_USER, offered, ["m[/]0"], query=MARKUP_QUERY)
    steps = (Step(StepKind.TOOL, "look[/]up", status="error", error="failed: [/] bad"),)
    return Episode(user_id=MARKUP_USER, query=MARKUP_QUERY, selections=(sel,), steps=steps, answer="[i]Ann[/i]")


def test_user_text_with_markup_is_shown_literally(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    assert runner.invoke(app, ["db", "upgrade", "--db", url]).exit_code == 0
    ep = _markup_episode()
    with EpisodeLog(url) as log:
        RewardService(log).record(ep)
    listed = runner.invoke(app, ["episodes", "list", "--db", url, "--user", MARKUP_USER])
    _no_traceback(listed)
    assert listed.exit_code == 0, listed.output
    assert MARKUP_USER in listed.output and "[bold]this[/]" in listed.output
    shown = runner.invoke(app, ["episodes", "show", ep.id, "--db", url])
    _no_traceback(shown)
    assert shown.exit_code == 0, shown.output
    for literal in (MARKUP_USER, MARKUP_QUERY, MARKUP_TEXT, "m[/]0", "look[/]up", "failed: [/] bad", "[i]Ann[/i]"):
        assert literal in shown.output, literal
    gone = runner.invoke(app, ["episodes", "show", "no[/]such", "--db", url])
    assert gone.exit_code == 1 and "no[/]such" in gone.output
    _no_traceback(gone)


def test_episodes_show_lists_candidate_texts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    runner.invoke(app, ["db", "upgrade", "--db", url])
    ep = episode()
    with EpisodeLog(url) as log:
        RewardService(log).record(ep)
    shown = runner.invoke(app, ["episodes", "show", ep.id, "--db", url])
    assert shown.exit_code == 0
    for sc in ep.selections[0].offered:
        row = next(line for line in shown.output.splitlines() if f" {sc.candidate.id} " in line)
        assert sc.candidate.text in row
    assert "stopped: memory at slot 2" in shown.output


def test_tables_keep_their_width_when_piped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    runner.invoke(app, ["db", "upgrade", "--db", url])
    ep = episode(user_id="a-user-with-a-rather-long-name")
    with EpisodeLog(url) as log:
        RewardService(log).record(ep)
    monkeypatch.delenv("COLUMNS", raising=False)
    piped = CliRunner().invoke(app, ["episodes", "list", "--db", url])  # CliRunner's output is not a terminal
    assert piped.exit_code == 0
    row = next(line for line in piped.output.splitlines() if ep.id in line)
    assert len(row) > 80 and "a-user-with-a-rather-long-name" in row and ep.query in row
    narrow = CliRunner(env={"COLUMNS": "60"}).invoke(app, ["episodes", "list", "--db", url])
    # an explicit $COLUMNS still narrows the table (text wraps at spaces), but never cuts a word
    assert max(len(line) for line in narrow.output.splitlines()) < len(row)
    assert ep.id in narrow.output and "a-user-with-a-rather-long-name" in narrow.output
    assert "\u2026" not in narrow.output


def test_db_upgrade_names_a_bad_revision(db_url: str) -> None:
    bad = runner.invoke(app, ["db", "upgrade", "--db", db_url, "--revision", "nope"])
    assert bad.exit_code == 1, bad.output
    assert "unknown schema revision 'nope'" in bad.output and head_revision() in bad.output
    _no_traceback(bad)
    assert runner.invoke(app, ["db", "upgrade", "--db", db_url]).exit_code == 0
    down = runner.invoke(app, ["db", "downgrade", "zzz", "--db", db_url])
    assert down.exit_code == 1 and "unknown schema revision 'zzz'" in down.output
    _no_traceback(down)


def test_a_failed_upgrade_of_a_new_sqlite_path_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    bad = runner.invoke(app, ["db", "upgrade", "--db", f"sqlite:///{path}", "--revision", "9999"])
    assert bad.exit_code == 1 and "unknown schema revision '9999'" in bad.output
    assert not path.exists()  # an empty file would pass for a database in every later command
    existing = tmp_path / "kept.db"
    assert runner.invoke(app, ["db", "upgrade", "--db", f"sqlite:///{existing}"]).exit_code == 0
    assert runner.invoke(app, ["db", "upgrade", "--db", f"sqlite:///{existing}", "--revision", "9999"]).exit_code == 1
    assert existing.exists()  # only a file this run created is removed


def test_a_downgrade_asks_before_dropping_data_and_an_upgrade_backwards_says_it_did_nothing(db_url: str) -> None:
    assert runner.invoke(app, ["db", "upgrade", "--db", db_url]).exit_code == 0
    refused = runner.invoke(app, ["db", "downgrade", "base", "--db", db_url], input="n\n")
    assert refused.exit_code == 1 and "Drop every memabra table" in refused.output
    assert "nothing was changed" in refused.output
    engine = make_engine(db_url)
    try:
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()
    behind = sorted(known_revisions())[-2]
    backwards = runner.invoke(app, ["db", "upgrade", "--db", db_url, "--revision", behind])
    assert backwards.exit_code == 0 and f"already past {behind}: nothing was changed" in " ".join(
        backwards.output.split()
    )
    done = runner.invoke(app, ["db", "downgrade", behind, "--db", db_url, "--yes"])
    assert done.exit_code == 0 and f"schema revision is now {behind}" in done.output
    runner.invoke(app, ["db", "upgrade", "--db", db_url])


def test_db_upgrade_on_a_newer_schema_says_to_upgrade_memabra(db_url: str) -> None:
    assert runner.invoke(app, ["db", "upgrade", "--db", db_url]).exit_code == 0
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
            # and 9999 declared itself breaking: older code cannot run on it
            conn.execute(text("UPDATE schema_compatibility SET oldest_compatible_revision = '9999'"))
    finally:
        engine.dispose()
    for args in (["db", "upgrade"], ["db", "downgrade", "base", "--yes"]):
        result = runner.invoke(app, [*args, "--db", db_url])
        assert result.exit_code == 1, result.output
        assert "at schema revision 9999, newer than this memabra" in result.output
        _no_traceback(result)
    listed = runner.invoke(app, ["episodes", "list", "--db", db_url])
    assert listed.exit_code == 1 and "newer than this memabra" in listed.output


def test_a_bench_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes('{"id": "r9", "query": "caf\u00e9"}\n'.encode("latin-1"))
    result = runner.invoke(app, ["bench", str(bad), "--routers", "hybrid", "--passes", "1"])
    assert result.exit_code == 1, result.output
    assert "latin1.jsonl line" in result.output and "not UTF-8" in result.output
    _no_traceback(result)


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "{bench}", "--routers", "hybrid", "--json", "{missing}/report.json"],
        ["bench", "{bench}", "--routers", "hybrid", "--plot", "{missing}/curve.png"],
        ["bench", "{bench}", "--routers", "hybrid", "--json", "{tmp}"],
        ["ope", "log", "--db", "{db}", "--policy", "hybrid", "--json", "{missing}/ope.json"],
        ["ope", "arrays", "{npz}", "--json", "{missing}/ope.json"],
    ],
    ids=["bench-json", "bench-plot", "bench-json-is-a-folder", "ope-log-json", "ope-arrays-json"],
)
def test_output_paths_are_checked_before_the_work_starts(args: list[str], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    runner.invoke(app, ["db", "upgrade", "--db", url])
    npz = tmp_path / "a.npz"
    npz.write_bytes(b"")
    values = {
        "bench": "/no/such/bench.jsonl",
        "missing": str(tmp_path / "no-such-dir"),
        "tmp": str(tmp_path),
        "db": url,
        "npz": str(npz),
    }
    started = time.perf_counter()
    result = runner.invoke(app, [a.format(**values) for a in args])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "does not exist; create it first" in message or "is a folder" in message, result.output
    assert "bench.jsonl" not in message  # refused before the bench file is even read
    assert time.perf_counter() - started < 5
    _no_traceback(result)


def test_the_linear_learner_has_one_name_and_sklearn_is_an_alias() -> None:
    from memabra.evals.bench import router_factories
    from memabra.evals.bench._routers import ROUTER_NAMES
    from memabra.evals.offline import resolve_policy
    from memabra.router import LinearRouter, Similarity

    assert "linear" in ROUTER_NAMES and "sklearn" not in ROUTER_NAMES
    sim = Similarity()
    assert isinstance(router_factories(["linear"], sim)["linear"](0), LinearRouter)
    assert isinstance(router_factories(["sklearn"], sim)["linear"](0), LinearRouter)
    assert LinearRouter.name == "linear"
    assert isinstance(resolve_policy("sklearn", None).router, LinearRouter)  # type: ignore[arg-type]
    help_text = runner.invoke(app, ["bench", "--help"]).output
    assert "linear" in help_text


@pytest.mark.slow
def test_loading_the_encoder_prints_no_progress_bar(tmp_path: Path) -> None:
    from memabra.router import embeddings_available

    if not embeddings_available():
        pytest.skip("needs the embeddings extra")
    script = "from memabra.router._similarity import SentenceTransformerEncoder as E; print(E().encode(['hi']).shape)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    assert "(1, 384)" in done.stdout
    assert "Loading weights" not in done.stderr and "it/s" not in done.stderr, done.stderr


def test_a_file_that_is_not_a_database_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    junk = tmp_path / "notes.db"
    junk.write_text("[bold]not a database[/] at all\n" * 100)
    monkeypatch.setattr(sys, "argv", ["memabra", "episodes", "list", "--db", f"sqlite:///{junk}"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "database error" in err and "not a database" in err and "Traceback" not in err


# ------------------------------------------------------------------ output options of every command


def _commands(group: typer.Typer, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Callable[..., Any]]]:
    for info in group.registered_commands:
        assert info.callback is not None
        yield (*prefix, info.name or info.callback.__name__.replace("_", "-")), info.callback
    for sub in group.registered_groups:
        assert sub.typer_instance is not None and sub.name is not None
        yield from _commands(sub.typer_instance, (*prefix, sub.name))


def _params(callback: Callable[..., Any]) -> Iterator[tuple[str, Any, Any, Any]]:
    """Each parameter of a command: name, type, its typer info (OptionInfo or ArgumentInfo), default."""
    hints = typing.get_type_hints(callback, include_extras=True)
    for name, param in inspect.signature(callback).parameters.items():
        hint = hints[name]
        info = param.default if isinstance(param.default, ParameterInfo) else None
        kind = hint
        if typing.get_origin(hint) is typing.Annotated:
            kind, *extras = typing.get_args(hint)
            info = next((e for e in extras if isinstance(e, ParameterInfo)), info)
        default = param.default if not isinstance(param.default, ParameterInfo) else param.default.default
        yield name, kind, info, default


# The flags of options that name a file a command writes (every other Path option is read).
OUTPUT_FLAGS = ("--json", "--out", "--plot")


def _flag(name: str, info: Any) -> str:
    decls = list(getattr(info, "param_decls", None) or ())
    default = getattr(info, "default", None)
    if isinstance(default, str) and default.startswith("--"):  # typer.Option("--json") inside Annotated
        decls.insert(0, default)
    return next((d for d in decls if d.startswith("--")), None) or "--" + name.replace("_", "-")


def _output_options() -> list[tuple[tuple[str, ...], str, Any]]:
    found = []
    for path, callback in _commands(app):
        for name, _kind, info, _ in _params(callback):
            if isinstance(info, OptionInfo) and _flag(name, info) in OUTPUT_FLAGS:
                found.append((path, _flag(name, info), info))
    return found


def test_every_output_option_is_checked_by_the_shared_helper() -> None:
    from memabra._cli._common import check_json_output, check_output_path

    options = _output_options()
    commands = {p for p, _, _ in options}
    assert {("memories", "add"), ("memories", "forget"), ("policies", "export"), ("route",), ("learner",)} <= commands
    assert {("episodes", "list"), ("episodes", "show"), ("bench",), ("ope", "log"), ("ope", "arrays")} <= commands
    for path, flag, info in options:
        assert info.callback in (check_output_path, check_json_output), (path, flag)


def _dummy_args(path: tuple[str, ...], skip: str, db: str) -> list[str]:
    """Values for a command's required parameters (and its --db), enough to get through parsing."""
    callback = dict(_commands(app))[path]
    positional, options = [], []
    for name, kind, info, default in _params(callback):
        flag = _flag(name, info)
        base = next((a for a in (kind, *typing.get_args(kind)) if a is not type(None)), str)
        value = "1" if base in (int, float) else db if name == "db" else "x"
        if name == "db":
            options += [flag, value]
        elif default is inspect.Parameter.empty or default is ...:
            if isinstance(info, OptionInfo):
                if flag != skip:
                    options += [flag, value]
            else:
                positional.append(value)
    return [*path, *positional, *options]


@pytest.mark.parametrize("where", ["folder", "missing"])
def test_every_output_option_refuses_a_bad_path_before_any_work(where: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    assert runner.invoke(app, ["db", "upgrade", "--db", url]).exit_code == 0
    bad = str(tmp_path) if where == "folder" else str(tmp_path / "no-such-dir" / "out")
    for path, flag, _ in _output_options():
        args = [*_dummy_args(path, flag, url), flag, bad]
        result = runner.invoke(app, args)
        message = " ".join(result.output.split())
        assert result.exit_code == 2, (args, result.output)
        assert f"Invalid value for '{flag}'" in message, (args, result.output)
        assert "is a folder" in message or "does not exist; create it first" in message, (args, result.output)
        _no_traceback(result)


def test_an_output_file_is_replaced_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memabra._cli._common import write_output

    target = tmp_path / "report.json"
    target.write_text("previous\n")
    target.chmod(0o640)
    write_output(target, '{"a": 1}\n')
    assert target.read_text() == '{"a": 1}\n' and (target.stat().st_mode & 0o777) == 0o640

    def full_disk(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("memabra._cli._common.os.fsync", full_disk)
    with pytest.raises(typer.Exit) as failed:
        write_output(target, '{"a": 2, "half": "written"}\n')
    assert failed.value.exit_code == 1
    assert target.read_text() == '{"a": 1}\n'  # the old file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary file left


def test_json_has_no_nan_and_takes_records() -> None:
    from memabra._cli._common import jsonable

    assert jsonable({"v": float("nan"), "w": [float("inf"), 1.5], "k": CandidateKind.TOOL}) == {
        "v": None,
        "w": [None, 1.5],
        "k": "tool",
    }


# ------------------------------------------------------------------ databases, models, episodes


def test_a_bad_database_url_names_where_it_came_from(tmp_path: Path) -> None:
    from_env = CliRunner(env={"COLUMNS": "200", "MEMABRA_DATABASE_URL": "sqlit:///x.db"}).invoke(app, ["demo"])
    message = " ".join(from_env.output.split())
    assert from_env.exit_code == 2 and "$MEMABRA_DATABASE_URL (no --db given)" in message
    assert "unsupported database 'sqlit'" in message and "'--db'" not in message
    _no_traceback(from_env)
    for command in (["demo"], ["episodes", "list"]):
        path = runner.invoke(app, [*command, "--db", str(tmp_path / "x.db")])
        message = " ".join(path.output.split())
        assert path.exit_code == 2 and "Invalid value for '--db'" in message, path.output
        assert f"sqlite:///{tmp_path / 'x.db'} (four slashes before an absolute path)" in message
        _no_traceback(path)
    assert list(tmp_path.iterdir()) == []


def test_demo_checks_the_model_before_it_creates_the_database(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    result = runner.invoke(app, ["demo", "--db", f"sqlite:///{db}", "--model", "garbage"])
    assert result.exit_code == 1 and "--model garbage:" in result.output and "provider:name" in result.output
    _no_traceback(result)
    missing = runner.invoke(app, ["demo", "--db", f"sqlite:///{db}", "--model", "no_such_provider:x"])
    assert missing.exit_code == 1 and "--model no_such_provider:x" in missing.output
    _no_traceback(missing)
    assert not db.exists()


def test_demo_on_a_newer_schema_says_to_upgrade_memabra(db_url: str) -> None:
    assert runner.invoke(app, ["db", "upgrade", "--db", db_url]).exit_code == 0
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
            # and 9999 declared itself breaking: older code cannot run on it
            conn.execute(text("UPDATE schema_compatibility SET oldest_compatible_revision = '9999'"))
    finally:
        engine.dispose()
    result = runner.invoke(app, ["demo", "--db", db_url, "--episodes", "20"])
    assert result.exit_code == 1 and "newer than this memabra" in result.output
    _no_traceback(result)


def test_episodes_list_and_show_write_the_table_as_json(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    runner.invoke(app, ["db", "upgrade", "--db", url])
    ep = episode()
    with EpisodeLog(url) as log:
        RewardService(log).record(ep)
    listed = runner.invoke(app, ["episodes", "list", "--db", url, "--json", "-"])
    assert listed.exit_code == 0, listed.output
    page = json.loads(listed.stdout)
    assert page["next_cursor"] is None
    [row] = page["episodes"]
    assert row["id"] == ep.id and row["query"] == ep.query and row["final"] is False
    assert ep.id in listed.stderr  # the table went to stderr
    out = tmp_path / "show.json"
    shown = runner.invoke(app, ["episodes", "show", ep.id, "--db", url, "--json", str(out)])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    [decision] = doc["decisions"]
    assert {c["id"] for c in decision["candidates"]} == {sc.candidate.id for sc in ep.selections[0].offered}
    assert [c["id"] for c in decision["candidates"] if c["chosen"]] == ["m0", "m2"]
    assert decision["stopped"] and decision["stopped"][0]["slot"] == 2
    assert doc["reward"]["terms"][0]["term"] == "S" and "h_by_kind" in doc["reward"]
    assert doc["steps"][0]["name"] == "fake-model"


def test_simulate_refuses_a_window_longer_than_the_run_and_no_routers() -> None:
    long = runner.invoke(app, ["simulate", "--rounds", "100", "--window", "500", "--routers", "random"])
    assert long.exit_code == 1 and "--window 500 is longer than the run (--rounds 100)" in long.output
    empty = runner.invoke(app, ["simulate", "--rounds", "100", "--window", "50", "--routers", ","])
    assert empty.exit_code == 1 and "--routers names no router" in empty.output
    short = runner.invoke(app, ["simulate", "--rounds", "100", "--routers", "random"])
    assert (
        short.exit_code == 0 and "simulator: 100 rounds, seed 0, last 100 rounds" in short.output
    )  # the default window fits
    bench = runner.invoke(app, ["bench", "/no/such.jsonl", "--routers", ","])
    assert bench.exit_code == 1 and "--routers names no router" in bench.output


def test_mempo_since_says_it_filters_by_feedback_time() -> None:
    help_text = " ".join(runner.invoke(app, ["mempo", "score", "--help"]).output.split())
    assert "gold answer arrived" in help_text


def test_the_command_line_imports_no_heavy_library_before_a_command_needs_it() -> None:
    # every call of `memabra` imports the whole app: scikit-learn with SciPy, LangChain and LangGraph
    # took it from about 0.8 s to 2.8 s on the CI machine, for commands that use none of them
    heavy = ("sklearn", "scipy", "langchain_core", "langgraph", "torch", "vowpalwabbit", "transformers")
    probe = f"import sys, memabra._cli; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stdout


def test_db_upgrade_reports_each_step_on_one_line_without_alembics_setup(tmp_path: Path) -> None:
    script = "from memabra._cli import main; main()"
    url = f"sqlite:///{tmp_path / 'new.db'}"
    done = subprocess.run(
        [sys.executable, "-c", script, "db", "upgrade", "--db", url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    steps = [line for line in done.stderr.splitlines() if line.strip()]
    assert steps and all("Running upgrade" in line for line in steps), done.stderr
    assert any("-> 0012: Turns kept in the log from the moment they are routed" in line for line in steps)
