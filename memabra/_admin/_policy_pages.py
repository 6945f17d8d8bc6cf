"""The policies page and its writes: promote a snapshot, roll one back, each with an audit entry,
and forget the learner checkpoint of a policy no longer learned (as ``memabra policies
forget-learner``), logged as a warning as the deletions are."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from memabra._admin import _views as views
from memabra._admin._confirm_page import unconfirmed
from memabra._admin._forms import WINDOW_LABELS, parse_window
from memabra._admin._ope_views import OPERun, evaluations, ope_rows, ope_runs
from memabra._admin._plumbing import _NOTICES, _AdminBase, _Auth, _client, _HttpError, _required
from memabra._admin._policy import ActiveSnapshotPolicy, group_by_snapshot
from memabra._admin._promotion import PromotionCheck, promotion_check
from memabra._health import DELETIONS_CHECK, format_age, health_problems
from memabra._records import OPEResult, RewardWeights, utcnow
from memabra.storage import DEFAULT_SAMPLE, MAX_AUDIT_TEXT, LearnerBusyError, PolicyStatus, SnapshotInfo

__all__ = ["PolicyPages"]

logger = logging.getLogger("memabra")

# Stored estimates the page reads (a run stores one per estimator, about a dozen), and how many of
# the latest runs' estimates the chart draws: past a few dozen bars, no label can be read.
OPE_ROWS = 200
OPE_CHART_ESTIMATES = 60


class PolicyPages(_AdminBase):
    """``GET /policies``, ``POST /policies/promote``, ``POST /policies/rollback`` and
    ``POST /policies/forget-learner``."""

    async def policies(self, request: Request) -> Response:
        async def build(auth: _Auth) -> Response:
            window, since = parse_window(request.query_params.get("window"), utcnow())
            context = await run_in_threadpool(self._policies_context, since)
            params = request.query_params
            notice = _policies_notice(params.get("notice", ""), params.get("policy", ""), params.get("version", ""))
            return self._render(
                "policies.html",
                auth=auth,
                window=window,
                windows=WINDOW_LABELS,
                window_label=WINDOW_LABELS[window],
                window_span="all time" if since is None else f"the last {WINDOW_LABELS[window]}",
                # the episodes page's From, so a snapshot's episode count links the episodes it counts
                window_since="" if since is None else since.strftime("%Y-%m-%dT%H:%M:%S"),
                notice=notice,
                max_reason=MAX_AUDIT_TEXT,
                section="policies",
                **context,
            )

        return await self._page(request, build)

    def _promotion_checks(self, snapshots: Sequence[SnapshotInfo], runs: Sequence[OPERun]) -> dict[str, PromotionCheck]:
        """Each snapshot's verdict, from its own newest runs where the page's recent ones hold none
        (with its policy's active snapshot's, which the same evaluation may have paired it with)."""
        shown = _evaluated(runs)
        active_of = _active_of(snapshots)
        unshown = [s for s in snapshots if s.version not in shown]
        wanted = {s.version for s in unshown} | {active_of[s.policy] for s in unshown if s.policy in active_of}
        older = ope_runs(ope_rows(self.queries.latest_ope_results(sorted(wanted - shown))))
        every = sorted([*runs, *older], key=lambda run: run.created_at, reverse=True)
        return {s.version: promotion_check(s.version, s.metrics, every, active_of.get(s.policy)) for s in snapshots}

    def _policies_context(self, since: datetime | None) -> dict[str, Any]:
        q = self.queries
        health = q.log.status()
        first, last = q.time_span(since=since)
        bucket = views.choose_bucket(first, last)
        points = q.reward_over_time(since=since, bucket=bucket)
        stats, shares = q.policy_stats_and_kind_shares(since=since)
        runs = _whole_runs(q.ope_results(limit=OPE_ROWS))
        charted_runs = _latest(runs, OPE_CHART_ESTIMATES)
        charted = [row.result for run in charted_runs for row in run.rows]
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
                for p in health_problems(health, self.max_lag, policies=None if served is None else [served])
                if p.check != DELETIONS_CHECK  # shown with the deletion history
            ],
            "checked_policy": served,
            "retention_holds": _retention_holds(health.policies, served),
            "max_lag": format_age(self.max_lag),
            "snapshots": snapshots,
            "stats": stats,
            "stats_by_version": {s.policy_version: s for s in stats},
            "episodes_by_version": dict(episodes),
            "mean_reward": mean_reward,
            "shares": shares_by_version,
            "ope_runs": runs,
            # the runs of each evaluation that scored several targets together, by evaluation id
            "evaluations": evaluations(runs),
            "charted_runs": len(charted_runs),
            "promotion": self._promotion_checks(snapshots, runs),
            # what a promote retires (and a roll back of it returns to): the policy's active snapshot
            "active_of": _active_of(snapshots),
            "has_snapshot": {s.version for s in snapshots},
            "chart_data": views.chart_payload(
                points, stats, shares, charted, self._reward_weights().total_range(), bucket=bucket
            ),
            "bucket": bucket,
            "sample": DEFAULT_SAMPLE,
        }

    def _reward_weights(self) -> RewardWeights:
        return self.reward_config.weights if self.reward_config is not None else RewardWeights()

    async def promote(self, request: Request) -> Response:
        async def apply(auth: _Auth, form: dict[str, str]) -> Response:
            version = _required(form, "version")
            # the snapshot the confirmation said it replaces: another operator's promote or rollback
            # since the page loaded makes this one a different change, refused (409) rather than made
            # ("" where none was active: then a promote landed meanwhile is a conflict too; a script
            # that sends no replaces asks for no check)
            replaces = form["replaces"].strip() if "replaces" in form else None
            # sent without the page's script having asked (blocked, not loaded): asked on a page
            question = await run_in_threadpool(self._promote_question, version, replaces or None)
            asked = unconfirmed(
                self,
                request,
                auth,
                form,
                question=question + _reason_line(form),
                action=f"Promote {version}",
                back=("/policies#snapshots", "back to the policies"),
            )
            if asked is not None:
                return asked
            done = await run_in_threadpool(
                self.audit.promote,
                version,
                by=auth.principal,
                client=_client(request),
                reason=form.get("reason", ""),
                replacing=replaces,
            )
            if not done.changed:
                # already active (no snapshot was when the page loaded, or a script posted no
                # replaces): what was asked is done, not a conflict
                query = urlencode({"notice": "already-active", "version": done.version, "policy": done.policy})
                return RedirectResponse(f"/policies?{query}", status_code=303)
            return RedirectResponse("/policies?notice=promoted", status_code=303)

        return await self._write(request, apply)

    async def rollback(self, request: Request) -> Response:
        async def apply(auth: _Auth, form: dict[str, str]) -> Response:
            version = _required(form, "version")
            question = await run_in_threadpool(self._rollback_question, version)
            asked = unconfirmed(
                self,
                request,
                auth,
                form,
                question=question + _reason_line(form),
                action=f"Roll back {version}",
                back=("/policies#snapshots", "back to the policies"),
            )
            if asked is not None:
                return asked
            await run_in_threadpool(
                self.audit.rollback, version, by=auth.principal, client=_client(request), reason=form.get("reason", "")
            )
            return RedirectResponse("/policies?notice=rolled-back", status_code=303)

        return await self._write(request, apply)

    def _promote_question(self, version: str, replaces: str | None) -> str:
        """What the Promote button's dialog asks, for the page that asks it without a script."""
        snapshot = next((s for s in self.queries.snapshots() if s.version == version), None)
        if snapshot is None:
            return f"Make {version} the active policy?"
        active = _active_of(self.queries.snapshots()).get(snapshot.policy)
        versions = [version] if active is None or active == version else [version, active]
        runs = ope_runs(ope_rows(self.queries.latest_ope_results(versions)))
        return promotion_check(version, snapshot.metrics, runs, active).confirmation(replaces)

    def _rollback_question(self, version: str) -> str:
        """What the Roll back button's dialog asks: the snapshot retired and the one made active."""
        snapshot = next((s for s in self.queries.snapshots() if s.version == version), None)
        if snapshot is None or not snapshot.rollback_to:
            return f"Roll back {version}?"
        return f"Roll back {version}? {snapshot.rollback_to} becomes active again."

    async def forget_learner(self, request: Request) -> Response:
        async def apply(auth: _Auth, form: dict[str, str]) -> Response:
            policy = _required(form, "policy")
            asked = unconfirmed(
                self,
                request,
                auth,
                form,
                question=f"Forget the learner checkpoint of policy {policy}? Episode retention stops waiting for "
                "its learner; its snapshots stay, and an active one keeps serving. A learner started for it later "
                "begins from the start of the log. Refused while a learner holds its lease.",
                action=f"Forget {policy}'s learner",
                back=("/policies#learning", "back to the policies"),
            )
            if asked is not None:
                return asked
            try:
                forgotten = await run_in_threadpool(self.log.forget_learner, policy)
            except LearnerBusyError as exc:
                raise _HttpError(
                    409, "Learner running", f"{exc}.", back=("/policies#learning", "Back to the policies")
                ) from None
            if forgotten:
                logger.warning(
                    "admin: %s from %s forgot the learner checkpoint of policy %s: retention no longer waits for it",
                    auth.principal,
                    _client(request),
                    policy,
                )
            notice = "learner-forgotten" if forgotten else "learner-none"
            return RedirectResponse(f"/policies?{urlencode({'notice': notice, 'policy': policy})}", status_code=303)

        return await self._write(request, apply)


