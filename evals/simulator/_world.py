"""A simulated population with known ground truth, for learning tests and the README's simulator
figures.

Each round a user asks about a topic. The pool holds, for every topic, one note per style (brief,
detailed, visual) plus a long "transcript" decoy that is full of the topic's words but never helps,
and some notes from other topics. Every user prefers one style: the note in that style helps with
probability ``p_preferred``, the other notes of the topic with ``p_other_style``, decoys never, other
topics with ``p_off_topic``. The query names the topic but never the style, so similarity ranks the
topic's notes (and its decoy, which it likes best) without knowing which one helps this user: the
preference is what similarity alone misses. After ``drift_at`` rounds, ``drift_share`` of the users
switch to another style.

Because the helpfulness probabilities are known, the expected composite reward of any selection is
exact (:func:`expected_reward`) and so is the oracle's: the best subset of at most ``slots`` notes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from memabra._errors import ConfigError
from memabra._records import Candidate, CandidateKind, RewardWeights

__all__ = ["SimRound", "World", "WorldConfig", "expected_reward", "oracle_value"]

TOPICS: tuple[tuple[str, ...], ...] = (
    ("invoice", "billing", "payment", "charge"),
    ("shipping", "delivery", "package", "courier"),
    ("refund", "return", "damaged", "replacement"),
    ("espresso", "machine", "grinder", "brew"),
    ("weather", "forecast", "rain", "temperature"),
    ("flight", "booking", "airport", "luggage"),
    ("workout", "running", "fitness", "training"),
    ("recipe", "dinner", "cooking", "ingredients"),
)
STYLES: tuple[tuple[str, ...], ...] = (
    ("brief", "summary", "bullets"),
    ("detailed", "walkthrough", "steps"),
    ("visual", "diagram", "chart"),
)
_FILLER = ("please", "help", "me", "with", "my", "question", "about", "need", "today", "the")


@dataclass(frozen=True, slots=True)
class WorldConfig:
    """Parameters of the simulated population (defaults used by the README figures)."""

    n_users: int = 12
    off_topic: int = 6
    slots: int = 3
    max_tokens: int = 600
    note_tokens: int = 40
    decoy_tokens: int = 360
    p_preferred: float = 0.9
    p_other_style: float = 0.08
    p_off_topic: float = 0.01
    drift_at: int = 1000
    drift_share: float = 0.5

    def __post_init__(self) -> None:
        others = (len(TOPICS) - 1) * len(STYLES)  # the notes of the other topics
        counts = {"n_users": self.n_users, "slots": self.slots, "max_tokens": self.max_tokens}
        counts |= {"note_tokens": self.note_tokens, "decoy_tokens": self.decoy_tokens}
        for name, value in counts.items():
            if value < 1:
                raise ConfigError(f"WorldConfig.{name} must be at least 1, got {value}")
        if not 0 <= self.off_topic <= others:
            raise ConfigError(
                f"WorldConfig.off_topic must be 0 to {others} (the other topics' notes), got {self.off_topic}"
            )
        if self.drift_at < 0:
            raise ConfigError(f"WorldConfig.drift_at must be at least 0, got {self.drift_at}")
        for name in ("p_preferred", "p_other_style", "p_off_topic", "drift_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"WorldConfig.{name} must be a probability (0 to 1), got {value}")


@dataclass(frozen=True, slots=True)
class SimRound:
    """One round: who asks what, the offered pool, each note's true helpfulness probability and the
    uniform draws that decide (identically for every router) which notes help."""

    index: int
    user_id: str
    query: str
    candidates: tuple[Candidate, ...]
    help_probability: NDArray[np.float64]
    draws: NDArray[np.float64]

    def helpful(self, chosen_ids: Sequence[str]) -> dict[str, float]:
        """The realised local outcome of each chosen note (1 helped, 0 not)."""
        position = {c.id: i for i, c in enumerate(self.candidates)}
        return {cid: float(self.draws[position[cid]] < self.help_probability[position[cid]]) for cid in chosen_ids}


@dataclass
class World:
    """A seeded population; iterate :meth:`rounds` to get the same rounds for every router."""

    config: WorldConfig = field(default_factory=WorldConfig)
    seed: int = 0

    def __post_init__(self) -> None:
        rng = np.random.default_rng([self.seed, 11])
        cfg = self.config
        self._notes: list[tuple[Candidate, int, int]] = []  # (candidate, topic, style or -1 for decoy)
        for t, topic in enumerate(TOPICS):
            for s, style in enumerate(STYLES):
                words = list(topic) + list(style) + ["note"]
                rng.shuffle(words)
                text = f"{' '.join(words)} {topic[0]} {style[0]}"
                self._notes.append(
                    (Candidate(f"note-{topic[0]}-{style[0]}", CandidateKind.MEMORY, text, cfg.note_tokens), t, s)
                )
            decoy = " ".join(list(topic) * 6) + " archived transcript of an old conversation"
            self._notes.append((Candidate(f"decoy-{topic[0]}", CandidateKind.MEMORY, decoy, cfg.decoy_tokens), t, -1))
        self._preferences = rng.integers(0, len(STYLES), size=cfg.n_users)
        drifted = self._preferences.copy()
        movers = rng.random(cfg.n_users) < cfg.drift_share
        drifted[movers] = (drifted[movers] + rng.integers(1, len(STYLES), size=int(movers.sum()))) % len(STYLES)
        self._drifted = drifted

    def preference(self, user: int, round_index: int) -> int:
        prefs = self._drifted if round_index >= self.config.drift_at else self._preferences
        return int(prefs[user])

    def rounds(self, n: int) -> list[SimRound]:
        cfg = self.config
        rng = np.random.default_rng([self.seed, 13])
        out: list[SimRound] = []
        for index in range(n):
            user = int(rng.integers(0, cfg.n_users))
            topic = int(rng.integers(0, len(TOPICS)))
            style = self.preference(user, index)
            words = list(rng.choice(TOPICS[topic], size=2, replace=False)) + list(
                rng.choice(_FILLER, size=3, replace=False)
            )
            rng.shuffle(words)
            own = [(c, t, s) for c, t, s in self._notes if t == topic]
            others = [(c, t, s) for c, t, s in self._notes if t != topic and s >= 0]
            picks = rng.choice(len(others), size=cfg.off_topic, replace=False)
            pool = own + [others[int(i)] for i in picks]
            order = rng.permutation(len(pool))
            pool = [pool[int(i)] for i in order]
            probability = np.array(
                [
                    0.0
                    if s < 0
                    else cfg.p_off_topic
                    if t != topic
                    else cfg.p_preferred
                    if s == style
                    else cfg.p_other_style
                    for _, t, s in pool
                ]
            )
            out.append(
                SimRound(
                    index=index,
                    user_id=f"user-{user}",
                    query=" ".join(words),
                    candidates=tuple(c for c, _, _ in pool),
                    help_probability=probability,
                    draws=rng.random(len(pool)),
                )
            )
        return out


def expected_reward(
    round_: SimRound, chosen_ids: Sequence[str], max_tokens: int, weights: RewardWeights | None = None
) -> float:
    """Exact expected composite reward of a selection (helpfulness independent across notes):
    ``E[R] = ws P(hit) + wr E[H] - wx X`` with ``H`` the precision on a hit and ``-1`` on a miss,
    so ``E[H] = E[#helped] / k - P(miss)``."""
    w = weights or RewardWeights()
    position = {c.id: i for i, c in enumerate(round_.candidates)}
    p = np.array([round_.help_probability[position[cid]] for cid in chosen_ids])
    tokens = sum(round_.candidates[position[cid]].tokens for cid in chosen_ids)
    miss = float(np.prod(1.0 - p)) if p.size else 1.0
    precision = float(p.sum() / p.size) if p.size else 0.0
    x = min(1.0, tokens / max_tokens)
    return w.ws * (1.0 - miss) + w.wr * (precision - miss) - w.wx * x


def oracle_value(
    round_: SimRound, slots: int, max_tokens: int, weights: RewardWeights | None = None
) -> tuple[float, tuple[str, ...]]:
    """The best expected reward of any selection of at most ``slots`` notes within the budget."""
    ids = [c.id for c in round_.candidates]
    tokens = {c.id: c.tokens for c in round_.candidates}
    best: tuple[float, tuple[str, ...]] = (expected_reward(round_, (), max_tokens, weights), ())
    for size in range(1, slots + 1):
        for subset in itertools.combinations(ids, size):
            if sum(tokens[i] for i in subset) > max_tokens:
                continue
            value = expected_reward(round_, subset, max_tokens, weights)
            if value > best[0]:
                best = (value, subset)
    return best
