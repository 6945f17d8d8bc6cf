"""``memabra admin``: serve the admin web view with uvicorn."""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import socket
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from memabra._cli._common import configure_logging, console, fail, run_guarded
from memabra._cli._database import DbOption
from memabra._cli._erase import open_checkpointer
from memabra._cli._retention import check_age, parse_age
from memabra._config import load_reward_config
from memabra._environment import empty_variable_error, secret_variable
from memabra._errors import ConfigError
from memabra._health import DEFAULT_MAX_LAG, format_age

if TYPE_CHECKING:
    from memabra._admin import CurrentPolicy
    from memabra.storage import EpisodeLog


def admin(
    db: DbOption = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on; anything but loopback needs a token or password.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="MEMABRA_ADMIN_TOKEN",
            help="Admin token (prefer the environment variable, or $MEMABRA_ADMIN_TOKEN_FILE naming a file "
            "holding it; every credential below takes the same _FILE form). On loopback with neither a token "
            "nor a password, a one-time token is made and printed.",
            show_default=False,
        ),
    ] = None,
    password: Annotated[
        str | None,
        typer.Option(
            envvar="MEMABRA_ADMIN_PASSWORD",
            help="Admin password (prefer the environment variable).",
            show_default=False,
        ),
    ] = None,
    reviewer_token: Annotated[
        str | None,
        typer.Option(
            envvar="MEMABRA_ADMIN_REVIEWER_TOKEN",
            help="Reviewer token (prefer the environment variable): signs in to see every page; every write is "
            "refused. Must differ from the operator token and password.",
            show_default=False,
        ),
    ] = None,
    reviewer_password: Annotated[
        str | None,
        typer.Option(
            envvar="MEMABRA_ADMIN_REVIEWER_PASSWORD",
            help="Reviewer password (prefer the environment variable); as --reviewer-token.",
            show_default=False,
        ),
    ] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Refuse every write (feedback, promote, roll back, memory edits).")
    ] = False,
    session_minutes: Annotated[int, typer.Option(min=1, help="Minutes a sign-in lasts.")] = 480,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            envvar="FORWARDED_ALLOW_IPS",
            help="Comma-separated addresses or networks of the reverse proxies in front of the admin: their "
            "X-Forwarded-For names the client (whom failed sign-ins count against) and their X-Forwarded-Proto "
            "the scheme (https marks the session cookie Secure). Without it no forwarded header is believed.",
            show_default=False,
        ),
    ] = None,
    secure_cookies: Annotated[
        bool,
        typer.Option(
            "--secure-cookies",
            help="Mark the session cookie Secure even on requests that did not arrive over HTTPS (a TLS proxy "
            "that sends no X-Forwarded-Proto).",
        ),
    ] = False,
    policy: Annotated[
        str | None,
        typer.Option(
            help="Policy whose active snapshot shows its most probable slate as 'what would it choose now' "
            "(default: newest active); the policies page's learning checks then look at its learner only."
        ),
    ] = None,
    checkpointer: Annotated[
        str | None,
        typer.Option(
            "--checkpointer",
            help="The agent's LangGraph checkpointer (sqlite:///FILE or postgresql://...): erasing a user "
            "deletes their conversation threads there too.",
        ),
    ] = None,
    max_lag: Annotated[
        str,
        typer.Option(
            "--max-lag",
            help="How long a reward may wait on its way to a learner before the policies page and GET /metrics "
            "report a health problem: 30m, 2h, 1d (give `memabra status --max-lag` the same).",
            callback=check_age,
        ),
    ] = format_age(DEFAULT_MAX_LAG),
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log requests and library events.")] = False,
) -> None:
    """Serve the admin view: review routing decisions, record feedback, promote or roll back snapshots,
    review and edit each user's memories."""
    configure_logging(verbose)
    token, password, reviewer_token, reviewer_password = (
        _credential(name, value)
        for name, value in (
            ("token", token),
            ("password", password),
            ("reviewer_token", reviewer_token),
            ("reviewer_password", reviewer_password),
        )
    )
    _refuse_empty_credentials(
        token=token, password=password, reviewer_token=reviewer_token, reviewer_password=reviewer_password
    )
    try:
        import uvicorn

        from memabra._admin import create_app, require_credentials_for
        from memabra.storage import EpisodeLog
    except ImportError as exc:
        fail(f"the admin view needs the admin extra (pip install 'memabra[admin]'): {exc}")
    try:
        require_credentials_for(host, token=token, password=password)
    except ConfigError as exc:
        fail(str(exc))
    generated = not token and not password
    if generated:
        # Loopback without configured credentials still gets a credential: one for this run only.
        token = secrets.token_urlsafe(24)
    # Feedback recorded here is scored under the log's weighting like every other writer's (the
    # library default would re-total each episode an operator judges under the spec's weights),
    # and a bad setting is refused before anything is served.
    reward_config = run_guarded(load_reward_config)
    log = run_guarded(EpisodeLog, db)
    stack = contextlib.ExitStack()
    try:
        saver = stack.enter_context(open_checkpointer(checkpointer))
        app = run_guarded(
            create_app,
            log,
            token=token,
            password=password,
            reviewer_token=reviewer_token,
            reviewer_password=reviewer_password,
            read_only=read_only,
            session_ttl=timedelta(minutes=session_minutes),
            secure_cookies=secure_cookies,
            current_policy=_current_policy(log, policy),
            checkpointer=saver,
            max_lag=parse_age(max_lag),
            reward_config=reward_config,
        )
        # bound before the banner, so a taken port is a clear error, never an address that is not served
        listening = _bind(host, port)
        where = f"http://{host if ':' not in host else f'[{host}]'}:{port}/"
        mode = " (read-only)" if read_only else ""
        console.print(f"memabra admin on [bold]{escape(where)}[/] for {escape(log.url)}{mode}")
        if generated:
            console.print(f"sign in with this one-time token: [bold]{token}[/]")
        # uvicorn believes X-Forwarded-* from loopback by default, so any local process could name
        # itself a fresh client on each guess; forwarded headers count only from proxies named here.
        trusted_proxies = (forwarded_allow_ips or "").strip()
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="info" if verbose else "warning",
            proxy_headers=bool(trusted_proxies),
            forwarded_allow_ips=trusted_proxies or None,
        )
        try:
            uvicorn.Server(config).run(sockets=[listening])
        finally:
            listening.close()
    finally:
        stack.close()
        log.close()


