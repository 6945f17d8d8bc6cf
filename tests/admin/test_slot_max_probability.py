"""Each slot draw's largest probability, stored at write time (migration 0013), reads as the JSON.

The policies page tells explored from greedy draws by the slot's maximum: from the stored column
where a row has one, from the JSON distribution where it is NULL (rows logged before 0013, which
the migration leaves as they are)."""

from __future__ import annotations

from sqlalchemy import func, select, update

from memabra.storage import AdminQueries, EpisodeLog, downgrade, make_engine, upgrade
from memabra.storage._models import DecisionSlotRow

from .conftest import seed_log


def test_stats_read_the_same_from_the_stored_maximum_and_from_the_json(db_url: str) -> None:
    upgrade(db_url)
    with EpisodeLog(db_url) as log:
        seeded = seed_log(log)
        queries = AdminQueries(log)
        stored = queries.policy_stats_and_kind_shares(sample=None)
        assert {s.policy_version: s.explored_draws for s in stored[0]} == seeded.explored_draws
        assert all(n > 0 for n in seeded.explored_draws.values())  # the check below needs some
        ds = DecisionSlotRow
        with log.engine.connect() as conn:
            # every draw keeps exactly the maximum the JSON computation reads
            assert conn.scalar(select(func.count()).where(ds.max_probability.is_(None))) == 0
            differing = select(func.count()).where(ds.max_probability != queries._json_max_probability())
            assert conn.scalar(differing) == 0
            assert conn.scalar(select(func.count()).select_from(ds)) == sum(seeded.draws.values())
        with log.engine.begin() as conn:  # the page reads the stored value where there is one
            conn.execute(update(ds).values(max_probability=ds.chosen_probability))
        assert all(s.explored_draws == 0 for s in queries.policy_version_stats(sample=None))

    # a log written before 0013: the column comes back empty, and the JSON is read instead
    engine = make_engine(db_url)
    try:
        assert downgrade(engine, "0012") == "0012"
        upgrade(engine)
    finally:
        engine.dispose()
    with EpisodeLog(db_url) as log:
        with log.engine.connect() as conn:
            nulls = conn.scalar(select(func.count()).where(DecisionSlotRow.max_probability.is_(None)))
        assert nulls == sum(seeded.draws.values())
        assert AdminQueries(log).policy_stats_and_kind_shares(sample=None) == stored
