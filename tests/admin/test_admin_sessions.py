"""Logout revokes the session server-side; failed sign-ins and bearer tokens are throttled per client."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, timedelta

import pytest
from starlette.testclient import TestClient

from memabra._admin import _auth, create_app
from memabra._admin._auth import MAX_FAILURES, SESSION_COOKIE, AttemptThrottle
from memabra.storage import EpisodeLog, RevokedSessions

from .conftest import TOKEN, Seeded, csrf_of, feedback_form, sign_in

SECRET = b"s" * 32


@pytest.fixture
def log(shared_log: tuple[EpisodeLog, Seeded]) -> EpisodeLog:
    return shared_log[0]


@pytest.fixture
def seeded(shared_log: tuple[EpisodeLog, Seeded]) -> Seeded:
    return shared_log[1]


@pytest.fixture
def no_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failures answer at once, so a test can reach the lockout without waiting out the delays."""
    monkeypatch.setattr(_auth, "_FIRST_FAILURE_DELAY_S", 0.0)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _workers(log: EpisodeLog, n: int, **kwargs: object) -> Iterator[TestClient]:
    """``n`` apps over one log with one secret key: the workers of one admin deployment."""
    for _ in range(n):
        client = TestClient(create_app(log, token=TOKEN, secret_key=SECRET, **kwargs), follow_redirects=False)  # type: ignore[arg-type]
        yield client


def test_logout_revokes_the_cookie_on_every_worker(log: EpisodeLog, seeded: Seeded) -> None:
    first, second = _workers(log, 2)
    with first, second:
        assert sign_in(first).status_code == 303
        cookie = first.cookies[SESSION_COOKIE]
        second.cookies.set(SESSION_COOKIE, cookie)
        assert second.get("/episodes").status_code == 200  # the same session on the other worker
        stale_form = feedback_form(second, seeded.xss, "rating-form")
        token = csrf_of(first.get("/episodes").text)
        assert first.post("/logout", data={"csrf_token": token}).status_code == 303

        # The old cookie, replayed on the worker that did not handle the logout, neither reads nor writes.
        second.cookies.set(SESSION_COOKIE, cookie)
        page = second.get(f"/episodes/{seeded.xss}")
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        second.cookies.set(SESSION_COOKIE, cookie)
        before = len(log.get_episode(seeded.xss).feedback)
        write = second.post(f"/episodes/{seeded.xss}/feedback", data={**stale_form, "rating": "1"})
        assert write.status_code == 401
        assert len(log.get_episode(seeded.xss).feedback) == before
        second.cookies.set(SESSION_COOKIE, cookie)
        assert (
            second.post(
                "/policies/promote", data={"version": "test-v3", "csrf_token": stale_form["csrf_token"]}
            ).status_code
            == 401
        )
        assert log.get_snapshot("test-v3").status == "candidate"

        # Signing in again works, with a new session.
        second.cookies.clear()
        assert sign_in(second).status_code == 303
        assert second.cookies[SESSION_COOKIE] != cookie
        assert second.get("/episodes").status_code == 200


def test_revoked_sessions_are_kept_until_they_expire(log: EpisodeLog) -> None:
    from datetime import datetime

    store = RevokedSessions(log)
    now = datetime.now(UTC)
    store.revoke("gone-soon", now + timedelta(seconds=1), now=now)
    store.revoke("gone-soon", now + timedelta(seconds=1), now=now)  # twice is the same as once
    assert store.is_revoked("gone-soon") and not store.is_revoked("never-revoked")
    store.revoke("later", now + timedelta(hours=1), now=now + timedelta(seconds=2))
    assert not store.is_revoked("gone-soon")  # expired rows are pruned: the cookie's signature refuses it anyway
    assert store.is_revoked("later")


def test_wrong_sign_ins_are_delayed_more_and_more(
    log: EpisodeLog, seeded: Seeded, caplog: pytest.LogCaptureFixture
) -> None:
    with next(_workers(log, 1)) as client:
        timings = []
        with caplog.at_level(logging.WARNING, logger="memabra"):
            for _ in range(3):
                started = time.perf_counter()
                assert sign_in(client, "not-the-token-at-all").status_code == 401
                timings.append(time.perf_counter() - started)
        assert timings[0] >= 0.25 and timings[1] >= 0.5 and timings[2] >= 1.0, timings
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 3 and all("failed sign-in from testclient" in w for w in warnings), warnings
        assert "3 of 10" in warnings[-1]
        assert sign_in(client).status_code == 303  # the right secret still signs in before the lockout


