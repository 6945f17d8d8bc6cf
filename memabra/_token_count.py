"""Candidates' context cost in the model's own tokens (``SessionSettings.token_counter``).

Without a counter a candidate costs :func:`memabra._text.approx_tokens` of its text, estimated when
a memory is written and when skills and tools are catalogued. With one, the session counts what
actually enters the prompt: a memory as the bullet line the model is shown
(:func:`memabra._context.memory_line`), a skill as its section of the system prompt
(:func:`memabra._context.skill_section`), a tool as the function spec bound to the model (its name, description and
JSON schema: the registry row's ``body``). Skills and tools are counted once, when the session is
built; the memories a turn recalls are counted per turn, through a small cache keyed by a digest of
the text (it keeps no user's text: a long memory costs the cache 16 bytes, and one erased is not
held on to in the process). The counter is called from one thread at a time: turns run on several
threads, and a tokenizer need not be safe to share (a Hugging Face fast tokenizer raises "Already
borrowed" when two threads use it at once). Those counts are the candidates' ``tokens`` the router
sees, so the budget check, the logged candidates, the reward's context cost and offline evaluation
all read the same numbers.
"""

from __future__ import annotations

import hashlib
import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from memabra._catalog import Skill
from memabra._context import memory_line, skill_section
from memabra._errors import ConfigError
from memabra._records import CandidateKind, RegistryItem

__all__ = ["CACHE_SIZE", "TokenCounter", "TokenCounts"]

TokenCounter = Callable[[str], int]

# Distinct texts whose counts are kept: the memories of the users active lately (a tokenizer call
# costs tens of microseconds; a recall returns a handful of short texts).
CACHE_SIZE = 4096


class TokenCounts:
    """``counter`` applied to the text each candidate puts in the prompt, with a bounded cache
    keyed by that text's digest. Thread-safe: the session serves turns from several threads, and
    ``counter`` is called by one of them at a time (a cached count is read without waiting)."""

    def __init__(self, counter: TokenCounter, *, cache_size: int = CACHE_SIZE) -> None:
        if not callable(counter):
            raise ConfigError(f"token_counter must be a function from text to a token count, got {counter!r}")
        self.counter = counter
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._size = cache_size
        self._lock = threading.Lock()  # the cache
        self._calling = threading.Lock()  # the counter: one call at a time

    def count(self, text: str, candidate_id: str) -> int:
        """Tokens of ``text`` (the prompt text of ``candidate_id``, which an error names)."""
        key = _digest(text)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        # outside the cache's lock: a tokenizer may take a while, and cached counts need not wait
        with self._calling:
            with self._lock:  # counted by the thread this one waited for
                cached = self._cache.get(key)
            n = self._called(text, candidate_id) if cached is None else cached
        with self._lock:
            self._cache[key] = n
            if len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return n

    def _called(self, text: str, candidate_id: str) -> int:
        try:
            value = self.counter(text)
        except Exception as exc:
            raise ConfigError(
                f"token_counter raised on the prompt text of candidate {candidate_id!r}: {type(exc).__name__}: {exc}"
            ) from exc
        try:
            # numpy and other integer types count too; a float or a bool is not a number of tokens
            n = None if isinstance(value, bool) else operator.index(value)
        except TypeError:
            n = None
        if n is None or n < 0:
            raise ConfigError(
                f"token_counter returned {value!r} for the prompt text of candidate {candidate_id!r}: "
                "it must return a non-negative integer (the number of tokens)"
            )
        return n

    def memories(self, items: Sequence[RegistryItem]) -> list[RegistryItem]:
        """Recalled memories, each costing its bullet line."""
        return [
            replace(item, tokens=self.count(memory_line(item.text), item.id))
            if item.kind is CandidateKind.MEMORY
            else item
            for item in items
        ]

    def shared(self, items: Sequence[RegistryItem], skills: Mapping[str, Skill]) -> list[RegistryItem]:
        """The session's skills (their prompt section) and tools (their bound function spec)."""
        out = []
        for item in items:
            if item.kind is CandidateKind.SKILL and item.id in skills:
                text = skill_section(skills[item.id])
            elif item.kind is CandidateKind.TOOL:
                text = item.body if item.body else item.text
            else:
                out.append(item)
                continue
            out.append(replace(item, tokens=self.count(text, item.id)))
        return out


def _digest(text: str) -> bytes:
    # surrogatepass: a text holding a lone surrogate (a store other than SQL may keep one) is counted too
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
