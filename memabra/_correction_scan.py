"""The next message as feedback on the previous turn: corrections, repeats, a wrong tool.

:class:`PreviousTurns` finds each conversation's last turn: for a thread, the latest episode of the
thread in the log, since the turns of one thread may be served by several processes sharing the log
(what this process remembers only saves reading back the turn's injected ids);
:func:`correction_feedback` turns what :func:`detect_correction` finds in the new message into
implicit feedback on that turn (one per turn, by idempotency key).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memabra._corrections import detect_correction, verdict_of
from memabra._errors import UnknownEpisodeError
from memabra._records import Feedback, FeedbackKind, RegistryItem
from memabra.storage import EpisodeFilter, EpisodeLog

__all__ = ["PreviousTurn", "PreviousTurns", "correction_feedback"]

# Conversations whose last turn is remembered in memory (older ones are read back from the log).
_REMEMBERED = 10_000


@dataclass(frozen=True, slots=True)
class PreviousTurn:
    episode_id: str
    query: str
    injected: frozenset[str] = frozenset()


class PreviousTurns:
    def __init__(self, log: EpisodeLog) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._last: OrderedDict[tuple[str, str | None], PreviousTurn] = OrderedDict()

    def get(self, user_id: str, thread_id: str | None, follows: str | None = None) -> PreviousTurn | None:
        """The turn the user's new message follows: ``follows`` where given (the episode its branch
        of a checkpointed thread names, ``""`` for none: the branch's first turn), since the log's
        latest episode of a thread may be another branch's (a regenerated answer, an edited
        message); else the thread's latest episode in the log."""
        with self._lock:
            found = self._last.get((user_id, thread_id))
        if follows is not None:
            return self._read(follows, user_id, found) if follows else None
        if thread_id is None:
            # No thread, no conversation another process could continue: this process's last turn.
            return found
        # One indexed read per turn: another worker may have served the thread's last turn.
        page = self._log.list_episodes(EpisodeFilter(user_id=user_id, thread_id=thread_id), limit=1)
        if not page.items:
            return None
        return self._read(page.items[0].id, user_id, found)

    def _read(self, episode_id: str, user_id: str, found: PreviousTurn | None) -> PreviousTurn | None:
        if found is not None and found.episode_id == episode_id:
            return found
        try:
            episode = self._log.get_episode(episode_id)
        except UnknownEpisodeError:  # erased since (or a state naming another log's episode)
            return None
        if episode.user_id != user_id:  # never feedback on another user's turn
            return None
        injected = frozenset(cid for selection in episode.selections for cid in selection.chosen_ids)
        return PreviousTurn(episode.id, episode.query, injected)

    def remember(self, user_id: str, thread_id: str | None, turn: PreviousTurn) -> None:
        key = (user_id, thread_id)
        with self._lock:
            self._last[key] = turn
            self._last.move_to_end(key)
            while len(self._last) > _REMEMBERED:
                self._last.popitem(last=False)


def correction_feedback(
    previous: PreviousTurn | None, query: str, memories: Sequence[RegistryItem], log: EpisodeLog | None = None
) -> Feedback | None:
    if previous is None:
        return None
    # A soft reminder ("as I said") after a turn judged a success is not a correction.
    verdict = verdict_of([f.payload for f in log.feedback_for(previous.episode_id)]) if log is not None else None
    signals = detect_correction(
        previous.query,
        query,
        [(m.id, m.text) for m in memories],
        injected_ids=previous.injected,
        previous_succeeded=verdict,
    )
    if not signals:
        return None
    payload: dict[str, Any] = {}
    severity = 0.0
    for s in signals:
        if s.kind == "repeat":
            payload["repeat"] = True
        elif s.kind == "wrong_tool":
            payload["tool_wrong"] = True
        else:
            payload["correction"] = True
            severity = max(severity, s.severity)
        if s.memory_id:
            payload.setdefault("relevant_ids", []).append(s.memory_id)
    if 0.0 < severity < 1.0:
        # "that's wrong" says the answer failed, not that the user had to restate what the
        # system should have known: the detector's lighter severity is what C charges
        payload["correction_severity"] = severity
    return Feedback(
        previous.episode_id,
        FeedbackKind.IMPLICIT,
        "memabra.corrections",
        payload,
        idempotency_key=f"next-turn:{previous.episode_id}",
    )
