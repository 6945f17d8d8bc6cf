"""What ``memabra episodes show`` prints: the episode's query and answer, its decisions, steps,
feedback and reward.

A turn logged before the log cut payloads (memabra/_log_caps.py) may hold an answer of 100,000
characters and a tool error of megabytes: printed whole, one episode was 10 million characters and
120,000 lines of terminal. The query and answer are printed as :func:`memabra._shown_text.shown_text`
cuts them (head and tail, saying how many characters are not shown), each step's result and error
on one line of the steps table, and a note of the log's cap as a dim sentence of its own; ``--full``
prints every query, answer, argument, result and error whole (as logged), and ``--json FILE`` writes
the episode's document (:func:`memabra._episode_document.episode_document`, the admin's download
too), each value as the log would keep it now.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from rich.markup import escape
from rich.text import Text

from memabra._cli._common import console, plain
from memabra._cli._tables import Table
from memabra._episode_document import injected_fields, kept_body, probability_shown, reward_terms
from memabra._records import STOP_ID, Episode, RewardBreakdown, Selection, Step
from memabra._shown_text import shown_text

__all__ = ["clip", "print_episode"]

_TEXT_WIDTH = 80
# a skill's instructions or a tool's spec on one line: enough to tell versions apart
_BODY_WIDTH = 200
# characters of a query or answer printed (about 25 lines of 80): its first 1,400 and last 400
_ROOM = 2_000
# a step's result or error in the steps table: one line, its start and its end
_CELL = 80
_FULL_HINT = "--full prints it whole"


def clip(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _ends(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` characters: whole, or its start and its end (where
    an error says what went wrong) around ``…``; a note of the log's cap reads ``…`` too."""
    flat = " ".join("…" if piece.kind != "text" else " ".join(piece.text.split()) for piece in shown_text(text).pieces)
    if len(flat) <= width:
        return flat
    tail = width // 3
    return f"{flat[: width - tail - 3]} … {flat[len(flat) - tail :]}"


def _shown(prefix: str, text: str, *, full: bool) -> Text:
    """``prefix`` and ``text``, cut to :data:`_ROOM` unless ``full``; notes as dim lines of their own.
    Printed with ``soft_wrap``: the terminal wraps the lines, so what is copied is what was logged."""
    shown = shown_text(text, len(text) if full else _ROOM, more=_FULL_HINT)
    out = Text(prefix)
    for piece in shown.pieces:
        if piece.kind == "text":
            out.append(piece.text)
            continue
        if not out.plain.endswith("\n"):
            out.append("\n")
        out.append(f"… {piece.text} …", style="dim italic")
        out.append("\n")
    if out.plain.endswith("\n"):
        out.right_crop(1)
    return out


def print_episode(ep: Episode, bodies: Mapping[str, str], *, full: bool = False) -> None:
    console.print(
        f"[bold]episode {ep.id}[/]  user {escape(ep.user_id)}  thread {escape(ep.thread_id or '-')}  turn {ep.turn}",
        highlight=False,
    )
    console.print(_shown("query:  ", ep.query, full=full), highlight=False, soft_wrap=True)
    console.print(_shown("answer: ", ep.answer or "-", full=full), highlight=False, soft_wrap=True)
    for sel in ep.selections:
        console.print(_decision_table(sel))
        _print_injected(sel, bodies)
        stops = [d for d in sel.slots if d.chosen_id == STOP_ID]
        if stops:
            console.print(
                plain(
                    "stopped: "
                    + ", ".join(f"{d.kind.value} at slot {d.slot} (p {d.chosen_probability:.3f})" for d in stops)
                )
            )
    if ep.steps:
        _print_steps(ep.steps, full=full)
    for f in ep.feedback:
        console.print(
            plain(
                f"feedback {f.kind.value} from {f.source}{' (late)' if f.late else ''}: {json.dumps(dict(f.payload))}"
            ),
            highlight=False,
        )
    if ep.reward is not None:
        _print_reward(ep.reward, final=ep.finalized_at is not None)


def _arguments(step: Step) -> str:
    return json.dumps(dict(step.arguments), sort_keys=True, default=str, indent=1, ensure_ascii=False)


def _print_steps(steps: tuple[Step, ...], *, full: bool) -> None:
    table = Table(title="steps")
    for col in ("#", "kind", "name", "status", "ms", "result", "error"):
        table.add_column(col)
    cut = False
    for i, st in enumerate(steps):
        result, error = _ends(st.result or "", _CELL), _ends(st.error or "", _CELL)
        cut = cut or result != (st.result or "") or error != (st.error or "") or bool(st.arguments)
        table.add_row(
            str(i), st.kind.value, plain(st.name), plain(st.status), f"{st.latency_ms:.0f}", plain(result), plain(error)
        )
    console.print(table)
    if not full:
        if cut:
            console.print(
                "steps: arguments not shown, results and errors on one line; --full prints them whole",
                style="dim",
                highlight=False,
            )
        return
    for i, st in enumerate(steps):
        for name, value in (
            ("arguments", _arguments(st) if st.arguments else ""),
            ("result", st.result or ""),
            ("error", st.error or ""),
        ):
            if value:
                console.print(_shown(f"step {i} {st.name} {name}: ", value, full=True), highlight=False, soft_wrap=True)


def _print_injected(sel: Selection, bodies: Mapping[str, str]) -> None:
    """What the chosen skills and tools put into the model's context, as the log kept it then
    (clipped here; whole in --json)."""
    for entry in injected_fields(sel, kept_body(bodies)):
        head = f"injected {entry['kind']} {entry['id']}"
        if entry["body"] is None:
            console.print(plain(f"{head}: {entry['note']}"), highlight=False)
        else:
            body = clip(entry["body"], _BODY_WIDTH)
            console.print(plain(f"{head} (body {entry['body_digest']}): {body}"), highlight=False)


def _decision_table(sel: Selection) -> Table:
    title = f"decision {sel.id} · {sel.policy} {sel.policy_version} · seed {sel.seed} · propensity {sel.propensity:.4g}"
    table = Table(title=plain(title))
    for col in ("candidate", "kind", "text", "tokens", "score", "rank", "p", "slot", "chosen"):
        table.add_column(col, no_wrap=col != "text")
    chosen_slot = {d.chosen_id: d for d in sel.slots}
    for sc in sorted(sel.offered, key=lambda s: (s.candidate.kind.value, s.rank)):
        draw = chosen_slot.get(sc.candidate.id)
        p = probability_shown(sel, sc.candidate.id, sc.candidate.kind)
        table.add_row(
            plain(sc.candidate.id),
            sc.candidate.kind.value,
            plain(clip(sc.candidate.text, _TEXT_WIDTH)),
            str(sc.candidate.tokens),
            f"{sc.score:.3f}",
            str(sc.rank),
            f"{p:.3f}",
            str(draw.slot) if draw else "",
            "✔" if draw else "",
        )
    return table


def _print_reward(reward: RewardBreakdown, *, final: bool) -> None:
    c = reward.components
    table = Table(title=f"reward {reward.total:+.4f} ({escape(reward.version)}, {'final' if final else 'provisional'})")
    for col in ("term", "value", "weight", "contribution"):
        table.add_column(col)
    for name, value, weight, contrib in reward_terms(reward):
        table.add_row(name, f"{value:.3f}", f"{weight:.2f}", f"{contrib:+.3f}")
    console.print(table)
    console.print(f"H by kind: memory {c.hm}, skill {c.hs}, tool {c.ht}")
