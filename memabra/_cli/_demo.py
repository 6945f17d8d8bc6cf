"""``memabra demo``: the main job, offline — a learned router against similarity top-k."""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from memabra._cli._common import console, fail, run_guarded
from memabra._cli._database import CreateDbOption, migrate
from memabra._cli._tables import Table
from memabra._settings import DEMO_EPISODES
from memabra.storage._engine import shown_url

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from memabra._demo import DemoSummary, WindowStats


def demo(
    db: CreateDbOption = None,
    episodes: Annotated[int, typer.Option(min=20, help="Simulated task episodes per router.")] = DEMO_EPISODES,
    seed: Annotated[int, typer.Option(help="Seeds the users, their tasks and the routers.")] = 0,
    users: Annotated[int, typer.Option(min=1, max=12, help="Simulated users.")] = 10,
    model: Annotated[
        str | None,
        typer.Option(help="A real chat model as provider:name (init_chat_model); default: the offline stand-in."),
    ] = None,
    baseline: Annotated[
        bool, typer.Option("--baseline/--no-baseline", help="Also run similarity top-k on the same users.")
    ] = True,
) -> None:
    """Simulated users with preferences, tasks that need tools and skills, corrections and a drift:
    the learned router against similarity top-k, logged to the episode log."""
    from memabra._demo import run_demo, summarize
    from memabra.storage import EpisodeLog, resolve_url, upgrade

    logging.getLogger("memabra").setLevel(logging.WARNING)
    url = run_guarded(resolve_url, db)  # checked by --db already; this only names the default
    # The model first: a bad one must not leave a new, empty database behind.
    chat = _chat_model(model) if model is not None else None
    migrate(upgrade, url, "head")
    with run_guarded(EpisodeLog, url) as log:
        held = run_guarded(log.count_episodes)
    if held:
        console.print(
            Text(
                f"{shown_url(url)} already holds {held} episodes: this run goes on "
                "from them (the learned router resumes its snapshot, the users keep their memories), so its table "
                "differs from a first run's; give --db a new file to start afresh"
            )
        )
    if model is not None:
        console.print(f"chat model: [bold]{escape(model)}[/]")
    else:
        console.print(
            "chat model: [bold]offline extractive stand-in[/] (deterministic; answers only from injected context; --model provider:name for a real one)"
        )

    from memabra.evals.offline import evaluate_on_log, logged_value
    from memabra.router import HybridRouter, LinearRouter

    runs: list[tuple[str, object, str]] = [("learned (linear)", LinearRouter(seed=seed), url)]
    scratch = tempfile.TemporaryDirectory(prefix="memabra-demo-")
    if baseline:
        runs.append(("similarity top-k", HybridRouter(seed=seed), f"sqlite:///{Path(scratch.name) / 'baseline.db'}"))
    summaries: list[DemoSummary] = []
    online: tuple[float, float, int] | None = None
    task_turns: list[str] = []
    started = time.perf_counter()
    try:
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as bar:
            for name, router, run_url in runs:
                task = bar.add_task(f"{name:>18}", total=episodes)
                migrate(upgrade, run_url, "head")
                with run_guarded(EpisodeLog, run_url) as log:
                    rows = run_guarded(
                        run_demo,
                        router=router,
                        log=log,
                        episodes=episodes,
                        seed=seed,
                        users=users,
                        model=chat,
                        progress=lambda _row, task=task: bar.advance(task),
                    )
                    if name == "similarity top-k":
                        online = run_guarded(logged_value, log, decision_ids=[r.decision_id for r in rows])
                    else:
                        task_turns = [r.decision_id for r in rows]
                summaries.append(summarize(name, rows, window=min(100, episodes // 2)))
    finally:
        scratch.cleanup()
    elapsed = time.perf_counter() - started
    _render(summaries, min(100, episodes // 2))
    console.print(f"{episodes} episodes per router in {elapsed:.0f} s; the learned router's log: {shown_url(url)}")
    if online is not None:
        with run_guarded(EpisodeLog, url) as log:
            # task turns only, on both sides: how many correction turns follow depends on the policy
            # (a miss brings one), so they are not contexts both policies would have met
            offline = run_guarded(
                evaluate_on_log, log, HybridRouter(seed=seed), policy="hybrid", seed=seed, decision_ids=task_turns
            ).recommended
        inside = offline.ci_low <= online[0] <= offline.ci_high
        span = "interval" if offline.supported else "bounds"
        console.print(
            f"similarity top-k offline, from the learned router's log ({offline.estimator}, its {len(task_turns)} task "
            f"turns): {offline.value:+.3f}, {span} [{offline.ci_low:+.3f}, {offline.ci_high:+.3f}], "
            + ("supported" if offline.supported else "[bold red]UNSUPPORTED[/]"),
            highlight=False,
        )
        if not offline.supported:
            console.print(f"  why: {escape(offline.reason)}", highlight=False)
        console.print(
            f"similarity top-k online, on its own task turns: {online[0]:+.3f} per decision, "
            + ("inside" if inside else "OUTSIDE")
            + f" the offline {span}"
            + ("" if offline.supported else " (which say the log cannot tell)"),
            highlight=False,
        )
    console.print("\nnext:")
    where = shown_url(url)  # a password on the URL is not echoed into a terminal or CI log
    console.print(f"  memabra episodes list --db {where}")
    console.print(f"  memabra admin --db {where}")
    console.print(f"  memabra ope log --db {where} --policy hybrid --json ope.json")


def _chat_model(model: str) -> BaseChatModel:
    """The chat model ``--model`` names, or one line saying why there is none: an unknown provider,
    its integration package not installed, or the provider refusing its settings (no API key)."""
    from memabra._build import resolve_model

    try:
        return resolve_model(model)
    except ImportError as exc:
        fail(f"--model {model}: {exc}".splitlines()[0])
    except Exception as exc:  # init_chat_model and the providers raise their own types (ValueError, ...)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        fail(f"--model {model}: {reason} (give provider:name, e.g. openai:gpt-4.1-mini)")


def _render(summaries: list[DemoSummary], window: int) -> None:
    table = Table(title="memabra demo")
    table.add_column("router")
    table.add_column("episodes")
    table.add_column("reward", justify="right")
    table.add_column("hit rate", justify="right")
    table.add_column("corrections /100", justify="right")
    table.add_column("tokens injected", justify="right")

    def row(name: str, label: str, w: WindowStats) -> None:
        table.add_row(
            name, label, f"{w.reward:+.3f}", f"{w.hit_rate:.1%}", f"{w.corrections_per_100:.0f}", f"{w.tokens:.0f}"
        )

    for s in summaries:
        row(s.router, f"first {window}", s.first)
        row("", f"last {window}", s.last)
        row("", "all", s.overall)
    console.print(table)
    if len(summaries) == 2:
        learned, base = summaries
        gain = learned.overall.reward - base.overall.reward
        console.print(
            f"learned vs similarity top-k over all episodes: reward {gain:+.3f}, hit rate "
            f"{learned.overall.hit_rate - base.overall.hit_rate:+.1%}, tokens {learned.overall.tokens - base.overall.tokens:+.0f}"
        )
