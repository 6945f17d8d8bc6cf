"""How the admin's pages show a time: in UTC, saying so, in a ``<time>`` element a machine reads,
and, where how old it is matters to the reader (a learner's last checkpoint, the oldest reward
waiting), its age too."""

from __future__ import annotations

from datetime import UTC, datetime

from markupsafe import Markup

from memabra._admin._views import format_time
from memabra._health import format_age
from memabra._records import utcnow

__all__ = ["time_ago", "time_element", "time_text"]


def time_element(value: datetime | None) -> Markup:
    """``value`` for a page's text: a ``<time>`` element whose ``datetime`` a machine reads (ISO 8601,
    ``Z``) and whose text says UTC, as every time the admin shows is (``""`` for ``None``)."""
    if value is None:
        return Markup("")
    utc = value.astimezone(UTC)
    return Markup('<time datetime="{}">{} UTC</time>').format(
        utc.strftime("%Y-%m-%dT%H:%M:%SZ"), utc.strftime("%Y-%m-%d %H:%M:%S")
    )


def time_text(value: datetime | None) -> str:
    """``value`` as plain text naming its zone, for an attribute (a ``title``) where no element goes."""
    return "" if value is None else f"{format_time(value)} UTC"


def time_ago(value: datetime | None, now: datetime | None = None) -> Markup:
    """``value`` with how long before ``now`` (the page's read) it was: ``3h 5m ago, at <time>``."""
    if value is None:
        return Markup("")
    age = format_age((now or utcnow()) - value)
    return Markup("{} ago, at {}").format(age, time_element(value))
