"""A password may sit in a database URL's query (``?password=``, ``?sslpassword=``: psycopg takes
them as connect arguments) as well as in ``USER:PASSWORD@``; neither is ever shown, in a log's
``url``, an unreachable-server error or a command's output."""

from __future__ import annotations

import os
import socket

import pytest
from typer.testing import CliRunner

from memabra._cli import app
from memabra._errors import ConfigError
from memabra.storage import DatabaseUnavailableError, EpisodeLog, resolve_url, upgrade
from memabra.storage._engine import mask_password, shown_url

PG_ENV = "MEMABRA_TEST_DATABASE_URL"
SECRET = "s3cr3t-Value"


@pytest.mark.parametrize(
    "text",
    [
        f"postgresql+psycopg://root@db:5432/app?password={SECRET}&sslmode=require",
        f"postgresql+psycopg://root@db/app?sslmode=require&sslpassword={SECRET}",
        f"postgresql+psycopg://root:{SECRET}@db/app?PASSWORD={SECRET}",
        f"connection failed: host=db user=root password={SECRET} dbname=app",
        f"host=db password='{SECRET} with spaces' dbname=app",
        # libpq's conninfo escapes a quote or a space with a backslash
        f"host=db password='it\\'s {SECRET}' dbname=app",
        f"host=db password=a\\ {SECRET} dbname=app",
    ],
)
def test_a_password_anywhere_in_a_url_or_conninfo_is_masked(text: str) -> None:
    masked = mask_password(text)
    assert SECRET not in masked and "***" in masked
    assert "db" in masked  # the rest still says where


@pytest.mark.parametrize(
    "text",
    [
        # unencoded: a URL's query value runs to its end, # included (make_url keeps it), and
        # libpq's conninfo value runs to a space; masking stopped at the # and showed the rest
        f"postgresql+psycopg://root@db:notaport/app?password=ab#{SECRET}",
        f"host=db password=ab#{SECRET} dbname=app",
        # an & not followed by a parameter is the password's, not a separator
        f"postgresql+psycopg://root@db:notaport/app?password=ab&{SECRET}",
    ],
)
def test_a_password_with_an_unencoded_hash_or_ampersand_is_masked_whole(text: str) -> None:
    masked = mask_password(text)
    assert SECRET not in masked and "password=***" in masked and "db" in masked


def test_a_malformed_url_with_a_query_password_is_named_without_it() -> None:
    url = f"postgresql+psycopg://root@db:notaport/app?sslmode=require&password=ab#{SECRET}"
    with pytest.raises(ConfigError) as caught:
        resolve_url(url)
    assert SECRET not in str(caught.value) and "sslmode=require" in str(caught.value)


def test_a_shown_url_keeps_everything_but_the_secrets() -> None:
    shown = shown_url(f"postgresql+psycopg://root:{SECRET}@db:5432/app?sslmode=require&password={SECRET}")
    assert shown == "postgresql+psycopg://root:***@db:5432/app?password=***&sslmode=require"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_server_does_not_show_a_query_password() -> None:
    url = f"postgresql+psycopg://root@127.0.0.1:{_closed_port()}/app?password={SECRET}&connect_timeout=2"
    with pytest.raises(DatabaseUnavailableError) as caught:
        EpisodeLog(url)
    assert SECRET not in str(caught.value) and "password=***" in str(caught.value)
    result = CliRunner().invoke(app, ["status", "--db", url])
    assert result.exit_code == 1
    assert SECRET not in result.output, result.output


@pytest.mark.postgres
@pytest.mark.skipif(not os.environ.get(PG_ENV), reason="PostgreSQL only")
def test_a_logs_url_does_not_show_a_query_password(pg_schema_url: str) -> None:
    # the test server trusts its clients: the password is sent and ignored
    url = f"{pg_schema_url}&password={SECRET}"
    upgrade(url)
    with EpisodeLog(url) as log:
        assert SECRET not in log.url and "password=***" in log.url
        assert SECRET not in repr(log)
