"""The episode log's decisions as JSON Lines, for offline evaluation outside memabra (Open Bandit
Pipeline's slate estimators, a notebook, a warehouse).

One object per decision, in time order, self-describing (``"format": "memabra.decision/1"``):

* the context: ``decision_id``, ``episode_id``, ``created_at`` (ISO 8601, UTC), ``user_id``,
  ``thread_id``, ``turn``, ``query``, ``kinds``, ``budget`` (``max_tokens`` and slots per kind);
* the logging policy: ``policy``, ``policy_version``, ``seed``, ``latency_ms``;
* ``candidates``: every candidate offered, chosen or not (the counterfactuals), with ``id``,
  ``kind``, ``text``, ``tokens``, ``score``, ``rank`` and the ``features`` the router saw;
* ``injected``: what each chosen skill and tool put into the model's context, in slot order:
  ``id``, ``kind``, ``body_digest``, ``body`` (a skill's instructions, a tool's function spec, as
  the log kept them when the decision was made) and ``body_status`` (``kept``, or ``not_logged``
  for a decision logged before schema revision 0017, with a ``note`` saying so);
* ``slots``: each slot's draw in order, with its full distribution (``candidate_ids`` and
  ``probabilities``, the stop option as ``"__stop__"``), ``chosen_id`` and ``chosen_probability``;
  ``propensity`` is their product;
* outcomes: ``used_ids`` (the chosen candidates the episode used; ``null`` when no outcome was
  reported) and ``reward`` (``null`` until one is stored): ``total``, ``final``, ``version``, the
  seven ``components`` (``hm``/``hs``/``ht``: H by kind) and the ``weights`` that gave the total;
* in an incremental export (:func:`export_final_decisions`) only, ``cursor``: where a run given it
  as ``after`` goes on, right after this record.

Incremental exports follow the order in which rewards became final (the commit order the learner
reads, :mod:`memabra.storage._final_decisions`), not decision time: a decision made before the last
run whose reward became final since is in the next run, and no decision is in two runs. The cursor
is opaque text (:class:`ExportCursor`); it names the database it came from where the database can
tell (PostgreSQL) and the ``user_id`` filter it was made under, and carries a check, so a cursor
given to another database, another filter, or edited or cut short is refused before anything is
written. A reward re-totalled later (``memabra rewards recompute``) keeps its place in that order,
so it is not exported again: re-export its decisions by time and replace them by ``decision_id``.

A slate estimator reads it directly: the slate is the decision and a position is a slot.
``chosen_probability`` is the draw's probability *given the draws before it*: its running product
along ``slots`` is obp's cascade propensity (``pscore_cascade``) and its product over the slots the
joint one (``pscore``, the record's ``propensity``). It is not obp's ``pscore_item_position``, the
item's marginal probability at that position (a sum over every prefix that could precede it), except
at the first slot: independent IPS fed the conditional probabilities is biased.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from memabra._episode_document import candidate_fields, injected_fields
from memabra._errors import InvalidRecordError
from memabra._record_fields import slot_fields
from memabra._records import LoggedDecision, RewardBreakdown
from memabra.storage._final_decisions import database_tag, iter_final_episodes, position_problem
from memabra.storage._injected_bodies import BODY_DIGEST_KEY, chosen_digests, read_bodies
from memabra.storage._learner_commit import START, ReadPosition

if TYPE_CHECKING:
    from memabra.storage import EpisodeLog

__all__ = [
    "EXPORT_FORMAT",
    "ExportCursor",
    "FinalExport",
    "decision_record",
    "export_decisions",
    "export_final_decisions",
    "parse_cursor",
]

EXPORT_FORMAT = "memabra.decision/1"


def decision_record(decision: LoggedDecision, bodies: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One logged decision as the JSON object :func:`export_decisions` writes; ``bodies``: kept
    skill bodies and tool specs by digest, those of its chosen skills and tools at least (the
    export functions read them; without them each is marked ``not_read``)."""
    sel = decision.selection
    ctx = sel.context
    return {
        "format": EXPORT_FORMAT,
        "decision_id": sel.id,
        "episode_id": decision.episode_id,
        "created_at": sel.created_at.isoformat(),
        "user_id": ctx.user_id,
        "thread_id": ctx.thread_id,
        "turn": ctx.turn,
        "query": ctx.query,
        "kinds": [k.value for k in ctx.kinds],
        "budget": {
            "max_tokens": ctx.budget.max_tokens,
            "slots": {k.value: n for k, n in ctx.budget.slots.items()},
        },
        "policy": sel.policy,
        "policy_version": sel.policy_version,
        "seed": sel.seed,
        "latency_ms": sel.latency_ms,
        "candidates": [{**candidate_fields(sc), "features": dict(sc.features)} for sc in sel.offered],
        "injected": _injected(decision, bodies),
        "slots": [slot_fields(d) for d in sel.slots],
        "propensity": sel.propensity,
        "used_ids": None if decision.used_ids is None else sorted(decision.used_ids),
        "reward": None if decision.reward is None else _reward(decision.reward, final=decision.final),
    }


