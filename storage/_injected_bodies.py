"""What a chosen skill or tool put into the model's context, kept for as long as the log is.

The registry holds one row per skill or tool id, replaced by every release that edits it, so it
knows only the latest release's skill body (the instructions injected when the skill is chosen)
and tool schema (the function spec bound to the model). ``injected_bodies`` keeps every body any
release registered, once each, under a digest of its text; each logged skill and tool candidate
names the digest of the body it could inject (its metadata's :data:`BODY_DIGEST_KEY`), so an old
decision is reviewed with the body it had, not today's.

The digest is the first :data:`DIGEST_CHARS` hex characters (64 bits) of the SHA-256 of the body
as stored: each logged candidate carries it, so it is kept short. 64 bits is safe here because
the bodies are a deployment's own release content, not user input, and few (a release has tens;
a million distinct bodies would collide with probability about 3e-8); and a collision could not
go unseen: registering a body whose digest is already taken by another text is refused
(:func:`store_bodies`), so a digest in the log names exactly one text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Integer, String, Text, and_, func, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Mapped, Session, mapped_column

from memabra._errors import InvalidRecordError
from memabra._records import CandidateKind, Episode, RegistryItem, Selection, utcnow
from memabra.storage._models import Base, DecisionCandidateRow, DecisionRow, RegistryRow, UTCDateTime, table_of
from memabra.storage._rows import clean_text
from memabra.storage._tx import Transactions

__all__ = [
    "BODY_DIGEST_KEY",
    "DIGEST_CHARS",
    "InjectedBodyRow",
    "OfferedVersion",
    "OfferedVersions",
    "body_digest",
    "chosen_digests",
    "episode_bodies",
    "forget_own_bodies",
    "kept_bodies",
    "offered_versions",
    "read_bodies",
    "store_bodies",
]

BODY_DIGEST_KEY = "body_digest"
"""Metadata key of a skill or tool (registry item and logged candidate): the digest of its body."""
DIGEST_CHARS = 16

_BODIED_KINDS = (CandidateKind.SKILL, CandidateKind.TOOL)


class InjectedBodyRow(Base):
    """A skill body or tool schema some release registered (revision 0017): content-addressed,
    written once, never changed; shared release content, not any user's data."""

    __tablename__ = "injected_bodies"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    body: Mapped[str] = mapped_column(Text)
    first_seen_at: Mapped[datetime] = mapped_column(UTCDateTime())


def body_digest(body: str) -> str:
    """The digest a skill's body or a tool's schema is kept and logged under: of the text as the
    log stores it (NUL bytes dropped, lone surrogates replaced), so anyone can check a stored body
    against it (``sha256sum | cut -c1-16``)."""
    return hashlib.sha256(clean_text(body).encode("utf-8")).hexdigest()[:DIGEST_CHARS]


def _bodies_of(items: Iterable[RegistryItem]) -> dict[str, str]:
    """Digest -> body of every skill and tool among ``items`` that has one; an item whose
    metadata names another digest than its body's is refused before anything is written."""
    out: dict[str, str] = {}
    for item in items:
        if item.kind not in _BODIED_KINDS or item.body is None:
            continue
        digest = body_digest(item.body)
        named = item.metadata.get(BODY_DIGEST_KEY)
        if named is not None and named != digest:
            raise InvalidRecordError(
                f"{item.id!r}: metadata {BODY_DIGEST_KEY}={named!r} is not its body's digest {digest!r} "
                "(build skills and tools with skill_items()/tool_items(), or leave the key out)"
            )
        out[digest] = clean_text(item.body)
    return out


def store_bodies(s: Session, items: Iterable[RegistryItem], *, is_postgres: bool) -> None:
    """Keep the bodies of ``items`` (inside the registry write's transaction): each is inserted
    unless its digest is there already. A digest already taken by another text (a collision) is
    refused, which rolls the registry write back with it."""
    bodies = _bodies_of(items)
    if not bodies:
        return
    table = table_of(InjectedBodyRow)
    insert = pg_insert if is_postgres else sqlite_insert
    now = utcnow()
    for digest in sorted(bodies):  # one lock order for every writer
        body = bodies[digest]
        inserted = s.execute(
            insert(table)
            .values(digest=digest, body=body, first_seen_at=now)
            .on_conflict_do_nothing(index_elements=["digest"])
            .returning(table.c.digest)
        ).first()
        if inserted is not None:
            continue
        stored = s.scalar(select(table.c.body).where(table.c.digest == digest))
        if stored != body:
            raise InvalidRecordError(
                f"two different skill bodies or tool schemas share the digest {digest!r}; nothing was registered "
                "(report it: the digest would no longer name one text)"
            )


def read_bodies(s: Session, digests: Collection[str]) -> dict[str, str]:
    """The stored bodies of ``digests`` (those the table lacks are left out)."""
    if not digests:
        return {}
    table = table_of(InjectedBodyRow)
    rows = s.execute(select(table.c.digest, table.c.body).where(table.c.digest.in_(sorted(set(digests))))).all()
    return {digest: body for digest, body in rows}


def chosen_digests(selection: Selection) -> dict[str, str]:
    """Candidate id -> logged body digest of each chosen skill and tool that names one."""
    out = {}
    for cand in selection.chosen:
        digest = cand.metadata.get(BODY_DIGEST_KEY)
        if cand.kind in _BODIED_KINDS and isinstance(digest, str):
            out[cand.id] = digest
    return out