def _reason_line(form: dict[str, str]) -> str:
    """The reason typed beside the button, as the confirmation quotes it (kept in the history)."""
    reason = form.get("reason", "").strip()
    return f"\nReason, kept in its history with who made the change: “{reason}”" if reason else ""


def _policies_notice(key: str, policy: str, version: str = "") -> str:
    """The notice a redirect asks for; a forget-learner one names its policy, an already-active
    one its snapshot."""
    if version and policy and key == "already-active":
        return f"{version} is already the active snapshot of policy {policy}: nothing changed."
    if policy and key == "learner-forgotten":
        return (
            f"Forgot the learner checkpoint of policy {policy}: retention no longer waits for it; its snapshots stay."
        )
    if policy and key == "learner-none":
        return f"Policy {policy} has no learner checkpoint in this log: nothing to forget (retention does not wait for it)."
    return _NOTICES.get(key, "")


def _retention_holds(policies: Sequence[PolicyStatus], served: str | None) -> dict[str, bool | None]:
    """The policies whose learner checkpoint keeps episodes from retention (final rewards it has yet
    to read), each with whether the view serves it (``None``: started without ``--policy``, so it
    cannot tell). A policy no longer learned keeps its checkpoint, and retention waits for it for good."""
    return {
        p.policy: None if served is None else p.policy == served
        for p in policies
        if p.checkpoint is not None and p.backlog > 0
    }


