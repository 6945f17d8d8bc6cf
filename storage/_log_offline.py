""":class:`~memabra.storage.EpisodeLog`'s reads of logged decisions for offline use (replay,
off-policy evaluation, MemPO's gold answers and labels) and its OPE results; the bodies live in
:mod:`memabra.storage._offline` and :mod:`memabra.storage._mempo_log`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime

from memabra._errors import InvalidRecordError
from memabra._records import (
    GoldDecision,
    LoggedDecision,
    MemoryQuality,
    OPEResult,
    PolicySnapshot,
    RewardBreakdown,
    Selection,
)
from memabra.storage import _mempo_log, _offline
from memabra.storage._tx import Transactions

__all__ = ["OfflineMethods"]


class OfflineMethods:
    """Mixed into :class:`~memabra.storage.EpisodeLog`, which supplies the transactions."""

    _tx: Transactions

    def iter_selections(
        self, *, since: datetime | None = None, until: datetime | None = None, chunk_size: int = _offline.DECISION_CHUNK
    ) -> Iterator[tuple[Selection, RewardBreakdown | None]]:
        """Every logged decision in time order with its episode's reward, in flat memory."""
        _offline.check_window(since, until, chunk_size)
        return _offline.iter_selections(self._tx, since, until, chunk_size)

    def iter_decisions(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        user_id: str | None = None,
        chunk_size: int = _offline.DECISION_CHUNK,
    ) -> Iterator[LoggedDecision]:
        """``iter_selections`` with each episode's used candidates (what offline evaluation reads);
        ``user_id``: only that user's decisions."""
        _offline.check_window(since, until, chunk_size)
        if user_id is not None and not user_id.strip():
            raise InvalidRecordError("user_id must not be empty (leave it out for every user's decisions)")
        return _offline.iter_decisions(self._tx, since, until, chunk_size, user_id=user_id)

    def count_rewarded(self, *, since: datetime | None = None, include_provisional: bool = False) -> int:
        """How many decisions since ``since`` have a final reward (any, with ``include_provisional``):
        one SQL count, no decision read."""
        _offline.check_window(since, None)
        return _offline.count_rewarded(self._tx, since, include_provisional)

    def rewarded_time_at(
        self, position: int, *, since: datetime | None = None, include_provisional: bool = False
    ) -> datetime:
        """The time of the ``position``-th (0-based) such decision in ``iter_decisions``'s order."""
        _offline.check_window(since, None)
        return _offline.rewarded_time_at(self._tx, position, since, include_provisional)

    def record_ope_results(self, results: Sequence[OPEResult], *, snapshot: PolicySnapshot | None = None) -> None:
        """Store an offline evaluation's rows, all or none; with ``snapshot``, a candidate saved in
        the same transaction (what ``train_from_log`` keeps, never without its run)."""
        _offline.record_ope_results(self._tx, results, snapshot)

    def list_ope_runs(
        self, version: str | None = None, *, policy: str | None = None, limit: int = 1000
    ) -> list[OPEResult]:
        return _offline.list_ope_runs(self._tx, version, policy, limit)

    def mempo_items(self, *, since: datetime | None = None, unscored_by: str | None = None) -> Iterator[GoldDecision]:
        """Decisions that offered memories and whose episode got a ``gold_answer`` in feedback;
        with ``unscored_by``, only those that scorer has not labelled yet."""
        _offline.check_window(since, None)
        return _mempo_log.mempo_items(self._tx, since, unscored_by)

    def count_mempo_items(self, *, since: datetime | None = None, unscored_by: str | None = None) -> int:
        """How many decisions :meth:`mempo_items` yields for the same arguments."""
        _offline.check_window(since, None)
        return _mempo_log.count_mempo_items(self._tx, since, unscored_by)

    def count_gold_episodes(self, *, since: datetime | None = None) -> int:
        """Episodes with a ``gold_answer`` in feedback, decisions offering memories or not."""
        _offline.check_window(since, None)
        return _mempo_log.count_gold_episodes(self._tx, since)

    def store_memory_scores(self, scores: Sequence[MemoryQuality]) -> None:
        """Insert or replace MemPO labels: each scorer keeps its own, a label replacing only the
        one its scorer stored for the decision."""
        _mempo_log.store_memory_scores(self._tx, scores)

    def memory_scores(self, decision_ids: Sequence[str], *, scorer: str | None = None) -> dict[str, MemoryQuality]:
        """The label of each of ``decision_ids`` that has one, by decision id: ``scorer``'s; left
        out, :class:`ConfigError` where several scorers labelled a decision."""
        return _mempo_log.memory_scores(self._tx, decision_ids, scorer)

    def all_memory_scores(self, decision_ids: Sequence[str], *, scorer: str | None = None) -> list[MemoryQuality]:
        """Every scorer's labels of ``decision_ids`` (``scorer``'s only, when given), by decision then scorer."""
        return _mempo_log.all_memory_scores(self._tx, decision_ids, scorer)
