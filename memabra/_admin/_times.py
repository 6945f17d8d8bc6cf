"""How the admin's pages show a time: in UTC, saying so, in a ``<time>`` element a machine reads,
and, where how old it is matters to the reader (a learner's last checkpoint, the oldest reward
waiting), its age too. A time without a zone (SQLite hands the log's times back so) is the UTC the
log stored, never the admin host's local time."""

from __future__ import annotations

from datetime import UTC, datetime

from markupsafe import Markup

from memabra._health import format_age
from memabra._records import utcnow

__all__ = ["time_ago", "time_element", "time_text"]


def _utc(value: datetime) -> datetime:
    """``value`` in UTC; one without a zone is UTC already (``astimezone`` would read it as local)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def time_element(value: datetime | None) -> Markup:
    """``value`` for a page's text: a ``<time>`` element whose ``datetime`` a machine reads (ISO 8601,
    ``Z``) and whose text says UTC, as every time the admin shows is (``""`` for ``None``)."""
    if value is None:
        return Markup("")
    utc = _utc(value)
    return Markup('<time datetime="{}">{} UTC</time>').format(
        utc.strftime("%Y-%m-%dT%H:%M:%SZ"), utc.strftime("%Y-%m-%d %H:%M:%S")
    )


def time_text(value: datetime | None) -> str:
    """``value`` as plain text naming its zone, for an attribute (a ``title``) where no element goes."""
    return "" if value is None else f"{_utc(value):%Y-%m-%d %H:%M:%S} UTC"


def time_ago(value: datetime | None, now: datetime | None = None) -> Markup:
    """``value`` with how long before ``now`` (the page's read) it was: ``3h 5m ago, at <time>``."""
    if value is None:
        return Markup("")
    age = format_age(_utc(now or utcnow()) - _utc(value))
    return Markup("{} ago, at {}").format(age, time_element(value))
