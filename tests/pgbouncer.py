"""A PgBouncer of a test's own in transaction pooling mode, in front of the test PostgreSQL server.

The pool is small (:data:`POOL_SIZE` server connections), so clients really share server
connections: session state one client leaves on a server connection (a session advisory lock, a
prepared statement, a LISTEN) is what the next client to get that connection finds.

PgBouncer 1.18 forwards no ``options`` startup parameter, so the per-test schema cannot travel in
the URL as :func:`pg_schema.pg_schema` puts it; each pooler is given one schema instead and sets
it as the search_path of every server connection it opens (``connect_query``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.engine import make_url

from memabra.storage import resolve_url

__all__ = ["BINARY_ABSENT", "PGBOUNCER", "POOL_SIZE", "pgbouncer"]

# Debian's path; elsewhere whatever PATH finds
PGBOUNCER = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None)
BINARY_ABSENT = "pgbouncer is not installed (apt-get install pgbouncer)"

# server connections per database and user: two, so that two clients in a transaction use both and
# a third waits, and consecutive transactions of one client land on either
POOL_SIZE = 2
# how long pgbouncer may take to accept connections after it starts
_START_S = 10.0
# PgBouncer refuses to run as root; the Debian package's service user runs it then
_RUN_AS = "postgres"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def pgbouncer(server_url: str, schema: str | None = None, *, pool_size: int = POOL_SIZE) -> Iterator[str]:
    """Start pgbouncer (transaction pooling, ``pool_size`` server connections) in front of the
    server of ``server_url``; yields the same URL through it (its search_path ``schema`` when
    given); stops it afterwards."""
    if PGBOUNCER is None:
        raise RuntimeError(BINARY_ABSENT)
    url = make_url(resolve_url(server_url))
    port = _free_port()
    user = url.username or pwd.getpwuid(os.getuid()).pw_name
    database = url.database or user
    workdir = Path(tempfile.mkdtemp(prefix="memabra-pgbouncer-"))
    target = f"host={url.host or '127.0.0.1'} port={url.port or 5432} dbname={database}"
    if url.password:
        target += f" user={user} password={url.password}"
    if schema is not None:
        target += f" connect_query='SET search_path TO {schema}'"
    (workdir / "users.txt").write_text(f'"{user}" "{url.password or ""}"\n')
    (workdir / "pgbouncer.ini").write_text(
        "\n".join(
            [
                "[databases]",
                f"{database} = {target}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {workdir / 'users.txt'}",
                "pool_mode = transaction",
                f"default_pool_size = {pool_size}",
                # every server connection open from the start and taken in turn: a client's next
                # transaction lands on another one, so whatever outlives a transaction (a prepared
                # statement, a session lock) fails every time rather than now and then
                f"min_pool_size = {pool_size}",
                "server_round_robin = 1",
                "max_client_conn = 500",
                f"logfile = {workdir / 'pgbouncer.log'}",
                "ignore_startup_parameters = extra_float_digits",
                "",
            ]
        )
    )
    command = [PGBOUNCER, "-q", str(workdir / "pgbouncer.ini")]
    if os.getuid() == 0:
        account = pwd.getpwnam(_RUN_AS)
        os.chown(workdir, account.pw_uid, account.pw_gid)
        for path in workdir.iterdir():
            os.chown(path, account.pw_uid, account.pw_gid)
        command[1:1] = ["-u", _RUN_AS]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_listening(port, process, workdir)
        pooled = url.set(port=port, host="127.0.0.1").render_as_string(hide_password=False)
        _open_every_server_connection(pooled, pool_size)
        yield pooled
    finally:
        process.terminate()  # SIGTERM: immediate shutdown, clients are cut
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_listening(port: int, process: subprocess.Popen[bytes], workdir: Path) -> None:
    deadline = time.monotonic() + _START_S
    while True:
        if process.poll() is not None:
            log = (workdir / "pgbouncer.log").read_text() if (workdir / "pgbouncer.log").exists() else ""
            err = process.stderr.read().decode() if process.stderr is not None else ""
            raise RuntimeError(f"pgbouncer exited with {process.returncode}: {err}{log}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not listen on port {port} within {_START_S}s") from None
            time.sleep(0.02)


def _open_every_server_connection(pooled_url: str, pool_size: int) -> None:
    """Have the pooler open all ``pool_size`` server connections now: ``pool_size`` clients each
    in a transaction at once. PgBouncer opens them only under such load, and until it has, one
    client's transactions all land on the one it has (``server_round_robin`` has nothing to turn)."""
    import psycopg

    conninfo = make_url(pooled_url).set(drivername="postgresql").render_as_string(hide_password=False)
    clients = [psycopg.connect(conninfo, prepare_threshold=None) for _ in range(pool_size)]
    try:
        for client in clients:
            client.execute("SELECT 1")  # opens a transaction: holds its server connection
    finally:
        for client in clients:
            client.rollback()  # a server connection left mid-transaction would be dropped, not pooled
            client.close()
