"""``memabra route --allowed-tools``: what a run restricted to some tools would be offered, from the
command line (an operator checking what a customer's run gets), refused by name for a tool the log
has none of, as a run's ``allowed_tools`` is."""

from __future__ import annotations

import json

from langchain_core.tools import tool
from typer.testing import CliRunner

from memabra._catalog import tool_items
from memabra._cli._app import app
from memabra._records import CandidateKind, RegistryItem
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "200"})


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return "sunny"


@tool
def refund_order(order_id: str) -> str:
    """Refund a customer's order."""
    return "refunded"


def _offered_tools(url: str, *allowed: str) -> tuple[int, list[str], str]:
    args = ["route", "--db", url, "--user", "ann", "--seed", "1", "--json", "-"]
    result = runner.invoke(app, [*args, *allowed, "refund my order, and the weather?"])
    if result.exit_code != 0:
        return result.exit_code, [], " ".join(result.output.split())
    offered = json.loads(result.stdout)["offered"]
    return 0, sorted(o["id"] for o in offered if o["kind"] == "tool"), ""


def test_route_offers_only_the_allowed_tools(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        log.put_items([RegistryItem(CandidateKind.MEMORY, "m1", "ann", "I live in Lyon", tokens=6)])
        log.put_items(tool_items([get_weather, refund_order]))
    code, every, _ = _offered_tools(migrated_url)
    assert code == 0 and len(every) == 2
    code, some, _ = _offered_tools(migrated_url, "--allowed-tools", "get_weather")
    assert code == 0 and some == [t for t in every if "get_weather" in t]
    code, none, _ = _offered_tools(migrated_url, "--allowed-tools", "")
    assert code == 0 and none == []
    code, _, said = _offered_tools(migrated_url, "--allowed-tools", "get_weather,refund_ordr")
    assert code == 1 and "allowed_tools names 'refund_ordr', which this agent has no tool of" in said, said
