"""Parsing of query strings and form fields; each bad value raises naming the field."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode

from memabra._errors import InvalidRecordError
from memabra._memory_records import MemoryStatus
from memabra._records import CandidateKind, JSONValue
from memabra.storage import FAILURE_CAUSES, MAX_MEMORY_PAGE, EpisodeFilter, MemorySort, MemoryUsage
from memabra.storage._admin_mempo import MemPOFilter

__all__ = [
    "FILTER_FIELDS",
    "MEMORY_FIELDS",
    "FeedbackForm",
    "FormError",
    "MemoryQuery",
    "clean_field",
    "error_field",
    "list_query",
    "parse_episode_filter",
    "parse_feedback_form",
    "parse_limit",
    "parse_offset_cursor",
    "parse_memory_edit",
    "parse_memory_query",
    "parse_mempo_filter",
    "parse_window",
]

MEMORY_FIELDS = ("user", "q", "status", "usage", "sort", "limit")
FILTER_FIELDS = (
    "q",
    "since",
    "until",
    "user",
    "thread",
    "policy_version",
    "snapshot",
    "kind",
    "reward_min",
    "reward_max",
    "corrected",
    "failed",
    "cause",
    "mempo",
    "scorer",
    "sort",
)
# what names a page of the episode list: its filters, its page and its length (an episode opened
# from the list carries them back to it)
LIST_FIELDS = (*FILTER_FIELDS, "cursor", "limit")
# longer than any list a link names (filters are short; a cursor is well under 200 characters)
_MAX_LIST_QUERY = 4_000
# how the episodes page orders its rows: newest first (keyset-paged), or lowest reward first
EPISODE_SORTS = ("newest", "reward")
WINDOWS = {"7": 7, "30": 30, "90": 90, "365": 365, "all": None}
# each window as its selector and the columns that count within it name it
WINDOW_LABELS = {"7": "7 days", "30": "30 days", "90": "90 days", "365": "1 year", "all": "all time"}
MAX_TEXT = 10_000
# The longest id (user, thread, memory) the log stores: its id columns are VARCHAR(200).
MAX_ID = 200
# The longest episode search: far past any phrase a person looks for, and well under SQLite's
# 50,000-byte limit on a LIKE pattern (a longer one fails in the database, not here).
MAX_SEARCH = 1_000
# Past this a memory page's offset is no page at all, and the databases' integers end not far above.
MAX_OFFSET = 1_000_000_000


class FormError(InvalidRecordError):
    """A query-string or form value the admin view cannot use; the message names the field."""


def error_field(message: str, fields: Iterable[str]) -> str:
    """The field of ``fields`` an error message names ('' for none): every message here starts
    with the field it is about, and a page marks that field invalid and focuses it."""
    first = message.split(" ", 1)[0]
    return first if first in fields else ""


def clean_field(value: str) -> str:
    """A query-string or form value without NUL bytes: the log stores text without them (PostgreSQL
    refuses them), so an id or a search that holds one names what the log holds without it."""
    return value.replace("\x00", "")


def list_query(values: str | Iterable[tuple[str, str]]) -> str:
    """The query string of the episode list a page was opened from, with the list's own
    parameters only (its filters, page and length, each once and non-empty): an episode page
    links back to ``/episodes?`` this. ``values``: the list's parameters, or a query string
    carried in a link or a form (anything else in it is dropped; a malformed one names no list)."""
    if isinstance(values, str):
        if len(values) > _MAX_LIST_QUERY:
            return ""
        values = parse_qsl(values, keep_blank_values=False)
    kept: dict[str, str] = {}
    for name, value in values:
        value = clean_field(value).strip()
        if name in LIST_FIELDS and value and name not in kept:
            kept[name] = value
    return urlencode(kept)


def _time(field: str, raw: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(raw)
        # Times without an offset are UTC, as everywhere else in the log.
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except ValueError:
        raise FormError(f"{field} must be a date or time like 2025-01-31 or 2025-01-31T13:45, got {raw!r}") from None
    except OverflowError:
        # an offset that moves the year below 1 or above 9999 in UTC
        raise FormError(f"{field} is out of range: {raw!r} is not a time between the years 1 and 9999 in UTC") from None


def _number(field: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise FormError(f"{field} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise FormError(f"{field} must be a finite number, got {raw!r}")
    return value


def parse_episode_filter(params: Mapping[str, str]) -> tuple[EpisodeFilter, dict[str, str]]:
    """The filter a query string asks for, and its non-empty raw values (to refill the form)."""
    raw = {name: params.get(name, "").strip() for name in FILTER_FIELDS}
    if len(raw["q"]) > MAX_SEARCH:
        raise FormError(f"q is longer than {MAX_SEARCH:,} characters; search for a shorter part of the query")
    kind: CandidateKind | None = None
    if raw["kind"]:
        try:
            kind = CandidateKind(raw["kind"])
        except ValueError:
            raise FormError(f"kind must be memory, skill or tool, got {raw['kind']!r}") from None
    if raw["sort"] not in ("", *EPISODE_SORTS):
        raise FormError(f"sort must be newest or reward, got {raw['sort']!r}")
    if raw["sort"] == "newest":
        raw["sort"] = ""  # the default: links stay as they were
    corrected: bool | None = None
    if raw["corrected"]:
        if raw["corrected"] not in ("yes", "no"):
            raise FormError(f"corrected must be yes or no, got {raw['corrected']!r}")
        corrected = raw["corrected"] == "yes"
    failed, cause = _failure(raw["failed"], raw["cause"])
    since = _time("since", raw["since"]) if raw["since"] else None
    until = _time("until", raw["until"]) if raw["until"] else None
    if since is not None and until is not None and until <= since:
        raise FormError("until must be later than since")
    # Refill the datetime-local inputs in the one format they display (UTC, like the page).
    for name, value in (("since", since), ("until", until)):
        if value is not None:
            raw[name] = value.strftime("%Y-%m-%dT%H:%M:%S")
    reward_min = _number("reward_min", raw["reward_min"]) if raw["reward_min"] else None
    reward_max = _number("reward_max", raw["reward_max"]) if raw["reward_max"] else None
    if reward_min is not None and reward_max is not None and reward_max < reward_min:
        raise FormError("reward_max must not be below reward_min")
    flt = EpisodeFilter(
        user_id=raw["user"] or None,
        thread_id=raw["thread"] or None,
        since=since,
        until=until,
        policy_version=raw["policy_version"] or None,
        snapshot=raw["snapshot"] or None,
        kind=kind,
        reward_min=reward_min,
        reward_max=reward_max,
        corrected=corrected,
        query_contains=raw["q"] or None,
        failed=failed,
        failure_cause=cause,
    )
    return flt, {k: v for k, v in raw.items() if v}


def parse_mempo_filter(raw: Mapping[str, str]) -> MemPOFilter | None:
    """The MemPO filter of the episode list's raw values (:func:`parse_episode_filter`'s):
    ``mempo=worse`` keeps the episodes with a decision MemPO graded -1, by ``scorer`` if named."""
    mempo, scorer = raw.get("mempo", ""), clean_field(raw.get("scorer", "")).strip()
    if mempo not in ("", "worse"):
        raise FormError(f"mempo must be worse (a decision MemPO graded -1), got {mempo!r}")
    if scorer and not mempo:
        raise FormError("scorer names whose MemPO -1 labels to keep: choose mempo=worse with it")
    if len(scorer) > MAX_ID:
        raise FormError(f"scorer is longer than {MAX_ID} characters: no scorer is named so")
    return MemPOFilter(scorer or None) if mempo else None


def _failure(failed: str, cause: str) -> tuple[bool | None, str | None]:
    """The failed-turn filter: ``failed`` yes or no, and the cause a failed turn names."""
    if failed not in ("", "yes", "no"):
        raise FormError(f"failed must be yes or no, got {failed!r}")
    if cause and cause not in FAILURE_CAUSES:
        raise FormError(f"cause must be one of {', '.join(FAILURE_CAUSES)}, got {cause!r}")
    if cause and failed == "no":
        raise FormError("cause names why a turn failed: choose failed (or any), not 'not failed', with a cause")
    return (None if not failed else failed == "yes"), (cause or None)


def parse_offset_cursor(raw: str | None) -> int:
    """The position a lowest-reward-first page starts at (its cursor is an offset; none: 0)."""
    if not raw:
        return 0
    if not raw.isdigit():
        raise FormError(f"cursor is not a page cursor of this listing: {raw!r}")
    return int(raw)


def parse_limit(raw: str | None, default: int = 50) -> int:
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise FormError(f"limit must be an integer, got {raw!r}") from None
    if not 1 <= value <= 500:
        raise FormError(f"limit must be between 1 and 500, got {value}")
    return value


def parse_window(raw: str | None, now: datetime) -> tuple[str, datetime | None]:
    """The policies page's time window: its key and the time it starts (``None``: all time)."""
    key = raw or "30"
    if key not in WINDOWS:
        raise FormError(f"window must be one of {', '.join(WINDOWS)}, got {key!r}")
    days = WINDOWS[key]
    # to the second: the episodes page's From, which links carry, has no finer unit
    return key, ((now - timedelta(days=days)).replace(microsecond=0) if days is not None else None)


