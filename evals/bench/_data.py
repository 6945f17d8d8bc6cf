"""Reading routing-benchmark files (JSON Lines, one round per line; see the bench README)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memabra._errors import InvalidRecordError, MemabraError
from memabra._records import MAX_ID_LENGTH, Candidate, CandidateKind

__all__ = ["NEED_RULES", "BenchFormatError", "BenchRound", "load_rounds"]

NEED_RULES = ("any", "all")

_log = logging.getLogger("memabra")

# the fields the format defines; any other is reported (a typo such as "neeed" would otherwise
# silently become the default)
_ROUND_FIELDS = frozenset({"id", "query", "candidates", "relevant", "slots", "group", "need"})
_CANDIDATE_FIELDS = frozenset({"id", "kind", "text", "tokens"})
_JSON_LINES = "a bench file is JSON Lines: one round per line, each a JSON object"


class BenchFormatError(MemabraError, ValueError):
    """A benchmark file line that does not follow the format; the message names line and field."""


@dataclass(frozen=True, slots=True)
class BenchRound:
    """One routing round: a query, its candidate pool, the relevant ids and the slot limit."""

    id: str
    query: str
    candidates: tuple[Candidate, ...]
    relevant: frozenset[str]
    slots: int
    group: str
    need: str = "any"

    @property
    def kind(self) -> CandidateKind:
        return self.candidates[0].kind

    def is_hit(self, chosen: Sequence[str]) -> bool:
        """Whether ``chosen`` serves the round by its ``need`` rule: one relevant candidate
        (``any``) or every one (``all``)."""
        if self.need == "all":
            return self.relevant.issubset(chosen)
        return any(cid in self.relevant for cid in chosen)

    def recall(self, chosen: Sequence[str]) -> float:
        """Share of the relevant candidates that ``chosen`` holds."""
        return len(self.relevant.intersection(chosen)) / len(self.relevant)


def _field(obj: dict[str, object], name: str, kind: type, where: str) -> object:
    if name not in obj:
        raise BenchFormatError(f"{where}: missing field {name!r}")
    value = obj[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BenchFormatError(f"{where}: field {name!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _candidate(raw: object, spot: str, pool: dict[tuple[str, str, str, int], Candidate] | None) -> Candidate:
    """One candidate object; with ``pool``, the same candidate as an earlier round's (one object
    per distinct candidate, so a shared registry is held once, not once per round)."""
    if not isinstance(raw, dict):
        raise BenchFormatError(f"{spot}: must be an object")
    kind_name = str(_field(raw, "kind", str, spot))
    if kind_name not in {k.value for k in CandidateKind}:
        raise BenchFormatError(f"{spot}: field 'kind' must be memory, skill or tool, got {kind_name!r}")
    key = (
        str(_field(raw, "id", str, spot)),
        kind_name,
        str(_field(raw, "text", str, spot)),
        int(_field(raw, "tokens", int, spot)),  # type: ignore[call-overload]
    )
    known = pool.get(key) if pool is not None else None
    if known is not None:
        return known
    try:
        candidate = Candidate(id=key[0], kind=CandidateKind(kind_name), text=key[2], tokens=key[3])
    except (InvalidRecordError, ValueError) as exc:
        raise BenchFormatError(f"{spot}: {exc}") from None
    if pool is not None:
        pool[key] = candidate
    return candidate


def parse_round(obj: object, where: str, pool: dict[tuple[str, str, str, int], Candidate] | None = None) -> BenchRound:
    """One round from its JSON object; ``where`` prefixes every error (file and line). Rounds
    parsed with the same ``pool`` dict share one object per distinct candidate."""
    if not isinstance(obj, dict):
        raise BenchFormatError(f"{where}: a round must be a JSON object, got {type(obj).__name__} ({_JSON_LINES})")
    round_id = str(_field(obj, "id", str, where))
    if not round_id:
        raise BenchFormatError(f"{where}: field 'id' must not be empty")
    query = str(_field(obj, "query", str, where))
    raw_candidates = _field(obj, "candidates", list, where)
    assert isinstance(raw_candidates, list)
    if not raw_candidates:
        raise BenchFormatError(f"{where}: field 'candidates' is empty")
    candidates = [_candidate(raw, f"{where} candidates[{j}]", pool) for j, raw in enumerate(raw_candidates)]
    ids = [c.id for c in candidates]
    if len(set(ids)) != len(ids):
        raise BenchFormatError(f"{where}: duplicate candidate ids {sorted({i for i in ids if ids.count(i) > 1})}")
    relevant = _field(obj, "relevant", list, where)
    assert isinstance(relevant, list)
    if not relevant or not all(isinstance(r, str) for r in relevant):
        raise BenchFormatError(f"{where}: field 'relevant' must be a non-empty list of ids")
    unknown = sorted(set(relevant) - set(ids))
    if unknown:
        raise BenchFormatError(f"{where}: 'relevant' names ids that are not candidates: {unknown}")
    slots = _field(obj, "slots", int, where)
    assert isinstance(slots, int)
    if slots < 1:
        raise BenchFormatError(f"{where}: field 'slots' must be at least 1, got {slots}")
    if len({c.kind for c in candidates}) != 1:
        raise BenchFormatError(f"{where}: a round's candidates must all be of one kind")
    group = obj.get("group", "")
    if not isinstance(group, str):
        raise BenchFormatError(f"{where}: field 'group' must be str, got {type(group).__name__}")
    # the group is the decision's user id, which the router refuses past this length: checked here,
    # the run would stop at the round's first decision without naming the line, its log opened
    if len(group) > MAX_ID_LENGTH:
        raise BenchFormatError(
            f"{where}: field 'group' holds at most {MAX_ID_LENGTH} characters (it is the episode log's user id), "
            f"got {len(group)} ({group[:40]!r}...)"
        )
    need = obj.get("need", "any")
    if need not in NEED_RULES:
        raise BenchFormatError(f"{where}: field 'need' must be one of {', '.join(NEED_RULES)}, got {need!r}")
    return BenchRound(round_id, query, tuple(candidates), frozenset(relevant), slots, group, str(need))


def load_rounds(path: str | Path) -> tuple[BenchRound, ...]:
    """All rounds of a bench file; :class:`BenchFormatError` names the first bad line and field.

    A UTF-8 byte order mark and CRLF line endings are read as the text they frame. Fields the
    format does not define, and ``need: all`` rounds that need more candidates than they have
    slots (no router can hit them), are logged as warnings naming the first line of each."""
    path = Path(path)
    rounds: list[BenchRound] = []
    first_line: dict[str, int] = {}
    unknown: dict[str, int] = {}
    unwinnable: list[int] = []
    pool: dict[tuple[str, str, str, int], Candidate] = {}
    try:
        handle = path.open("rb")  # decoded line by line, so a bad byte is reported on its own line
    except OSError as exc:
        raise BenchFormatError(f"cannot read bench file {path}: {exc.strerror}") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{path.name} line {number}"
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BenchFormatError(
                    f"{where}: not UTF-8 text (byte {raw[exc.start]:#04x} at column {exc.start + 1}); "
                    "bench files are UTF-8 JSON Lines"
                ) from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                # the column: a round with a large pool is one line of many kilobytes; some of the
                # decoder's messages end in "at", meant to be followed by the position
                reason = exc.msg.removesuffix(" at")
                raise BenchFormatError(
                    f"{where}: not valid JSON ({reason} at column {exc.colno}; {_JSON_LINES})"
                ) from None
            round_ = parse_round(obj, where, pool)
            if round_.id in first_line:
                raise BenchFormatError(
                    f"{where}: duplicate round id {round_.id!r} (first on line {first_line[round_.id]})"
                )
            first_line[round_.id] = number
            _note_unknown(obj, number, unknown)
            if round_.need == "all" and len(round_.relevant) > round_.slots:
                unwinnable.append(number)
            rounds.append(round_)
    if not rounds:
        raise BenchFormatError(f"{path.name}: no rounds")
    for name, number in unknown.items():
        _log.warning(
            "%s line %d: unknown field %r ignored (the format's fields are in the bench README)",
            path.name,
            number,
            name,
        )
    if unwinnable:
        _log.warning(
            "%s: %d round(s) need all of more relevant candidates than they have slots (first on line %d): "
            "no router can hit them",
            path.name,
            len(unwinnable),
            unwinnable[0],
        )
    return tuple(rounds)


def _note_unknown(obj: dict[str, object], number: int, unknown: dict[str, int]) -> None:
    """Record, on first sight, each field of ``obj`` (a parsed round) the format does not define."""
    names = [str(k) for k in obj if k not in _ROUND_FIELDS]
    raw_candidates = obj["candidates"]
    assert isinstance(raw_candidates, list)
    for raw in raw_candidates:
        names += [f"candidates[].{k}" for k in raw if k not in _CANDIDATE_FIELDS]
    for name in names:
        unknown.setdefault(name, number)


def split_unseen(rounds: Sequence[BenchRound], seed: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A seeded split of round indices into a learning half and a scoring half, keeping rounds that
    share a query text together so the scoring half holds only queries never learned from."""
    import numpy as np

    by_query: dict[str, list[int]] = {}
    for i, r in enumerate(rounds):
        by_query.setdefault(r.query, []).append(i)
    groups = list(by_query.values())
    order = np.random.default_rng([seed, 1]).permutation(len(groups))
    learn: list[int] = []
    score: list[int] = []
    for g in order:
        (learn if len(learn) <= len(score) else score).extend(groups[int(g)])
    return tuple(sorted(learn)), tuple(sorted(score))
