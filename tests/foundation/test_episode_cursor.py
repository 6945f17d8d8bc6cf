"""A page cursor the listing did not write is refused up front, naming the cursor."""

from __future__ import annotations

import base64
import json

import pytest

from memabra import InvalidRecordError
from memabra.storage import EpisodeLog


def _cursor(at: str, episode_id: str = "e") -> str:
    return base64.urlsafe_b64encode(json.dumps([at, episode_id]).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        _cursor("2026-12-03T08:24:26"),  # naive: every cursor the listing writes carries its offset
        _cursor("0001-01-01T00:00:00+01:00"),  # out of range once in UTC
        _cursor("not a time"),
        "garbage!",
    ],
)
def test_a_cursor_the_listing_did_not_write_is_refused(log: EpisodeLog, cursor: str) -> None:
    with pytest.raises(InvalidRecordError, match="^cursor is not a page cursor"):
        log.list_episodes(cursor=cursor)


def test_a_cursor_with_another_offset_pages_on(log: EpisodeLog) -> None:
    # the same instant written with an offset reads the same page as the UTC one
    assert log.list_episodes(cursor=_cursor("2026-12-03T09:24:26+01:00")).items == ()
