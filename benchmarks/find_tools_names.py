"""find_tools asked for a tool by its exact name (not a test): how often that tool comes first.

A model refused a registry tool it knows calls ``find_tools`` with the tool's name. For every tool
of a bench file's registry (the first row's candidates), one search with the bare name, on a fresh
turn with nothing bound; prints how many came first and how many were among the tools returned,
and the names that did not come first::

    python benchmarks/find_tools_names.py ../shared/data/bench/tools_multiturn.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memabra._records import CandidateKind, RegistryItem
from memabra._tool_search import FIND_LIMIT, ToolSearch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_file", type=Path)
    args = parser.parse_args()
    with args.bench_file.open(encoding="utf-8") as f:
        row = json.loads(f.readline())
    items = [
        RegistryItem(kind=CandidateKind.TOOL, id=c["id"], owner="", text=c["text"], tokens=0, name=c["id"])
        for c in row["candidates"]
        if c.get("kind", "tool") == "tool"
    ]
    search = ToolSearch(items, encoder=None)
    first, returned, behind = 0, 0, []
    for n, item in enumerate(items):
        fetched: list[str] = []
        search.search(f"turn-{n}", item.name, (), fetched.extend)
        first += fetched[:1] == [item.name]
        returned += item.name in fetched
        if fetched[:1] != [item.name]:
            behind.append(f"{item.name}: {', '.join(fetched)}")
    print(f"{len(items)} tools asked for by name: {first} first, {returned} among the {FIND_LIMIT} returned")
    for line in behind:
        print(f"  {line}")


if __name__ == "__main__":
    main()
