"""Memories in Chinese, Japanese or Korean recounted: a token per character.

Until this release a memory's token count was its whitespace words x 1.3, and a sentence of
Chinese or Japanese (no spaces) counted as one word: the router's budget let such memories in at
a fraction of their real cost. New memories are counted a token per CJK character (plus the other
words x 1.3, as before); this revision recounts the stored ones the old rule undercounted. English
rows count the same under both rules and are not touched. The count is written out here rather
than imported, so this revision keeps doing what it did when the counting code moves on.

A downgrade leaves the counts (older code reads any count; it would only count new memories the
old way).

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# a data change older code reads as it reads any count
BREAKS_OLDER_CODE = False

_CJK = re.compile(
    "[\u1100-\u11ff\u3005-\u3007\u303b\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f]"
)
_BATCH = 1000
# rows read per round trip of the streamed read: a few megabytes of text at a time
_READ_BATCH = 20_000

_registry = sa.table(
    "registry",
    sa.column("kind", sa.String),
    sa.column("owner", sa.String),
    sa.column("id", sa.String),
    sa.column("text", sa.Text),
    sa.column("tokens", sa.Integer),
)


def _count(text: str) -> int:
    if not text.strip():
        return 0
    cjk = len(_CJK.findall(text))
    return max(1, round(1.3 * len(_CJK.sub(" ", text).split()) + cjk))


def upgrade() -> None:
    bind = op.get_bind()
    # streamed (a server-side cursor on PostgreSQL): a registry of millions of memories is read in
    # batches, not fetched whole into this process; only the rows to recount are kept
    rows = bind.execute(
        sa.select(_registry.c.owner, _registry.c.id, _registry.c.text, _registry.c.tokens)
        .where(_registry.c.kind == "memory")
        .execution_options(stream_results=True, yield_per=_READ_BATCH)
    )
    recounted = []
    for owner, item_id, text, tokens in rows:
        if text and _CJK.search(text) and _count(text) != tokens:
            recounted.append({"o": owner, "i": item_id, "old": text, "t": _count(text)})
    update = (
        sa.update(_registry)
        .where(
            _registry.c.kind == "memory",
            _registry.c.owner == sa.bindparam("o"),
            _registry.c.id == sa.bindparam("i"),
            # only the text counted: a pod still serving may rewrite a memory (and its count)
            # between this read and this write
            _registry.c.text == sa.bindparam("old"),
        )
        .values(tokens=sa.bindparam("t"))
    )
    for start in range(0, len(recounted), _BATCH):
        bind.execute(update, recounted[start : start + _BATCH])


def downgrade() -> None:
    pass
