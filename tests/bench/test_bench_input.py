"""A user's own bench files: what a converter gets wrong (a BOM, duplicate ids, typos in field
names, rounds no router can win) is reported by line; the harness keeps usage per group as the
episode log does; the CLI says why a metric is missing and refuses inputs that would mix runs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import typer
from bench.bench_rounds import bench_round
from typer.testing import CliRunner

from memabra._cli._bench import bench
from memabra.evals.bench import BenchFormatError, BenchRound, load_rounds, parse_round, run_router
from memabra.evals.bench._harness import _Usage
from memabra.router import HybridRouter, Similarity


def _write(tmp_path: Path, rows: list[dict[str, object]], name: str = "mine.jsonl", **kw: str) -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), **kw)  # type: ignore[arg-type]
    return path


def _parsed(rows: list[dict[str, object]]) -> tuple[BenchRound, ...]:
    return tuple(parse_round(r, f"row {i}") for i, r in enumerate(rows))


def _cli(*args: str) -> tuple[int, str]:
    app = typer.Typer()
    app.command()(bench)
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_a_byte_order_mark_is_read_as_utf8(tmp_path: Path) -> None:
    # Notepad and PowerShell's Out-File write one; the format says UTF-8, and a BOM is UTF-8
    path = _write(tmp_path, [bench_round(0), bench_round(1)], encoding="utf-8-sig")
    assert [r.id for r in load_rounds(path)] == ["r0", "r1"]


def test_crlf_line_endings_are_read(tmp_path: Path) -> None:
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\r\n" for r in [bench_round(0), bench_round(1)]))
    assert len(load_rounds(path)) == 2


def test_duplicate_round_ids_name_both_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, [bench_round(0), bench_round(1), bench_round(0)])
    with pytest.raises(BenchFormatError, match=r"line 3: duplicate round id 'r0' \(first on line 1\)"):
        load_rounds(path)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.update(id=""), "field 'id' must not be empty"),
        (lambda r: r.update(slots=0), "field 'slots' must be at least 1"),
        (lambda r: r.update(group=3), "field 'group' must be str, got int"),
    ],
)
def test_rounds_no_router_could_play_are_refused(tmp_path: Path, mutate: object, message: str) -> None:
    row = bench_round(1)
    mutate(row)  # type: ignore[operator]
    with pytest.raises(BenchFormatError, match=f"line 2: {message}"):
        load_rounds(_write(tmp_path, [bench_round(0), row]))


def test_a_whole_json_document_gets_a_hint_about_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "rounds.json"
    path.write_text(json.dumps([bench_round(0), bench_round(1)], indent=2), encoding="utf-8")
    with pytest.raises(BenchFormatError, match="one round per line"):
        load_rounds(path)


def test_unknown_fields_and_unwinnable_rounds_are_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a typo in an optional field would otherwise silently become its default ("need": "any")
    typo = bench_round(1, neeed="all")
    too_many = bench_round(2, slots=1, need="all")
    too_many["relevant"] = ["t-a", "t-b"]
    path = _write(tmp_path, [bench_round(0), typo, too_many])
    with caplog.at_level(logging.WARNING, logger="memabra"):
        rounds = load_rounds(path)
    assert rounds[1].need == "any"
    text = caplog.text
    assert "unknown field 'neeed'" in text and "line 2" in text
    assert "1 round" in text and "need all" in text and "line 3" in text


def test_usage_counts_are_kept_per_group_as_the_episode_log_keeps_them_per_user() -> None:
    rounds = _parsed([bench_round(0), bench_round(1, group="other")])
    usage = _Usage()
    usage.record(rounds[0], ["t-a"])
    mine = {c.id: c.usage for c in usage.annotate(rounds[0])}
    theirs = {c.id: c.usage for c in usage.annotate(rounds[1])}
    assert mine["t-a"] is not None and mine["t-a"].times_chosen == 1
    assert theirs["t-a"] is not None and theirs["t-a"].times_chosen == 0


def test_an_empty_unseen_half_is_explained_not_printed_as_nan(tmp_path: Path) -> None:
    rows = [bench_round(i, query="same question") for i in range(6)]
    code, output = _cli(str(_write(tmp_path, rows)), "--routers", "hybrid", "--passes", "1")
    assert code == 0, output
    assert "nan" not in output
    assert "unseen half is empty" in output
    code, output = _cli(str(_write(tmp_path, rows)), "--routers", "hybrid", "--passes", "1", "--seeds", "0-1")
    assert code == 0, output
    assert "nan" not in output and "unseen half is empty" in output
    sim = Similarity()
    _, unseen = run_router(lambda s: HybridRouter(seed=s, similarity=sim), load_rounds(_write(tmp_path, rows)), 1, 0)
    assert unseen == []


def test_log_db_refuses_a_log_that_already_holds_episodes(tmp_path: Path) -> None:
    path = _write(tmp_path, [bench_round(i) for i in range(4)])
    url = f"sqlite:///{tmp_path / 'bench.db'}"
    code, output = _cli(str(path), "--routers", "hybrid", "--passes", "1", "--log-db", url)
    assert code == 0, output
    code, output = _cli(str(path), "--routers", "hybrid", "--passes", "1", "--log-db", url)
    assert code == 1
    assert "already holds 4 episodes" in output


def test_log_db_refuses_an_older_log_without_migrating_it(tmp_path: Path) -> None:
    from sqlalchemy import text

    from memabra.storage import current_revision, downgrade, make_engine

    path = _write(tmp_path, [bench_round(i) for i in range(4)])
    url = f"sqlite:///{tmp_path / 'production.db'}"
    code, _ = _cli(str(path), "--routers", "hybrid", "--passes", "1", "--log-db", url)
    assert code == 0
    engine = make_engine(url)
    try:
        downgrade(engine, "0010")  # a log an older memabra wrote, given by mistake
        code, output = _cli(str(path), "--routers", "hybrid", "--passes", "1", "--log-db", url)
        assert code == 1 and "already holds 4 episodes" in output
        assert current_revision(engine) == "0010"  # refused before anything was migrated
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM episodes")).scalar_one() == 4
    finally:
        engine.dispose()


def test_log_db_given_a_path_suggests_the_sqlite_url(tmp_path: Path) -> None:
    path = _write(tmp_path, [bench_round(i) for i in range(4)])
    app = typer.Typer()
    app.command()(bench)
    result = CliRunner(env={"COLUMNS": "300"}).invoke(app, [str(path), "--routers", "hybrid", "--log-db", "bench.db"])
    assert result.exit_code == 2 and "a SQLite file is written sqlite:///bench.db" in result.output


def test_a_router_named_twice_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, [bench_round(i) for i in range(4)])
    code, output = _cli(str(path), "--routers", "hybrid,random,hybrid")
    assert code == 1 and "hybrid" in output and "more than once" in output


def test_seed_zero_with_seeds_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, [bench_round(i) for i in range(4)])
    code, output = _cli(str(path), "--routers", "hybrid", "--seed", "0", "--seeds", "1-2")
    assert code == 1 and "either --seed or --seeds" in output


def test_a_class_that_takes_no_similarity_is_told_how_the_bench_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_bench_routers.py").write_text(
        "import numpy as np\n"
        "from memabra.router import Router\n"
        "class OnlySeed(Router):\n"
        "    name = 'only-seed'\n"
        "    def __init__(self, seed=0):\n"
        "        super().__init__(seed=seed)\n"
        "    def _slot_distribution(self, view):\n"
        "        return np.full(view.n_options, 1.0 / view.n_options)\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from memabra import ConfigError
    from memabra.evals.bench import router_factories

    with pytest.raises(ConfigError, match=r"OnlySeed\(seed=\.\.\., similarity=\.\.\.\).*module:function"):
        router_factories(["my_bench_routers:OnlySeed"], similarity=Similarity())


def test_a_shared_pool_is_held_once_not_once_perbench_round(tmp_path: Path) -> None:
    # a registry of 128 tools on each of thousands of rounds would otherwise be thousands of copies
    rounds = load_rounds(_write(tmp_path, [bench_round(i) for i in range(3)]))
    assert all(a is b for a, b in zip(rounds[0].candidates, rounds[2].candidates, strict=True))


def test_the_report_says_which_similarity_the_baselines_ranked_by(tmp_path: Path) -> None:
    # hybrid is BM25 + MiniLM where the embeddings extra is installed and BM25 alone where it is
    # not: two machines' numbers are comparable only if the report says which
    from memabra.router import Similarity

    path = _write(tmp_path, [bench_round(i) for i in range(4)])
    out = tmp_path / "out.json"
    code, output = _cli(str(path), "--routers", "hybrid", "--passes", "1", "--json", str(out))
    assert code == 0, output
    expected = "bm25+minilm" if Similarity.default().has_semantic else "bm25"
    assert json.loads(out.read_text(encoding="utf-8"))["similarity"] == expected
    assert expected in output
    code, output = _cli(str(path), "--routers", "hybrid", "--passes", "1", "--seeds", "0-1", "--json", str(out))
    assert code == 0, output
    assert json.loads(out.read_text(encoding="utf-8"))["similarity"] == expected


def test_the_report_says_how_many_rounds_the_unseen_half_holds(tmp_path: Path) -> None:
    # a hit rate over 3 rounds and one over 300 read alike; the count says which this is
    from memabra.evals.bench import router_factories, run_bench, split_unseen

    rounds = load_rounds(_write(tmp_path, [bench_round(i) for i in range(7)]))
    report = run_bench(rounds, router_factories(["hybrid"], Similarity()), 1, 2)
    assert report["rounds_unseen"] == len(split_unseen(rounds, 2)[1]) == 3
    code, output = _cli(str(_write(tmp_path, [bench_round(i) for i in range(7)])), "--routers", "hybrid", "--seed", "2")
    assert code == 0, output
    assert "unseen half 3 rounds" in output


def test_lexical_ranks_by_bm25_alone_and_says_so(tmp_path: Path) -> None:
    path, out = _write(tmp_path, [bench_round(i) for i in range(4)]), tmp_path / "out.json"
    code, output = _cli(str(path), "--routers", "hybrid", "--passes", "1", "--lexical", "--json", str(out))
    assert code == 0, output
    assert json.loads(out.read_text(encoding="utf-8"))["similarity"] == "bm25"


def test_a_group_too_long_to_be_a_user_id_is_refused_by_line_before_the_log_is_opened(tmp_path: Path) -> None:
    # the group is each decision's user id (at most 200 characters): a converter's
    # "tenant/workspace/user/..." used to pass the load and stop the run at its first decision,
    # without a line, after --log-db was created and marked stopped
    path = _write(tmp_path, [bench_round(0), bench_round(1, group="acme/" + "w" * 250)])
    with pytest.raises(BenchFormatError, match=r"line 2: field 'group' holds at most 200 characters"):
        load_rounds(path)
    log = tmp_path / "bench.db"
    code, output = _cli(str(path), "--routers", "hybrid", "--passes", "1", "--log-db", f"sqlite:///{log}")
    assert code == 1 and "mine.jsonl line 2: field 'group'" in " ".join(output.split())
    assert not log.exists()
    assert len(load_rounds(_write(tmp_path, [bench_round(0, group="g" * 200)]))) == 1


def test_bad_json_says_the_column_on_a_long_line(tmp_path: Path) -> None:
    # a round with a 128-tool registry is one line of some 50 kB: the line alone does not find the typo
    line = json.dumps(bench_round(0))
    cut = line.index('"relevant"')
    path = tmp_path / "cut.jsonl"
    path.write_text(line[:cut] + line[cut + 1 :] + "\n", encoding="utf-8")
    with pytest.raises(BenchFormatError, match=rf"line 1: not valid JSON \(.* at column {cut + 1}; "):
        load_rounds(path)


def test_a_log_db_the_driver_cannot_open_names_the_option_and_url(tmp_path: Path) -> None:
    # a nightly job's --log-db in a folder that was not created: the driver's bare "unable to open
    # database file" used to reach the user as a database error naming neither
    url = f"sqlite:///{tmp_path / 'nightly' / 'bench.db'}"
    code, output = _cli(str(_write(tmp_path, [bench_round(0)])), "--routers", "hybrid", "--log-db", url)
    said = " ".join(output.split())
    assert code == 1 and f"--log-db {url}: cannot open the log: cannot open the SQLite database" in said, said
    assert "nightly does not exist (create it first)" in said, said
