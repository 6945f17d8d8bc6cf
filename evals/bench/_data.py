"""Reading routing-benchmark files (JSON Lines, one round per line; see the bench README)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memabra._errors import InvalidRecordError, MemabraError
from memabra._records import Candidate, CandidateKind

__all__ = ["NEED_RULES", "BenchFormatError", "BenchRound", "load_rounds"]

NEED_RULES = ("any", "all")


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


def parse_round(obj: object, where: str) -> BenchRound:
    if not isinstance(obj, dict):
        raise BenchFormatError(f"{where}: a round must be a JSON object")
    round_id = str(_field(obj, "id", str, where))
    query = str(_field(obj, "query", str, where))
    raw_candidates = _field(obj, "candidates", list, where)
    assert isinstance(raw_candidates, list)
    if not raw_candidates:
        raise BenchFormatError(f"{where}: field 'candidates' is empty")
    candidates: list[Candidate] = []
    for j, raw in enumerate(raw_candidates):
        spot = f"{where} candidates[{j}]"
        if not isinstance(raw, dict):
            raise BenchFormatError(f"{spot}: must be an object")
        kind_name = str(_field(raw, "kind", str, spot))
        if kind_name not in {k.value for k in CandidateKind}:
            raise BenchFormatError(f"{spot}: field 'kind' must be memory, skill or tool, got {kind_name!r}")
        try:
            candidates.append(
                Candidate(
                    id=str(_field(raw, "id", str, spot)),
                    kind=CandidateKind(kind_name),
                    text=str(_field(raw, "text", str, spot)),
                    tokens=int(_field(raw, "tokens", int, spot)),  # type: ignore[call-overload]
                )
            )
        except (InvalidRecordError, ValueError) as exc:
            if isinstance(exc, BenchFormatError):
                raise
            raise BenchFormatError(f"{spot}: {exc}") from None
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
    if slots < 0:
        raise BenchFormatError(f"{where}: field 'slots' must be non-negative, got {slots}")
    if len({c.kind for c in candidates}) != 1:
        raise BenchFormatError(f"{where}: a round's candidates must all be of one kind")
    group = obj.get("group", "")
    if not isinstance(group, str):
        raise BenchFormatError(f"{where}: field 'group' must be a string")
    need = obj.get("need", "any")
    if need not in NEED_RULES:
        raise BenchFormatError(f"{where}: field 'need' must be one of {', '.join(NEED_RULES)}, got {need!r}")
    return BenchRound(round_id, query, tuple(candidates), frozenset(relevant), slots, group, str(need))


def load_rounds(path: str | Path) -> tuple[BenchRound, ...]:
    """All rounds of a bench file; :class:`BenchFormatError` names the first bad line and field."""
    path = Path(path)
    rounds: list[BenchRound] = []
    try:
        handle = path.open("rb")  # decoded line by line, so a bad byte is reported on its own line
    except OSError as exc:
        raise BenchFormatError(f"cannot read bench file {path}: {exc.strerror}") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{path.name} line {number}"
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
                raise BenchFormatError(f"{where}: not valid JSON ({exc.msg})") from None
            rounds.append(parse_round(obj, where))
    if not rounds:
        raise BenchFormatError(f"{path.name}: no rounds")
    seen: set[str] = set()
    for r in rounds:
        if r.id in seen:
            raise BenchFormatError(f"{path.name}: duplicate round id {r.id!r}")
        seen.add(r.id)
    return tuple(rounds)


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
