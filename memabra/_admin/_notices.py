"""The admin's notices: the line a page shows after a write redirected to it (``?notice=KEY``).
Split from :mod:`memabra._admin._plumbing`.

A notice is looked up by its key, never taken from the query as text: a link cannot make the
admin say what it likes. The one key with a part of its own is a feedback's that retracted a
memory, ``feedback-STATUS:OUTCOME:MEMORY_ID``: the operator needs to learn whether the memory
was retired (the reward alone does not say), and which one; an id not shaped like one is left out
of the text rather than shown.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from memabra._retraction import Retraction

__all__ = ["NOTICES", "feedback_notice"]

_STATIC = {
    "feedback-stored": "Feedback recorded; the episode's reward was recomputed.",
    "feedback-late": "Feedback recorded as late: the episode's reward was already final (learned from, or its feedback window had closed), so it is kept for review and never applied.",
    "feedback-duplicate": "This feedback was already recorded; nothing changed.",
    "promoted": "Snapshot promoted: it is now the active policy.",
    "rolled-back": "Rolled back: the snapshot the rolled-back one replaced is active again.",
    "memory-updated": "Memory updated; its old text is in its history.",
    "memory-retired": "Memory retired: it is no longer recalled. Restore it to recall it again.",
    "memory-restored": "Memory restored: it is recalled again.",
    "signed-out": "Signed out.",
    "episode-deleted": "Episode deleted, with its decisions, steps, feedback and reward.",
    "turn-abandoned": "Turn abandoned: logged as a failed episode (accepted: false) with its routing decision and steps.",
    "learner-forgotten": "Forgot the learner checkpoint: retention no longer waits for that policy; its snapshots stay.",
    "learner-none": "That policy has no learner checkpoint in this log: nothing to forget (retention does not wait for it).",
    "user-erased": "User erased: their episodes deleted and their memories forgotten (the first entry below).",
}

# a retried retraction answers as its first send did, so "already recorded" must not claim that
# nothing changed: the retry may be what retired the memory
_RETRACTING = {
    "stored": "Feedback recorded; the episode's reward was recomputed.",
    "late": _STATIC["feedback-late"],
    "duplicate": "This feedback was already recorded; the reward is unchanged.",
}

_OUTCOMES = {
    "retired": "{memory} is retired by this correction: it is no longer recalled (restore it from the "
    "memories page to recall it again).",
    "kept": "{memory} was not retired: it is not a current memory of the episode's user (unknown, another "
    "user's, retired or replaced since the turn, or restored by hand after this correction retired it), "
    "or the memory backend cannot retire. The correction still counts.",
    "failed": "{memory} was not retired: retiring it failed after the feedback was stored (the admin's log "
    "says why). Go back and submit the same form again (it records once, and retires the memory), or retire "
    "it from the memories page.",
}

_MEMORY_ID = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")


def feedback_notice(retraction: Retraction, retract_memory: str | None) -> str:
    """The notice key after a feedback form: ``feedback-STATUS``, and where the feedback retracts
    a memory (``retract_memory``, the id it names), whether it was retired."""
    receipt = retraction.receipt
    base = f"feedback-{receipt.status}"
    if retract_memory is None:
        return base
    if retraction.failure is not None:
        outcome = "failed"
    else:
        outcome = "retired" if receipt.retired_memory is not None else "kept"
    return f"{base}:{outcome}:{receipt.retired_memory or retract_memory}"


class _Notices(Mapping[str, str]):
    """The notices by key; ``get`` (what every page calls) also reads a retraction's key."""

    def __getitem__(self, key: str) -> str:
        if key in _STATIC:
            return _STATIC[key]
        status, _, rest = key.partition(":")
        outcome, _, memory_id = rest.partition(":")
        base = _RETRACTING.get(status.removeprefix("feedback-")) if status.startswith("feedback-") else None
        if base is None or outcome not in _OUTCOMES:
            raise KeyError(key)
        memory = f"Memory {memory_id}" if _MEMORY_ID.fullmatch(memory_id) else "The memory it names"
        return f"{base} {_OUTCOMES[outcome].format(memory=memory)}"

    def __iter__(self) -> Iterator[str]:
        return iter(_STATIC)

    def __len__(self) -> int:
        return len(_STATIC)


NOTICES: Mapping[str, str] = _Notices()
