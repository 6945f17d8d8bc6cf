"""Sign-in, sessions, bearer tokens, CSRF and the loopback rule."""

from __future__ import annotations

import re
import socket
import time
from datetime import timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient
from typer import Typer
from typer.testing import CliRunner

from memabra._admin import create_app, is_loopback, require_credentials_for
from memabra._admin._auth import SESSION_COOKIE, Credentials, SessionCodec, SessionState
from memabra._cli._admin import admin
from memabra._errors import ConfigError
from memabra.storage import EpisodeLog

from .conftest import PASSWORD, TOKEN, ClientFactory, Seeded, csrf_of, sign_in


@pytest.fixture
def log(shared_log: tuple[EpisodeLog, Seeded]) -> EpisodeLog:
    """This module only reads: every test shares one seeded log per backend."""
    return shared_log[0]


@pytest.fixture
def seeded(shared_log: tuple[EpisodeLog, Seeded]) -> Seeded:
    return shared_log[1]


def test_pages_without_credentials_redirect_to_sign_in(make_client: ClientFactory, seeded: Seeded) -> None:
    client = make_client(signed_in=False)
    for path in ("/episodes", f"/episodes/{seeded.xss}", "/policies", "/episodes?user=alice"):
        response = client.get(path)
        assert response.status_code == 303
        assert response.headers["location"].startswith("/login?next=")
    assert "user%3Dalice" in client.get("/episodes?user=alice").headers["location"]
    assert client.get("/login").status_code == 200


def test_writes_without_credentials_are_refused(make_client: ClientFactory, seeded: Seeded, log: EpisodeLog) -> None:
    client = make_client(signed_in=False)
    response = client.post(
        f"/episodes/{seeded.xss}/feedback", data={"action": "rating", "rating": "1", "idempotency_key": "k"}
    )
    assert response.status_code == 401
    assert client.post("/policies/promote", data={"version": "test-v3"}).status_code == 401
    assert log.get_snapshot("test-v3").status == "candidate"
    assert len(log.get_episode(seeded.xss).feedback) == 0


def test_wrong_token_is_refused(make_client: ClientFactory, seeded: Seeded) -> None:
    client = make_client(signed_in=False)
    response = sign_in(client, "not-the-token-at-all")
    assert response.status_code == 401
    assert "Wrong token or password." in response.text
    assert client.get("/episodes").status_code == 303


def test_token_and_password_both_sign_in(make_client: ClientFactory, seeded: Seeded) -> None:
    by_token = make_client(signed_in=False, password=PASSWORD)
    response = sign_in(by_token, TOKEN, next_url="/policies")
    assert response.status_code == 303 and response.headers["location"] == "/policies"
    assert by_token.get("/policies").status_code == 200
    by_password = make_client(signed_in=False, password=PASSWORD)
    assert sign_in(by_password, PASSWORD).status_code == 303
    assert by_password.get("/episodes").status_code == 200


def test_sign_in_redirects_only_within_the_site(make_client: ClientFactory, seeded: Seeded) -> None:
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
        client = make_client(signed_in=False)
        assert sign_in(client, next_url=target).headers["location"] == "/episodes"


def test_sign_in_needs_the_forms_csrf_token(make_client: ClientFactory, seeded: Seeded) -> None:
    client = make_client(signed_in=False)
    client.get("/login")
    response = client.post("/login", data={"secret": TOKEN, "csrf_token": "forged"})
    assert response.status_code == 403
    assert client.get("/episodes").status_code == 303


def test_sign_in_issues_a_fresh_csrf_token(make_client: ClientFactory, seeded: Seeded) -> None:
    client = make_client(signed_in=False)
    before = csrf_of(client.get("/login").text)
    sign_in(client)
    after = csrf_of(client.get("/episodes").text)
    assert before != after


