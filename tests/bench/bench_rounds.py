"""A small bench round as a user would write one in the bench format (tool candidates, one group)."""

from __future__ import annotations


def bench_round(i: int, relevant: str = "t-a", slots: int = 1, **extra: object) -> dict[str, object]:
    topics = ["weather forecast", "divorce lawyer", "pizza recipe", "flight booking"]
    candidates = [
        {"id": f"t-{c}", "kind": "tool", "text": f"{c} tool for {topics[j % 4]}", "tokens": 10 + j}
        for j, c in enumerate("abcd")
    ]
    row: dict[str, object] = {
        "id": f"r{i}",
        "query": f"question {i} about {topics[i % 4]}",
        "candidates": candidates,
        "relevant": [relevant],
        "slots": slots,
        "group": "g",
    }
    row.update(extra)
    return row
