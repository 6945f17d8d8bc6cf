"""What counting candidates in the model's own tokens (``SessionSettings.token_counter``) costs a turn.

    python benchmarks/token_counter_overhead.py [--turns 300] [--memories 40]

Two sessions on SQLite, alike but for the counter: the default (the whitespace estimate) and a
byte-level BPE tokenizer of the ``tokenizers`` library trained here on the docs (vocabulary 8,000,
about what a model's tokenizer costs a call). Each serves the same turns (``begin`` + ``finish``,
eight tools, three skills, a user with ``--memories`` memories), alternated turn by turn so both see
the same machine. Prints the median turn of each, the difference, and what counting one turn's
recalled memories costs alone, with a cold cache (every text new: a user seen for the first time)
and a warm one (the user's next turn).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from langchain_core.tools import StructuredTool
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from memabra._build import build_session
from memabra._catalog import Skill
from memabra._session import RoutingSession
from memabra._token_count import TokenCounts
from memabra.router import HybridRouter, Similarity

DOCS = Path(__file__).resolve().parents[1] / "docs"
TOPICS = ["weather", "invoice", "flight", "refund", "calendar", "translation", "shipping", "password"]


def bpe_counter() -> tuple[Tokenizer, object]:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=8000, show_progress=False)
    texts = [p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md"))]
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer, lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


def _tool(topic: str) -> StructuredTool:
    def run(query: str, limit: int = 5) -> str:
        return "ok"

    return StructuredTool.from_function(
        run, name=f"{topic}_lookup", description=f"Look up {topic} records for the user by a free-text query."
    )


def _session(folder: str, name: str, counter: object) -> RoutingSession:
    skills = [
        Skill(f"{t}-style", f"answer {t} questions tersely", f"When asked about {t}, be brief.") for t in TOPICS[:3]
    ]
    return build_session(
        tools=[_tool(t) for t in TOPICS],
        skills=skills,
        db=f"sqlite:///{Path(folder) / name}",
        router=HybridRouter(similarity=Similarity(encoder=None)),
        learn=False,
        token_counter=counter,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--memories", type=int, default=40)
    args = parser.parse_args()
    _, counter = bpe_counter()
    with tempfile.TemporaryDirectory() as folder:
        sessions = {"default": _session(folder, "a.db", None), "counted": _session(folder, "b.db", counter)}
        for s in sessions.values():
            for i in range(args.memories):
                s.memory.remember("ann", f"my {TOPICS[i % 8]} account number {i} is https://example.com/a/{i}?x=1")
        timed: dict[str, list[float]] = {name: [] for name in sessions}
        for i in range(args.turns + 20):
            query = f"help with my {TOPICS[i % 8]} and {TOPICS[(i * 3) % 8]} please"
            for name, s in sessions.items():
                started = time.perf_counter()
                t = s.begin(user_id="ann", query=query, thread_id=f"t{i}")
                s.finish(t.id, "done")
                if i >= 20:  # the first turns warm caches and the SQLite pages
                    timed[name].append((time.perf_counter() - started) * 1000.0)
        recalled = sessions["counted"].memory.recall("ann", "help with my invoice")
        cold = []
        for _ in range(200):
            counts = TokenCounts(counter)  # type: ignore[arg-type]
            started = time.perf_counter()
            counts.memories(recalled)
            cold.append((time.perf_counter() - started) * 1e6)
        warm = []
        counts = TokenCounts(counter)  # type: ignore[arg-type]
        counts.memories(recalled)
        for _ in range(200):
            started = time.perf_counter()
            counts.memories(recalled)
            warm.append((time.perf_counter() - started) * 1e6)
        for s in sessions.values():
            s.close()
    default, counted = (statistics.median(timed[n]) for n in ("default", "counted"))
    print(f"turns: {args.turns} each, {len(recalled)} memories recalled a turn, 8 tools, 3 skills")
    print(f"median turn, default estimate: {default:.2f} ms")
    print(f"median turn, BPE token_counter: {counted:.2f} ms  (difference {counted - default:+.2f} ms)")
    print(f"counting one turn's recalled memories, cold cache: {statistics.median(cold):.0f} us (median)")
    print(f"counting one turn's recalled memories, warm cache: {statistics.median(warm):.0f} us (median)")


if __name__ == "__main__":
    main()
