"""``memabra bench --log-db URL``: the first router's decisions, written as an episode log.

Every decision the first router makes in its passes (candidates, features, each slot's
distribution and the propensities, as :class:`~memabra.Selection` records them) becomes a
finalised episode whose reward is the harness's composite reward for it, and whose used ids are
the chosen relevant candidates. ``memabra ope log --db URL --policy P`` then estimates any other
router's value on the same rounds, where the same bench run reports P's on-policy ``reward_mean``.
"""

from __future__ import annotations

from types import TracebackType

from sqlalchemy import inspect, text

from memabra._errors import ConfigError
from memabra._records import Episode, RewardBreakdown, Selection, utcnow
from memabra.evals.bench._data import BenchRound
from memabra.storage import EpisodeLog, make_engine, upgrade

__all__ = ["DecisionLogWriter"]

# episodes written per transaction: large enough to amortise the INSERTs, small enough to stay flat
_FLUSH_EVERY = 500


class DecisionLogWriter:
    """A bench decision hook (``on_decision``) writing to the episode log at ``url`` (migrated to
    the head schema). The log must hold no episode yet: a second run's decisions beside the first's
    would make ``memabra ope log`` evaluate a mix of the two, which no run's ``reward_mean`` checks
    (:class:`~memabra.ConfigError` says so, at open and again before each write, where it finds
    episodes another process wrote meanwhile)."""

    def __init__(self, url: str) -> None:
        self.url = url
        held = _episodes_held(url)  # before migrating: a production log given by mistake stays as it was
        if held:
            raise ConfigError(
                f"the episode log at {url} already holds {held} episodes; a bench log holds one run's "
                "decisions, so `memabra ope log` can be checked against that run: give a new database"
            )
        upgrade(url)
        self._log = EpisodeLog(url)
        self._pending: list[Episode] = []
        self.written = 0

    def __call__(self, selection: Selection, reward: RewardBreakdown, round_: BenchRound) -> None:
        used = frozenset(selection.chosen_ids) & round_.relevant
        context = selection.context
        self._pending.append(
            Episode(
                context.user_id,
                context.query,
                selections=(selection,),
                reward=reward,
                finalized_at=utcnow(),
                used_ids=used,
                created_at=selection.created_at,
            )
        )
        if len(self._pending) >= _FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        # the emptiness check at open cannot see a second run started on the same new database
        # before this one wrote anything; re-counting before each write stops whichever run finds
        # the other's decisions, so the log never holds two runs' decisions interleaved
        held = _episodes_held(self.url)
        if held != self.written:
            pending, self._pending = len(self._pending), []
            raise ConfigError(
                f"the episode log at {self.url} holds {held} episodes where this bench run wrote {self.written}: "
                f"another process wrote to it during the run; this run's last {pending} decisions were not "
                "written, so that no report is checked against two runs' decisions: give each bench run a new database"
            )
        self._log.log_episodes(self._pending)
        self.written += len(self._pending)
        self._pending = []

    def close(self) -> None:
        self.flush()
        self._log.close()

    def __enter__(self) -> DecisionLogWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _episodes_held(url: str) -> int:
    """Episodes the database at ``url`` holds, at whatever schema revision (0: none, or no log yet)."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("episodes"):
                return 0
            return int(conn.execute(text("SELECT COUNT(*) FROM episodes")).scalar_one())
    finally:
        engine.dispose()