@dataclass(frozen=True, slots=True)
class FeedbackForm:
    """An admin's feedback: the payload for the reward service and its idempotency key."""

    payload: dict[str, JSONValue]
    idempotency_key: str
    decision_id: str | None


def parse_feedback_form(form: Mapping[str, str]) -> FeedbackForm:
    """``action=correction`` (optional ``correction`` text and ``retract_memory``, the id of a
    memory that was wrong) or ``action=rating`` (``rating`` 1..5),
    each with an optional ``comment``; the form's ``idempotency_key`` makes a resubmission a no-op."""
    action = form.get("action", "")
    comment = form.get("comment", "").strip()
    key = form.get("idempotency_key", "").strip()
    if not key or len(key) > 200:
        raise FormError("idempotency_key is missing or longer than 200 characters; reload the page")
    payload: dict[str, JSONValue] = {}
    if action == "correction":
        text = form.get("correction", "").strip()
        if len(text) > MAX_TEXT:
            raise FormError(f"correction is longer than {MAX_TEXT} characters")
        payload["correction"] = text or True
        # a memory the episode offered that was wrong: retired with the correction (memabra._retraction)
        retracted = form.get("retract_memory", "").strip()
        if retracted:
            if len(retracted) > MAX_TEXT:
                raise FormError(f"retract_memory is longer than {MAX_TEXT} characters")
            payload["retract_memory"] = retracted
    elif action == "rating":
        raw = form.get("rating", "")
        if raw not in ("1", "2", "3", "4", "5"):
            raise FormError(f"rating must be an integer from 1 to 5, got {raw!r}")
        payload["rating"] = int(raw)
    else:
        raise FormError(f"action must be correction or rating, got {action!r}")
    if comment:
        if len(comment) > MAX_TEXT:
            raise FormError(f"comment is longer than {MAX_TEXT} characters")
        payload["comment"] = comment
    decision_id = form.get("decision_id", "").strip() or None
    return FeedbackForm(payload, key, decision_id)