def test_repeated_wrong_sign_ins_lock_the_client_out(
    log: EpisodeLog, seeded: Seeded, no_delay: None, caplog: pytest.LogCaptureFixture
) -> None:
    clock = _Clock()
    with next(_workers(log, 1, throttle=AttemptThrottle(clock=clock))) as client:
        with caplog.at_level(logging.WARNING, logger="memabra"):
            for _ in range(MAX_FAILURES):
                assert sign_in(client, "not-the-token-at-all").status_code == 401
        assert any("locked out" in r.getMessage() for r in caplog.records)
        locked = sign_in(client)  # even the right secret: it is not looked at while locked out
        assert locked.status_code == 429
        assert int(locked.headers["retry-after"]) == 15 * 60
        assert "Too many wrong tokens or passwords" in locked.text
        assert client.get("/episodes").status_code == 303
        clock.now += 15 * 60 + 1
        assert sign_in(client).status_code == 303
        assert client.get("/episodes").status_code == 200


def test_failures_outside_the_window_do_not_add_up(log: EpisodeLog, seeded: Seeded, no_delay: None) -> None:
    clock = _Clock()
    with next(_workers(log, 1, throttle=AttemptThrottle(clock=clock))) as client:
        for _ in range(3 * MAX_FAILURES):
            assert sign_in(client, "not-the-token-at-all").status_code == 401
            clock.now += 60.0  # one a minute: never ten within five minutes
        assert sign_in(client).status_code == 303


def test_wrong_bearer_tokens_lock_the_client_out(
    log: EpisodeLog, seeded: Seeded, no_delay: None, caplog: pytest.LogCaptureFixture
) -> None:
    clock = _Clock()
    with next(_workers(log, 1, throttle=AttemptThrottle(clock=clock))) as client:
        wrong = {"authorization": "Bearer wrong-token-guess"}
        with caplog.at_level(logging.WARNING, logger="memabra"):
            for _ in range(MAX_FAILURES):
                assert client.get("/episodes", headers=wrong).status_code == 401
        messages = [r.getMessage() for r in caplog.records]
        assert sum("failed bearer token from testclient" in m for m in messages) == MAX_FAILURES - 1
        assert any("locked out" in m for m in messages)
        right = {"authorization": f"Bearer {TOKEN}"}
        refused = client.post("/policies/promote", headers=right, data={"version": "test-v3"})
        assert refused.status_code == 429 and "retry-after" in refused.headers
        assert log.get_snapshot("test-v3").status == "candidate"
        clock.now += 15 * 60 + 1
        assert client.get("/episodes", headers=right).status_code == 200


def test_a_bearer_failure_is_delayed(log: EpisodeLog, seeded: Seeded) -> None:
    with next(_workers(log, 1)) as client:
        started = time.perf_counter()
        assert client.get("/episodes", headers={"authorization": "Bearer wrong"}).status_code == 401
        assert time.perf_counter() - started >= 0.25


def test_throttle_is_per_client() -> None:
    clock = _Clock()
    throttle = AttemptThrottle(max_failures=2, clock=clock)
    throttle.failed("10.0.0.1", "sign-in")
    throttle.failed("10.0.0.1", "sign-in")
    assert throttle.locked_for("10.0.0.1") == pytest.approx(15 * 60)
    assert throttle.locked_for("10.0.0.2") == 0.0
    with pytest.raises(Exception, match="max_failures"):
        AttemptThrottle(max_failures=0)


def test_the_in_memory_revocations_serve_one_process(log: EpisodeLog, seeded: Seeded) -> None:
    from memabra._admin._auth import InMemoryRevocations

    revocations = InMemoryRevocations()
    with TestClient(create_app(log, token=TOKEN, revocations=revocations), follow_redirects=False) as client:
        assert sign_in(client).status_code == 303
        cookie = client.cookies[SESSION_COOKIE]
        client.post("/logout", data={"csrf_token": csrf_of(client.get("/episodes").text)})
        client.cookies.set(SESSION_COOKIE, cookie)
        assert client.get("/episodes").status_code == 303
    assert len(revocations._revoked) == 1  # one session kept as revoked
