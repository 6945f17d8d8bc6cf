"""The README as a new user reads it: its Python snippets run, every `memabra ...` command line it
(or docs/*.md) shows names a command and options that exist, and its links to docs resolve.

The snippets run as written, with the two changes the README itself tells an offline reader to
make: the stand-in ``memabra.ExtractiveChatModel()`` for ``"openai:gpt-4.1-mini"``, and a scratch
database for ``sqlite:///memabra.db``. Their agents are built lexical-only (no MiniLM load), which
changes what is recalled, not what the snippet calls.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

import memabra
from memabra._cli import app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _fenced_blocks(text: str, language: str) -> list[str]:
    """The bodies of the fenced blocks of ``language`` (indented ones too, dedented)."""
    pattern = re.compile(rf"^( *)```{language}\n(.*?)^\1```", re.DOTALL | re.MULTILINE)
    return [textwrap.dedent(m.group(2)) for m in pattern.finditer(text)]


def _python_snippets() -> list[str]:
    """The agent and middleware snippets this test runs (the MemPO one runs in tests/mempo, which
    builds a model for it)."""
    blocks = _fenced_blocks(README.read_text(encoding="utf-8"), "python")
    return [b for b in blocks if "MemPOScorer" not in b and "quickstart.db" not in b]


def _quickstart_snippet() -> str:
    """The Quickstart's first agent, which runs offline as written."""
    blocks = _fenced_blocks(README.read_text(encoding="utf-8"), "python")
    found = [b for b in blocks if "quickstart.db" in b]
    assert len(found) == 1, "the README's Quickstart agent names sqlite:///quickstart.db"
    return found[0]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[Any]]:
    """``create_memabra_agent`` / ``create_memabra_middleware`` as the snippets import them, made
    lexical-only; yields the agents and middlewares built, to close them afterwards."""
    from memabra.router import LinearRouter, Similarity

    built: list[Any] = []
    real_agent, real_middleware = memabra.create_memabra_agent, memabra.create_memabra_middleware

    def agent(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("router", LinearRouter(similarity=Similarity(encoder=None)))
        built.append(real_agent(*args, **kwargs))
        return built[-1]

    def middleware(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("router", LinearRouter(similarity=Similarity(encoder=None)))
        built.append(real_middleware(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(memabra, "create_memabra_agent", agent)
    monkeypatch.setattr(memabra, "create_memabra_middleware", middleware)
    monkeypatch.chdir(tmp_path)
    yield built
    for item in built:
        (getattr(item, "session", None) or item).close()


def _offline_source(snippet: str) -> str:
    assert '"openai:gpt-4.1-mini"' in snippet, "the README's snippets name this model; update the test's substitution"
    return snippet.replace('"openai:gpt-4.1-mini"', "memabra.ExtractiveChatModel()")


def test_the_readme_has_the_snippets_this_test_runs() -> None:
    snippets = _python_snippets()
    assert len(snippets) == 2
    assert "create_memabra_agent(" in snippets[0] and "agent.feedback(" in snippets[0]
    assert "create_memabra_middleware(" in snippets[1]


def test_quickstart_agent_answers_from_memory_and_learns_every_final_reward(
    offline: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """As the Quickstart says: it prints "I live in Oslo." per turn, and the three rewards given
    with ``final=True`` are learned in the same process (``policy_version`` ends ``+3``)."""
    exec(compile(_quickstart_snippet(), "README.md (quickstart)", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["I live in Oslo."] * 3
    assert lines[3].startswith("serving linear-") and lines[3].endswith("+3")
    from memabra.storage import EpisodeLog

    with EpisodeLog("sqlite:///quickstart.db") as log:  # the snippet's log, in the test's folder
        status = log.status()
    assert (status.episodes, status.open_windows, status.unlearned) == (3, 0, 0)


def test_embedding_snippet_runs_offline_and_its_correction_retires_the_old_fact(offline: list[Any]) -> None:
    namespace: dict[str, Any] = {"memabra": memabra}
    exec(compile(_offline_source(_python_snippets()[0]), "README.md (embedding)", "exec"), namespace)
    agent, out = namespace["agent"], namespace["out"]
    assert out["memabra_episode_id"]
    assert agent.session.log.get_episode(out["memabra_episode_id"]).user_id == "ann"
    # "The correction in feedback ... goes into the user's memory by the write path": "I moved to
    # Oslo" is stored as ann's fact
    texts = {m.text: m.status.value for m in agent.session.memory.list("ann")}
    assert texts.get("I moved to Oslo") == "active"


def test_correction_in_feedback_retires_the_fact_it_replaces(offline: list[Any]) -> None:
    """The README's example: "I moved to Oslo" retires "I live in Lyon"."""
    snippet = _offline_source(_python_snippets()[0])
    before_invoke = snippet.index("out = agent.invoke(")
    snippet = (
        snippet[:before_invoke] + 'agent.session.memory.remember("ann", "I live in Lyon")\n' + snippet[before_invoke:]
    )
    namespace: dict[str, Any] = {"memabra": memabra}
    exec(compile(snippet, "README.md (embedding)", "exec"), namespace)
    statuses = {m.text: m.status.value for m in namespace["agent"].session.memory.list("ann")}
    assert statuses == {"I live in Lyon": "retired", "I moved to Oslo": "active"}


def test_middleware_snippet_runs_offline(offline: list[Any]) -> None:
    first, second = _python_snippets()
    # the middleware snippet reuses the first one's tool
    tool_source = first[first.index("@tool") : first.index("agent = create_memabra_agent(")]
    source = "import memabra\nfrom langchain_core.tools import tool\n" + tool_source + _offline_source(second)
    namespace: dict[str, Any] = {}
    exec(compile(source, "README.md (middleware)", "exec"), namespace)
    out, middleware = namespace["out"], namespace["middleware"]
    episode = middleware.session.log.get_episode(out["memabra_episode_id"])
    assert episode.user_id == "ann"


# -- command lines --------------------------------------------------------------------------------


def _command_lines(path: Path) -> list[str]:
    """Every `memabra ...` line of the file's bash blocks and indented code lines."""
    text = re.sub(r"\\\n\s*", " ", path.read_text(encoding="utf-8"))  # continued lines, joined
    lines = [line for block in _fenced_blocks(text, "bash") for line in block.splitlines()]
    lines += [m.group(1) for m in re.finditer(r"^ {4}(memabra .*)$", text, re.MULTILINE)]
    found = []
    for line in lines:
        # a line may chain commands (`&& cmp ...`) or start with an environment assignment
        for part in re.split(r"&&|\|\|", line):
            part = re.sub(r"^\s*(?:[A-Z_]+=\S+\s+)*", "", part)
            part = re.sub(r"(^|\s)\.venv/bin/", r"\1", part)
            if part.startswith("memabra "):
                found.append(part.strip())
    return found


def _options_of(line: str) -> tuple[Any, list[str], list[str]]:
    """The click command a README line runs, the words that named it and the options it uses."""
    line = line.split("  #", 1)[0]
    words = shlex.split(line.replace("[", " ").replace("]", " ").replace("…", ""))[1:]
    command: Any = typer.main.get_command(app)  # typer's own click: groups are told by `commands`
    path = []
    while hasattr(command, "commands") and words and words[0] in command.commands:
        path.append(words[0])
        command = command.commands[words.pop(0)]
    options = [w.split("=", 1)[0] for w in words if w.startswith("-") and w != "-" and not w[1:2].isdigit()]
    # `--policy linear|vw`, `--once --wait S`: the options themselves, not their placeholders
    return command, path, [o for o in options if not re.fullmatch(r"-[A-Z]+", o)]


_DOC_FILES = [README, *DOCS]


@pytest.mark.parametrize("path", _DOC_FILES, ids=lambda p: p.name)
def test_every_command_line_names_a_command_and_options_that_exist(path: Path) -> None:
    problems = []
    for line in _command_lines(path):
        command, names, options = _options_of(line)
        if hasattr(command, "commands"):
            problems.append(f"{line!r}: no such command (memabra {' '.join(names)} has no such subcommand)")
            continue
        known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        problems += [f"{line!r}: memabra {' '.join(names)} has no option {o}" for o in options if o not in known]
    assert not problems, "\n".join(problems)


def test_readme_has_command_lines_to_check() -> None:
    assert len(_command_lines(README)) > 30


# -- links ----------------------------------------------------------------------------------------


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


@pytest.mark.parametrize("path", _DOC_FILES, ids=lambda p: p.name)
def test_relative_links_resolve(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if file_part and not linked.exists():
            if file_part.startswith("../shared/"):
                continue  # the project's shared specs, outside this repository
            problems.append(f"{target}: no file {linked}")
            continue
        if anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", linked.read_text(encoding="utf-8"), re.MULTILINE)
            if anchor not in {_anchor(h) for h in headings}:
                problems.append(f"{target}: no heading for #{anchor} in {linked.name}")
    assert not problems, "\n".join(problems)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    text = README.read_text(encoding="utf-8")
    unlinked = [p.name for p in DOCS if f"](docs/{p.name}" not in text]
    assert not unlinked, f"docs pages a README reader cannot find: {unlinked}"


# -- what the README's command lines promise ------------------------------------------------------


def test_memories_add_says_which_memory_the_new_fact_retired(tmp_path: Path) -> None:
    """`memabra memories add "I live in Lyon" --user ann   # the write path above: dedup, supersession`:
    the command names what the new value of a subject retired, as `memories restore` does."""
    from typer.testing import CliRunner

    runner = CliRunner(env={"COLUMNS": "200"})
    db = f"sqlite:///{tmp_path / 'memabra.db'}"
    assert runner.invoke(app, ["db", "upgrade", "--db", db]).exit_code == 0
    lyon = runner.invoke(app, ["memories", "add", "I live in Lyon", "--user", "ann", "--db", db])
    assert lyon.exit_code == 0, lyon.output
    lyon_id = lyon.output.split()[1].rstrip(":")
    hobart = runner.invoke(app, ["memories", "add", "I moved to Hobart", "--user", "ann", "--db", db])
    assert hobart.exit_code == 0, hobart.output
    assert f"retired {lyon_id}" in hobart.output and "I live in Lyon" in hobart.output
    again = runner.invoke(app, ["memories", "add", "I moved to Hobart", "--user", "ann", "--db", db])
    assert "retired" not in again.output  # a restatement retires nothing


def test_route_writes_its_json_when_the_reader_of_its_tables_stops_early(tmp_path: Path) -> None:
    """`memabra route ... --json FILE` piped to a reader that stops (`| head`): the file is there."""
    import subprocess
    import sys

    from memabra import SQLMemory
    from memabra.storage import EpisodeLog, upgrade

    db = f"sqlite:///{tmp_path / 'memabra.db'}"
    upgrade(db)
    with EpisodeLog(db) as log:
        SQLMemory(log).remember("ann", "I live in Lyon")
    out = tmp_path / "route.json"
    code = "from memabra._cli import main; main()"
    args = [sys.executable, "-c", code, "route", "--db", db, "--user", "ann", "--json", str(out), "where do I live?"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line
    proc.stderr.read()
    proc.wait(timeout=120)
    proc.stderr.close()
    assert "mem:" in out.read_text(encoding="utf-8")