def _reward(reward: RewardBreakdown, *, final: bool) -> dict[str, Any]:
    return {
        "total": reward.total,
        "final": final,
        "version": reward.version,
        "components": reward.components.as_dict(),
        "weights": reward.weights.as_dict(),
    }


def export_decisions(
    log: EpisodeLog,
    out: TextIO,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    user_id: str | None = None,
    final_only: bool = False,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write every logged decision in ``[since, until)`` (``user_id``'s only, when given) to
    ``out``, one JSON object per line, in time order and flat memory (the log is streamed);
    ``final_only`` skips decisions whose reward is missing or not final yet. Returns how many were
    written; ``progress(written)`` is called every 1,000."""
    written = 0
    bodies = _KeptBodies(log)
    for decision in log.iter_decisions(since=since, until=until, user_id=user_id):
        if final_only and not (decision.final and decision.reward is not None):
            continue
        written = _write_line(out, _with_bodies(decision_record(decision), decision, bodies), written, progress)
    if progress is not None:
        progress(written)
    return written


def _injected(decision: LoggedDecision, bodies: Mapping[str, str] | None) -> list[dict[str, Any]]:
    if bodies is None:
        return injected_fields(decision.selection, None)
    return injected_fields(decision.selection, lambda cand: bodies.get(str(cand.metadata.get(BODY_DIGEST_KEY))))


def _with_bodies(record: dict[str, Any], decision: LoggedDecision, bodies: _KeptBodies) -> dict[str, Any]:
    """``record`` (from :func:`decision_record`) with what its chosen skills and tools injected."""
    return {**record, "injected": _injected(decision, bodies.of(decision))}


class _KeptBodies:
    """The kept bodies an export's decisions name, each read once: a log has few (a release's
    skills and tools), so they are held for the run while the decisions stream."""

    def __init__(self, log: EpisodeLog) -> None:
        self._log = log
        self._known: dict[str, str] = {}
        self._asked: set[str] = set()

    def of(self, decision: LoggedDecision) -> Mapping[str, str]:
        digests = set(chosen_digests(decision.selection).values())
        new = digests - self._asked
        if new:
            with self._log.transactions.read() as s:
                self._known.update(read_bodies(s, new))
            self._asked |= new
        return self._known


def _write_line(out: TextIO, record: dict[str, Any], written: int, progress: Callable[[int], None] | None) -> int:
    """``record`` as one line of ``out``; returns the count written so far (every 1,000 told to ``progress``)."""
    out.write(json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":")))
    out.write("\n")
    written += 1
    if progress is not None and written % 1000 == 0:
        progress(written)
    return written


_CURSOR_PREFIX = "mdc1."
_START = "start"


@dataclass(frozen=True, slots=True)
class ExportCursor:
    """Where an incremental export stops and the next one goes on: a place in the commit order of
    final rewards (``position``) and, when the export stopped inside an episode, how many of its
    decisions are behind it (``done``; ``None``: all of them). ``database`` and ``user`` say what
    it was made on (``""``: not yet known, the cursor of a first run)."""

    position: ReadPosition = START
    done: int | None = None
    database: str = ""
    user: str = ""

    def __str__(self) -> str:
        body = json.dumps(
            [self.database, self.user, self.position.seq, self.position.episode_id, self.done],
            separators=(",", ":"),
        ).encode()
        return _CURSOR_PREFIX + base64.urlsafe_b64encode(body).decode().rstrip("=") + "." + _check(body)


def _check(body: bytes) -> str:
    return hashlib.sha256(b"memabra export cursor\x00" + body).hexdigest()[:10]


def _user_tag(user_id: str | None) -> str:
    return "*" if user_id is None else hashlib.sha256(user_id.encode()).hexdigest()[:12]


def parse_cursor(value: str) -> ExportCursor:
    """The cursor a previous incremental export reported, or ``"start"`` (the first run: from the
    beginning); :class:`InvalidRecordError` naming what is wrong with anything else."""
    value = value.strip()
    if value == _START:
        return ExportCursor()
    if not value.startswith(_CURSOR_PREFIX):
        raise InvalidRecordError(
            f"{_shown(value)} is not an export cursor (one reads {_CURSOR_PREFIX}…, as an incremental export "
            f"reported it; give {_START!r} to start from the beginning)"
        )
    encoded, _, check = value[len(_CURSOR_PREFIX) :].partition(".")
    try:
        body = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError):
        body = b""
    if not body or check != _check(body):
        raise InvalidRecordError(f"the export cursor {_shown(value)} is damaged (cut short or edited: its check fails)")
    try:
        database, user, seq, episode_id, done = json.loads(body)
        return ExportCursor(
            ReadPosition(int(seq), str(episode_id)), None if done is None else int(done), database, user
        )
    except (ValueError, TypeError):
        raise InvalidRecordError(f"the export cursor {_shown(value)} is damaged (its content does not read)") from None


def _shown(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:57] + "...")


@dataclass(frozen=True, slots=True)
class FinalExport:
    """What an incremental export did: ``written`` decisions, and the ``cursor`` the next run takes."""

    written: int
    cursor: ExportCursor


def check_cursor(log: EpisodeLog, cursor: ExportCursor, *, user_id: str | None = None) -> ExportCursor:
    """``cursor`` made ready for ``log`` (its database named), or :class:`InvalidRecordError` when
    it was made on another database or under another ``user_id`` filter."""
    tx = log.transactions
    database = database_tag(tx)
    user = _user_tag(user_id)
    if cursor.position == START:  # "start": nothing to check yet
        return ExportCursor(database=database, user=user)
    if cursor.database != database:
        raise InvalidRecordError(
            "the export cursor was made on another database (or this one was restored into a new one since, "
            "which restarts the commit order); export from 'start' and replace what was loaded"
        )
    if cursor.user != user:
        made = "every user's decisions" if cursor.user == "*" else "one user's decisions (--user)"
        asked = "every user's" if user_id is None else f"user {user_id!r}'s"
        raise InvalidRecordError(f"the export cursor was made by an export of {made}, not of {asked}")
    problem = position_problem(tx, cursor.position)
    if problem is not None:
        raise InvalidRecordError(
            f"the export cursor cannot be used on this database: {problem}; export from 'start' (or by time "
            "from before the last load) and replace what was loaded by decision_id"
        )
    return cursor


def export_final_decisions(
    log: EpisodeLog,
    out: TextIO,
    *,
    after: ExportCursor | None = None,
    user_id: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> FinalExport:
    """Write every decision whose reward became final after ``after`` (from the start when
    ``None``), in the order the rewards became final, ``user_id``'s only when given, one JSON
    object per line with a ``cursor`` field, in flat memory. Returns how many were written and
    the cursor the next run takes (past every reward read, even those whose decisions are gone).
    Each decision is in exactly one run of a chain of runs, each given the cursor the one before
    returned; see the module docstring for what a re-totalled reward does."""
    if user_id is not None and not user_id.strip():
        raise InvalidRecordError("user_id must not be empty (leave it out for every user's decisions)")
    cursor = check_cursor(log, after or ExportCursor(), user_id=user_id)
    written = 0
    bodies = _KeptBodies(log)
    # a cursor from inside an episode (a stream cut short) goes on with that episode's next decision
    inside = cursor.done is not None
    for episode in iter_final_episodes(log.transactions, cursor.position, inclusive=inside, user_id=user_id):
        skip = cursor.done or 0 if inside and episode.position == cursor.position else 0
        inside = False
        cursor = replace(cursor, position=episode.position, done=None)
        last = len(episode.decisions)
        for n, decision in enumerate(episode.decisions[skip:], start=skip + 1):
            here = replace(cursor, done=None if n == last else n)
            record = {**_with_bodies(decision_record(decision), decision, bodies), "cursor": str(here)}
            written = _write_line(out, record, written, progress)
    if progress is not None:
        progress(written)
    return FinalExport(written, cursor)
