"""The code blocks of docs/*.md run as a reader who copies them would run them, so they cannot rot.

Each page runs in a scratch folder holding ``memabra.db``, a small episode log (300 rewarded
decisions of ``logged_world``), so an example that opens ``sqlite:///memabra.db`` finds a log to
read; any other database URL an example names is turned into a SQLite file of the same name there.
A page's blocks run in order: its ``python`` blocks share one namespace (later blocks use what
earlier ones defined), and its shell blocks (``bash``, ``sh``, ``console`` or unlabelled) run their
``memabra ...`` commands through typer's ``CliRunner``, with the page's Python so far importable as
``my_routers`` (the module the router pages tell the reader to write) and a bench file a command
names (``*.jsonl``) written as eight small rounds where the reader would have the real one.
Similarity is BM25 alone (no MiniLM load), which changes what is ranked, not what is called.

A block that cannot run offline, or is a fragment on purpose, carries ``<!-- not run: why -->`` on
the line before its fence (invisible to a reader of the rendered page); any other block that fails
fails this test, so a new example has to run or to say why it does not.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import traceback
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from logged_world import log_world
from memabra._cli._app import app
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog, upgrade

DOCS = Path(__file__).resolve().parents[2] / "docs"
# configuration.md and production.md join once their blocks are run or marked (`<!-- not run: ... -->`)
PAGES = [
    DOCS / f"{name}.md"
    for name in ("router", "ope", "storage", "memory", "custom_router", "demo", "configuration", "production")
]

_FENCE = re.compile(r"^( *)```([\w+-]*)[^\n]*\n(.*?)^\1```[ \t]*$", re.DOTALL | re.MULTILINE)
_NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->")
_SHELL = {"", "bash", "sh", "shell", "console"}
_PYTHON = {"python", "py"}
# a SQLite file anywhere, or a PostgreSQL server: the reader's database, here a file in the scratch folder
_SQLITE_URL = re.compile(r"sqlite:///[^\s\"'`]*?([\w.-]+\.db)\b")
_POSTGRES_URL = re.compile(r"postgresql(?:\+\w+)?://[^\s\"'`]+")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    source: str
    not_run: str | None  # the reason a marked block gives, else None

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    blocks = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
        marker = _NOT_RUN.fullmatch(before.strip())
        indent = len(match.group(1))
        source = "\n".join(line[indent:] for line in match.group(3).splitlines())
        line = text.count("\n", 0, match.start()) + 1
        blocks.append(Block(page, line, match.group(2).lower(), source, marker.group(1) if marker else None))
    return blocks


def _with_scratch_urls(source: str) -> str:
    return _POSTGRES_URL.sub("sqlite:///memabra.db", _SQLITE_URL.sub(r"sqlite:///\1", source))


def _commands(block: Block) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", block.source)  # continued lines, joined
    commands = []
    for line in joined.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()  # a comment, not a `#` inside a word
        commands += [part.strip() for part in line.split("&&") if part.strip()]
    return commands


def _tiny_bench_file(path: Path) -> None:
    """Eight rounds in the bench format: one tool of four is needed, by the words of the query."""
    topics = ["weather forecast", "divorce lawyer", "pizza recipe", "flight booking"]
    rows = []
    for i in range(8):
        candidates = [
            {"id": f"t-{j}", "kind": "tool", "text": f"tool for {topic}", "tokens": 10 + j}
            for j, topic in enumerate(topics)
        ]
        rows.append(
            {
                "id": f"r{i}",
                "query": f"help with a {topics[i % 4]}",
                "candidates": candidates,
                "relevant": [f"t-{i % 4}"],
                "slots": 1,
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def _run_shell(
    block: Block, namespace: dict[str, object], scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> str | None:
    """The first command of the block that failed, with its output, or None."""
    module = types.ModuleType("my_routers")
    module.__dict__.update({k: v for k, v in namespace.items() if not k.startswith("__")})
    monkeypatch.setitem(sys.modules, "my_routers", module)
    runner = CliRunner(env={"MEMABRA_DATABASE_URL": None, "MEMABRA_DATABASE_URL_FILE": None, "COLUMNS": "200"})
    for command in _commands(block):
        words = shlex.split(_with_scratch_urls(command))
        if words[0] != "memabra":
            return f"`{command}` is not a memabra command this test can run"
        for word in words:
            if word.endswith(".jsonl") and not (scratch / word).exists():
                target = (scratch / word).resolve()
                assert target.is_relative_to(scratch.parent), f"{word} lies outside the scratch folder"
                _tiny_bench_file(target)
        result = runner.invoke(app, words[1:])
        if result.exit_code != 0:
            return f"`{command}` exited {result.exit_code}:\n{result.output}"
    return None


def run_page(page: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every unmarked block of ``page`` run in order in ``scratch``; the problems found."""
    monkeypatch.chdir(scratch)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    problems = []
    try:
        for block in blocks_of(page):
            if block.not_run is not None:
                if not block.not_run:
                    problems.append(f"{block.where}: `<!-- not run: -->` gives no reason")
                continue
            if block.language in _PYTHON:
                code = "\n" * block.line + _with_scratch_urls(block.source)  # tracebacks name the page's lines
                try:
                    exec(compile(code, str(page), "exec"), namespace)  # noqa: S102 - the page's own code
                except Exception:
                    problems.append(f"{block.where}: the python block failed:\n{traceback.format_exc(limit=-3)}")
            elif block.language in _SHELL:
                failed = _run_shell(block, namespace, scratch, monkeypatch)
                if failed:
                    problems.append(f"{block.where}: {failed}")
            else:
                problems.append(f"{block.where}: a `{block.language}` block this test cannot run")
    finally:
        for value in namespace.values():
            if isinstance(value, EpisodeLog):
                value.close()
    return [f"{p}\n(run it, or mark it with `<!-- not run: why -->` on the line before its fence)" for p in problems]


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working folder holding ``memabra.db``, an episode log with 300 rewarded decisions."""
    monkeypatch.setattr(Similarity, "default", classmethod(lambda cls: cls()))
    folder = tmp_path / "work"
    folder.mkdir()
    url = f"sqlite:///{folder / 'memabra.db'}"
    upgrade(url)
    with EpisodeLog(url) as log:
        log_world(log, RandomRouter(similarity=Similarity(), seed=1), 300)
    yield folder


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_unmarked_block_of_the_page_runs(
    page: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    problems = run_page(page, scratch, monkeypatch)
    capsys.readouterr()  # what the examples printed is theirs, not the report's
    assert not problems, "\n\n".join(problems)


def test_the_pages_hold_examples_that_run() -> None:
    """The runner finds the blocks (a changed fence syntax would otherwise pass vacuously)."""
    run = [b for page in PAGES for b in blocks_of(page) if b.not_run is None]
    assert sum(b.language in _PYTHON for b in run) >= 7
    assert any(b.language in _SHELL for b in run)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_commands_are_fenced_where_this_test_sees_them(page: Path) -> None:
    """An indented code line that is a command is not run by anything: it belongs in a ```bash block."""
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    indented = re.findall(r"^ {4}(memabra .*)$", text, re.MULTILINE)
    assert not indented, f"indented commands in {page.name}, fence them as ```bash: {indented}"


def test_an_unmarked_block_that_fails_is_reported_and_a_marked_one_is_not(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = scratch / "page.md"
    page.write_text(
        "# A page\n\n```python\nfrom memabra import NoSuchThing\n```\n\n"
        "<!-- not run: a fragment -->\n```python\nundefined_name()\n```\n\n"
        "```bash\nmemabra no-such-command\n```\n\n"
        "```bash\npytest -q\n```\n\n"
        "```toml\n[memabra]\n```\n\n"
        "```python\nfrom memabra.storage import EpisodeLog\nlog = EpisodeLog('sqlite:///memabra.db')\n```\n",
        encoding="utf-8",
    )
    problems = run_page(page, scratch, monkeypatch)
    assert [p.split(":", 2)[1] for p in problems] == ["3", "12", "16", "20"]
    assert "NoSuchThing" in problems[0] and "no-such-command" in problems[1]
    assert "not a memabra command" in problems[2] and "`toml`" in problems[3]
