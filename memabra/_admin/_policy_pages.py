"""The policies page and its writes: promote a snapshot, roll one back, each with an audit entry."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from memabra._admin import _views as views
from memabra._admin._forms import parse_window
from memabra._admin._ope_views import ope_rows
from memabra._admin._plumbing import _NOTICES, _AdminBase, _Auth, _client, _required
from memabra._admin._policy import ActiveSnapshotPolicy, group_by_snapshot
from memabra._health import DEFAULT_MAX_LAG, DELETIONS_CHECK, format_age, health_problems
from memabra._records import utcnow
from memabra.storage import DEFAULT_SAMPLE

__all__ = ["PolicyPages"]


class PolicyPages(_AdminBase):
    """``GET /policies``, ``POST /policies/promote`` and ``POST /policies/rollback``."""

    async def policies(self, request: Request) -> Response:
        async def build(auth: _Auth) -> Response:
            window, since = parse_window(request.query_params.get("window"), utcnow())
            context = await run_in_threadpool(self._policies_context, since)
            notice = _NOTICES.get(request.query_params.get("notice", ""), "")
            return self._render("policies.html", auth=auth, window=window, notice=notice, section="policies", **context)

        return await self._page(request, build)

    def _policies_context(self, since: datetime | None) -> dict[str, Any]:
        q = self.queries
        health = q.log.status()
        first, last = q.time_span(since=since)
        points = q.reward_over_time(since=since, bucket=views.choose_bucket(first, last))
        stats = q.policy_version_stats(since=since)
        shares = q.kind_shares(since=since)
        ope = q.ope_results()
        snapshots = q.snapshots()
        # one row and one chart series per snapshot, however many online updates each made
        points, stats, shares = group_by_snapshot(points, stats, shares, {s.version for s in snapshots})
        reward_sum: dict[str, float] = defaultdict(float)
        rewarded: dict[str, int] = defaultdict(int)
        episodes: dict[str, int] = defaultdict(int)
        for p in points:
            episodes[p.policy_version] += p.episodes
            if p.mean_reward is not None:
                reward_sum[p.policy_version] += p.mean_reward * p.rewarded
                rewarded[p.policy_version] += p.rewarded
        mean_reward = {v: reward_sum[v] / n for v, n in rewarded.items() if n}
        shares_by_version: dict[str, dict[str, float]] = defaultdict(dict)
        for share in shares:
            shares_by_version[share.policy_version][share.kind] = share.share
        # `memabra admin --policy P` names the policy in service: a policy the log served once keeps
        # its checkpoint, and that learner stays behind for good
        served = self.current_policy.policy if isinstance(self.current_policy, ActiveSnapshotPolicy) else None
        return {
            "health": health,
            "health_problems": [
                p
                for p in health_problems(health, policies=None if served is None else [served])
                if p.check != DELETIONS_CHECK  # shown with the deletion history
            ],
            "checked_policy": served,
            "max_lag": format_age(DEFAULT_MAX_LAG),
            "snapshots": snapshots,
            "stats": stats,
            "stats_by_version": {s.policy_version: s for s in stats},
            "episodes_by_version": dict(episodes),
            "mean_reward": mean_reward,
            "shares": shares_by_version,
            "ope": ope_rows(ope),
            "has_snapshot": {s.version for s in snapshots},
            "chart_data": views.chart_payload(points, stats, shares, ope),
            "sample": DEFAULT_SAMPLE,
        }

    async def promote(self, request: Request) -> Response:
        async def apply(auth: _Auth, form: dict[str, str]) -> Response:
            version = _required(form, "version")
            await run_in_threadpool(self.audit.promote, version, by=auth.principal, client=_client(request))
            return RedirectResponse("/policies?notice=promoted", status_code=303)

        return await self._write(request, apply)

    async def rollback(self, request: Request) -> Response:
        async def apply(auth: _Auth, form: dict[str, str]) -> Response:
            version = _required(form, "version")
            await run_in_threadpool(self.audit.rollback, version, by=auth.principal, client=_client(request))
            return RedirectResponse("/policies?notice=rolled-back", status_code=303)

        return await self._write(request, apply)
