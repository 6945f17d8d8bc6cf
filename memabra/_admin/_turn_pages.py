"""Unfinished turns (``GET /turns``): the turns the log keeps until their episode is logged, each
paused (an interrupt waits on a person), running, or lost (running for longer than
:data:`~memabra.storage.RUNNING_TURN_LIMIT`: its process died mid-turn), as ``memabra episodes
paused`` lists them; and ``POST /turns/abandon``, which logs a paused or lost turn as a failed
episode with its routing decision (:func:`memabra._paused_turns.abandon_paused_turn`, as
``memabra episodes paused --abandon`` does). A running turn is never abandoned: it may still finish."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from memabra._admin._confirm_page import unconfirmed
from memabra._admin._forms import FormError
from memabra._admin._plumbing import _NOTICES, _AdminBase, _Auth, _client, _HttpError, _required
from memabra._errors import InvalidRecordError, UnknownEpisodeError
from memabra._feedback import RewardService
from memabra._health import format_age, turn_problems
from memabra._paused_turns import ABANDONED_SOURCE, abandon_paused_turn
from memabra._records import Episode
from memabra.storage import RUNNING_TURN_LIMIT, SuspendedTurn, TurnWentOnError

__all__ = ["TurnPages"]

logger = logging.getLogger("memabra")

# Turns per page, as the deletion trail shows its entries.
_PAGE = 50
# what a page cursor is made of (URL-safe base64 of a time and a turn id: well under 400 characters)
_CURSOR = re.compile(r"[A-Za-z0-9_-]{1,400}")
_LIMIT = format_age(RUNNING_TURN_LIMIT)


@dataclass(frozen=True, slots=True)
class TurnRow:
    """A kept turn as the page shows it."""

    kept: SuspendedTurn
    state: str  # paused, running or lost
    query: str
    steps: int
    age: str

    @property
    def abandonable(self) -> bool:
        return self.state != "running"

    def confirmation(self) -> str:
        """What Abandon asks before it logs the turn."""
        kept = self.kept
        where = f"of user {kept.user_id}" + (f" (thread {kept.thread_id})" if kept.thread_id else "")
        why = {
            "paused": f"It waits on a person (paused {self.age} ago): the approval it waits on is dropped, and a run "
            "resumed later starts a new turn.",
            "lost": f"Its process died mid-turn (running for {self.age} without finishing).",
        }[self.state]
        return (
            f"Abandon the {self.state} turn {kept.turn_id} {where}? {why} It is logged as a failed episode "
            f"(accepted: false) with its routing decision and {self.steps} step(s), as "
            "`memabra episodes paused --abandon` does; this cannot be undone."
        )


def _row(kept: SuspendedTurn, now: datetime) -> TurnRow:
    steps = kept.document.get("steps", ())
    return TurnRow(
        kept,
        kept.state(now),
        str(kept.document.get("query", "")),
        len(steps) if isinstance(steps, list | tuple) else 0,
        format_age(now - kept.suspended_at),
    )


class TurnPages(_AdminBase):
    """``GET /turns`` and ``POST /turns/abandon``."""

    async def turns(self, request: Request) -> Response:
        async def build(auth: _Auth) -> Response:
            if "offset" in request.query_params:
                # a link from before the list paged by cursor: its page number no longer names the
                # same turns, so say so rather than show the first page as if it were that one
                raise FormError(
                    "offset is no longer a parameter of the unfinished turns: they page by cursor "
                    "(open /turns and follow Next page)"
                )
            cursor = request.query_params.get("cursor") or None
            lost = parse_lost_only(request.query_params.get("lost"))
            context = await run_in_threadpool(self._turns_context, cursor, lost)
            notice = _NOTICES.get(request.query_params.get("notice", ""), "")
            abandoned = request.query_params.get("episode", "") if notice else ""
            return self._render("turns.html", auth=auth, section="turns", notice=notice, abandoned=abandoned, **context)

        return await self._page(request, build)

    def _turns_context(self, cursor: str | None, lost: bool) -> dict[str, Any]:
        now = self.log.database_now()  # lost by the log's clock, as `memabra status` counts them
        # lost only: the ones on-call must act on, which paused turns waiting on people for days
        # would otherwise push pages back (the same filter as `episodes paused --lost`)
        page = self.queries.kept_turns(cursor, _PAGE, lost_at=now if lost else None)
        # the header's counts alone: the log's whole status also counts every episode and reward
        counts = self.queries.kept_turn_counts(now)
        return {
            "rows": [_row(k, now) for k in page.items],
            "page": page,
            "cursor": cursor,
            "counts": counts,
            "turn_problems": turn_problems(counts.lost, counts.lost_since, now),
            "lost_only": lost,
            "running_limit": _LIMIT,
        }

    async def abandon_turn(self, request: Request) -> Response:
        async def apply(auth: _Auth, form: dict[str, str]) -> Response:
            turn_id = _required(form, "turn_id")
            episode_id = form.get("episode_id", "").strip()
            cursor = _form_cursor(form.get("cursor", ""))
            listing = {
                **({"lost": "1"} if form.get("lost") == "1" else {}),
                **({"cursor": cursor} if cursor else {}),
            }
            back = f"/turns?{urlencode(listing)}" if listing else "/turns"
            asked = unconfirmed(
                self,
                request,
                auth,
                form,
                question=f"Abandon turn {turn_id}? It is logged as a failed episode (accepted: false) with its "
                "routing decision and steps, as memabra episodes paused --abandon does; this cannot be undone.",
                action="Abandon turn",
                back=(back, "back to the unfinished turns"),
            )
            if asked is not None:
                return asked
            kept, state, logged_as = await run_in_threadpool(
                self._abandon, turn_id, episode_id, back, auth.principal, _client(request)
            )
            logger.warning(
                "admin: %s from %s abandoned the %s turn %s of user %s (kept since %s): logged as failed episode %s",
                auth.principal,
                _client(request),
                state,
                turn_id,
                kept.user_id,
                kept.suspended_at.isoformat(),
                logged_as,
            )
            # back to the page the form was on, saying what was logged
            query = {"notice": "turn-abandoned", "episode": logged_as, **listing}
            return RedirectResponse(f"/turns?{urlencode(query)}", status_code=303)

        return await self._write(request, apply)

    def _abandon(
        self, turn_id: str, episode_id: str, back: str, actor: str, client: str
    ) -> tuple[SuspendedTurn, str, str]:
        kept = self.log.suspended_turn(turn_id)
        if kept is None:
            raise self._gone(turn_id, episode_id, back)
        now = self.log.database_now()
        state = kept.state(now)
        if state == "running":
            raise _HttpError(
                409,
                "Still running",
                f"Turn {turn_id} of user {kept.user_id} is running: it was routed "
                f"{format_age(now - kept.suspended_at)} ago, under the {_LIMIT} after which a turn counts as "
                "lost, and may still finish; nothing was abandoned.",
                back=(back, "Back to the unfinished turns"),
            )
        try:
            logged_as = abandon_paused_turn(
                RewardService(self.log, self.reward_config), kept, actor=actor, client=client
            )
        except TurnWentOnError as went_on:
            # a retry picked the turn up after the read above: its run goes on, it did not fail
            if went_on.now is None:
                raise self._gone(turn_id, kept.episode_id, back) from None
            raise _HttpError(
                409,
                "Went on",
                f"Turn {turn_id} of user {kept.user_id} went on since it was read: it is now "
                f"{'paused' if went_on.now.paused else 'running'} since {went_on.now.suspended_at:%Y-%m-%d %H:%M:%S} "
                "UTC (a process picked it up); nothing was abandoned.",
                back=(back, "Back to the unfinished turns"),
            ) from None
        except InvalidRecordError:
            # logged between the read above and this write (resumed and finished, or abandoned by
            # someone else): the log refuses the id a second time
            if self._logged(kept.episode_id) is None:
                raise
            raise self._gone(turn_id, kept.episode_id, back) from None
        return kept, state, logged_as

    def _logged(self, episode_id: str) -> Episode | None:
        if not episode_id:
            return None
        try:
            return self.log.get_episode(episode_id)
        except UnknownEpisodeError:
            return None

    def _gone(self, turn_id: str, episode_id: str, back: str) -> _HttpError:
        """Why a turn to abandon is no longer kept: its episode was logged meanwhile, or it went
        with its user's erasure (or its episode was deleted since)."""
        episode = self._logged(episode_id)
        if episode is None:
            return _HttpError(
                404,
                "Not found",
                f"Turn {turn_id} is no longer kept in the log and no episode was logged for it (its user was erased, "
                "or its episode deleted since); nothing changed.",
                back=(back, "Back to the unfinished turns"),
            )
        if "abandoned_at" in episode.metadata or any(f.source == ABANDONED_SOURCE for f in episode.feedback):
            by = episode.metadata.get("abandoned_by")
            how = (
                f"abandoned meanwhile (at {episode.metadata.get('abandoned_at', 'an earlier time')}"
                f"{f', by {by}' if by else ''}) and logged as a failed episode"
            )
        else:
            how = "finished meanwhile (its run was resumed) and logged"
        return _HttpError(
            409,
            "Already logged",
            f"Turn {turn_id} of user {episode.user_id} was {how}: it is already logged as episode {episode.id}; "
            "nothing changed.",
            back=(f"/episodes/{quote(episode.id, safe='')}", f"Open episode {episode.id}"),
        )


def parse_lost_only(raw: str | None) -> bool:
    if raw in (None, "", "0"):
        return False
    if raw == "1":
        return True
    raise FormError(f"lost must be 1 (only lost turns) or 0, got {raw!r}")


def _form_cursor(raw: str) -> str | None:
    """The page of the list a form was sent from (the first when its cursor cannot be one; one
    that only looks like one is refused, naming it, when the page is opened)."""
    cursor = raw.strip()
    return cursor if _CURSOR.fullmatch(cursor) else None
