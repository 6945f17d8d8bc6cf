"""The admin behind a TLS-terminating proxy on an internal network: the session cookie is Secure over
HTTPS (and forwarded headers are believed only from the proxies named), every write route needs
the CSRF token, nothing with user data is cached, an IPv6 client cannot escape the sign-in
throttle by changing address within its /64, a search too long for the database is a 400 naming
it, and no credential shows in a repr."""

from __future__ import annotations

import logging
import re
import socket
from datetime import timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient
from typer import Typer
from typer.testing import CliRunner

from memabra._admin import Credentials, create_app
from memabra._admin import _auth as auth
from memabra._admin._auth import SESSION_COOKIE, AttemptThrottle, throttled_client
from memabra._cli._admin import admin
from memabra.storage import EpisodeLog

from .conftest import PASSWORD, TOKEN, ClientFactory, Seeded, sign_in
from .test_admin_roles import (
    WRITES,
    World,
    _path,
    _state,
    world_fixture,  # noqa: F401 - the fixture world, shared
)


def _session_cookie(response: Any) -> str:
    cookies = [c for c in response.headers.get_list("set-cookie") if c.startswith(f"{SESSION_COOKIE}=")]
    assert len(cookies) == 1, response.headers
    return str(cookies[0])


def test_the_session_cookie_is_secure_over_https(log: EpisodeLog, seeded: Seeded) -> None:
    with TestClient(create_app(log, token=TOKEN), base_url="https://admin.internal", follow_redirects=False) as client:
        assert "; secure" in _session_cookie(client.get("/login")).lower()  # the sign-in form's session too
        signed_in = sign_in(client)
        assert signed_in.status_code == 303
        cookie = _session_cookie(signed_in).lower()
        assert "; secure" in cookie and "; httponly" in cookie and "samesite=strict" in cookie
    with TestClient(create_app(log, token=TOKEN), follow_redirects=False) as plain:
        assert "; secure" not in _session_cookie(sign_in(plain)).lower()  # plain http on loopback still works


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _serve(monkeypatch: pytest.MonkeyPatch, log: EpisodeLog, *args: str) -> tuple[Any, str]:
    """Runs ``memabra admin`` with ``args``: the uvicorn config it serves with, and the session
    cookie of a sign-in through uvicorn's own app stack, forwarded as a proxy that terminated TLS
    for 203.0.113.9 would forward it."""
    import uvicorn

    monkeypatch.setenv("MEMABRA_ADMIN_TOKEN", TOKEN)
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    served: dict[str, Any] = {}

    def fake_run(server: uvicorn.Server, sockets: list[socket.socket]) -> None:
        server.config.load()
        forwarded = {"x-forwarded-proto": "https", "x-forwarded-for": "203.0.113.9"}
        with TestClient(server.config.loaded_app, follow_redirects=False, headers=forwarded) as client:
            csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text)
            assert csrf
            signed_in = client.post("/login", data={"secret": TOKEN, "csrf_token": csrf.group(1)})
        served.update(config=server.config, cookie=_session_cookie(signed_in).lower())

    monkeypatch.setattr(uvicorn.Server, "run", fake_run)
    app = Typer()
    app.command()(admin)
    url = log.engine.url.render_as_string(hide_password=False)
    result = CliRunner().invoke(app, ["--db", url, "--port", str(_free_port()), *args])
    assert result.exit_code == 0, result.output
    assert TOKEN not in result.output  # a configured credential is never echoed
    return served["config"], served["cookie"]


def test_cli_believes_forwarded_headers_only_from_the_proxies_it_names(
    monkeypatch: pytest.MonkeyPatch, log: EpisodeLog, seeded: Seeded
) -> None:
    # uvicorn's own default believes X-Forwarded-* from loopback: any local process could claim
    # a fresh client address for each guess, or https
    default, cookie = _serve(monkeypatch, log)
    assert default.proxy_headers is False and "; secure" not in cookie

    trusted, cookie = _serve(monkeypatch, log, "--forwarded-allow-ips", "testclient")
    assert trusted.proxy_headers is True and trusted.forwarded_allow_ips == "testclient"
    assert "; secure" in cookie

    _, cookie = _serve(monkeypatch, log, "--secure-cookies")
    assert "; secure" in cookie