def _active_of(snapshots: Sequence[SnapshotInfo]) -> dict[str, str]:
    """Each policy's active snapshot: what a promote retires (and a roll back of it returns to)."""
    return {s.policy: s.version for s in snapshots if s.status == "active"}


def _evaluated(runs: Sequence[OPERun]) -> set[str]:
    return {row.result.snapshot_version for run in runs for row in run.rows if row.result.snapshot_version}


def _whole_runs(results: Sequence[OPEResult]) -> list[OPERun]:
    """The stored runs, newest first; when the read stopped at its limit, the run of the last
    estimate read may be cut short, so it is left out rather than shown with some of its estimates
    (with the other runs of its evaluation, stored at the same time and as likely cut)."""
    runs = ope_runs(ope_rows(results))
    if len(results) < OPE_ROWS or len(runs) < 2:
        return runs
    cut = next(run for run in runs if run.run_id == results[-1].run_id)
    kept = [
        run for run in runs if run is not cut and (cut.evaluation_id is None or run.evaluation_id != cut.evaluation_id)
    ]
    return kept or runs[:-1]


def _latest(runs: Sequence[OPERun], estimates: int) -> list[OPERun]:
    """The newest runs whose estimates add up to at most ``estimates`` (always the newest one),
    oldest first, as the chart draws them."""
    kept: list[OPERun] = []
    total = 0
    for run in runs:
        total += len(run.rows)
        if kept and total > estimates:
            break
        kept.append(run)
    return kept[::-1]
