"""The conversation an episode page shows: its thread's latest turns, and where the thread holds
more than those, a link to the rest on the episodes page.

The log reads a thread's latest :data:`TURNS` turns. An older turn of a longer thread is not among
them: its page then shows that turn alone (the latest turns came after it and are not its context)
and links the thread's turns up to it, which the episodes page lists in full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import Any
from urllib.parse import urlencode

from memabra._records import Episode

__all__ = ["TURNS", "ConversationView", "conversation_view"]

# Turns of a thread an episode page reads.
TURNS = 50


@dataclass(frozen=True, slots=True)
class ConversationView:
    """``turns``: what the page shows (empty: the episode's own turn alone); ``earlier_url``: the
    episodes page listing the thread up to this episode, when some of its turns are not shown."""

    turns: Sequence[Any]
    earlier_url: str | None


def conversation_view(episode: Episode, turns: Sequence[Any]) -> ConversationView:
    """``turns``: the latest turns of ``episode``'s thread, at most :data:`TURNS`, as the log read them."""
    shown = any(t.episode_id == episode.id for t in turns)
    if shown and len(turns) < TURNS:
        return ConversationView(turns, None)
    # the episodes page's Until is exclusive, to the second: the next second keeps this episode in
    until = episode.created_at.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=1)
    query = {"user": episode.user_id, "thread": episode.thread_id or "", "until": until.strftime("%Y-%m-%dT%H:%M:%S")}
    return ConversationView(turns if shown else (), f"/episodes?{urlencode(query)}")