def test_bearer_token(make_client: ClientFactory, seeded: Seeded) -> None:
    client = make_client(signed_in=False)
    assert client.get("/episodes", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.get("/policies", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.get("/episodes", headers={"Authorization": "Bearer wrong-token-value"}).status_code == 401
    assert client.get("/episodes", headers={"Authorization": f"Bearer {PASSWORD}"}).status_code == 401


def test_expired_session_is_refused(make_client: ClientFactory, seeded: Seeded, log: EpisodeLog) -> None:
    client = make_client(session_ttl=timedelta(seconds=1))
    page = client.get(f"/episodes/{seeded.xss}")
    assert page.status_code == 200
    token = csrf_of(page.text)
    time.sleep(1.2)
    write = client.post(
        f"/episodes/{seeded.xss}/feedback",
        data={"csrf_token": token, "action": "rating", "rating": "2", "idempotency_key": "late-1"},
    )
    assert write.status_code == 401
    assert "Your session expired" in write.text
    assert log.get_episode(seeded.xss).feedback == ()
    response = client.get("/episodes")
    assert response.status_code == 303
    assert "expired=1" in response.headers["location"]
    assert "Your session expired" in client.get(response.headers["location"]).text


def test_tampered_session_cookie_is_refused(make_client: ClientFactory, seeded: Seeded) -> None:
    client = make_client()
    cookie = client.cookies[SESSION_COOKIE]
    client.cookies.clear()
    client.cookies.set(SESSION_COOKIE, cookie[:-3] + ("AAA" if not cookie.endswith("AAA") else "BBB"))
    assert client.get("/episodes").status_code == 303


def test_sign_out_ends_the_session(client, seeded: Seeded) -> None:  # type: ignore[no-untyped-def]
    token = csrf_of(client.get("/episodes").text)
    assert client.post("/logout", data={"csrf_token": "wrong"}).status_code == 403
    response = client.post("/logout", data={"csrf_token": token})
    assert response.status_code == 303
    assert client.get("/episodes").status_code == 303


def test_session_codec_states() -> None:
    now = [1000.0]
    codec = SessionCodec(b"k" * 32, timedelta(minutes=5), clock=lambda: now[0])
    cookie, session = codec.issue(authenticated=True)
    assert codec.read(cookie) == (SessionState.VALID, session)
    assert codec.read(None) == (SessionState.MISSING, None)
    assert codec.read("garbage") == (SessionState.INVALID, None)
    assert SessionCodec(b"x" * 32, timedelta(minutes=5)).read(cookie)[0] is SessionState.INVALID
    now[0] += 301
    assert codec.read(cookie) == (SessionState.EXPIRED, None)
    with pytest.raises(ConfigError, match="session_ttl"):
        SessionCodec(b"k", timedelta(0))


def test_credentials_are_required(log: EpisodeLog) -> None:
    with pytest.raises(ConfigError, match="token or a password"):
        create_app(log)
    with pytest.raises(ConfigError, match="at least 8"):
        Credentials(token="short")
    creds = Credentials(token=TOKEN, password=PASSWORD)
    assert creds.accepts(TOKEN) and creds.accepts(PASSWORD) and not creds.accepts("")
    assert creds.accepts_bearer(TOKEN) and not creds.accepts_bearer(PASSWORD)


def test_non_loopback_address_needs_credentials() -> None:
    for host in ("127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"):
        assert is_loopback(host)
        require_credentials_for(host, token=None, password=None)
    for host in ("0.0.0.0", "192.168.1.5", "::", "example.org"):
        assert not is_loopback(host)
        with pytest.raises(ConfigError, match="refusing to listen"):
            require_credentials_for(host, token=None, password=None)
        require_credentials_for(host, token=TOKEN, password=None)


def test_cli_refuses_public_address_without_credentials(monkeypatch: pytest.MonkeyPatch, log: EpisodeLog) -> None:
    monkeypatch.delenv("MEMABRA_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("MEMABRA_ADMIN_PASSWORD", raising=False)
    app = Typer()
    app.command()(admin)
    url = log.engine.url.render_as_string(hide_password=False)
    result = CliRunner().invoke(app, ["--db", url, "--host", "0.0.0.0"])
    assert result.exit_code == 1
    assert "refusing to listen" in result.output


def test_cli_serves_loopback_with_a_one_time_token(monkeypatch: pytest.MonkeyPatch, log: EpisodeLog) -> None:
    import uvicorn

    from memabra._cli import _admin as cli_admin

    monkeypatch.delenv("MEMABRA_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("MEMABRA_ADMIN_PASSWORD", raising=False)
    printed: list[str] = []
    monkeypatch.setattr(cli_admin.console, "print", lambda *objects, **_: printed.append(" ".join(map(str, objects))))
    served: dict[str, Any] = {}

    def fake_run(server: uvicorn.Server, sockets: list[socket.socket]) -> None:
        match = re.search(r"one-time token: \[bold\]([\w-]+)\[/\]", " ".join(printed))
        assert match, printed
        # the banner comes only once the port is bound
        assert [s.getsockname()[:2] for s in sockets] == [("127.0.0.1", port)]
        with TestClient(server.config.app) as client:
            served["status"] = client.get(
                "/episodes", headers={"Authorization": f"Bearer {match.group(1)}"}
            ).status_code
            served["denied"] = client.get("/episodes", headers={"Authorization": f"Bearer {TOKEN}"}).status_code
        served.update(host=server.config.host, port=server.config.port)

    monkeypatch.setattr(uvicorn.Server, "run", fake_run)
    port = _free_port()
    app = Typer()
    app.command()(admin)
    url = log.engine.url.render_as_string(hide_password=False)
    result = CliRunner().invoke(app, ["--db", url, "--port", str(port), "--read-only"])
    assert result.exit_code == 0, result.output
    assert (served["host"], served["port"], served["status"], served["denied"]) == ("127.0.0.1", port, 200, 401)
    assert "(read-only)" in " ".join(printed)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_cli_refuses_a_taken_port_before_announcing_it(monkeypatch: pytest.MonkeyPatch, log: EpisodeLog) -> None:
    monkeypatch.setenv("MEMABRA_ADMIN_TOKEN", TOKEN)
    app = Typer()
    app.command()(admin)
    url = log.engine.url.render_as_string(hide_password=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["--db", url, "--port", str(port)])
    assert result.exit_code == 1, result.output
    output = " ".join(result.output.split())
    assert f"cannot listen on 127.0.0.1:{port}" in output and "--port" in output
    assert "memabra admin on" not in output and "Traceback" not in output
