"""Secrets mounted as files (``NAME_FILE``, the Docker / Kubernetes convention), an empty ``--db``,
and usage errors written where no terminal reads them (a CI log, ``2>file``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer import Typer
from typer.testing import CliRunner

from memabra import _environment
from memabra._cli import _app, app
from memabra._environment import secret_variable, unknown_variables
from memabra._errors import ConfigError
from memabra.storage import EpisodeLog, open_log, resolve_url

runner = CliRunner()
URL_FILE = "MEMABRA_DATABASE_URL_FILE"
CREDENTIALS = ("TOKEN", "PASSWORD", "REVIEWER_TOKEN", "REVIEWER_PASSWORD")


@pytest.fixture(autouse=True)
def _fresh_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_environment, "_secret_files", {})  # each test reads its files afresh
    for name in ("MEMABRA_DATABASE_URL", *(f"MEMABRA_ADMIN_{c}" for c in CREDENTIALS)):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name + "_FILE", raising=False)


def _secret(tmp_path: Path, content: str | bytes, name: str = "secret") -> str:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return str(path)


def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


# ---------------------------------------------------------------------------- NAME_FILE variables


def test_a_secret_file_is_read_once_with_one_trailing_newline_removed(tmp_path: Path) -> None:
    path = _secret(tmp_path, " pass word \n")
    env = {"MEMABRA_ADMIN_PASSWORD_FILE": path}
    assert secret_variable("MEMABRA_ADMIN_PASSWORD", env) == " pass word "  # other whitespace is the secret's
    Path(path).write_text("rotated-secret\n")
    assert secret_variable("MEMABRA_ADMIN_PASSWORD", env) == " pass word "  # read once per process
    assert secret_variable("MEMABRA_ADMIN_TOKEN", {"MEMABRA_ADMIN_TOKEN_FILE": _secret(tmp_path, "t0ken-abc\r\n", "t")})
    assert secret_variable("MEMABRA_ADMIN_TOKEN", {"MEMABRA_ADMIN_TOKEN": "plain-value"}) == "plain-value"
    assert secret_variable("MEMABRA_ADMIN_TOKEN", {}) is None


def test_the_database_url_comes_from_its_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(URL_FILE, _secret(tmp_path, f"sqlite:///{tmp_path}/from-file.db\n"))
    assert resolve_url() == f"sqlite:///{tmp_path}/from-file.db"
    assert resolve_url("sqlite:///given.db") == "sqlite:///given.db"  # the argument wins
    with open_log() as log:
        assert log.url.endswith("from-file.db")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "does not exist"),
        ("", "is empty"),
        ("\n", "is empty"),
        (b"\xff\xfesecret", "is not UTF-8 text"),
        ("first-secret\nsecond-secret\n", "holds more than one line"),
        ("x" * (64 * 1024 + 1), "is larger than 64 KiB"),
    ],
)
def test_a_bad_secret_file_names_the_variable_and_path_not_the_content(
    tmp_path: Path, content: str | bytes | None, problem: str
) -> None:
    path = str(tmp_path / "missing") if content is None else _secret(tmp_path, content)
    with pytest.raises(ConfigError) as raised:
        secret_variable("MEMABRA_ADMIN_TOKEN", {"MEMABRA_ADMIN_TOKEN_FILE": path})
    message = str(raised.value)
    assert message.startswith(f"$MEMABRA_ADMIN_TOKEN_FILE names {path}, which {problem}"), message
    assert "secret" not in message.replace(path, "")


def test_a_folder_an_unreadable_file_and_an_empty_variable_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^\$MEMABRA_ADMIN_TOKEN_FILE names .*, which is a folder"):
        secret_variable("MEMABRA_ADMIN_TOKEN", {"MEMABRA_ADMIN_TOKEN_FILE": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"^\$MEMABRA_ADMIN_TOKEN_FILE is set but empty"):
        secret_variable("MEMABRA_ADMIN_TOKEN", {"MEMABRA_ADMIN_TOKEN_FILE": ""})
    if os.geteuid() != 0:  # root reads any file
        path = _secret(tmp_path, "s3cret-value")
        os.chmod(path, 0)
        with pytest.raises(ConfigError, match=r"which cannot be read: Permission denied"):
            secret_variable("MEMABRA_ADMIN_TOKEN", {"MEMABRA_ADMIN_TOKEN_FILE": path})


def test_setting_a_variable_and_its_file_is_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    both = {"MEMABRA_DATABASE_URL": "sqlite:///a.db", URL_FILE: _secret(tmp_path, "sqlite:///b.db")}
    with pytest.raises(ConfigError, match=r"\$MEMABRA_DATABASE_URL and \$MEMABRA_DATABASE_URL_FILE are both set"):
        secret_variable("MEMABRA_DATABASE_URL", both)
    for name, value in both.items():
        monkeypatch.setenv(name, value)
    result = runner.invoke(app, ["status"])
    assert result.exit_code == 2
    assert "$MEMABRA_DATABASE_URL and $MEMABRA_DATABASE_URL_FILE are both set" in _flat(result.output)


def test_a_malformed_url_from_a_file_hides_its_password_and_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(URL_FILE, _secret(tmp_path, "postgresql://agent:s3cret@db:badport/memabra\n"))
    with pytest.raises(ConfigError) as raised:
        resolve_url()
    assert "s3cret" not in str(raised.value) and "agent:***@db" in str(raised.value)
    result = runner.invoke(app, ["status"])
    message = _flat(result.output)
    assert result.exit_code == 2 and "s3cret" not in message
    assert "$MEMABRA_DATABASE_URL_FILE (no --db given)" in message and "not a database URL" in message
    monkeypatch.setenv(URL_FILE, str(tmp_path / "nowhere"))
    message = _flat(runner.invoke(app, ["status"]).output)
    assert f"$MEMABRA_DATABASE_URL_FILE names {tmp_path / 'nowhere'}, which does not exist" in message


def test_the_unknown_variable_warning_knows_the_file_forms() -> None:
    file_forms = {f"MEMABRA_ADMIN_{c}_FILE": "x" for c in CREDENTIALS} | {URL_FILE: "x"}
    assert unknown_variables(file_forms) == ()
    assert unknown_variables({"MEMABRA_DATABASE_URL_FLE": "x"}) == (
        "$MEMABRA_DATABASE_URL_FLE is not a memabra setting and is ignored; did you mean MEMABRA_DATABASE_URL_FILE?",
    )


# ------------------------------------------------------------------------ admin credentials


def _serve_admin(
    monkeypatch: pytest.MonkeyPatch, log: EpisodeLog, args: list[str], env: dict[str, str]
) -> tuple[int, str, dict[str, Any]]:
    """``memabra admin`` up to the point of serving; what it would serve with."""
    import uvicorn

    import memabra._admin
    from memabra._cli._admin import admin

    real_create_app = memabra._admin.create_app
    given: dict[str, Any] = {}

    def create_app(*a: Any, **kw: Any) -> Any:
        given.update(kw)
        return real_create_app(*a, **kw)

    monkeypatch.setattr(memabra._admin, "create_app", create_app)
    monkeypatch.setattr(uvicorn.Server, "run", lambda *_, **__: None)
    one = Typer()
    one.command()(admin)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = log.engine.url.render_as_string(hide_password=False)
    result = CliRunner().invoke(one, ["--db", url, "--port", str(port), *args], env=env)
    return result.exit_code, _flat(result.output), given


def test_admin_credentials_come_from_their_files(
    monkeypatch: pytest.MonkeyPatch, log: EpisodeLog, tmp_path: Path
) -> None:
    env = {
        "MEMABRA_ADMIN_TOKEN_FILE": _secret(tmp_path, "operator-token\n", "t"),
        "MEMABRA_ADMIN_REVIEWER_PASSWORD_FILE": _secret(tmp_path, "reviewer-pass\n", "rp"),
    }
    code, output, given = _serve_admin(monkeypatch, log, [], env)
    assert code == 0, output
    assert (given["token"], given["reviewer_password"]) == ("operator-token", "reviewer-pass")
    assert "one-time token" not in output and "operator-token" not in output
    code, output, given = _serve_admin(monkeypatch, log, ["--token", "from-the-option"], env)
    assert code == 0 and given["token"] == "from-the-option"  # the option wins


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"MEMABRA_ADMIN_PASSWORD": "password-1", "MEMABRA_ADMIN_PASSWORD_FILE": "/run/secrets/pw"},
            "$MEMABRA_ADMIN_PASSWORD and $MEMABRA_ADMIN_PASSWORD_FILE are both set",
        ),
        (
            {"MEMABRA_ADMIN_REVIEWER_TOKEN_FILE": "/run/secrets/absent"},
            "$MEMABRA_ADMIN_REVIEWER_TOKEN_FILE names /run/secrets/absent, which does not exist",
        ),
    ],
)
def test_a_bad_admin_credential_file_is_refused_before_serving(
    monkeypatch: pytest.MonkeyPatch, log: EpisodeLog, env: dict[str, str], message: str
) -> None:
    code, output, given = _serve_admin(monkeypatch, log, [], env)
    assert code == 1 and message in output and not given


# ------------------------------------------------------------------------------------ --db ""


@pytest.mark.parametrize("command", [["status"], ["db", "upgrade"], ["bench", "--log-db"]])
def test_an_empty_db_option_is_refused_not_read_as_absent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, migrated_url: str, command: list[str]
) -> None:
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("MEMABRA_DATABASE_URL", migrated_url)  # what an absent --db would fall back to
    args = [*command, ""] if command[-1] == "--log-db" else [*command, "--db", " "]
    result = runner.invoke(app, args)
    message = _flat(result.output)
    assert result.exit_code == 2, result.output
    assert ("Invalid value for --log-db: is empty" if "--log-db" in args else "'--db': is empty") in message
    assert list(workdir.iterdir()) == []  # no default database made on the way


# ------------------------------------------------------------------- errors off a terminal


def test_a_usage_error_off_a_terminal_is_not_wrapped(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/no/such/folder/with/a/long/name/memabra-production-log.db"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "MEMABRA_DATABASE_URL")}
    done = subprocess.run(
        [sys.executable, "-c", "from memabra._cli import main; main()", "episodes", "list", "--db", db],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(error) == 1, done.stderr
    assert f"run `memabra db upgrade --db {db}`" in error[0]  # the whole command, on one line
    assert "╭" not in done.stderr


def test_a_terminal_still_gets_the_panel_and_exit_codes_are_kept(
    monkeypatch: pytest.MonkeyPatch, migrated_url: str
) -> None:
    assert runner.invoke(app, ["status", "--db", migrated_url]).exit_code == 0
    assert runner.invoke(app, ["--version"]).exit_code == 0
    assert runner.invoke(app, ["no-such-command"]).exit_code == 2
    assert runner.invoke(app, ["episodes", "show", "no-such-episode", "--db", migrated_url]).exit_code == 1
    monkeypatch.setattr(_app, "_stderr_is_terminal", lambda: True)
    result = runner.invoke(app, ["episodes", "list", "--db", "sqlite:////nonexistent/x.db"])
    assert result.exit_code == 2 and "╭─ Error" in result.output