@dataclass(frozen=True, slots=True)
class MemoryQuery:
    """The memories page's query: whose memories (none: the list of users), which, in what order."""

    user: str
    search: str
    status: MemoryStatus | None
    usage: MemoryUsage | None
    sort: MemorySort
    offset: int
    limit: int

    def query(self, **overrides: str | None) -> dict[str, str]:
        """The non-default values as query parameters (for links that keep the view)."""
        values = {
            "user": self.user,
            "q": self.search,
            "status": self.status.value if self.status else "",
            "usage": self.usage.value if self.usage else "",
            "sort": self.sort.value if self.sort is not MemorySort.NEWEST else "",
            "limit": str(self.limit) if self.limit != 50 else "",
        }
        return {k: v for k, v in {**values, **overrides}.items() if v}


def _choice(field: str, raw: str, allowed: type[MemoryStatus] | type[MemoryUsage] | type[MemorySort]) -> Any:
    try:
        return allowed(raw)
    except ValueError:
        raise FormError(f"{field} must be one of {', '.join(m.value for m in allowed)}, got {raw!r}") from None


def parse_memory_query(params: Mapping[str, str]) -> MemoryQuery:
    raw = {name: clean_field(params.get(name, "")).strip() for name in (*MEMORY_FIELDS, "offset")}
    if len(raw["q"]) > 200:
        raise FormError("q is longer than 200 characters")
    offset = 0
    if raw["offset"]:
        try:
            offset = int(raw["offset"])
        except ValueError:
            raise FormError(f"offset must be an integer, got {raw['offset']!r}") from None
        if not 0 <= offset <= MAX_OFFSET:
            raise FormError(f"offset must be between 0 and {MAX_OFFSET:,}, got {raw['offset']!r}")
    limit = parse_limit(raw["limit"])
    if limit > MAX_MEMORY_PAGE:
        raise FormError(f"limit must be between 1 and {MAX_MEMORY_PAGE}, got {limit}")
    return MemoryQuery(
        user=raw["user"],
        search=raw["q"],
        status=_choice("status", raw["status"], MemoryStatus) if raw["status"] else None,
        usage=_choice("usage", raw["usage"], MemoryUsage) if raw["usage"] else None,
        sort=_choice("sort", raw["sort"], MemorySort) if raw["sort"] else MemorySort.NEWEST,
        offset=offset,
        limit=limit,
    )


def parse_memory_edit(form: Mapping[str, str]) -> tuple[str, str, str]:
    """The ``user``, ``memory_id`` and (for an edit) ``text`` fields of a memory write."""
    user = form.get("user", "").strip()
    memory_id = form.get("memory_id", "").strip()
    if not user:
        raise FormError("user is required")
    if not memory_id:
        raise FormError("memory_id is required")
    text = form.get("text", "").strip()
    if len(text) > MAX_TEXT:
        raise FormError(f"text is longer than {MAX_TEXT} characters")
    return user, memory_id, text
