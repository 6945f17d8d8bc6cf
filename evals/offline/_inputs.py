"""The checks of :func:`~memabra.evals.offline.evaluate_policies`'s arguments: the time window,
the decision ids, the logging policies and the targets. Each failure names the argument at fault."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from numbers import Integral

from memabra._errors import InvalidRecordError
from memabra.evals.offline._evaluation_records import Target
from memabra.router import Router

__all__ = ["check_decision_ids", "check_logged_by", "check_seed", "check_targets", "check_window"]


def check_window(since: datetime | None, until: datetime | None) -> None:
    """``since`` and ``until`` must be timezone-aware datetimes (the log keeps UTC instants, and a
    naive time names none), ``since`` before ``until``."""
    for name, value in (("since", since), ("until", until)):
        if value is None:
            continue
        if not isinstance(value, datetime):
            raise InvalidRecordError(f"{name} must be a datetime, got {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidRecordError(
                f"{name} is a naive datetime ({value.isoformat()}): pass a timezone-aware one "
                "(for a UTC time, .replace(tzinfo=datetime.timezone.utc))"
            )
    if since is not None and until is not None and since >= until:
        raise InvalidRecordError(f"since ({since.isoformat()}) must be before until ({until.isoformat()})")


def check_targets(targets: Sequence[Target]) -> None:
    """At least one :class:`Target`, their names distinct: results are keyed by the policy's name
    (the JSON's ``policies``, the paired differences), so a second target of the same name would
    silently replace the first."""
    if isinstance(targets, Target | Router) or not isinstance(targets, Sequence):
        raise InvalidRecordError(f"targets must be a sequence of Target(policy, router), got {type(targets).__name__}")
    if not targets:
        raise InvalidRecordError("name at least one policy to evaluate")
    for index, target in enumerate(targets):
        if not isinstance(target, Target):
            raise InvalidRecordError(f"targets[{index}] must be a Target(policy, router), got {type(target).__name__}")
    seen: set[str] = set()
    for target in targets:
        if target.policy in seen:
            raise InvalidRecordError(
                f"policy {target.policy!r} is named twice: each target needs its own name (results are keyed by it)"
            )
        seen.add(target.policy)


def check_decision_ids(decision_ids: Collection[str] | None) -> frozenset[str] | None:
    """``decision_ids`` as a set: a collection of decision ids (a bare string is refused, it would
    be read as its characters)."""
    if decision_ids is None:
        return None
    if isinstance(decision_ids, str) or not isinstance(decision_ids, Collection):
        raise InvalidRecordError(
            f"decision_ids must be a collection of decision ids, got {type(decision_ids).__name__}"
        )
    wrong = [d for d in decision_ids if not isinstance(d, str)]
    if wrong:
        raise InvalidRecordError(f"decision_ids must hold decision ids (strings), got {wrong[0]!r}")
    return frozenset(decision_ids)


def check_logged_by(logged_by: str | Collection[str] | None) -> frozenset[str] | None:
    """``logged_by`` as a set of policy names (a decision's ``policy``, the name of the router class
    that made it): one name, or a collection of them (a bot whose router was renamed logged under
    both names)."""
    if logged_by is None:
        return None
    names = (logged_by,) if isinstance(logged_by, str) else logged_by
    if not isinstance(names, Collection):
        raise InvalidRecordError(f"logged_by must be a policy name or a collection of them, got {type(names).__name__}")
    for name in names:
        if not isinstance(name, str):
            raise InvalidRecordError(f"logged_by must hold policy names (strings), got {name!r}")
        if not name.strip():
            raise InvalidRecordError("logged_by names an empty policy: name a policy that logged decisions")
    if not names:
        raise InvalidRecordError("logged_by is empty: name at least one policy (None reads every policy's decisions)")
    return frozenset(names)


def check_seed(seed: int) -> None:
    """``seed`` must be an integer >= 0 (it seeds the reward model and every rollout; numpy refuses
    anything else halfway through the pass, naming nothing)."""
    if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
        raise InvalidRecordError(f"seed must be an integer >= 0, got {seed!r}")
