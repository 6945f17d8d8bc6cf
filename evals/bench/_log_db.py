"""``memabra bench --log-db URL``: the first router's decisions, written as an episode log.

Every decision the first router makes in its passes (candidates, features, each slot's
distribution and the propensities, as :class:`~memabra.Selection` records them) becomes a
finalised episode whose reward is the harness's composite reward for it, and whose used ids are
the chosen relevant candidates. ``memabra ope log --db URL --policy P`` then estimates any other
router's value on the same rounds, where the same bench run reports P's on-policy ``reward_mean``.

The log's ``bench_runs`` row (:mod:`._run_record`) says whether the run finished: it is taken at
open, before any decision is written (a second run on the same log is refused there), and marked
finished or stopped at close; a run killed outright leaves it running, which readers refuse.
"""

from __future__ import annotations

from types import TracebackType

from sqlalchemy import inspect, text

from memabra._errors import ConfigError
from memabra._records import Episode, RewardBreakdown, Selection, utcnow
from memabra.evals._log_order import DecisionClock
from memabra.evals.bench._data import BenchRound
from memabra.evals.bench._run_record import BenchRun, claim_log, end_run
from memabra.storage import EpisodeLog, make_engine, upgrade
from memabra.storage._engine import shown_url

__all__ = ["DecisionLogWriter"]

# episodes written per transaction: large enough to amortise the INSERTs, small enough to stay flat
_FLUSH_EVERY = 500


class DecisionLogWriter:
    """A bench decision hook (``on_decision``) writing to the episode log at ``url`` (migrated to
    the head schema). The log must hold no episode yet: a second run's decisions beside the first's
    would make ``memabra ope log`` evaluate a mix of the two, which no run's ``reward_mean`` checks
    (:class:`~memabra.ConfigError` says so, at open and again before each write, where it finds
    episodes another process wrote meanwhile). ``logger`` names the router whose decisions these
    are and ``expected`` how many it will make, for the log's run row and what readers say of it.

    :meth:`close` marks the run finished when it made every expected decision (or, without
    ``expected``, when the caller says it finished); a ``with`` block left by an exception marks
    it stopped."""

    def __init__(self, url: str, *, logger: str = "bench", expected: int | None = None) -> None:
        self.url = url
        # what messages (and a cron job's mail) show of the URL: never its password
        self.where = shown_url(url)
        self.expected = expected
        held = _episodes_held(url)  # before migrating: a production log given by mistake stays as it was
        if held:
            raise ConfigError(
                f"the episode log at {self.where} already holds {held} episodes; a bench log holds one run's "
                "decisions, so `memabra ope log` can be checked against that run: give a new database"
            )
        upgrade(url)
        self._log = EpisodeLog(url)
        try:
            # the claim, not the emptiness check above, is what keeps two runs started together apart
            self.run: BenchRun | None = claim_log(self._log.engine, logger, expected)
        except BaseException:
            self._log.close()
            raise
        self._pending: list[Episode] = []
        self._clock = DecisionClock()
        self.written = 0
        # episodes handed to a write not yet counted: a stop (Ctrl-C, SIGTERM) raised between the
        # commit and the count must not read as another process's episodes at the next count
        self._uncounted = 0

    def __call__(self, selection: Selection, reward: RewardBreakdown, round_: BenchRound) -> None:
        selection = self._clock(selection)  # the log's time order is the order of the run's decisions
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
        # the run row keeps other bench runs out, but not another writer (an agent given this URL
        # by mistake): re-counting before each write stops this run where it finds their episodes
        held = self._count_written()
        if held != self.written:
            pending, self._pending = len(self._pending), []
            raise ConfigError(
                f"the episode log at {self.where} holds {held} episodes where this bench run wrote {self.written}: "
                f"another process wrote to it during the run; this run's last {pending} decisions were not "
                "written, so that no report is checked against two runs' decisions: give each bench run a new database"
            )
        # taken off before the write: a write that failed midway (rolled back) is not tried again
        batch, self._pending = self._pending, []
        self._uncounted = len(batch)
        self._log.log_episodes(batch)
        self.written += len(batch)
        self._uncounted = 0

    def _count_written(self) -> int:
        """The episodes the log holds, counting into ``written`` the last write where it went
        through before a stop kept it from being counted (one transaction: all of it or none)."""
        held = _episodes_held(self.url)
        if self._uncounted and held == self.written + self._uncounted:
            self.written = held
        self._uncounted = 0
        return held

    def close(self, *, finished: bool = True) -> None:
        """Write what is pending and mark the run's end: ``finished`` when the logger made every
        expected decision (without ``expected``: when the caller's run ``finished``), else ``stopped``.
        Closing again does nothing."""
        if self.run is None:
            return
        try:
            if self._uncounted:
                self._count_written()
            self.flush()
        finally:
            # a later router's failure stops the run after the logger's last decision: its log is whole
            whole = self.written >= self.expected if self.expected is not None else finished
            try:
                end_run(self._log.engine, self.run, self.written, "finished" if whole else "stopped")
            finally:
                self.run = None
                self._log.close()

    def __enter__(self) -> DecisionLogWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(finished=kind is None)


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