_CREDENTIAL_ENV = {
    "token": "MEMABRA_ADMIN_TOKEN",
    "password": "MEMABRA_ADMIN_PASSWORD",
    "reviewer_token": "MEMABRA_ADMIN_REVIEWER_TOKEN",
    "reviewer_password": "MEMABRA_ADMIN_REVIEWER_PASSWORD",
}


def _credential(name: str, value: str | None) -> str | None:
    """A credential given on the command line as it is (the option wins); otherwise its variable's,
    or the text of the file its ``_FILE`` variable names (a mounted secret)."""
    if value is not None and value != os.environ.get(_CREDENTIAL_ENV[name]):
        return value
    try:
        return secret_variable(_CREDENTIAL_ENV[name])
    except ConfigError as exc:
        fail(str(exc))


def _refuse_empty_credentials(**given: str | None) -> None:
    """An empty credential is an unfilled secret: click reads an empty variable as unset, so on
    loopback it would quietly become a one-time token, and elsewhere a refusal that says none was set."""
    for name, value in given.items():
        env = _CREDENTIAL_ENV[name]
        from_env = os.environ.get(env)
        if from_env is not None and not from_env.strip() and value in (None, from_env):
            fail(empty_variable_error(env, "the credential (at least 8 characters)"))
        if value is not None and not value.strip():
            fail(f"--{name.replace('_', '-')} is empty; give the credential or leave the option out")


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        fail(f"cannot listen on host {host!r}: {exc.strerror}")
    listening = socket.socket(family, kind, proto)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind(address)
    except OSError as exc:
        listening.close()
        fail(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (is another server using that port? pick one with --port)"
        )
    listening.set_inheritable(True)
    return listening


def _current_policy(log: EpisodeLog, policy: str | None) -> CurrentPolicy | None:
    """The active-snapshot policy, or ``None`` when the router package is not importable."""
    from memabra._admin import ActiveSnapshotPolicy

    try:
        importlib.import_module("memabra.router")
    except ImportError:
        return None
    return ActiveSnapshotPolicy(log, policy)
