"""The registry of memories, skills and tools, and each candidate's usage counts per user."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Integer, and_, func, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError
from memabra._records import CandidateKind, RegistryItem, UsageCounts, utcnow
from memabra.storage import _convert as cv
from memabra.storage._injected_bodies import store_bodies
from memabra.storage._models import DecisionCandidateRow, RegistryRow, table_of
from memabra.storage._rows import clean_text, prepare
from memabra.storage._tx import Transactions

__all__ = ["candidate_usage", "delete_item", "items", "put_items", "registered"]

# Columns a re-put replaces; usage counters and created_at of the existing row are kept.
_REPLACED = ("name", "text", "body", "tokens", "source", "updated_at")


def put_items(tx: Transactions, items_: Sequence[RegistryItem]) -> None:
    """Insert or replace memories, skills and tools (usage counters of a replaced row are kept).

    Every process of a release registers its skills and tools as it starts, so several put the
    same new row at once: each inserts it unless it is there (the first insert stands, the others
    wait for it on the key and replace its columns), rather than all but one failing their start
    on the primary key.

    Each skill's body and tool's schema is also kept in ``injected_bodies`` under its digest, in the
    same transaction (:mod:`memabra.storage._injected_bodies`): the log keeps every release's, the
    registry row only the latest."""
    if not items_:
        return
    rows = prepare(table_of(RegistryRow), [cv.registry_values(i) for i in items_])
    # Fixed key order, as for every registry write: concurrent writers lock rows in one sequence.
    rows.sort(key=lambda r: (r["kind"], r["owner"], r["id"]))
    table = table_of(RegistryRow)
    insert = pg_insert if tx.is_postgres else sqlite_insert

    def work(s: Session) -> None:
        store_bodies(s, items_, is_postgres=tx.is_postgres)
        for values in rows:
            # RETURNING, not rowcount: psycopg reports -1 for an insert that did nothing
            inserted = s.execute(
                insert(table)
                .values(values)
                .on_conflict_do_nothing(index_elements=["kind", "owner", "id"])
                .returning(table.c.id)
            ).first()
            if inserted is not None:
                continue
            existing = s.get(RegistryRow, (values["kind"], values["owner"], values["id"]), with_for_update=True)
            if existing is None:  # cannot happen: the insert found the key taken
                raise InvalidRecordError(f"registry row {values['id']!r} vanished while it was being replaced")
            for key in _REPLACED:
                setattr(existing, key, values[key])
            existing.metadata_ = values["metadata"]
            existing.deleted_at = None

    tx.write(work, what="put_items")


def items(tx: Transactions, user_id: str, kind: CandidateKind | str | None) -> list[RegistryItem]:
    """The registry as one user sees it: their own rows plus shared skills and tools. Another
    user's memories are never returned."""
    if not user_id:
        raise InvalidRecordError("items() needs a user_id: the registry is scoped by user")
    owner = clean_text(user_id)
    stmt = select(RegistryRow).where(
        RegistryRow.deleted_at.is_(None),
        RegistryRow.retired_at.is_(None),  # superseded memories stay in history, out of recall
        or_(RegistryRow.owner == owner, and_(RegistryRow.owner == "", RegistryRow.kind != CandidateKind.MEMORY.value)),
    )
    if kind is not None:
        stmt = stmt.where(RegistryRow.kind == CandidateKind(kind).value)
    with tx.read() as s:
        return [cv.registry_from_row(r) for r in s.scalars(stmt.order_by(RegistryRow.kind, RegistryRow.created_at))]


def registered(tx: Transactions, kind: CandidateKind | str, owner: str = "") -> list[RegistryItem]:
    """Every item of ``kind`` registered under ``owner`` (``""``: shared by every user) and not
    deleted, by id: the skills or tools some release registered, with their latest body."""
    stmt = select(RegistryRow).where(
        RegistryRow.kind == CandidateKind(kind).value,
        RegistryRow.owner == clean_text(owner),
        RegistryRow.deleted_at.is_(None),
    )
    with tx.read() as s:
        return [cv.registry_from_row(r) for r in s.scalars(stmt.order_by(RegistryRow.id))]


def delete_item(tx: Transactions, kind: CandidateKind | str, owner: str, item_id: str) -> bool:
    key = (CandidateKind(kind).value, clean_text(owner), clean_text(item_id))

    def work(s: Session) -> bool:
        row = s.get(RegistryRow, key, with_for_update=True)
        if row is None or row.deleted_at is not None:
            return False
        row.deleted_at = utcnow()
        return True

    return tx.write(work, what="delete_item")


def candidate_usage(tx: Transactions, user_id: str, candidate_ids: Sequence[str]) -> dict[str, UsageCounts]:
    """How often each candidate was offered to, chosen for, and used by this user."""
    if not candidate_ids:
        return {}
    t = DecisionCandidateRow
    ids = [clean_text(c) for c in candidate_ids]
    with tx.read() as s:
        rows = s.execute(
            select(
                t.candidate_id,
                func.count(),
                func.sum(func.cast(t.chosen, Integer())),
                func.sum(func.cast(func.coalesce(t.used, False), Integer())),
            )
            .where(t.user_id == clean_text(user_id), t.candidate_id.in_(ids))
            .group_by(t.candidate_id)
        ).all()
    return {cid: UsageCounts(int(n), int(ch or 0), int(u or 0)) for cid, n, ch, u in rows}
