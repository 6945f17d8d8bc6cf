"""Review: revision 0016 recounts CJK memories while older processes still serve (it declares it
does not break older code, so a rolling deploy runs it under live pods). A memory a pod rewrites
between the revision's read and its write must keep the count of its new text: the revision's
update used to name the row by its key alone, so it wrote the old text's count over the new one.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, event, text

from memabra.storage import make_engine, upgrade

_OLD_TEXT = "我的狗叫旺财，它喜欢在公园里追球"
_NEW_TEXT = "My dog is called Rex"
_NEW_COUNT = 7


def test_a_memory_rewritten_while_the_revision_runs_keeps_its_new_count(engine: Engine, db_url: str) -> None:
    if engine.dialect.name == "sqlite":
        pytest.skip("SQLite serialises writers: the pod's rewrite waits for the revision or fails it")
    upgrade(engine, "0015")
    now = datetime.now(UTC)
    with engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO registry (kind, owner, id, name, text, tokens, source, metadata, created_at, "
                "updated_at, times_chosen, times_used) VALUES ('memory', 'mei', 'm1', 'm1', :t, 1, 'user', '{}', "
                ":at, :at, 0, 0)"
            ),
            {"t": _OLD_TEXT, "at": now},
        )
    pod = make_engine(db_url)
    fired: list[bool] = []

    def a_pod_rewrites_the_memory(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        # right after the revision read the memories, before it writes any count
        if fired or "FROM registry" not in statement or "registry.tokens" not in statement:
            return
        fired.append(True)
        with pod.begin() as other:
            other.execute(
                text("UPDATE registry SET text = :t, tokens = :n WHERE id = 'm1'"), {"t": _NEW_TEXT, "n": _NEW_COUNT}
            )

    event.listen(engine, "after_cursor_execute", a_pod_rewrites_the_memory)
    try:
        upgrade(engine)
    finally:
        event.remove(engine, "after_cursor_execute", a_pod_rewrites_the_memory)
        pod.dispose()
    assert fired
    with engine.connect() as c:
        stored = c.execute(text("SELECT text, tokens FROM registry WHERE id = 'm1'")).one()
    assert tuple(stored) == (_NEW_TEXT, _NEW_COUNT)
