"""Settings a deployment gives memabra (``MEMABRA_*`` variables, the TOML file, the admin
credentials): a typo is warned about or refused, never silently ignored; a bad value is one line
naming the setting and where it came from; a secret never appears in an error."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest
from click.testing import Result
from typer import Typer
from typer.testing import CliRunner

from factories import episode
from memabra import RewardConfig, _environment, load_reward_config
from memabra._cli import app
from memabra._environment import KNOWN_VARIABLES, unknown_variables
from memabra._errors import ConfigError
from memabra.storage import EpisodeLog, resolve_url

runner = CliRunner(env={"COLUMNS": "200"})


def _one_line(result: Result) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    return " ".join(result.output.replace("│", " ").split())


# ------------------------------------------------------------------------------- the TOML file


def test_a_config_file_the_variable_names_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\$MEMABRA_CONFIG names .*memabra.toml, which does not exist"):
        load_reward_config(environ={"MEMABRA_CONFIG": str(tmp_path / "etc" / "memabra.toml")})
    with pytest.raises(ConfigError, match=r"which is a folder, not a file"):
        load_reward_config(environ={"MEMABRA_CONFIG": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"\$MEMABRA_CONFIG is set but empty"):
        load_reward_config(environ={"MEMABRA_CONFIG": ""})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[rewards]\nfeedback_window_seconds = 5\n", r"unknown table or key 'rewards' .*did you mean reward\?"),
        ("feedback_window_seconds = 5\n", r"unknown table or key 'feedback_window_seconds'"),
        (
            "[reward]\nfeedback_windows = 5\n",
            r"unknown key 'feedback_windows' in \[reward\]; did you mean feedback_window_seconds\?",
        ),
        ("[reward.weights]\nwcc = 0.5\n", r"unknown reward weight\(s\): wcc .*did you mean wc\?"),
        ('[reward]\ndefault_success = "high"\n', r"default_success must be in \[-0.5, 1\], got 'high'"),
        ('[reward.weights]\nws = "abc"\n', r"reward weight ws must be a finite number, got 'abc'"),
    ],
)
def test_a_mistyped_or_malformed_file_is_refused_naming_the_file(tmp_path: Path, body: str, message: str) -> None:
    toml = tmp_path / "memabra.toml"
    toml.write_text(body)
    with pytest.raises(ConfigError, match=message) as raised:
        load_reward_config(toml, environ={})
    assert str(raised.value).startswith(f"{toml}: ")


def test_a_file_that_is_not_text_is_a_config_error(tmp_path: Path) -> None:
    toml = tmp_path / "memabra.toml"
    toml.write_bytes(b"\xff\xfe[reward]\n")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_reward_config(toml, environ={})


# ------------------------------------------------------------------------- the MEMABRA_* variables


def test_a_bad_variable_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"^\$MEMABRA_REWARD_WEIGHTS: weight ws is not a number: 'abc'"):
        load_reward_config(environ={"MEMABRA_REWARD_WEIGHTS": "ws=abc"})
    with pytest.raises(ConfigError, match=r"^\$MEMABRA_REWARD_WEIGHTS: bad weight 'wcc=1'.*did you mean wc\?"):
        load_reward_config(environ={"MEMABRA_REWARD_WEIGHTS": "wcc=1"})
    with pytest.raises(ConfigError, match=r"\$MEMABRA_REWARD_WEIGHTS is set but empty"):
        load_reward_config(environ={"MEMABRA_REWARD_WEIGHTS": " "})


def test_an_unknown_variable_is_warned_once_naming_the_closest(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_environment, "_reported", set())
    env = {"MEMABRA_REWARD_WIEGHTS": "wc=0.9", "MEMABRA_TEST_DATABASE_URL": "x", "OTHER": "y"}
    with caplog.at_level(logging.WARNING, logger="memabra"):
        assert load_reward_config(environ=env) == RewardConfig()
        load_reward_config(environ=env)  # a long-lived process reloading says it once
    warned = [r.getMessage() for r in caplog.records if "MEMABRA_" in r.getMessage()]
    assert warned == [
        "$MEMABRA_REWARD_WIEGHTS is not a memabra setting and is ignored; did you mean MEMABRA_REWARD_WEIGHTS?"
    ]


def test_every_documented_variable_is_known() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    text = docs.read_text()
    assert all(f"`{name}`" in text for name in KNOWN_VARIABLES), "docs/configuration.md lacks a variable"
    assert unknown_variables(dict.fromkeys(KNOWN_VARIABLES, "x")) == ()
    assert unknown_variables({"MEMABRA_ZZZ": "1"}) == (
        "$MEMABRA_ZZZ is not a memabra setting and is ignored; the variables memabra reads are listed in "
        "docs/configuration.md",
    )


# --------------------------------------------------------------------------------- the database URL


def test_an_empty_database_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMABRA_DATABASE_URL", "")
    with pytest.raises(ConfigError, match=r"\$MEMABRA_DATABASE_URL is set but empty"):
        resolve_url()
    result = runner.invoke(app, ["status"])
    assert result.exit_code == 2
    assert "$MEMABRA_DATABASE_URL is set but empty" in _one_line(result)


@pytest.mark.parametrize("url", ["postgresql://agent:s3cret@db:badport/memabra", "agent:s3cret@db/memabra"])
def test_a_malformed_database_url_never_shows_its_password(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    with pytest.raises(ConfigError) as raised:
        resolve_url(url)
    assert "s3cret" not in str(raised.value) and "agent:***@db" in str(raised.value)
    monkeypatch.setenv("MEMABRA_DATABASE_URL", url)
    message = _one_line(runner.invoke(app, ["status"]))
    assert "not a database URL" in message and "s3cret" not in message


@pytest.mark.parametrize(
    ("url", "supported"),
    [
        ("postgresql+asyncpg://agent:s3cret@db/memabra", "postgresql+psycopg://"),
        ("postgresql+psycopg_async://agent:s3cret@db/memabra", "postgresql+psycopg://"),
        ("postgresql+psycopg2://agent:s3cret@db/memabra", "postgresql+psycopg://"),
        ("sqlite+aiosqlite:///memabra.db", "sqlite:///PATH"),
    ],
)
def test_a_driver_memabra_does_not_run_on_is_refused_naming_the_one_it_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, supported: str
) -> None:
    # an async server's team writes its async URL; before, asyncpg's absence surfaced as a bare
    # ModuleNotFoundError and aiosqlite's URL as "no database at ..." advising `db upgrade` with it
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="unsupported database driver") as raised:
        EpisodeLog(url)
    assert supported in str(raised.value) and "s3cret" not in str(raised.value)
    monkeypatch.setenv("MEMABRA_DATABASE_URL", url)
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code == 2 and "unsupported database driver" in _one_line(result)
    assert not list(tmp_path.iterdir())  # nothing created on the way to the refusal


def test_the_drivers_memabra_runs_on_are_kept() -> None:
    assert resolve_url("postgres://agent@db/memabra") == "postgresql+psycopg://agent@db/memabra"
    assert resolve_url("sqlite+pysqlite:///memabra.db") == "sqlite+pysqlite:///memabra.db"
    assert resolve_url("sqlite://") == "sqlite://"


# ----------------------------------------------------------------------------------- the CLI


def test_the_cli_warns_of_a_typo_and_refuses_a_bad_reward_setting_in_one_line(
    monkeypatch: pytest.MonkeyPatch, migrated_url: str
) -> None:
    monkeypatch.setattr(_environment, "_reported", set())  # each backend's run warns afresh
    with EpisodeLog(migrated_url) as log:
        ep = episode("ann")
        log.log_episodes([ep])
    env = {"MEMABRA_REWARD_WEIGTHS_CLI": "wc=1", "MEMABRA_REWARD_WEIGHTS": "ws=abc"}
    result = runner.invoke(app, ["feedback", ep.id, '{"success": 1}', "--db", migrated_url], env=env)
    message = _one_line(result)
    assert result.exit_code == 1, result.output
    assert "warning: $MEMABRA_REWARD_WEIGTHS_CLI is not a memabra setting" in message
    assert "error: $MEMABRA_REWARD_WEIGHTS: weight ws is not a number: 'abc'" in message
    with EpisodeLog(migrated_url) as log:
        assert not log.feedback_for(ep.id, include_late=True)  # nothing stored on the way
    result = runner.invoke(app, ["rewards", "finalize", "--db", migrated_url], env=env)
    assert result.exit_code == 1 and "error: $MEMABRA_REWARD_WEIGHTS:" in _one_line(result)


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ([], {"MEMABRA_ADMIN_TOKEN": ""}, "$MEMABRA_ADMIN_TOKEN is set but empty"),
        ([], {"MEMABRA_ADMIN_REVIEWER_PASSWORD": " "}, "$MEMABRA_ADMIN_REVIEWER_PASSWORD is set but empty"),
        (["--token", ""], {}, "--token is empty"),
    ],
)
def test_an_empty_admin_credential_is_refused_not_replaced(
    monkeypatch: pytest.MonkeyPatch, log: EpisodeLog, args: list[str], env: dict[str, str], message: str
) -> None:
    import uvicorn

    from memabra._cli._admin import admin

    for name in ("TOKEN", "PASSWORD", "REVIEWER_TOKEN", "REVIEWER_PASSWORD"):
        monkeypatch.delenv(f"MEMABRA_ADMIN_{name}", raising=False)
    served: list[bool] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda *_, **__: served.append(True))
    one = Typer()
    one.command()(admin)
    url = log.engine.url.render_as_string(hide_password=False)
    with socket.socket() as probe:  # a free port, should the old code get as far as binding one
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = CliRunner().invoke(one, ["--db", url, "--port", str(port), *args], env=env)
    assert result.exit_code == 1, result.output
    assert message in _one_line(result) and not served
