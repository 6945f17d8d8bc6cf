"""Long payloads on the episode page, and ``GET /episodes/{id}/raw``, one of them whole.

A turn logged before the log cut payloads (memabra/_log_caps.py) may hold a 5 MB tool result,
arguments of hundreds of kilobytes and an answer of 100,000 characters: put on the page whole, they
made it megabytes of HTML that a browser tab took tens of seconds to lay out. The page shows each
such value as :func:`memabra._shown_text.shown_text` cuts it (its head and tail, saying how many
characters are not shown, with a link to the whole value) and a newer turn's cap note as a muted
sentence; the link opens the value alone, as plain text, behind the same sign-in as every page.
The episode's JSON download (``?format=json``) cuts them as the log would now, and names each cut
(:mod:`memabra._document_cuts`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from memabra._admin._plumbing import _AdminBase, _Auth, _HttpError, _path_id, _raw_path
from memabra._records import Episode, Step
from memabra._shown_text import ROOM, ShownText, format_bytes, shown_text

__all__ = [
    "OTHER_TURN_ROOM",
    "PayloadPages",
    "PayloadView",
    "StepView",
    "TurnView",
    "raw_url",
    "step_views",
    "turn_views",
]

# Characters of the query and answer shown in each bubble of the thread's other turns (this
# episode's own turn gets ROOM): fifty turns of a long thread stay a page, not megabytes.
OTHER_TURN_ROOM = 2_000

Field = Literal["query", "answer", "arguments", "result", "error"]
_EPISODE_FIELDS = ("query", "answer")
_STEP_FIELDS = ("arguments", "result", "error")
# chunks of the plain view, so a 5 MB value is not encoded into one second copy before it is sent
_CHUNK = 256 * 1024


@dataclass(frozen=True, slots=True)
class PayloadView:
    """A value as the page shows it: ``shown`` (its pieces); ``url``: the whole value, plain;
    ``label``: what it is (``the result of step 3``), for the link's accessible name; ``size``:
    its whole size (``5.0 MB``)."""

    shown: ShownText
    url: str
    label: str
    size: str


@dataclass(frozen=True, slots=True)
class StepView:
    """A step with its arguments, result and error as the step table shows them (``None``: none)."""

    step: Step
    arguments: PayloadView | None
    result: PayloadView | None
    error: PayloadView | None


@dataclass(frozen=True, slots=True)
class TurnView:
    """A turn of the conversation: ``turn`` (the log's row, or the episode), its query and answer."""

    turn: Any
    query: PayloadView
    answer: PayloadView | None


def raw_url(episode_id: str, field: Field, step: int | None = None) -> str:
    query = {"field": field, **({"step": str(step)} if step is not None else {})}
    return f"/episodes/{quote(episode_id, safe='')}/raw?{urlencode(query)}"


def arguments_text(step: Step) -> str:
    """A step's arguments as the page shows them (and their plain view serves them)."""
    return json.dumps(dict(step.arguments), sort_keys=True, default=str, indent=1, ensure_ascii=False)


def _view(text: str, url: str, label: str, room: int = ROOM) -> PayloadView:
    return PayloadView(shown_text(text, room), url, label, format_bytes(len(text.encode("utf-8", "surrogatepass"))))


def step_views(episode: Episode) -> list[StepView]:
    views = []
    for s in episode.steps:

        def field(name: Field, text: str | None, seq: int = s.seq) -> PayloadView | None:
            if not text:
                return None
            return _view(text, raw_url(episode.id, name, seq), f"the {name} of step {seq}")

        views.append(
            StepView(
                s,
                field("arguments", arguments_text(s) if s.arguments else None),
                field("result", s.result),
                field("error", s.error),
            )
        )
    return views


def turn_views(episode: Episode, turns: Sequence[Any]) -> list[TurnView]:
    """The conversation's bubbles: the thread's ``turns`` (the log's rows: ``episode_id``, ``turn``,
    ``query``, ``answer``), or ``episode`` alone when none are shown. This episode's turn gets
    :data:`ROOM` characters a text, the others :data:`OTHER_TURN_ROOM`."""
    rows: Sequence[Any] = turns or [_OwnTurn(episode.id, episode.turn, episode.query, episode.answer)]
    views = []
    for t in rows:
        room = ROOM if t.episode_id == episode.id else OTHER_TURN_ROOM
        query = _view(t.query, raw_url(t.episode_id, "query"), f"the query of turn {t.turn}", room)
        answer = None
        if t.answer is not None:
            answer = _view(t.answer, raw_url(t.episode_id, "answer"), f"the answer of turn {t.turn}", room)
        views.append(TurnView(t, query, answer))
    return views


@dataclass(frozen=True, slots=True)
class _OwnTurn:
    episode_id: str
    turn: int
    query: str
    answer: str | None


def raw_value(episode: Episode, params: Mapping[str, str]) -> tuple[str, str]:
    """The value ``params`` names (``field``, and ``step`` for a step's) and a file name for it;
    404 naming what is missing."""
    field = params.get("field", "")
    if field in _EPISODE_FIELDS:
        value = episode.query if field == "query" else episode.answer
        if value is None:
            raise _HttpError(404, "Not found", f"Episode {episode.id} has no answer logged.")
        return value, field
    if field not in _STEP_FIELDS:
        raise _HttpError(
            400, "Bad request", f"field must be one of {', '.join((*_EPISODE_FIELDS, *_STEP_FIELDS))}, got {field!r}"
        )
    raw_step = params.get("step", "")
    # ASCII digits, few of them: "²" passes isdigit() and int() refuses it, as it does 5,000 digits
    if not (raw_step.isascii() and raw_step.isdigit() and len(raw_step) <= 18):
        raise _HttpError(400, "Bad request", f"step must be a step's number (the # column), got {raw_step!r}")
    step = next((s for s in episode.steps if s.seq == int(raw_step)), None)
    if step is None:
        raise _HttpError(404, "Not found", f"Episode {episode.id} has no step {raw_step}.")
    value = arguments_text(step) if field == "arguments" and step.arguments else getattr(step, field)
    if not value:
        raise _HttpError(404, "Not found", f"Step {raw_step} of episode {episode.id} has no {field} logged.")
    return value, f"step-{raw_step}-{field}"


def _chunks(text: str) -> Iterator[bytes]:
    for start in range(0, len(text), _CHUNK):
        yield text[start : start + _CHUNK].encode("utf-8", "surrogatepass")


class PayloadPages(_AdminBase):
    """``GET /episodes/{id}/raw?field=F[&step=N]``: one logged value whole, as plain text."""

    if TYPE_CHECKING:

        async def episode(self, request: Request) -> Response:
            """The episode page, which :class:`memabra._admin._app._Admin` defines."""

    async def raw_payload(self, request: Request) -> Response:
        if _raw_path(request).rsplit("/", 1)[-1] != "raw":
            # an id ending in an encoded "/raw" (/episodes/a%2Fraw): that episode's page
            return await self.episode(request)

        async def build(auth: _Auth) -> Response:
            episode_id = _path_id(request, "episodes", suffix="raw")
            episode = await run_in_threadpool(self.log.get_episode, episode_id)
            value, name = raw_value(episode, request.query_params)
            safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in episode.id)[:100]
            return StreamingResponse(
                _chunks(value),
                media_type="text/plain; charset=utf-8",
                # inline: read in the tab; the name is what "save as" offers
                headers={"Content-Disposition": f'inline; filename="episode-{safe}-{name}.txt"'},
            )

        return await self._page(request, build)
