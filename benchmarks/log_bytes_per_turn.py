"""Bytes the episode log grows by per turn whose tool returns a large payload (a 2 MB web page).

Each turn of a built-in agent calls ``fetch_page``, which returns ``--payload-mb`` MB of HTML-like
text of random words (so PostgreSQL's TOAST compression halves it rather than hiding
it), then answers. The log is measured after a warm-up turn and after ``--turns`` more: SQLite's
file size (its write-ahead log checkpointed into it first), PostgreSQL's ``pg_total_relation_size`` of
every table in the run's own schema (rows, TOAST and indexes).

    python benchmarks/log_bytes_per_turn.py
    python benchmarks/log_bytes_per_turn.py --pg postgresql+psycopg://root@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from _scratch import scratch_log
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from sqlalchemy import create_engine, text

from memabra import Budget, CandidateKind, create_memabra_agent
from memabra.storage import upgrade

_WORDS = [f"w{n:04x}" for n in range(4096)]


def _page(mb: float, seed: int) -> str:
    rng = random.Random(seed)
    parts: list[str] = ["<html><body>"]
    size = 0
    while size < mb * 1_000_000:
        line = "<p>" + " ".join(rng.choices(_WORDS, k=16)) + "</p>\n"
        parts.append(line)
        size += len(line)
    return "".join(parts) + "</body></html>"


class _FetchThenAnswer(BaseChatModel):
    """Calls ``fetch_page`` once, then answers with the payload's size."""

    @property
    def _llm_type(self) -> str:
        return "fetch-then-answer"

    def bind_tools(self, tools: Any, **kwargs: Any) -> _FetchThenAnswer:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        seen = [m for m in messages if isinstance(m, ToolMessage)]
        if seen:
            reply = AIMessage(f"The page has {len(str(seen[-1].content))} characters.")
        else:
            reply = AIMessage("", tool_calls=[{"name": "fetch_page", "args": {"url": "https://x.test"}, "id": "c1"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _size(url: str, path: Path | None) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if path is not None:  # the file itself, its write-ahead log checkpointed into it
                conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
                return path.stat().st_size
            return int(
                conn.execute(
                    text(
                        "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
                        " JOIN pg_namespace n ON n.oid = c.relnamespace"
                        " WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                    )
                ).scalar_one()
            )
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg", help="a PostgreSQL URL (a schema of its own is used and dropped)")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--payload-mb", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        sqlite = None if args.pg else Path(folder) / "log.db"
        url_in = args.pg or f"sqlite:///{sqlite}"
        with scratch_log(url_in, prefix="payload") as url:
            if args.pg:
                upgrade(url)
            fetched: list[int] = []

            @tool
            def fetch_page(url: str) -> str:
                """Fetch a web page's HTML."""
                page = _page(args.payload_mb, len(fetched))
                fetched.append(len(page))
                return page

            budget = Budget(max_tokens=2000, slots={CandidateKind.TOOL: 1})
            with create_memabra_agent(_FetchThenAnswer(), tools=[fetch_page], db=url, budget=budget) as agent:

                def turn(n: int) -> None:
                    agent.invoke(
                        {"messages": [HumanMessage("fetch the page")]},
                        {"configurable": {"thread_id": f"t{n}"}},
                        context={"user_id": "ann"},
                    )

                turn(0)  # warm-up: the schema's pages, the registry, the embeddings
                before = _size(url, sqlite)
                for n in range(1, args.turns + 1):
                    turn(n)
                after = _size(url, sqlite)
    per_turn = (after - before) / args.turns
    where = "PostgreSQL pg_total_relation_size" if args.pg else "SQLite file size"
    print(
        f"{where}: {per_turn / 1e6:.3f} MB per turn with a {fetched[-1] / 1e6:.1f} MB tool result"
        f" ({args.turns} turns, pid {os.getpid()})"
    )


if __name__ == "__main__":
    main()