@pytest.mark.parametrize("csrf", [None, "forged-token"])
@pytest.mark.parametrize("route", sorted(WRITES))
def test_every_write_route_needs_the_csrf_token(
    make_client: ClientFactory, log: EpisodeLog, world: World, route: str, csrf: str | None
) -> None:
    client = make_client()  # an operator, signed in: only the token is missing
    before = _state(log, world)
    fields = {**WRITES[route](world), **({"csrf_token": csrf} if csrf is not None else {})}
    response = client.post(_path(route, world), data=fields)
    assert response.status_code == 403, response.text
    assert "CSRF token is missing or wrong" in response.text
    assert _state(log, world) == before


def test_nothing_with_user_data_is_cached(client: TestClient, seeded: Seeded) -> None:
    download = client.get(f"/episodes/{seeded.xss}?format=json")
    assert download.status_code == 200 and "mallory" in download.text
    assert download.headers["cache-control"] == "no-store"
    assert client.get("/episodes").headers["cache-control"] == "no-store"
    assert client.get("/no-such-page").headers["cache-control"] == "no-store"
    assert client.get("/login").headers["cache-control"] == "no-store"
    # the vendored script and stylesheet are the same for everyone: a browser may keep them
    assert "no-store" not in client.get("/static/admin.css").headers.get("cache-control", "")


def test_an_episode_search_longer_than_any_phrase_is_refused_naming_q(client: TestClient, seeded: Seeded) -> None:
    # SQLite fails a LIKE pattern over 50,000 bytes; the page said 500 before
    response = client.get("/episodes", params={"q": "x" * 60_000})
    assert response.status_code == 400
    assert "q is longer than 1,000 characters" in response.text
    assert client.get("/episodes", params={"q": "x" * 1_000}).status_code == 200


def test_an_ipv6_client_is_throttled_with_its_whole_64(
    log: EpisodeLog, seeded: Seeded, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(auth, "_FIRST_FAILURE_DELAY_S", 0.0)
    app = create_app(log, token=TOKEN)
    with caplog.at_level(logging.WARNING, logger="memabra"):
        for i in range(auth.MAX_FAILURES):
            # a host handed 2001:db8:0:1::/64 picks a fresh address for every guess
            with TestClient(app, follow_redirects=False, client=(f"2001:db8:0:1::{i + 1:x}", 4000)) as guesser:
                assert sign_in(guesser, "not-the-token-at-all").status_code == 401
    assert "2001:db8:0:1::/64 locked out" in caplog.text
    with TestClient(app, follow_redirects=False, client=("2001:db8:0:1:ffff::1", 4000)) as same_network:
        assert sign_in(same_network).status_code == 429
    with TestClient(app, follow_redirects=False, client=("2001:db8:0:2::1", 4000)) as operator:
        assert sign_in(operator).status_code == 303  # another network is not locked out


def test_throttled_client_keys() -> None:
    assert throttled_client("10.1.2.3") == "10.1.2.3"
    assert throttled_client("::ffff:10.1.2.3") == "10.1.2.3"
    assert throttled_client("2001:db8::abcd") == throttled_client("2001:db8::1") == "2001:db8::/64"
    assert throttled_client("testclient") == "testclient"
    throttle = AttemptThrottle(max_failures=1)
    throttle.failed("2001:db8::1", "sign-in")
    assert throttle.locked_for("2001:db8::2") > 0 and throttle.locked_for("2001:db9::1") == 0


def test_credentials_never_show_in_a_repr() -> None:
    credentials = Credentials(
        token=TOKEN, password=PASSWORD, reviewer_token="reviewer-token-1", reviewer_password="reviewer password"
    )
    shown = repr(credentials)
    for secret in (TOKEN, PASSWORD, "reviewer-token-1", "reviewer password"):
        assert secret not in shown


def test_cli_max_lag_is_the_bound_the_admin_checks_against(monkeypatch: pytest.MonkeyPatch, log: EpisodeLog) -> None:
    import uvicorn

    monkeypatch.setenv("MEMABRA_ADMIN_TOKEN", TOKEN)
    served: list[Any] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets: served.append(server.config.app))
    app = Typer()
    app.command()(admin)
    url = log.engine.url.render_as_string(hide_password=False)
    result = CliRunner().invoke(app, ["--db", url, "--port", str(_free_port()), "--max-lag", "2h"])
    assert result.exit_code == 0, result.output
    assert served[0].state.admin.max_lag == timedelta(hours=2)
    refused = CliRunner().invoke(app, ["--db", url, "--port", str(_free_port()), "--max-lag", "0m"])
    assert refused.exit_code == 2 and "--max-lag" in refused.output and not served[1:]
