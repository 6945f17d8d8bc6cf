"""The memories pages: each user's memories with their usage, one memory's history, and the
writes a reviewer makes to them (edit, retire, restore).

Writes go through :class:`memabra._sql_memory.SQLMemory`, the backend ``memabra memories`` uses, so
each one lands in the memory's history like any other change and the router's recall sees it on
its next turn. Listing reads :class:`~memabra.storage._admin_memories.AdminMemories`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from memabra._admin._forms import (
    MemoryQuery,
    clean_field,
    error_field,
    parse_memory_edit,
    parse_memory_query,
)
from memabra._admin._plumbing import _NOTICES, _AdminBase, _Auth, _HttpError
from memabra._errors import InvalidRecordError
from memabra._memory_records import MemoryStatus
from memabra._memory_restore import restore_memory
from memabra._memory_write import ContradictsCurrentError, audit_reason, edit_memory
from memabra.storage import EpisodeFilter
from memabra.storage._memory_rows import MAX_REASON_CHARS

__all__ = ["MemoryPages"]

_RECENT_USES = 20
# Users the list shows (those with the most memories); a search finds the others.
USERS_SHOWN = 200


class MemoryPages(_AdminBase):
    """``GET /memories`` (users, or one user's memories), ``GET /memories/item`` (one memory) and
    ``POST /memories/update|retire|restore``."""

    async def memories(self, request: Request) -> Response:
        async def build(auth: _Auth) -> Response:
            try:
                query = parse_memory_query(request.query_params)
            except InvalidRecordError as exc:
                return self._render(
                    "memories.html",
                    400,
                    auth=auth,
                    query=None,
                    error=str(exc),
                    # the form's own fields (a bad offset or limit came with a link)
                    error_field=error_field(str(exc), ("user", "q", "status", "usage", "sort")),
                    section="memories",
                    **_empty(),
                )
            context = await run_in_threadpool(self._memories_context, query)
            return self._render("memories.html", auth=auth, query=query, error="", section="memories", **context)

        return await self._page(request, build)

    def _memories_context(self, query: MemoryQuery) -> dict[str, Any]:
        if not query.user:
            users = self.memory_queries.users(search=query.search or None, limit=USERS_SHOWN + 1)
            return {**_empty(), "users": users[:USERS_SHOWN], "more_users": len(users) > USERS_SHOWN}
        page = self.memory_queries.memories(
            query.user,
            search=query.search or None,
            status=query.status,
            usage=query.usage,
            sort=query.sort,
            offset=query.offset,
            limit=query.limit,
        )
        # a filter that matches nothing is not "nothing stored": the erase form is for a user the
        # log holds something of (a memory, retired or not, or an episode)
        stored = (
            page.total > 0
            or self.memory_queries.memories(query.user, limit=1).total > 0
            or bool(self.log.list_episodes(EpisodeFilter(user_id=query.user), limit=1).items)
        )
        return {**_empty(), "page": page if stored else None, "unknown_user": not stored}

    async def memory(self, request: Request) -> Response:
        async def build(auth: _Auth) -> Response:
            user = clean_field(request.query_params.get("user", ""))
            memory_id = clean_field(request.query_params.get("id", ""))
            if not user or not memory_id:
                raise _HttpError(400, "Bad request", "user and id are required: /memories/item?user=…&id=…")
            context = await run_in_threadpool(self._memory_context, user, memory_id)
            notice = _NOTICES.get(request.query_params.get("notice", ""), "")
            return self._render(
                "memory.html", auth=auth, notice=notice, section="memories", reason_room=_room(auth), **context
            )

        return await self._page(request, build)

    def _memory_context(self, user: str, memory_id: str) -> dict[str, Any]:
        backend = self._memory_backend()
        try:
            record = backend.get(user, memory_id)
        except InvalidRecordError as exc:
            raise _HttpError(404, "Not found", str(exc)) from None
        return {
            "record": record,
            "history": backend.history(user, memory_id),
            "uses": self.memory_queries.uses(user, memory_id, limit=_RECENT_USES),
            "list_query": urlencode({"user": user}),
        }

    async def update_memory(self, request: Request) -> Response:
        async def apply(auth: _Auth, form: dict[str, str]) -> Response:
            user, memory_id, text = parse_memory_edit(form)
            if not text:
                raise InvalidRecordError("text is required: a memory needs non-empty text (retire it instead)")
            base = form.get("base_text")
            reason = _audited("edited", auth.principal, form)
            try:
                outcome = await run_in_threadpool(
                    self._update,
                    user,
                    memory_id,
                    _lf(text),
                    None if base is None else _lf(base),
                    reason,
                    _choice(form),
                )
            except ContradictsCurrentError as exc:
                return await self._contradiction(auth, user, memory_id, text, form, exc)
            if outcome is not None:
                return await self._edit_conflict(auth, user, memory_id, text, outcome, form.get("reason", ""))
            return _to_memory(user, memory_id, "memory-updated")

        return await self._write(request, apply)

    def _update(
        self, user: str, memory_id: str, text: str, base: str | None, reason: str, choice: tuple[bool, bool]
    ) -> str | None:
        """Save ``text`` unless the memory changed since its form was opened with ``base``: then
        nothing is written and its current text comes back (``None``: saved). Saved by the rule a
        restore keeps: a text contradicting another current memory is refused unless ``choice``
        (replace, keep both) says what becomes of it."""
        backend = self._memory_backend()
        record = backend.get(user, memory_id)
        if record.status is MemoryStatus.RETIRED:
            # the backend's update would restore it as a side effect: make that a deliberate step
            raise InvalidRecordError(f"memory {memory_id!r} is retired: restore it first, then edit it")
        if base is not None and base.strip() != record.text:
            if text.strip() == record.text:
                return None  # the same edit sent again (a double click, a re-post): saved already
            return record.text
        replace, keep_both = choice
        edit_memory(backend, user, memory_id, text, replace=replace, keep_both=keep_both, reason=reason)
        return None

    async def _contradiction(
        self, auth: _Auth, user: str, memory_id: str, draft: str, form: dict[str, str], exc: ContradictsCurrentError
    ) -> Response:
        """409: the new text states another value of a subject a current memory holds. Nothing is
        saved; the page comes back with the draft, the reason and the memories in the way, for the
        reviewer to retire them in the same step or keep them."""
        context = await run_in_threadpool(self._memory_context, user, memory_id)
        return self._render(
            "memory.html",
            409,
            auth=auth,
            notice="",
            error=str(exc),
            draft=draft,
            draft_reason=form.get("reason", ""),
            clashing=exc.clashing,
            section="memories",
            reason_room=_room(auth),
            **context,
        )

    async def _edit_conflict(
        self, auth: _Auth, user: str, memory_id: str, draft: str, current: str, draft_reason: str
    ) -> Response:
        """409: another edit landed after this form was opened. Saving would silently overwrite
        it, so nothing is saved; the page comes back with the current text, and the draft and its
        reason to merge and save again."""
        context = await run_in_threadpool(self._memory_context, user, memory_id)
        message = (
            f"This memory was changed after you opened it: it now reads “{current}”. Your text was not saved; "
            "it is in the box below: save it again to replace the current text."
        )
        return self._render(
            "memory.html",
            409,
            auth=auth,
            notice="",
            error=message,
            draft=draft,
            draft_reason=draft_reason,
            section="memories",
            reason_room=_room(auth),
            **context,
        )

    async def retire_memory(self, request: Request) -> Response:
        async def apply(auth: _Auth, form: dict[str, str]) -> Response:
            user, memory_id, _ = parse_memory_edit(form)
            backend = self._memory_backend()
            reason = _audited("retired", auth.principal, form)
            await run_in_threadpool(backend.retire, user, memory_id, reason=reason)
            return _to_memory(user, memory_id, "memory-retired")

        return await self._write(request, apply)

    async def restore_memory(self, request: Request) -> Response:
        async def apply(auth: _Auth, form: dict[str, str]) -> Response:
            user, memory_id, _ = parse_memory_edit(form)
            backend = self._memory_backend()
            # the same rule as `memabra memories restore`: never two current values of one subject
            await run_in_threadpool(
                restore_memory,
                backend,
                user,
                memory_id,
                replace=form.get("replace") == "on",
                keep_both=form.get("keep_both") == "on",
                reason=_audited("restored", auth.principal, form),
            )
            return _to_memory(user, memory_id, "memory-restored")

        return await self._write(request, apply)


def _audited(action: str, principal: str, form: dict[str, str]) -> str:
    """The history's reason for a change made here: who (the signed-in principal) and, where the
    reviewer gave it, why. A team lead reviewing a support fix reads both from the history; before,
    only who was kept, and the "why" (the ticket, "user says they never said this") was lost."""
    why = " ".join(clean_field(form.get("reason", "")).split())
    # refused whole (400, nothing written) where the history would cut it
    return audit_reason(f"{action} in the admin ({principal})" + (f": {why}" if why else ""))


def _room(auth: _Auth) -> int:
    """How long a "why" the page's boxes take: what the history keeps after who made the change
    (the longest action's prefix, so that one limit fits the edit, retire and restore forms)."""
    return max(0, MAX_REASON_CHARS - len(f"restored in the admin ({auth.principal}): "))


def _choice(form: dict[str, str]) -> tuple[bool, bool]:
    """The edit form's (replace, keep both) boxes: what becomes of current memories it contradicts."""
    return form.get("replace") == "on", form.get("keep_both") == "on"


def _lf(text: str) -> str:
    """A form field's text with the CRLF line breaks a browser sends as the page's LF ones."""
    return text.replace("\r\n", "\n")


def _empty() -> dict[str, Any]:
    return {"users": [], "more_users": False, "page": None, "unknown_user": False}


def _to_memory(user: str, memory_id: str, notice: str) -> Response:
    query = urlencode({"user": user, "id": memory_id, "notice": notice})
    return RedirectResponse(f"/memories/item?{query}", status_code=303)
