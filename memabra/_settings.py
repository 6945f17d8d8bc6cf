"""The runtime's settings: one record, passed down from ``create_memabra_agent`` / ``build_session``
to the session instead of a dozen keyword arguments repeated at every level."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from memabra._errors import ConfigError
from memabra._records import Budget, CandidateKind
from memabra._reward import RewardConfig

__all__ = ["COMMIT_INTERVAL_S", "DEMO_EPISODES", "RELOAD_INTERVAL_S", "SessionSettings"]

# How often a serving process asks the log which snapshot is active (PostgreSQL also pushes it).
RELOAD_INTERVAL_S = 2.0
# The learner commits at least this often while it has learned something (besides every ``snapshot_every``).
COMMIT_INTERVAL_S = 30.0
# The demo's task episodes per router: the fewest at which the learned router's log supports its
# offline estimate of similarity top-k (the reference share follows top-k's whole selection on
# about 2.5% of decisions; 500 episodes give about half the effective samples the verdict needs;
# measured in README "The demo").
DEMO_EPISODES = 1500


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """How a session routes and learns.

    budget
        What one turn may inject (tokens and slots per kind).
    reward
        The composite reward's weights and feedback window (``None``: what
        :func:`memabra.load_reward_config` reads, as the CLI does: ``memabra.toml`` or
        ``$MEMABRA_CONFIG``, ``$MEMABRA_REWARD_WEIGHTS``, else the spec's defaults).
    learn
        ``False`` logs and serves (with hot reload) but never runs the learner in this process.
    snapshot_every
        The in-process learner commits its model after this many rewards (0: only on close).
    local_credit
        Per-slot credit from local outcomes instead of one reward per slate.
    kinds
        Candidate kinds offered (``None``: every kind the budget gives slots).
    reload_interval_s
        Seconds between looks at the log's active snapshot.
    commit_interval_s
        The learner also commits once this many seconds passed since its first uncommitted reward.
    token_counter
        The model's tokenizer as a function from text to its number of tokens (``None``: the
        whitespace estimate, :func:`memabra._text.approx_tokens`). With one, each candidate costs
        the tokens of what it puts in the prompt (:mod:`memabra._token_count`): the budget, the
        logged candidates, the reward's context cost and offline evaluation all count in it.
    """

    budget: Budget = field(default_factory=Budget)
    reward: RewardConfig | None = None
    learn: bool = True
    snapshot_every: int = 100
    local_credit: bool = False
    kinds: tuple[CandidateKind, ...] | None = None
    reload_interval_s: float = RELOAD_INTERVAL_S
    commit_interval_s: float = COMMIT_INTERVAL_S
    token_counter: Callable[[str], int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.budget, Budget):
            raise ConfigError(f"budget must be a Budget, got {type(self.budget).__name__}")
        if isinstance(self.snapshot_every, bool) or not isinstance(self.snapshot_every, int) or self.snapshot_every < 0:
            raise ConfigError(f"snapshot_every must be a non-negative integer, got {self.snapshot_every!r}")
        for name in ("reload_interval_s", "commit_interval_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        if self.token_counter is not None and not callable(self.token_counter):
            raise ConfigError(
                "token_counter must be a function from text to its number of tokens (such as"
                f" lambda text: len(tokenizer.encode(text).ids)), got {self.token_counter!r}"
            )
        if self.kinds is not None:
            object.__setattr__(self, "kinds", tuple(CandidateKind(k) for k in self.kinds))

    @property
    def offered_kinds(self) -> tuple[CandidateKind, ...]:
        if self.kinds is not None:
            return self.kinds
        return tuple(k for k in CandidateKind if self.budget.slots_for(k) > 0)

    def updated(self, **overrides: Any) -> SessionSettings:
        """A copy with the given fields replaced (``None`` values leave a field as it is)."""
        names = {f.name for f in fields(self)}
        unknown = set(overrides) - names
        if unknown:
            raise ConfigError(f"unknown session setting(s): {', '.join(sorted(unknown))}")
        given: dict[str, Any] = {
            k: (tuple(v) if k == "kinds" and isinstance(v, Sequence) else v)
            for k, v in overrides.items()
            if v is not None
        }
        return replace(self, **given)
