"""Deleting an episode or erasing a user from the admin view, and the deletion audit trail (``GET /deletions``):
every run of ``delete_episodes``, whoever made it (this view, ``memabra episodes delete``, the
library), with who asked, from where and how many episodes went."""

from __future__ import annotations

import logging
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from memabra._admin._confirm_page import unconfirmed
from memabra._admin._forms import MAX_ID, FormError, clean_field, list_query
from memabra._admin._plumbing import _NOTICES, _AdminBase, _Auth, _client, _HttpError, _path_id, _required
from memabra._erasure import erase_user
from memabra._errors import InvalidRecordError
from memabra._health import deletion_problems

__all__ = ["DeletionPages"]

logger = logging.getLogger("memabra")

# Entries per page of the audit trail.
_PAGE = 50


class DeletionPages(_AdminBase):
    """``POST /episodes/{id}/delete``, ``POST /erase`` (a user's episodes and memories) and
    ``GET /deletions``."""

    async def delete_episode(self, request: Request) -> Response:
        async def apply(auth: _Auth, form: dict[str, str]) -> Response:
            episode_id = _path_id(request, "episodes", suffix="delete")
            episode = await run_in_threadpool(self.log.get_episode, episode_id)
            back = list_query(form.get("list", ""))
            page = f"/episodes/{quote(episode_id, safe='')}" + (f"?list={quote(back, safe='')}" if back else "")
            asked = unconfirmed(
                self,
                request,
                auth,
                form,
                question=f"Delete episode {episode_id} of user {episode.user_id} with its decisions, steps, "
                "feedback and reward? This cannot be undone; a reward the learner has not read yet is lost to it.",
                action="Delete episode",
                back=(page, "back to the episode"),
            )
            if asked is not None:
                return asked
            # A reviewer deletes an episode to remove what it holds (text pasted by mistake, an
            # erasure request): its reward goes too, learned or not.
            await run_in_threadpool(
                lambda: self.log.delete_episodes(
                    [episode_id], include_unlearned=True, actor=f"admin ({auth.principal})", client=_client(request)
                )
            )
            logger.warning(
                "admin: %s from %s deleted episode %s of user %s (created %s) with everything logged under it",
                auth.principal,
                _client(request),
                episode_id,
                episode.user_id,
                episode.created_at.isoformat(),
            )
            # back to the list the episode was opened from, its filters and page kept
            return RedirectResponse(f"/episodes?{back + '&' if back else ''}notice=episode-deleted", status_code=303)

        return await self._write(request, apply)

    async def erase_user(self, request: Request) -> Response:
        async def apply(auth: _Auth, form: dict[str, str]) -> Response:
            user = _required(form, "user")
            if len(user) > MAX_ID:
                # the log holds no such user (its user ids are at most MAX_ID characters)
                raise FormError(
                    f"user is longer than {MAX_ID} characters, which no user id in the log is; nothing was deleted"
                )
            if form.get("confirm", "").strip() != user:
                raise _HttpError(
                    400,
                    "Not erased",
                    f"type the user id {user!r} to confirm the erasure; nothing was deleted",
                    back=(f"/memories?user={quote(user, safe='')}", f"Back to {user}'s memories"),
                )
            backend = self._memory_backend()
            result = await run_in_threadpool(
                lambda: erase_user(
                    self.log,
                    user,
                    memory=backend,
                    checkpointer=self.checkpointer,
                    actor=f"admin ({auth.principal})",
                    client=_client(request),
                )
            )
            logger.warning(
                "admin: %s from %s erased user %s: %d episode(s), %d memories",
                auth.principal,
                _client(request),
                user,
                result.episodes,
                result.memories,
            )
            return RedirectResponse(f"/deletions?notice=user-erased&user={quote(user, safe='')}", status_code=303)

        return await self._write(request, apply)

    async def deletions(self, request: Request) -> Response:
        async def build(auth: _Auth) -> Response:
            after = request.query_params.get("after") or None
            user = clean_field(request.query_params.get("user") or "").strip() or None
            try:
                entries = await run_in_threadpool(
                    lambda: self.log.deletion_history(limit=_PAGE + 1, after=after, user_id=user)
                )
            except InvalidRecordError as exc:
                raise _HttpError(400, "Bad request", str(exc)) from None
            # the deletions check alone: the page needs none of the learning figures status() reads
            unfinished = await run_in_threadpool(self.log.unfinished_deletions)
            # by the database's clock, the audit trail's and `memabra status`'s (this host's may be minutes apart)
            stalled = deletion_problems(unfinished, await run_in_threadpool(self.log.database_now))
            notice = _NOTICES.get(request.query_params.get("notice", ""), "")
            return self._render(
                "deletions.html",
                auth=auth,
                section="deletions",
                entries=entries[:_PAGE],
                next_after=entries[_PAGE - 1].id if len(entries) > _PAGE else None,
                first_page=after is not None,
                user=user or "",
                notice=notice,
                stalled=stalled,
            )

        return await self._page(request, build)
