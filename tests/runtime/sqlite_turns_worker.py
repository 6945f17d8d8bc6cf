"""One agent process of the shared-SQLite-file test: ``python sqlite_turns_worker.py URL SEED TURNS``.

Builds the default agent (the offline stand-in model) on the shared file and runs ``TURNS`` turns
(``invoke``, then ``feedback`` on the episode) whose statements restate and replace the users'
facts, so memory writes that read first meet the other processes' commits; prints one JSON line
of counts and the first failure's message."""

from __future__ import annotations

import json
import sys
from collections import Counter

from langchain_core.messages import HumanMessage

from memabra import ExtractiveChatModel, create_memabra_agent


def main(url: str, seed: int, turns: int) -> None:
    counts: Counter[str] = Counter()
    first_error = ""
    with create_memabra_agent(ExtractiveChatModel(), db=url) as agent:
        user = {"user_id": f"user{seed % 2}"}  # processes share users: the same memories and pools
        for turn in range(turns):
            try:
                out = agent.invoke(
                    {"messages": [HumanMessage(f"I live in city {turn % 3}; what should I cook tonight?")]},
                    {"configurable": {"thread_id": f"p{seed}-t{turn % 4}"}},
                    context=user,
                )
                agent.feedback(out["memabra_episode_id"], rating=1 + (turn + seed) % 5)
                counts["ok"] += 1
            except Exception as exc:  # counted: the test's figure is how many fail
                counts["failed"] += 1
                first_error = first_error or f"{type(exc).__name__}: {exc}".splitlines()[0]
    print(json.dumps({"counts": dict(counts), "first_error": first_error}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