def episode_bodies(s: Session, episode: Episode) -> dict[str, str]:
    """Digest -> kept body of each chosen skill and tool of ``episode`` that logged a digest (no
    query when none did): what its decisions injected, for review."""
    wanted = {digest for sel in episode.selections for digest in chosen_digests(sel).values()}
    return read_bodies(s, wanted)


def forget_own_bodies(s: Session, owner: str) -> None:
    """An erasure's step: the kept bodies of ``owner``'s own skills and tools (their instructions
    may hold the user's words), those registered now and every earlier version a decision of theirs
    offered (its logged candidate names the owner), unless another registry row or another user's
    logged decision names the same body (two users given one template skill: the other's decisions
    are reviewed with it). An earlier version no remaining decision of theirs names (replaced before
    any turn offered it, or offered only in episodes deleted or expired before) is named nowhere
    and stays."""

    def digests(rows: Iterable[Mapping[str, object] | None]) -> set[str]:
        return {str(m[BODY_DIGEST_KEY]) for m in rows if m and isinstance(m.get(BODY_DIGEST_KEY), str)}

    own = RegistryRow.owner == owner
    mine = digests(s.scalars(select(RegistryRow.metadata_).where(own, RegistryRow.kind != CandidateKind.MEMORY.value)))
    named = DecisionCandidateRow.metadata_[BODY_DIGEST_KEY].as_string()
    bodied = DecisionCandidateRow.kind.in_([k.value for k in _BODIED_KINDS])
    # the user's own decisions, through the (user_id, candidate_id) index: those that offered a
    # skill or tool the user owned, as it was then
    offered_own = DecisionCandidateRow.metadata_["owner"].as_string() == owner
    mine.update(
        str(d)
        for d in s.scalars(
            select(named)
            .where(DecisionCandidateRow.user_id == owner, bodied, offered_own, named.is_not(None))
            .distinct()
        )
    )
    if not mine:
        return
    others = digests(
        s.scalars(select(RegistryRow.metadata_).where(~own, RegistryRow.kind != CandidateKind.MEMORY.value))
    )
    gone = mine - others
    if gone:
        # a scan of the log's skill and tool candidates, made only for a user who owns skills or tools
        gone -= set(
            s.scalars(
                select(named).where(DecisionCandidateRow.user_id != owner, bodied, named.in_(sorted(gone))).distinct()
            )
        )
    table = table_of(InjectedBodyRow)
    for digest in sorted(gone):
        s.execute(table.delete().where(table.c.digest == digest))


@dataclass(frozen=True, slots=True)
class OfferedVersion:
    """One version of a skill or tool as the log's decisions offered it: its body's ``digest``
    (``None`` for decisions logged before revision 0017, which name none), how many decisions
    offered and chose it, and when the first and the last of them were made."""

    digest: str | None
    decisions: int
    chosen: int
    first_offered: datetime
    last_offered: datetime


@dataclass(frozen=True, slots=True)
class OfferedVersions:
    """The versions the newest ``read`` decisions offered (of the owner's, for an owner's item),
    oldest first; ``older`` is true when the log holds older decisions that were not read."""

    versions: tuple[OfferedVersion, ...]
    read: int | None
    older: bool


def offered_versions(
    tx: Transactions, candidate_id: str, owner: str = "", *, last: int | None = None
) -> OfferedVersions:
    """Each version of the skill or tool ``candidate_id`` (of ``owner``; ``""``: the shared one)
    that the newest ``last`` decisions (``None``: every one) offered, oldest first.

    The decisions are read newest first through their ``created_at`` (or ``user_id``) index and
    each one's candidate is found by the primary key ``(decision_id, candidate_id)``: the cost
    grows with ``last``, not with the log (a scan of every logged candidate, as a filter on the
    candidate id alone would be, reads tens of rows per decision)."""
    if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 1):
        raise InvalidRecordError(f"last must be a positive number of decisions or None, got {last!r}")
    t, d = DecisionCandidateRow, DecisionRow
    named = t.metadata_[BODY_DIGEST_KEY].as_string()
    logged_owner = t.metadata_["owner"].as_string()
    owner = clean_text(owner)
    newest = select(d.id, d.created_at)
    if owner:
        newest = newest.where(d.user_id == owner)
    newest = newest.order_by(d.created_at.desc(), d.id.desc())
    window = (newest.limit(last) if last is not None else newest.order_by(None)).subquery()
    whose = (
        [t.user_id == owner, logged_owner == owner]
        if owner
        else [or_(logged_owner == "", logged_owner.is_(None))]  # a decision of an older release names none
    )
    stmt = (
        select(
            named,
            func.count(),
            func.sum(func.cast(t.chosen, Integer())),
            func.min(window.c.created_at),
            func.max(window.c.created_at),
        )
        .select_from(window)
        .join(t, and_(t.decision_id == window.c.id, t.candidate_id == clean_text(candidate_id)))
        .where(*whose)
        .group_by(named)
    )
    with tx.read() as s:
        rows = s.execute(stmt).all()
        older = last is not None and s.execute(newest.offset(last).limit(1)).first() is not None
    versions = sorted(
        (OfferedVersion(digest, int(n), int(chosen or 0), first, last_) for digest, n, chosen, first, last_ in rows),
        key=lambda v: (v.first_offered, v.last_offered, v.digest or ""),
    )
    return OfferedVersions(tuple(versions), last, older)


def kept_bodies(tx: Transactions, digests: Collection[str]) -> dict[str, str]:
    """The kept bodies of ``digests`` (those never kept, or forgotten by an erasure, are left out)."""
    with tx.read() as s:
        return read_bodies(s, digests)
